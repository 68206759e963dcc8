"""Materialize one tokenized shard into storage, or recognise that it is already there.

A shard is done when its receipt (``shard_NNNNN.json``) exists, names the same input (row ranges, file
versions, tokenizer, settings) and its ``.bin``/``.idx`` have the recorded sizes. Then the step reports
"up to date" instead of rebuilding: re-running a failed multi-shard run redoes only the failed shards.

Commit order: receipt deleted, ``.idx`` deleted, ``.bin`` committed, ``.idx`` committed, receipt written.
At every instant the storage holds a finished shard, or a shard without a receipt (not done).
"""

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nemotron_assets.blend import Blend
from nemotron_assets.formats.megatron import DType, dtype_for_vocab
from nemotron_assets.layout import ShardKey, shard_prefix
from nemotron_assets.pretrain.build import BackendMismatch, ShardStats, build_shard
from nemotron_assets.sources.manifest import SourceManifest, iter_shard_texts, read_options
from nemotron_assets.sources.prefetch import prefetch
from nemotron_assets.sources.readers import ReadStats
from nemotron_assets.storage import Storage
from nemotron_assets.tokenize.documents import LoadedTokenizer

FORMAT_VERSION = "megatron-mmidx-1"


@dataclass(frozen=True)
class ShardOutcome:
    key: ShardKey
    status: str  # "built" or "up to date"
    receipt: dict
    seconds: float = 0.0  # wall time of this step (not in the receipt, whose bytes are deterministic)


def shard_dtype(blend: Blend, tokenizer: LoadedTokenizer) -> DType:
    return DType[blend.dtype] if blend.dtype else dtype_for_vocab(tokenizer.vocab_size)


def input_fingerprint(blend: Blend, manifest: SourceManifest, key: ShardKey, tokenizer: LoadedTokenizer) -> str:
    payload = json.dumps({
        "format": FORMAT_VERSION, "shard": manifest.shard_fingerprint(key.index),
        "tokenizer": tokenizer.fingerprint(), "dtype": shard_dtype(blend, tokenizer).name,
        "on_error": blend.on_error,
    }, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def read_receipt(storage: Storage, prefix: str) -> dict | None:
    if not storage.exists(f"{prefix}.json"):
        return None
    try:
        return json.loads(storage.read_bytes(f"{prefix}.json"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None  # a receipt we cannot read proves nothing: the shard is rebuilt


def is_up_to_date(storage: Storage, prefix: str, receipt: dict | None, fingerprint: str) -> bool:
    if receipt is None or receipt.get("input_fingerprint") != fingerprint:
        return False
    for ext, key in ((".bin", "bin_bytes"), (".idx", "idx_bytes")):
        if not storage.exists(prefix + ext) or storage.size(prefix + ext) != receipt["stats"][key]:
            return False
    return True


def materialize_shard(storage: Storage, blend: Blend, manifest: SourceManifest, key: ShardKey,
                      tokenizer: LoadedTokenizer, force: bool = False,
                      log: Callable[[str], None] = print) -> ShardOutcome:
    started = time.monotonic()
    prefix = shard_prefix(blend.name, key)
    fingerprint = input_fingerprint(blend, manifest, key, tokenizer)
    receipt = read_receipt(storage, prefix)
    if not force and is_up_to_date(storage, prefix, receipt, fingerprint):
        return ShardOutcome(key, "up to date", receipt, time.monotonic() - started)
    dtype = shard_dtype(blend, tokenizer)
    total_rows = manifest.shards[key.index].rows

    def progress(rows: int, tokens: int, seconds: float) -> None:
        rate = tokens / seconds if seconds else 0.0
        eta = (total_rows - rows) * seconds / rows if rows else 0.0
        log(f"{key}: {rows:,}/{total_rows:,} rows ({100 * rows / max(total_rows, 1):.0f}%), "
            f"{tokens:,} tokens, {rate / 1e6:.2f} M tokens/s, ETA {eta:.0f} s")

    with storage.staging() as folder:
        staged = folder / "shard"
        stats, read = _build_with_fallback(blend, manifest, key, tokenizer, dtype, staged, progress, log)
        receipt = {
            "shard": str(key), "blend": blend.name, "split": manifest.split, "input_fingerprint": fingerprint,
            "source_fingerprint": manifest.shard_fingerprint(key.index),
            "vocab_size": tokenizer.vocab_size, "tokenizer": tokenizer.files.spec,
            "tokenizer_sha256": tokenizer.files.sha256, "stats": stats.as_dict(),
            "ranges": [{"file": manifest.files[r.file_index].url, "row_start": r.row_start, "row_end": r.row_end}
                       for r in manifest.shards[key.index].ranges],
        }
        receipt["stats"]["dropped"] = dict(read.dropped)
        receipt["stats"]["dropped_examples"] = list(read.examples)
        if read.dropped:
            log(f"{key}: skipped {sum(read.dropped.values()):,} bad row(s) "
                f"({', '.join(f'{k}: {v:,}' for k, v in sorted(read.dropped.items()))}); first: {read.examples[0]}")
        storage.delete(f"{prefix}.json")
        storage.delete(f"{prefix}.idx")
        storage.commit(folder / "shard.bin", f"{prefix}.bin")
        storage.commit(folder / "shard.idx", f"{prefix}.idx")
        storage.write_bytes(f"{prefix}.json", json.dumps(receipt, indent=1, sort_keys=True).encode())
    return ShardOutcome(key, "built", receipt, time.monotonic() - started)


def _build_with_fallback(blend: Blend, manifest: SourceManifest, key: ShardKey, tokenizer: LoadedTokenizer,
                         dtype: DType, staged: Path, progress, log) -> tuple[ShardStats, ReadStats]:
    """Build with the chosen backend; if a fast backend disagrees on real data, rebuild with the reference."""
    options = read_options(blend, blend.entry(key.dataset))

    def build() -> tuple[ShardStats, ReadStats]:
        read = ReadStats()
        batches = prefetch(iter_shard_texts(manifest, key.index, options, read))
        stats = build_shard(batches, tokenizer, dtype, staged, progress=progress)
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
