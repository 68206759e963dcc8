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

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import ShardKey, shard_prefix
from nemotron_assets.core.records import Receipt, SourceManifest, freshness, rebuild_reason, receipt_path, write_receipt
from nemotron_assets.core.storage import Storage, locate_os_errors
from nemotron_assets.defs.pretrain.build import TOKENIZE_THREADS, BackendMismatch, ShardStats, build_shard
from nemotron_assets.defs.pretrain.inputs import shard_inputs, tokenizer_identity
from nemotron_assets.formats.megatron import DType, dtype_for_vocab
from nemotron_assets.sources.manifest import iter_shard_texts, read_options
from nemotron_assets.sources.prefetch import prefetch
from nemotron_assets.sources.readers import ReadStats
from nemotron_assets.tokenize.documents import LoadedTokenizer, TokenizerFacts

RECEIPT_KIND = "pretrain_shard"
SHARD_FILES = (".bin", ".idx")


@dataclass(frozen=True)
class ShardOutcome:
    key: ShardKey
    status: str  # "built" or "up to date"
    receipt: Receipt
    seconds: float = 0.0  # wall time of this step (not in the receipt, whose inputs part is deterministic)
    rebuilt_because: str = ""  # why a shard that existed was built again


def shard_dtype(blend: Blend, tokenizer: TokenizerFacts) -> DType:
    return DType[blend.dtype] if blend.dtype else dtype_for_vocab(tokenizer.vocab_size)


@dataclass(frozen=True)
class PlannedBuild:
    """A shard that must be built: where it goes, the inputs its receipt will name, and why it is built again."""

    key: ShardKey
    prefix: str
    inputs: dict
    rebuilt_because: str  # "" for a shard never built
    started: float  # time.monotonic() when the step began on it


def plan_shard(storage: Storage, blend: Blend, manifest: SourceManifest, key: ShardKey, tokenizer: TokenizerFacts,
               force: bool = False, log: Callable[[str], None] = print,
               base: str | None = None) -> ShardOutcome | PlannedBuild:
    """The outcome of a shard already up to date, or what building it takes (the tokenizer's facts suffice: the
    step may not hold the tokenizer itself, pretrain/build_host.py)."""
    started = time.monotonic()
    prefix = shard_prefix(base or blend.name, key)
    inputs = shard_inputs(blend, manifest, key.index, tokenizer_identity(tokenizer.files, tokenizer.vocab_size))
    current = freshness(storage, prefix, inputs)
    rebuilt_because = rebuild_reason(current, force)
    if rebuilt_because is None:
        return ShardOutcome(key, "up to date", current.receipt, time.monotonic() - started)
    if rebuilt_because:
        log(f"{key}: rebuilding: {rebuilt_because}")
    return PlannedBuild(key, prefix, inputs, rebuilt_because, started)


def materialize_shard(storage: Storage, blend: Blend, manifest: SourceManifest, key: ShardKey,
                      tokenizer: LoadedTokenizer, force: bool = False, log: Callable[[str], None] = print,
                      base: str | None = None) -> ShardOutcome:
    """Build shard ``key`` under ``base`` (the blend's folder, or a sample's; default the full build)."""
    planned = plan_shard(storage, blend, manifest, key, tokenizer.facts, force, log, base)
    if isinstance(planned, ShardOutcome):
        return planned
    return build_planned(storage, blend, manifest, planned, tokenizer, log)


def build_planned(storage: Storage, blend: Blend, manifest: SourceManifest, planned: PlannedBuild,
                  tokenizer: LoadedTokenizer, log: Callable[[str], None]) -> ShardOutcome:
    """Build a planned shard in a staging folder of this process, then commit it."""
    with storage.staging() as folder:
        with locate_os_errors(folder):
            stats, read = build_staged(blend, manifest, planned.key, tokenizer, folder, log)
        return commit_shard(storage, blend, manifest, planned, tokenizer.facts, folder, stats, read, log)


def build_staged(blend: Blend, manifest: SourceManifest, key: ShardKey, tokenizer: LoadedTokenizer, folder: Path,
                 log: Callable[[str], None], threads: int = TOKENIZE_THREADS) -> tuple[ShardStats, ReadStats]:
    """Write the shard's ``shard.bin``/``shard.idx`` into the local ``folder``; nothing is committed.

    Touches only the source files, the tokenizer and ``folder``, so it can run in a forked process
    (pretrain/shard_processes.py, pretrain/build_host.py)."""
    total_rows = manifest.shards[key.index].rows

    def progress(rows: int, tokens: int, seconds: float) -> None:
        rate = tokens / seconds if seconds else 0.0
        eta = (total_rows - rows) * seconds / rows if rows else 0.0
        log(f"{key}: {rows:,}/{total_rows:,} rows ({100 * rows / max(total_rows, 1):.0f}%), "
            f"{tokens:,} tokens, {rate / 1e6:.2f} M tokens/s, ETA {eta:.0f} s")

    dtype = shard_dtype(blend, tokenizer.facts)
    return _build_with_fallback(blend, manifest, key, tokenizer, dtype, folder / "shard", progress, log, threads)


def commit_shard(storage: Storage, blend: Blend, manifest: SourceManifest, planned: PlannedBuild,
                 tokenizer: TokenizerFacts, folder: Path, stats: ShardStats, read: ReadStats,
                 log: Callable[[str], None]) -> ShardOutcome:
    """Publish the files ``build_staged`` wrote into ``folder``, then the receipt that makes the shard done."""
    key, prefix = planned.key, planned.prefix
    if read.dropped:
        log(f"{key}: skipped {sum(read.dropped.values()):,} bad row(s) "
            f"({', '.join(f'{k}: {v:,}' for k, v in sorted(read.dropped.items()))}); first: {read.examples[0]}")
    receipt = Receipt(
        kind=RECEIPT_KIND, key=str(key), inputs=planned.inputs,
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
    return ShardOutcome(key, "built", receipt, time.monotonic() - planned.started, planned.rebuilt_because)


def _build_with_fallback(blend: Blend, manifest: SourceManifest, key: ShardKey, tokenizer: LoadedTokenizer,
                         dtype: DType, staged: Path, progress, log, threads: int) -> tuple[ShardStats, ReadStats]:
    """Build with the chosen backend; if a fast backend disagrees on real data, rebuild with the reference."""
    options = read_options(blend, blend.entry(key.dataset))

    def build() -> tuple[ShardStats, ReadStats]:
        read = ReadStats()
        batches = prefetch(iter_shard_texts(manifest, key.index, options, read))
        stats = build_shard(batches, tokenizer, dtype, staged, progress=progress, log=log, threads=threads)
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
