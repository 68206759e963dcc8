"""``export BLEND --hf DIR --push REPO_ID`` against a loopback Hub (hub_server.py), on huggingface_hub's path without
hf_xet (``HF_HUB_DISABLE_XET=1``): repo create, preupload, LFS batch and upload, commit. The Xet path (resumable
batches of commits) is not tested: it needs the Hub's Xet storage, which cannot be reached here."""

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from nemotron_assets_tests.conftest import REPO
from nemotron_assets_tests.hub_server import HubServer

pytestmark = pytest.mark.slow


def hub_env(built, hub: HubServer) -> dict:
    return dict(built.env, HF_ENDPOINT=hub.endpoint, HF_HUB_DISABLE_XET="1", HF_HUB_OFFLINE="0", HF_TOKEN="hf_test")


def published(folder: Path) -> dict[str, bytes]:
    """What an upload of the folder must publish: every file outside the hidden folders."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)}


def test_push_creates_a_private_repo_unless_public_and_uploads_the_folder(built, tmp_path):
    folder = tmp_path / "hf"
    with HubServer() as hub:
        done = built.run("export", "posttrain_sample", "--hf", str(folder), "--push", "org/posttrain",
                         env=hub_env(built, hub))
        assert done.returncode == 0, done.stderr[-3000:]
        repo = hub.repos["org/posttrain"]
        assert repo.private and len(repo.commits) == 1
        assert repo.files == published(folder) and "README.md" in repo.files
        assert len(hub.uploads) == 14  # the Parquet files, through the LFS batch API; README.md is a regular file
        assert not any(path.startswith(".") for path in repo.files)
        public = built.run("export", "posttrain_sample", "--hf", str(folder), "--push", "org/open", "--public",
                           env=hub_env(built, hub))
        assert public.returncode == 0, public.stderr[-3000:]
        assert not hub.repos["org/open"].private
        assert len(hub.uploads) == 14  # the Hub had every object already: none uploaded again
    assert "pushed to " in done.stderr and "(private)" in done.stderr


def test_a_push_killed_midway_and_run_again_ends_with_the_same_files(built, tmp_path):
    folder = tmp_path / "hf"
    command = [sys.executable, "-m", "nemotron_assets", "export", "posttrain_sample", "--hf", str(folder),
               "--push", "org/resumed"]
    with HubServer(hold_uploads_after=4) as hub:
        env = hub_env(built, hub)
        killed = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            assert hub.upload_held.wait(180), "the push never reached its fifth upload"
        finally:
            killed.send_signal(signal.SIGKILL)
            killed.communicate(timeout=60)
        repo = hub.repos["org/resumed"]
        assert repo.commits == [] and repo.files == {}  # killed before its one commit
        stored = set(hub.lfs)
        assert len(stored) == 4
        hub.release()
        hub.settle()  # the killed push's held or half-read uploads are done before the next push's are counted
        before = len(hub.uploads)

        again = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
        assert again.returncode == 0, again.stderr[-3000:]
        assert "hf_export: " + str(folder) + ": up to date" in again.stderr  # the folder was complete
        assert repo.files == published(folder) and len(repo.commits) == 1
        uploaded_again = hub.uploads[before:]
        assert len(uploaded_again) == 10 and not stored & set(uploaded_again)  # only what the Hub lacked
        assert len(hub.lfs) == 14

        twice = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
        assert twice.returncode == 0, twice.stderr[-3000:]
        assert len(repo.commits) == 1 and repo.files == published(folder)
        assert "No files have been modified since last commit" in twice.stderr
