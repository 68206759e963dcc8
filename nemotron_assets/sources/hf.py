"""Resolve ``hf://org/repo[/sub/folder]`` to the exact files of one subset and split, pinned to a commit.

Everything goes through huggingface_hub's ``snapshot_download`` and its cache (``$HF_HUB_CACHE/datasets--org--repo/
{refs/<branch>, snapshots/<sha>/<path>, blobs/}``), so the same code works online and, with ``HF_HUB_OFFLINE=1``,
from the local cache alone:

1. Fetch ``README.md`` at ``entry.revision`` (default ``main``). The snapshot folder is named by the commit sha,
   which pins the revision for everything after it (``Resolution.revision``).
2. Choose the files. A README ``configs:`` entry whose ``config_name`` equals the subset decides with its
   ``data_files`` (``[{split, path}]``, ``{split: glob}``, or a glob or list of globs = the ``train`` split, as in
   ``datasets``; relative to the repo or its ``data_dir``; ``*`` stays within a folder) or its ``data_dir`` alone.
   Otherwise ``matches_subset_split`` matches whole path segments below the repo (or sub folder): ``4plus`` never
   matches ``4plus_MIND/``. A sub folder in the path always narrows the selection.
3. Fetch a superset of those at the pinned sha (``allow_patterns`` are fnmatch: ``*`` crosses folders), then select
   exactly from the snapshot's listing, sorted by repo-relative path.

A file's url is its absolute path in the cache; its fingerprint ``hf:<repo>@<sha>:<path>`` needs no hashing, since
the commit fixes the content.
"""

import re
from pathlib import Path

import yaml
from fsspec.utils import glob_translate
from huggingface_hub import constants, errors, snapshot_download

from nemotron_assets.sources.errors import InputError
from nemotron_assets.sources.files import SourceFile, detect_format
from nemotron_assets.sources.selection import Resolution, SourceEntry, matches_subset_split

README = "README.md"
FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*\r?$", re.DOTALL | re.MULTILINE)


def resolve_hf(entry: SourceEntry) -> Resolution:
    """The entry's files in the local hub cache, and the commit sha they come from."""
    parts = [p for p in entry.path[len("hf://"):].split("/") if p]
    if len(parts) < 2:
        raise _error(entry, "path", "expected hf://org/repo or hf://org/repo/sub/folder")
    repo, prefix = "/".join(parts[:2]), "".join(f"{p}/" for p in parts[2:])
    snapshot = _download(entry, repo, entry.revision, [README])
    sha = snapshot.name
    config = _configs(entry, snapshot).get(entry.subset) if entry.subset else None
    data_dir = f"{str(config['data_dir']).strip('/')}/" if config and config.get("data_dir") else ""
    found = _split_globs(entry, config) if config else None
    globs = None if found is None else [data_dir + glob for glob in found]  # data_files are below data_dir
    regexes = [re.compile(glob_translate(g)) for g in globs or []]
    base = data_dir if config else prefix  # config paths are repo-relative; a sub folder only filters
    subset = None if config else entry.subset  # a config's files are its subset
    folder = max(prefix, base, key=len)  # the narrower of the two (they nest, or nothing is selected)

    def selected(rel: str) -> bool:
        if not (rel.startswith(prefix) and rel.startswith(base)):
            return False
        if globs is not None:
            return any(r.match(rel) for r in regexes)
        return matches_subset_split(rel[len(base):], subset, entry.split)

    patterns = globs if globs is not None else [f"{folder}*{subset}/*" if subset else f"{folder}*"]
    snapshot = _download(entry, repo, sha, patterns)
    candidates = sorted((p.relative_to(snapshot).as_posix(), p) for p in snapshot.rglob("*") if p.is_file())
    files = []
    for rel, path in candidates:
        detected = detect_format(rel, entry.format)
        if detected is None or any(part.startswith(".") for part in rel.split("/")) or not selected(rel):
            continue
        files.append(SourceFile(url=str(path.absolute()), size=path.stat().st_size, format=detected[0],
                                compression=detected[1], fingerprint=f"hf:{repo}@{sha}:{rel}"))
    if not files:
        data = [rel for rel, _ in candidates if rel.startswith(folder) and detect_format(rel, entry.format)]
        raise _nothing_selected(entry, repo, sha, folder, data, globs, subset)
    return Resolution(files, revision=sha)


def _download(entry: SourceEntry, repo: str, revision: str | None, patterns: list[str]) -> Path:
    wanted = revision or constants.DEFAULT_REVISION
    try:
        return Path(snapshot_download(repo, repo_type="dataset", revision=revision, allow_patterns=patterns))
    except errors.RevisionNotFoundError:
        raise _error(entry, "revision", f"revision {wanted!r} does not exist in {repo}") from None
    except errors.RepositoryNotFoundError:
        raise _error(entry, "path", f"no dataset repo {repo} on the hub (or it is private/gated and no "
                                    "HF_TOKEN is set)") from None
    except errors.LocalEntryNotFoundError as exc:
        folder = Path(constants.HF_HUB_CACHE) / f"datasets--{repo.replace('/', '--')}"
        why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else "the hub cannot be reached"
        if not folder.is_dir():
            raise _error(entry, "path", f"{repo} is not in the local Hugging Face cache ({folder}) and {why}; "
                                        "download it once online or point HF_HUB_CACHE at a cache holding it") from None
        ref = folder / "refs" / wanted
        sha = ref.read_text().strip() if ref.is_file() else wanted
        if (folder / "snapshots" / sha).is_dir():
            detail = f": {exc}" if isinstance(exc, errors.IncompleteSnapshotError) else ""
            raise _error(entry, "path", f"the cached snapshot {sha[:12]} of {repo} is incomplete: it lacks files "
                                        f"matching {patterns} and {why}{detail}") from None
        cached = sorted(p.name for p in (folder / "refs").glob("*")) + sorted(
            p.name[:12] for p in (folder / "snapshots").glob("*"))
        raise _error(entry, "revision", f"revision {wanted!r} of {repo} is not in the local cache ({why}); "
                                        f"cached refs and snapshots: {', '.join(cached) or 'none'}") from None
    except (errors.HfHubHTTPError, OSError, ValueError) as exc:  # ValueError: a malformed repo id
        raise _error(entry, "path", f"cannot fetch {repo} from the Hugging Face hub: {exc}") from None


def _configs(entry: SourceEntry, snapshot: Path) -> dict[str, dict]:
    """``config_name`` -> config from the README's YAML front matter (empty without a README or configs)."""
    readme = snapshot / README
    match = FRONT_MATTER.match(readme.read_text(encoding="utf-8", errors="replace")) if readme.is_file() else None
    if match is None:
        return {}
    try:
        meta = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        raise InputError(f"README front matter is not valid YAML: {exc}", dataset=entry.name, path=str(readme),
                         field="configs") from None
    configs = meta.get("configs") if isinstance(meta, dict) else None
    return {c["config_name"]: c for c in configs or [] if isinstance(c, dict) and "config_name" in c}


def _split_globs(entry: SourceEntry, config: dict) -> list[str] | None:
    """The config's data_files globs for the entry's split (every split when none is set); None without any."""
    data_files = config.get("data_files")
    if data_files is None:
        return None
    if isinstance(data_files, dict):
        by_split = {str(k): _as_list(v) for k, v in data_files.items()}
    elif isinstance(data_files, str) or all(isinstance(item, str) for item in data_files):
        by_split = {"train": _as_list(data_files)}
    else:
        by_split = {}
        for item in data_files:
            if not (isinstance(item, dict) and "split" in item and "path" in item):
                raise _error(entry, "subset", f"README config {entry.subset!r}: data_files item {item!r} needs "
                                              "'split' and 'path'")
            by_split.setdefault(str(item["split"]), []).extend(_as_list(item["path"]))
    if entry.split is not None and entry.split not in by_split:
        raise _error(entry, "split", f"README config {entry.subset!r} has no split {entry.split!r} (its splits: "
                                     f"{', '.join(by_split)})")
    chosen = [by_split[entry.split]] if entry.split is not None else by_split.values()
    return [str(glob).lstrip("/") for globs in chosen for glob in globs]


def _nothing_selected(entry: SourceEntry, repo: str, sha: str, folder: str, data: list[str],
                      globs: list[str] | None, subset: str | None) -> InputError:
    where = f"{repo}@{sha[:12]}" + (f" under {folder}" if folder else "")
    if globs is not None:
        field = "split" if entry.split is not None else "subset"
        return _error(entry, field, f"README config {entry.subset!r} data_files {globs} match no data files in "
                                    f"{where}")
    below = [rel[len(folder):] for rel in data]
    folders = sorted({rel.split("/")[0] for rel in below if "/" in rel})
    if subset is not None and not any(matches_subset_split(rel, subset, None) for rel in below):
        return _error(entry, "subset", f"no folder named exactly {subset!r} holds data files in {where} "
                                       f"(folders in the local snapshot: {', '.join(folders) or 'none'})")
    if entry.split is not None:
        return _error(entry, "split", f"no data files of split {entry.split!r} in {where}: a split matches a "
                                      f"folder {entry.split}/ or a file {entry.split}.* / {entry.split}-*")
    return _error(entry, "path", f"no data files (.jsonl, .jsonl.gz, .jsonl.zst, .parquet) in {where}")


def _as_list(value: str | list) -> list:
    return [value] if isinstance(value, str) else list(value)


def _error(entry: SourceEntry, field: str, reason: str) -> InputError:
    return InputError(reason, dataset=entry.name, path=entry.path, field=field)
