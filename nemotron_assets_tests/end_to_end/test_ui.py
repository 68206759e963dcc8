"""The Dagster UI as a user sees it: a real webserver on loopback, driven in headless Chromium with Playwright.

Screenshots of every step go to ``test-artifacts/ui/`` at the repository root (kept on success too, so a
reviewer can look at what the test saw); on failure the page, and the webserver and daemon logs, land there too.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nemotron_assets_tests.conftest import REPO
from nemotron_assets_tests.end_to_end.ui_helpers import CHROMIUM, CHROMIUM_ARGS, dagster_ui, graph_edges

pytestmark = pytest.mark.slow

ARTIFACTS = REPO / "test-artifacts" / "ui"
LOCATION = "nemotron_assets.definitions"  # the code location name workspace.yaml gives (its python_module)
PARTITION = "code/shard_00000"
LINEAGE = ["source_split", "pretrain_shard", "megatron_blend"]


@pytest.fixture
def ui_env(tmp_path):
    home = tmp_path / "dagster_home"
    (home / ".nux").mkdir(parents=True)
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    (home / ".nux" / "nux.yaml").write_text("seen: 1\n")  # no first-visit modal over the page
    return dict(os.environ, DAGSTER_HOME=str(home), NEMOTRON_DATA_ROOT=str(tmp_path / "data"),
                NEMOTRON_BLENDS_DIR=str(REPO / "blends"), HF_HUB_OFFLINE="1")


@pytest.fixture
def artifacts():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.iterdir():
        if old.is_file():
            old.unlink()
    return ARTIFACTS


def test_ui_shows_lineage_launches_a_partition_and_shows_its_metadata(ui_env, artifacts, tmp_path):
    try:
        from playwright import sync_api
    except ImportError:
        pytest.fail("playwright is missing: install the test extra (pip install -e '.[test]')")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run .ci/install_system_deps.sh (apt-get install chromium)")
    expect = sync_api.expect

    # The shard partitions are dynamic: they exist once the source splits are materialized.
    done = subprocess.run([sys.executable, "-m", "nemotron_assets", "materialize", "sample", "--select",
                           "source_split"], env=ui_env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    data = tmp_path / "data" / "sample"
    shard_count = sum(len(json.loads(m.read_text())["shards"]) for m in (data / "sources").glob("*/manifest.json"))
    assert shard_count >= 2

    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    with dagster_ui(REPO, ui_env, log_dir, daemon=False) as ui, sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.set_default_timeout(30_000)
        expect.set_options(timeout=30_000)
        try:
            # A backfill of one dataset's three shards, as the UI's "Launch backfill" sends it, requested before the
            # daemon starts so that its first loop takes it (the backfill loop then sleeps 30 s); checked in 2.
            wiki = [f"wiki/shard_{i:05d}" for i in range(3)]
            backfill = ui.launch_backfill(["sample", "pretrain_shard"], wiki)
            ui.start_daemon()

            # 1. The asset graph of group `sample`: source_split -> pretrain_shard -> megatron_blend.
            page.goto(f"{ui.url}/locations/{LOCATION}/asset-groups/sample")
            expect(page.get_by_text("Asset Group in", exact=False)).to_be_visible()
            boxes = {}
            for name in LINEAGE:
                node = page.locator("foreignObject").filter(has=page.get_by_text(name, exact=True))
                expect(node).to_have_count(1)
                expect(node.get_by_text(name, exact=True)).to_be_visible()
                boxes[name] = {k: float(node.get_attribute(k)) for k in ("x", "y", "width", "height")}
            shard_node = page.locator("foreignObject").filter(has=page.get_by_text("pretrain_shard", exact=True))
            expect(shard_node).to_contain_text(f"{shard_count} partitions")
            edge_paths = page.locator('svg path[stroke^="var(--color-lineage-edge"]')
            expect(edge_paths).to_have_count(2)
            drawn = graph_edges(boxes, [p.get_attribute("d") for p in edge_paths.all()])
            assert drawn == {("source_split", "pretrain_shard"), ("pretrain_shard", "megatron_blend")}, drawn
            page.screenshot(path=artifacts / "01-asset-graph.png")
            # The same lineage from the UI's own GraphQL API.
            nodes = ui.graphql("{ assetNodes { assetKey { path } dependencyKeys { path } groupName } }")["assetNodes"]
            deps = {"/".join(n["assetKey"]["path"]): sorted("/".join(d["path"]) for d in n["dependencyKeys"])
                    for n in nodes if n["groupName"] == "sample"}
            assert deps == {"sample/source_split": [], "sample/pretrain_shard": ["sample/source_split"],
                            "sample/megatron_blend": ["sample/pretrain_shard"]}, deps

            # 2. The backfill requested at the start makes one run (the shard assets have a single-run backfill
            # policy), which builds the three shards at the same time in its step.
            runs = ui.wait_for_backfill_runs(backfill)
            assert len(runs) == 1 and runs[0]["status"] == "SUCCESS", (runs, ui.log_tails())
            assert "building 3 shard(s) in 2 processes, 1 core(s) each" in ui.run_messages(runs[0]["runId"])

            # 3. Materialize one partition from the asset page: Materialize… -> pick the partition -> launch.
            page.goto(f"{ui.url}/assets/sample/pretrain_shard")
            page.get_by_role("button", name="Materialize…").click()
            dialog = page.get_by_role("dialog")
            expect(dialog.get_by_text("Launch runs to materialize sample / pretrain_shard")).to_be_visible()
            dialog.get_by_text("Select a partition or create one").click()
            page.get_by_placeholder("Filter partitions").fill(PARTITION)
            page.get_by_role("menuitem").filter(has_text=PARTITION).click()
            dialog.get_by_text("Launch runs to materialize").click()  # close the partition picker
            expect(page.get_by_placeholder("Filter partitions")).to_be_hidden()
            expect(dialog.get_by_text("1 partition", exact=True)).to_be_visible()
            launch = dialog.get_by_role("button", name="Launch 1 run")
            expect(launch).to_be_enabled()
            page.screenshot(path=artifacts / "02-launch-dialog.png")
            launch.click()

            # 4. Follow the toast to the run page and wait for the run to succeed.
            toast = page.get_by_role("listitem").filter(has_text=re.compile(r"Launched run [0-9a-f]{8}"))
            expect(toast).to_be_visible()
            toast.get_by_role("link", name="View", exact=True).click()
            page.wait_for_url(re.compile(r"/runs/[0-9a-f-]{36}"))
            run_id = re.search(r"/runs/([0-9a-f-]{36})", page.url).group(1)
            status = ui.wait_for_run(run_id, timeout=120)
            assert status == "SUCCESS", f"run {run_id} ended {status}\n{ui.log_tails()}"
            expect(page.get_by_text("Success", exact=True).first).to_be_visible()
            expect(page.get_by_text(PARTITION).first).to_be_visible()
            page.screenshot(path=artifacts / "03-run-succeeded.png")

            # 5. The partition's latest materialization and its metadata: counts and the token histogram.
            page.goto(f"{ui.url}/assets/sample/pretrain_shard")
            page.get_by_role("tab", name="Partitions").click()
            page.get_by_text(PARTITION, exact=True).first.click()
            expect(page.get_by_text("Materialized", exact=True)).to_be_visible()  # the partition's status tag
            expect(page.get_by_role("link", name=run_id[:8], exact=True)).to_be_visible()  # by our run
            stats = json.loads((data / "pretrain" / "code" / ".receipts" / "shard_00000.json").read_text())["stats"]

            def value_cell(key: str):
                row = page.locator("tr").filter(has=page.locator("td:first-child", has_text=re.compile(f"^{key}$")))
                expect(row).to_have_count(1)
                return row.locator(":scope > td").nth(1)

            expect(value_cell("documents")).to_have_text(str(stats["documents"]))
            expect(value_cell("tokens")).to_have_text(str(stats["tokens"]))
            expect(value_cell("rows")).to_have_text(str(stats["rows"]))
            histogram = value_cell("token_histogram").locator("table")
            expect(histogram.get_by_role("columnheader")).to_have_text(["tokens", "documents", ""])
            buckets = stats["histogram"]
            first = next(i for i, c in enumerate(buckets) if c)
            last = max(i for i, c in enumerate(buckets) if c)
            expect(histogram.locator("tbody tr > td:nth-child(2)")).to_have_text(
                [f"{c:,}" for c in buckets[first:last + 1]])
            expect(histogram.locator("tbody tr").first).to_contain_text(f"{2 ** first:,}")
            page.screenshot(path=artifacts / "04-partition-metadata.png")
            value_cell("token_histogram").scroll_into_view_if_needed()
            page.screenshot(path=artifacts / "05-token-histogram.png")

            # 6. One switch builds the rest: the blend's build sensor, turned on in the Automation page, requests
            # the shards not built yet (in ranges, each run building its shards at the same time), then the blend
            # files. Afterwards the graph shows every shard built and its checks passed, each in its own step.
            page.goto(f"{ui.url}/automation")
            row = page.locator("[data-index]").filter(has=page.locator('a[href$="/sensors/sample__build"]'))
            expect(row).to_have_count(1)
            toggle = row.locator("label").filter(has=page.locator("#handle"))  # the on/off switch, drawn in SVG
            expect(toggle).to_have_count(1)
            switch = toggle.locator("input")
            expect(switch).not_to_be_checked()
            toggle.click()
            expect(switch).to_be_checked()
            page.screenshot(path=artifacts / "06-build-sensor-on.png")
            receipt = data / "pretrain" / ".receipts" / "blend.receipt.json"
            deadline = time.monotonic() + 180
            while not receipt.exists():
                assert time.monotonic() < deadline, f"the build sensor did not build the blend\n{ui.log_tails()}"
                time.sleep(1)
            sensor_runs = ui.runs(("dagster/sensor_name", "sample__build"))
            assert {"/".join(r["assetSelection"][0]["path"]) for r in sensor_runs} == {
                "sample/pretrain_shard", "sample/megatron_blend"}, sensor_runs
            assert any(any(m.startswith("building 2 shard(s) in 2 processes") for m in ui.run_messages(r["runId"]))
                       for r in sensor_runs if r["assetSelection"][0]["path"][-1] == "pretrain_shard")
            for run in sensor_runs:
                assert ui.wait_for_run(run["runId"]) == "SUCCESS"
            page.goto(f"{ui.url}/locations/{LOCATION}/asset-groups/sample")
            shard_node = page.locator("foreignObject").filter(has=page.get_by_text("pretrain_shard", exact=True))
            expect(shard_node).to_contain_text("3 / 3 Passed")
            expect(shard_node).to_contain_text("100% filled")
            page.screenshot(path=artifacts / "07-checks-passed.png")
            page.goto(f"{ui.url}/assets/sample/pretrain_shard?view=checks")
            for check in ("bin_idx_consistent", "counts_match_metadata", "token_ids_below_vocab"):
                expect(page.get_by_text(check, exact=True).first).to_be_visible()
            expect(page.get_by_text("Succeeded", exact=True)).to_have_count(3)  # each check's latest execution
            page.screenshot(path=artifacts / "08-checks-tab.png")
        except Exception:
            page.screenshot(path=artifacts / "failure.png")
            (artifacts / "failure.html").write_text(page.content())
            for log in ui.logs.values():
                if log.exists():
                    shutil.copy(log, artifacts / log.name)
            raise
        finally:
            browser.close()
