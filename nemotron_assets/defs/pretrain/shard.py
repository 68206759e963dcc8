"""One pretraining shard: its rows of the source files -> a Megatron ``.bin``/``.idx`` pair (formats/megatron.py).

What decides the shard's bytes (its receipt's ``inputs``, core/records.py):

- ``format``: this code's output format version. Bump ``FORMAT_VERSION`` whenever the same inputs would give
  different bytes (a writer change, a tokenization fix), so every shard built before is rebuilt.
- ``source``: the manifest's fingerprint of the shard's row ranges and the exact versions of the files they come
  from (sources/manifest.py ``shard_fingerprint``).
- ``tokenizer``: the sha256 of ``tokenizer.json``, the EOS/BOS/SEP token names its config gives, and its vocabulary
  size (base + added tokens, which decides the dtype).
- ``settings``: every blend setting that changes ids or layout: ``add_bos``, ``add_eos``, ``eod_token``,
  ``max_doc_tokens``, ``on_error``, and the dtype the shard is written in (the blend's ``dtype``, else Megatron's
  rule on the vocabulary size), so ``dtype: int32`` on a vocabulary that is int32 anyway changes nothing.

Dataset weights, the shard count of *other* datasets and the tokenizer backend (every backend is checked to give
the reference's ids) are not inputs: changing them rebuilds nothing.

The build (`shard_build`) reads the shard's rows, tokenizes them and writes ``shard.bin``/``shard.idx`` into a
staging folder (build.py); it touches nothing else, so it can run in a process forked from the step (core/step.py
``ShardRun``). The commit (core/step.py): receipt deleted, ``.idx`` deleted, ``.bin`` committed, ``.idx``
committed, receipt written: at every instant the storage holds a finished shard, or a shard without a receipt.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.step import Output, ShardBuild, Staged
from nemotron_assets.defs.pretrain.build import BackendMismatch, build_shard
from nemotron_assets.defs.pretrain.layout import shard_prefix
from nemotron_assets.defs.sources.manifest import read_options
from nemotron_assets.formats.megatron import DType, dtype_for_vocab
from nemotron_assets.sources.files import is_remote
from nemotron_assets.sources.manifest import SourceManifest, iter_shard_texts
from nemotron_assets.sources.prefetch import prefetch
from nemotron_assets.sources.readers import ReadOptions, ReadStats
from nemotron_assets.tokenize.documents import DocumentOptions, LoadedTokenizer
from nemotron_assets.tokenize.loading import TokenizerFiles, locate_tokenizer, vocab_size

FORMAT_VERSION = "megatron-mmidx/2"
RECEIPT_KIND = "pretrain_shard"


@dataclass(frozen=True)
class PretrainSettings:
    """What of the blend the pretraining steps use: the tokenizer, how texts become documents, the dtype."""

    blend: str
    tokenizer_model: str
    tokenizer_revision: str | None
    documents: DocumentOptions  # add_bos, add_eos, eod_token, max_doc_tokens, and the backend that encodes
    dtype: str | None  # the blend's override of Megatron's rule
    on_error: str
    reads: dict[str, ReadOptions]  # how each pretraining dataset's rows are read: its text field, an S3 endpoint

    @classmethod
    def of(cls, blend: Blend, backend: str = "auto") -> "PretrainSettings":
        return cls(blend.name, blend.tokenizer_model, blend.tokenizer_revision,
                   DocumentOptions(add_bos=blend.add_bos, add_eos=blend.add_eos, eod_token=blend.eod_token,
                                   max_doc_tokens=blend.max_doc_tokens, backend=backend),
                   blend.dtype, blend.on_error,
                   {entry.name: read_options(blend, entry) for entry in blend.datasets_of("pretrain")})

    def tokenizer_files(self) -> TokenizerFiles:
        return locate_tokenizer(self.tokenizer_model, self.tokenizer_revision)

    def tokenizer_identity(self) -> dict:
        """What of the tokenizer decides the ids (the module docstring), without building it."""
        files = self.tokenizer_files()
        return {**files.identity(), "vocab_size": vocab_size(files)}

    def dtype_for(self, vocabulary: int) -> DType:
        return DType[self.dtype] if self.dtype else dtype_for_vocab(vocabulary)


def shard_inputs(settings: PretrainSettings, manifest: SourceManifest, index: int, tokenizer: dict) -> dict:
    """The receipt ``inputs`` of shard ``index`` of ``manifest`` built now (``tokenizer``: its identity)."""
    documents = settings.documents
    return {
        "format": FORMAT_VERSION,
        "source": manifest.shard_fingerprint(index),
        "tokenizer": tokenizer,
        "settings": {"add_bos": documents.add_bos, "add_eos": documents.add_eos, "eod_token": documents.eod_token,
                     "max_doc_tokens": documents.max_doc_tokens,
                     "dtype": settings.dtype_for(tokenizer["vocab_size"]).name, "on_error": settings.on_error},
    }


def shard_output(settings: PretrainSettings, manifest: SourceManifest, key: ShardKey, base: str,
                 tokenizer: dict) -> Output:
    return Output(
        prefix=shard_prefix(base, key), inputs=shard_inputs(settings, manifest, key.index, tokenizer),
        kind=RECEIPT_KIND, key=str(key),
        extra={"blend": settings.blend, "split": manifest.split, "tokenizer_model": settings.tokenizer_model,
               "ranges": [{"file": manifest.files[r.file_index].url, "row_start": r.row_start,
                           "row_end": r.row_end} for r in manifest.shards[key.index].ranges]})


def shard_build(settings: PretrainSettings, manifest: SourceManifest, key: ShardKey, base: str, tokenizer: dict,
                loaded: Callable[[], LoadedTokenizer]) -> ShardBuild:
    """Shard ``key`` of ``manifest`` under ``base``: its output, and its build, which tokenizes with ``loaded()``
    (the step's tokenizer, loaded once: before the builds are forked, or by the first build in the step)."""
    total_rows = manifest.shards[key.index].rows

    def build(folder: Path, log, cores: int) -> Staged:
        def progress(rows: int, tokens: int, seconds: float) -> None:
            rate = tokens / seconds if seconds else 0.0
            eta = (total_rows - rows) * seconds / rows if rows else 0.0
            log(f"{key}: {rows:,}/{total_rows:,} rows ({100 * rows / max(total_rows, 1):.0f}%), "
                f"{tokens:,} tokens, {rate / 1e6:.2f} M tokens/s, ETA {eta:.0f} s")

        tokenizer_now = loaded()

        def tokenize() -> tuple:
            rows = ReadStats()
            batches = prefetch(iter_shard_texts(manifest, key.index, settings.reads[key.dataset], rows))
            stats = build_shard(batches, tokenizer_now, settings.dtype_for(tokenizer["vocab_size"]), folder / "shard",
                                progress=progress, log=log, threads=cores)
            stats.rows = rows.rows
            return stats, rows

        try:
            stats, rows = tokenize()
        except BackendMismatch as exc:  # a fast backend disagreed with the reference on real data
            if tokenizer_now.encoder is tokenizer_now.hf:
                raise
            log(f"{key}: {exc}; rebuilding with hf-tokenizers")
            tokenizer_now.use_reference(str(exc))
            stats, rows = tokenize()
        if rows.dropped:
            log(f"{key}: skipped {sum(rows.dropped.values()):,} bad row(s) "
                f"({', '.join(f'{k}: {v:,}' for k, v in sorted(rows.dropped.items()))}); first: {rows.examples[0]}")
        return Staged(
            files={".bin": folder / "shard.bin", ".idx": folder / "shard.idx"},
            digests={".bin": {"bytes": stats.bin_bytes, "sha256": stats.bin_sha256},
                     ".idx": {"bytes": stats.idx_bytes, "sha256": stats.idx_sha256}},
            stats={**stats.as_dict(), "vocab_size": tokenizer_now.vocab_size, "dropped": dict(rows.dropped),
                   "dropped_examples": list(rows.examples)},
            delete_first=(".idx",))  # never a new .bin beside an old .idx

    local = not any(is_remote(manifest.files[r.file_index].url) for r in manifest.shards[key.index].ranges)
    return ShardBuild(shard_output(settings, manifest, key, base, tokenizer), build, forkable=local)
