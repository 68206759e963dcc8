"""Build a local Hugging Face hub cache in a temp folder, laid out exactly as huggingface_hub writes it.

``snapshot_download``/``hf_hub_download`` (huggingface_hub 2.x) store a repo as::

    <cache>/<models|datasets>--<org>--<name>/
        blobs/<etag>                      file contents; etag = git blob sha1, or sha256 for LFS files
        snapshots/<commit sha>/<path>     relative symlinks to ../../blobs/<etag> (one folder per commit)
        refs/<branch or tag>              the commit sha, no newline
        trees/<commit sha>.json           the commit's file listing ({"format_version": 1, "files": {...}})

With ``HF_HUB_OFFLINE=1`` ``snapshot_download`` turns a branch or tag into a sha via ``refs/``, returns
``snapshots/<sha>`` if it exists, and, when ``trees/<sha>.json`` exists, raises ``IncompleteSnapshotError`` if a
listed file matching ``allow_patterns`` is missing from the snapshot. ``use_hub_cache`` points the library at
such a folder: its cache path and offline flag are read from the environment once, at import, so the module
constants are patched along with the environment.
"""

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

LFS_SUFFIXES = (".parquet", ".arrow", ".zst", ".gz", ".safetensors", ".bin")


@dataclass(frozen=True)
class CachedRepo:
    cache_dir: Path
    repo_id: str
    repo_type: str  # "model" or "dataset"
    sha: str

    @property
    def folder(self) -> Path:
        return self.cache_dir / f"{self.repo_type}s--{self.repo_id.replace('/', '--')}"

    @property
    def snapshot(self) -> Path:
        return self.folder / "snapshots" / self.sha


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def add_repo(cache_dir: Path, repo_id: str, files: dict[str, bytes | str], repo_type: str = "model",
             refs: tuple[str, ...] = ("main",), sha: str | None = None, tree_listing: bool = True) -> CachedRepo:
    """Add one commit of a repo (its files, the refs pointing at it) to the cache; returns where it is."""
    contents = {path: data.encode() if isinstance(data, str) else data for path, data in files.items()}
    if sha is None:
        digest = hashlib.sha1(repo_id.encode())
        for path in sorted(contents):
            digest.update(path.encode() + b"\0" + contents[path])
        sha = digest.hexdigest()
    repo = CachedRepo(Path(cache_dir), repo_id, repo_type, sha)
    tree = {}
    for path, data in contents.items():
        lfs = path.endswith(LFS_SUFFIXES)
        etag = hashlib.sha256(data).hexdigest() if lfs else git_blob_sha1(data)
        blob = repo.folder / "blobs" / etag
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        pointer = repo.snapshot / path
        pointer.parent.mkdir(parents=True, exist_ok=True)
        pointer.symlink_to(os.path.relpath(blob, pointer.parent))
        tree[path] = {"size": len(data), "blob_id": git_blob_sha1(data)}
        if lfs:
            tree[path].update(lfs_sha256=etag, lfs_size=len(data))
    repo.snapshot.mkdir(parents=True, exist_ok=True)
    for ref in refs:
        (repo.folder / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (repo.folder / "refs" / ref).write_text(sha)
    if tree_listing:
        listing = {"format_version": 1, "files": dict(sorted(tree.items()))}
        (repo.folder / "trees").mkdir(exist_ok=True)
        (repo.folder / "trees" / f"{sha}.json").write_text(json.dumps(listing, indent=1))
    return repo


def use_hub_cache(monkeypatch: pytest.MonkeyPatch, cache_dir: Path, offline: bool = True) -> None:
    """Make huggingface_hub read (only) this cache, as ``HF_HUB_CACHE=<cache_dir> HF_HUB_OFFLINE=1`` would."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HOME", str(Path(cache_dir).parent / "hf_home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_dir))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1" if offline else "0")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache_dir))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
