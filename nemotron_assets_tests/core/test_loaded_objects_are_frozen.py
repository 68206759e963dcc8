"""allocator.py ``loading_for_good``: what a process keeps to its end (Dagster, the pipelines' modules, the code
location's definitions) is frozen out of the cycle collector's full collections once loaded, and the collector is on
again afterwards.

Each case runs in a fresh interpreter, as a command or a Dagster process starts: this test process has imported
everything already, and may have frozen it."""

import json
import subprocess
import sys

from nemotron_assets_tests.conftest import REPO

#: Counts the full collections from the interpreter's start, then reports the collector's state as JSON.
PROBE = """
import gc, json, sys
full = []
gc.callbacks.append(lambda phase, info: full.append(1) if phase == "stop" and info["generation"] == 2 else None)
if sys.argv[1] == "definitions":
    import nemotron_assets.definitions
else:
    from nemotron_assets.cli import main
    main(["status", "sample"])
print(json.dumps({"full_collections": len(full), "frozen": gc.get_freeze_count(), "walked": len(gc.get_objects()),
                  "enabled": gc.isenabled()}))
"""


def _collector_after(what: str, tmp_path) -> dict:
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO / "dagster_home" / "dagster.yaml").read_text())
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "DAGSTER_HOME": str(home),
           "NEMOTRON_DATA_ROOT": str(tmp_path / "data"), "NEMOTRON_BLENDS_DIR": str(REPO / "blends")}
    done = subprocess.run([sys.executable, "-c", PROBE, what], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_loading_the_code_location_freezes_what_it_loaded_and_leaves_the_collector_on(tmp_path):
    state = _collector_after("definitions", tmp_path)
    assert state["enabled"]
    assert state["frozen"] > 100_000  # Dagster's objects and ours, the definitions of every bundled blend
    assert state["walked"] < 5_000  # what a full collection still walks


def test_the_command_imports_with_the_collector_off_then_freezes_them(tmp_path):
    state = _collector_after("status", tmp_path)
    assert state["enabled"]
    assert state["frozen"] > 100_000
    # With the collector on during the imports, four full collections walked the growing heap (the code before);
    # what is left is at most one, among the objects made after the freeze (the instance's own imports).
    assert state["full_collections"] <= 1
