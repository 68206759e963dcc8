"""Resolve a blend entry's ``path`` to a sorted list of data files.

``path`` is a local file, directory or glob (relative paths are relative to the blend file's folder, so a
blend and its data can move together), ``s3://bucket/prefix`` (a prefix or a glob; ``endpoint_url`` from
the entry or ``AWS_ENDPOINT_URL``), or ``hf://org/repo`` (see ``sources/hf.py``). ``subset`` and ``split``
are matched exactly against path segments: ``4plus`` matches ``4plus/x.parquet`` and
``data/4plus/x.parquet`` but never ``4plus_MIND/x.parquet``.
"""

import glob
import hashlib
import json
import os
from pathlib import Path

from nemotron_assets.sources.errors import InputError
from nemotron_assets.sources.files import SourceFile, detect_format
from nemotron_assets.sources.selection import Resolution, SourceEntry, matches_subset_split

GLOB_CHARS = set("*?[")


def storage_options_for(entry: SourceEntry) -> dict:
    """fsspec options for the entry's remote files (S3 endpoint; credentials come from the environment)."""
    if entry.path.startswith("s3://"):
        endpoint = entry.endpoint_url or os.environ.get("AWS_ENDPOINT_URL")
        return {"client_kwargs": {"endpoint_url": endpoint}} if endpoint else {}
    return {}


def resolve_files(entry: SourceEntry, base_dir: Path) -> Resolution:
    """The entry's data files, sorted by path; raises InputError naming the entry when there are none."""
    if entry.path.startswith("hf://"):
        from nemotron_assets.sources.hf import resolve_hf  # huggingface_hub costs 0.4 s to import: only when used

        resolution = resolve_hf(entry)
    elif entry.path.startswith("s3://"):
        resolution = Resolution(_resolve_s3(entry))
    elif "://" in entry.path:
        raise InputError(f"unsupported URL scheme in {entry.path!r} (use a local path, s3:// or hf://)",
                         dataset=entry.name, field="path")
    else:
        resolution = Resolution(_resolve_local(entry, base_dir))
    if not resolution.files:
        what = f" with subset {entry.subset!r}" if entry.subset else ""
        what += f" and split {entry.split!r}" if entry.split else ""
        raise InputError(f"no data files (.jsonl, .jsonl.gz, .jsonl.zst, .parquet) found at {entry.path}"
                         f"{what}", dataset=entry.name, field="path")
    return resolution


def listing_hash(entry: SourceEntry, base_dir: Path) -> str:
    """A short hash of the entry's file listing (path, size, and the ETag on S3 or the modification time on local
    disk): it changes when a file appears, goes or changes, and reading it never opens a file."""
    return files_listing_hash(resolve_files(entry, base_dir).files)


def files_listing_hash(files: list[SourceFile]) -> str:
    """`listing_hash` of files already listed by ``resolve_files``."""
    listing = []
    for source in files:
        fingerprint = source.fingerprint or str(os.stat(source.url).st_mtime_ns)  # local: no ETag
        listing.append([source.url, source.size, fingerprint])
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()[:16]


def _data_file(url: str, size: int, entry: SourceEntry, fingerprint: str = "",
               single_file: bool = False) -> SourceFile | None:
    """A SourceFile if ``url`` is data. A declared ``format`` reaches files with unknown suffixes only when
    the path names that one file: in a folder, a README.md must not be read as JSONL."""
    detected = detect_format(url, entry.format, any_suffix=single_file)
    if detected is None:
        return None
    fmt, compression = detected
    return SourceFile(url=url, size=size, format=fmt, compression=compression, fingerprint=fingerprint)


def _resolve_local(entry: SourceEntry, base_dir: Path) -> list[SourceFile]:
    path = Path(entry.path).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    if GLOB_CHARS & set(entry.path):
        candidates = [Path(p) for p in glob.glob(str(path), recursive=True)]
        root = _glob_root(path)
    elif path.is_dir():
        candidates = list(path.rglob("*"))
        root = path
    elif path.is_file():
        source = _data_file(str(path.resolve()), path.stat().st_size, entry, single_file=True)
        if source is None:
            raise InputError(f"{path} is not a data file (.jsonl, .jsonl.gz, .jsonl.zst or .parquet); set "
                             "'format' in the blend entry if the suffix is unusual", dataset=entry.name,
                             field="path")
        return [source]
    else:
        raise InputError(f"no such file or directory: {path}", dataset=entry.name, field="path")
    files = []
    for p in sorted(candidates, key=lambda p: p.as_posix()):  # string order, like the s3:// and hf:// listings
        relative = os.path.relpath(p, root).replace(os.sep, "/")
        if not p.is_file() or any(part.startswith(".") for part in relative.split("/")):
            continue  # hidden files and everything inside hidden folders (.git/, .cache/)
        if not matches_subset_split(relative, entry.subset, entry.split):
            continue
        source = _data_file(str(p.resolve()), p.stat().st_size, entry)
        if source is not None:
            files.append(source)
    return files


def _glob_root(pattern: Path) -> Path:
    """The folder part of a glob before its first wildcard: subset/split match below it."""
    fixed = []
    for part in pattern.parts:
        if GLOB_CHARS & set(part):
            break
        fixed.append(part)
    return Path(*fixed)


def _resolve_s3(entry: SourceEntry) -> list[SourceFile]:
    import s3fs

    options = storage_options_for(entry)
    fs = s3fs.S3FileSystem(**options)
    target = entry.path[len("s3://"):].rstrip("/")
    try:
        if GLOB_CHARS & set(target):
            listing = fs.glob(target, detail=True)
            root = target.split("*")[0].rsplit("/", 1)[0]
        elif fs.isfile(target):
            listing = {target: fs.info(target)}
            root = target.rsplit("/", 1)[0]
        else:
            listing = fs.find(target, detail=True)
            root = target
    except (FileNotFoundError, PermissionError, OSError) as exc:
        raise InputError(f"cannot list {entry.path}: {exc}", dataset=entry.name, field="path") from None
    files = []
    for key in sorted(listing):
        info = listing[key]
        if info.get("type") != "file":
            continue
        relative = key[len(root):].lstrip("/")
        if not matches_subset_split(relative, entry.subset, entry.split):
            continue
        etag = str(info.get("ETag", "")).strip('"')
        source = _data_file(f"s3://{key}", int(info["size"]), entry, fingerprint=f"etag:{etag}")
        if source is not None:
            files.append(source)
    return files
