"""Materialize one tokenized shard into storage, or recognise that it is already there.

A shard is up to date when ``records.freshness`` says so: its receipt names the inputs a build would use now
(pretrain/inputs.py) and its ``.bin``/``.idx`` are as committed. Then the step reports "up to date" instead of
rebuilding; anything else (missing, stale, or files changed after the commit) is rebuilt.

Commit order: receipt deleted, ``.idx`` deleted, ``.bin`` committed, ``.idx`` committed, receipt written. At every
instant the storage holds a finished shard, or a shard without a receipt (not done).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nemotron_assets.blend import Blend
from nemotron_assets.formats.megatron import DType, dtype_for_vocab
from nemotron_assets.layout import ShardKey, shard_prefix
from nemotron_assets.pretrain.build import BackendMismatch, ShardStats, build_shard
from nemotron_assets.pretrain.inputs import shard_inputs, tokenizer_identity
from nemotron_assets.records import Receipt, SourceManifest, freshness, rebuild_reason, receipt_path, write_receipt
from nemotron_assets.sources.manifest import iter_shard_texts, read_options
from nemotron_assets.sources.prefetch import prefetch
from nemotron_assets.sources.readers import ReadStats
from nemotron_assets.storage import Storage, locate_os_errors
from nemotron_assets.tokenize.documents import LoadedTokenizer

RECEIPT_KIND = "pretrain_shard"
SHARD_FILES = (".bin", ".idx")


@dataclass(frozen=True)
class ShardOutcome:
    key: ShardKey
    status: str  # "built" or "up to date"
    receipt: Receipt
    seconds: float = 0.0  # wall time of this step (not in the receipt, whose inputs part is deterministic)
    rebuilt_because: str = ""  # why a shard that existed was built again
    sample: str | None = None  # the sample it belongs to (None: the full build)


def shard_dtype(blend: Blend, tokenizer: LoadedTokenizer) -> DType:
    return DType[blend.dtype] if blend.dtype else dtype_for_vocab(tokenizer.vocab_size)


def materialize_shard(storage: Storage, blend: Blend, manifest: SourceManifest, key: ShardKey,
                      tokenizer: LoadedTokenizer, force: bool = False, log: Callable[[str], None] = print,
                      base: str | None = None) -> ShardOutcome:
    """Build shard ``key`` under ``base`` (the blend's folder, or a sample's; default the full build)."""
    started = time.monotonic()
    prefix = shard_prefix(base or blend.name, key)
    inputs = shard_inputs(blend, manifest, key.index, tokenizer_identity(tokenizer.files, tokenizer.vocab_size))
    current = freshness(storage, prefix, inputs)
    rebuilt_because = rebuild_reason(current, force)
    if rebuilt_because is None:
        return ShardOutcome(key, "up to date", current.receipt, time.monotonic() - started)
    if rebuilt_because:
        log(f"{key}: rebuilding: {rebuilt_because}")
    dtype = shard_dtype(blend, tokenizer)
    total_rows = manifest.shards[key.index].rows

    def progress(rows: int, tokens: int, seconds: float) -> None:
        rate = tokens / seconds if seconds else 0.0
        eta = (total_rows - rows) * seconds / rows if rows else 0.0
        log(f"{key}: {rows:,}/{total_rows:,} rows ({100 * rows / max(total_rows, 1):.0f}%), "
            f"{tokens:,} tokens, {rate / 1e6:.2f} M tokens/s, ETA {eta:.0f} s")

    with storage.staging() as folder:
        staged = folder / "shard"
        with locate_os_errors(folder):
            stats, read = _build_with_fallback(blend, manifest, key, tokenizer, dtype, staged, progress, log)
        if read.dropped:
            log(f"{key}: skipped {sum(read.dropped.values()):,} bad row(s) "
                f"({', '.join(f'{k}: {v:,}' for k, v in sorted(read.dropped.items()))}); first: {read.examples[0]}")
        receipt = Receipt(
            kind=RECEIPT_KIND, key=str(key), inputs=inputs,
            files={".bin": {"bytes": stats.bin_bytes, "sha256": stats.bin_sha256},
                   ".idx": {"bytes": stats.idx_bytes, "sha256": stats.idx_sha256}},
            stats={**stats.as_dict(), "vocab_size": tokenizer.vocab_size, "dropped": dict(read.dropped),
                   "dropped_examples": list(read.examples)},
            extra={"blend": blend.name, "split": manifest.split, "tokenizer_model": tokenizer.files.spec,
                   "ranges": [{"file": manifest.files[r.file_index].url, "row_start": r.row_start,
                               "row_end": r.row_end} for r in manifest.shards[key.index].ranges]},
        )
        storage.delete(receipt_path(prefix))
        storage.delete(f"{prefix}.idx")
        storage.commit(folder / "shard.bin", f"{prefix}.bin")
        storage.commit(folder / "shard.idx", f"{prefix}.idx")
        receipt = write_receipt(storage, prefix, receipt)
    return ShardOutcome(key, "built", receipt, time.monotonic() - started, rebuilt_because)


def _build_with_fallback(blend: Blend, manifest: SourceManifest, key: ShardKey, tokenizer: LoadedTokenizer,
                         dtype: DType, staged: Path, progress, log) -> tuple[ShardStats, ReadStats]:
    """Build with the chosen backend; if a fast backend disagrees on real data, rebuild with the reference."""
    options = read_options(blend, blend.entry(key.dataset))

    def build() -> tuple[ShardStats, ReadStats]:
        read = ReadStats()
        batches = prefetch(iter_shard_texts(manifest, key.index, options, read))
        stats = build_shard(batches, tokenizer, dtype, staged, progress=progress, log=log)
        stats.rows = read.rows
        return stats, read

    try:
        return build()
    except BackendMismatch as exc:
        if tokenizer.encoder is tokenizer.hf:
            raise
        log(f"{key}: {exc}; rebuilding with hf-tokenizers")
        tokenizer.use_reference(str(exc))
        return build()
