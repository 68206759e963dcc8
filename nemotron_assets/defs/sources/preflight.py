"""Blend-level checks that need no data: run before any file is read or hashed.

A tokenizer path that does not exist, a ``sentence_language`` without punkt data, or a Parquet file without the
text column, would otherwise surface only
after ``source_split`` had read and hashed a whole dataset. ``check_before_reading`` finds them from file listings
and Parquet footers alone, so the CLI can refuse the blend at once (exit status 2, like other blend errors).
``hf://`` sources are resolved by ``source_split`` itself (resolving them means downloading), so they are not
listed here.
"""

from pathlib import Path

from nemotron_assets.core.blend import Blend
from nemotron_assets.defs.sources.manifest import read_options
from nemotron_assets.sources.discovery import resolve_files
from nemotron_assets.sources.errors import InputError
from nemotron_assets.sources.readers import check_parquet_text_column
from nemotron_assets.tokenize.loading import locate_any_tokenizer
from nemotron_assets.tokenize.sentences import punkt_model_dir


def check_before_reading(blend: Blend, blend_file: Path, datasets: list[str] | None = None) -> None:
    """Raise the first ``InputError`` a build of ``datasets`` (default: all) would hit before reading data."""
    entries = [e for e in blend.entries() if datasets is None or e.name in datasets]
    if any(e.kind == "pretrain" for e in entries):
        try:
            locate_any_tokenizer(blend.tokenizer_model, blend.tokenizer_revision)
        except InputError as exc:  # name the blend file that chose it, and the setting as written there
            raise InputError(f"{exc.reason}: {blend.tokenizer_model!r}"
                             + (f" ({exc.path})" if exc.path and exc.path != blend.tokenizer_model else ""),
                             path=str(blend_file), field="tokenizer_model") from None
        if blend.split_sentences:
            try:
                punkt_model_dir(blend.sentence_language)
            except InputError as exc:
                raise InputError(exc.reason, path=str(blend_file), field=exc.field) from None
    for entry in entries:
        if entry.path.startswith("hf://"):
            continue
        files = resolve_files(entry, blend_file.parent).files
        if entry.kind != "pretrain":
            continue  # post-training rows are read whole, by their family mapper or their transform
        options = read_options(blend, entry)
        for source in files:
            if source.format == "parquet":
                check_parquet_text_column(source, options)

