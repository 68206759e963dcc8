"""Push an export folder to the Hugging Face Hub: create the dataset repo (private unless asked public), then
``HfApi.upload_folder``, leaving out the hidden folders (``.receipts/``, ``.meta/``, ``.staging/``).

What a re-run after an interrupted push does depends on ``hf_xet``. With it, ``upload_folder`` uploads and commits in
batches and a re-run goes on where the last one stopped. Without it (or with ``HF_HUB_DISABLE_XET=1``), the whole folder
is one commit: a re-run asks the Hub (preupload) which files it has, uploads through the LFS batch API only the
objects it lacks, and makes that one commit; a re-run after a finished push commits nothing. Only the path without
``hf_xet`` is tested here (against a loopback server, nemotron_assets_tests/hub_server.py): the Hub cannot be reached.

The token is huggingface_hub's own (``HF_TOKEN``, or ``hf auth login``); ``HF_ENDPOINT`` names another Hub.
"""

from dataclasses import dataclass
from pathlib import Path

from nemotron_assets.defs.export.step import HIDDEN


@dataclass(frozen=True)
class Pushed:
    repo_url: str
    commit: str  # the commit's oid
    private: bool


def push_folder(folder: Path, repo_id: str, *, public: bool = False, message: str = "") -> Pushed:
    from huggingface_hub import HfApi

    api = HfApi()
    url = api.create_repo(repo_id, repo_type="dataset", private=not public, exist_ok=True)
    commit = api.upload_folder(repo_id=repo_id, repo_type="dataset", folder_path=folder, ignore_patterns=list(HIDDEN),
                               commit_message=message or f"Export of {folder.name}")
    return Pushed(str(url), commit.oid, not public)
