from nemotron_assets.cli import run

run()
