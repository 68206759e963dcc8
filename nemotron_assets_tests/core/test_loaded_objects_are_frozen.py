"""allocator.py ``loading_for_good``: what a process keeps to its end (Dagster, the pipelines' modules, the code
location's definitions) is frozen out of the cycle collector's full collections once loaded, and the collector is on
again afterwards; a process that materializes again through the Python API keeps no more objects each time
(``refreeze_after_reload``).

Each case runs in a fresh interpreter, as a command or a Dagster process starts: this test process has imported
everything already, and may have frozen it."""

import json
import subprocess
import sys

import pytest

from nemotron_assets_tests.conftest import REPO

#: Counts the full collections from the interpreter's start, then reports the collector's state as JSON.
PROBE = """
import gc, json, sys
full = []
gc.callbacks.append(lambda phase, info: full.append(1) if phase == "stop" and info["generation"] == 2 else None)
tracked = []  # frozen or not: every object the collector knows, after each call
if sys.argv[1] == "definitions":
    import nemotron_assets.definitions
elif sys.argv[1] == "status":
    from nemotron_assets.cli import main
    main(["status", "sample"])
else:
    import contextlib, io
    import nemotron_assets
    with contextlib.redirect_stderr(io.StringIO()):
        nemotron_assets.materialize("sample")
        for _ in range(3):
            nemotron_assets.materialize("sample", select="megatron_blend")
            tracked.append(gc.get_freeze_count() + len(gc.get_objects()))
print(json.dumps({"full_collections": len(full), "frozen": gc.get_freeze_count(), "walked": len(gc.get_objects()),
                  "enabled": gc.isenabled(), "tracked": tracked}))
"""


def _collector_after(what: str, tmp_path) -> dict:
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO / "dagster_home" / "dagster.yaml").read_text())
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "DAGSTER_HOME": str(home),
           "NEMOTRON_DATA_ROOT": str(tmp_path / "data"), "NEMOTRON_BLENDS_DIR": str(REPO / "blends")}
    done = subprocess.run([sys.executable, "-c", PROBE, what], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=240, check=True)
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


def test_materializing_again_in_one_process_keeps_no_more_objects(tmp_path):
    # Each call reloads the code location. Were its last load's objects and its runs' garbage frozen with the new
    # ones, each call would keep ~6,000-7,000 more objects (measured with the refreeze removed).
    tracked = _collector_after("api", tmp_path)["tracked"]
    assert [after - before for before, after in zip(tracked, tracked[1:])] == [pytest.approx(0, abs=2_000)] * 2
