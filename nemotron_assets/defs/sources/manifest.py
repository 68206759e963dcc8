"""One dataset of a blend -> its manifest: resolve the files, measure them, plan the shards.

``build_manifest`` lists the files (sources/discovery.py), counts every file's rows and hashes its content in one
streaming pass (sources/readers.py), and cuts the rows into shards of about ``shard_size`` input bytes
(sources/plan.py). The manifest (sources/manifest.py) is what every later step builds from.
"""

from pathlib import Path

from nemotron_assets.core.blend import Blend, DatasetEntry
from nemotron_assets.sources.discovery import resolve_files, storage_options_for
from nemotron_assets.sources.errors import InputError
from nemotron_assets.sources.files import SourceFile
from nemotron_assets.sources.manifest import SourceManifest
from nemotron_assets.sources.plan import plan_shards, shard_count_for
from nemotron_assets.sources.readers import ReadOptions, check_parquet_text_column, count_rows_and_hash


def read_options(blend: Blend, entry: DatasetEntry) -> ReadOptions:
    """How every step reads a dataset's rows: its text field, the blend's ``on_error``, an S3 endpoint."""
    return ReadOptions(dataset=entry.name, text_field=entry.text_field, on_error=blend.on_error,
                       storage_options=storage_options_for(entry))


def build_manifest(blend: Blend, entry: DatasetEntry, base_dir: Path, max_rows: int | None = None) -> SourceManifest:
    """Resolve, measure (rows + content hash, one streaming pass per file) and plan one dataset.

    With ``max_rows`` (a sample) only the first files holding that many rows are measured and listed.
    """
    resolution = resolve_files(entry, base_dir)
    options = read_options(blend, entry)
    if entry.kind == "pretrain":  # text: every Parquet file must have the text column, checked before reading
        for source in resolution.files:
            if source.format == "parquet":
                check_parquet_text_column(source, options)
    files, skipped = [], []
    for source in resolution.files:
        if max_rows is not None and sum(f.rows for f in files) >= max_rows:
            break  # a sample: the files after the first max_rows rows are neither read nor listed
        line_starts: list[tuple[int, int]] = []
        rows, digest = count_rows_and_hash(source, options, line_starts)
        fingerprint = source.fingerprint or f"blake3:{digest}"
        if rows == 0:
            if blend.on_error != "skip":
                raise InputError("empty file (no rows); remove it or set on_error: skip", dataset=entry.name,
                                 path=source.url)
            skipped.append(source.url)
        files.append(SourceFile(source.url, source.size, source.format, source.compression, rows, fingerprint,
                                tuple(line_starts)))
    if sum(f.rows for f in files) == 0:
        raise InputError(f"empty dataset: {len(files)} file(s) at {entry.path} hold no rows", dataset=entry.name,
                         field="path")
    return plan_manifest(blend, entry, resolution.revision, files, max_rows, skipped)


def plan_manifest(blend: Blend, entry: DatasetEntry, revision: str | None, files: list[SourceFile],
                  max_rows: int | None, skipped: list[str]) -> SourceManifest:
    """The manifest of measured ``files``: the blend's settings cut their rows into shards."""
    rows = _limit_rows([f.rows for f in files], max_rows)
    sizes = [f.size * r // f.rows if f.rows else 0 for f, r in zip(files, rows)]
    count = blend.shard_count_override(entry) or shard_count_for(sum(sizes), sum(rows), blend.shard_size_bytes)
    return SourceManifest(
        blend=blend.name, dataset=entry.name, split=blend.split_of(entry.name), path=entry.path,
        revision=revision, text_field=entry.text_field, files=files,
        shards=plan_shards(sizes, rows, count), max_rows=max_rows, skipped_empty_files=skipped,
    )


def replan_reason(blend: Blend, entry: DatasetEntry, base_dir: Path, manifest: SourceManifest) -> str | None:
    """Why a full build's manifest is no longer the plan the blend and the files make now, or None.

    The files are listed again (never read): a file that appeared, went, or changed size (or ETag, on S3) means
    the dataset must be measured again. A local file rewritten to the same size is not seen here. Then the
    measurements in the manifest are planned again with the blend's settings as they are now (``shard_size``,
    ``num_shards``, ``split``, ``text_field``, ...). ``hf://`` sources are pinned by revision and not listed."""
    if not entry.path.startswith("hf://"):
        listed = [(f.url, f.size, f.fingerprint) for f in resolve_files(entry, base_dir).files]
        measured = [(f.url, f.size, f.fingerprint if fingerprint else "")
                    for f, (_, _, fingerprint) in zip(manifest.files, listed)]
        if len(listed) != len(manifest.files) or measured != listed:
            return "its source files changed"
    planned = plan_manifest(blend, entry, manifest.revision, manifest.files, None, manifest.skipped_empty_files)
    if planned.to_bytes() != manifest.to_bytes():
        return "the blend's settings plan it otherwise"
    return None


def _limit_rows(rows: list[int], max_rows: int | None) -> list[int]:
    """Keep only the first ``max_rows`` rows of the dataset (file order)."""
    if max_rows is None:
        return rows
    limited, left = [], max_rows
    for r in rows:
        take = min(r, left)
        limited.append(take)
        left -= take
    return limited
