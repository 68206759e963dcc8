"""The ``pretrain_shard`` asset, top to bottom: one pretraining shard, its rows of the source files -> a Megatron
``.bin``/``.idx`` pair (formats/megatron.py), one partition per dataset shard (``<dataset>/shard_NNNNN``), with its
three checks (checks.py).

A run of the asset takes any range of shards (``BackfillPolicy.single_run()``): it decides which are up to date,
loads the tokenizer once, builds the others at the same time in processes forked from the step, and commits and
reports each in partition order (core/step.py ``ShardRun``). So ``dagster asset materialize --select
<blend>/pretrain_shard --partition-range <dataset>/shard_00000...<dataset>/shard_NNNNN`` builds a whole dataset in
one run, in parallel, as the command line does.

What decides the shard's bytes (its receipt's ``inputs``, core/records.py):

- ``format``: this code's output format version. Bump ``FORMAT_VERSION`` whenever the same inputs would give
  different bytes (a writer change, a tokenization fix), so every shard built before is rebuilt.
- ``source``: the manifest's fingerprint of the shard's row ranges and the exact versions of the files they come
  from (sources/manifest.py ``shard_fingerprint``).
- ``tokenizer``: the sha256 of ``tokenizer.json``, the EOS/BOS/SEP token names its config gives, and its vocabulary
  size (base + added tokens, which decides the dtype). For a SentencePiece or TikTokenizer model file: its kind,
  the file's sha256, the vocabulary size, and a TikTokenizer's pattern and special-token count
  (tokenize/model_files.py); the ``tiktoken_*`` settings therefore change only shards made with a TikTokenizer.
- ``settings``: every blend setting that changes ids or layout: ``add_bos``, ``add_eos``, ``eod_token``,
  ``max_doc_tokens``, ``on_error``, and the dtype the shard is written in (the blend's ``dtype``, else Megatron's
  rule on the vocabulary size), so ``dtype: int32`` on a vocabulary that is int32 anyway changes nothing. With
  ``split_sentences`` only, ``sentences``: the language, ``keep_newlines``, the NLTK version and the sha256 of the
  punkt model (tokenize/sentences.py ``punkt_identity``); without it the key is absent, so receipts written before
  the setting existed stay up to date.

A list ``text_field`` (Megatron's ``--json-keys``) is in ``source`` (the manifest's fingerprint names the fields),
and the shard writes one ``.bin``/``.idx`` pair per field, ``shard_NNNNN_<field>_document`` (layout.py
``field_suffixes``), all under the shard's one receipt: the fields' documents are the same rows, a row that cannot
be read is left out of every field; the rows are read once per field, each field tokenized as one shard is. Its
``stats`` are the first field's (rows and documents are every field's), and ``stats["fields"]`` holds each field's,
with the ``suffix`` of its files' names.

Dataset weights, the shard count of *other* datasets and the tokenizer backend (every backend is checked to give
the reference's ids) are not inputs: changing them rebuilds nothing.

The build (`shard_build`, then `build_shard`) reads the shard's rows, tokenizes them and writes
``shard.bin``/``shard.idx`` into a staging folder; it touches nothing else, so it can run in a process forked from
the step (core/step.py ``ShardRun``). The commit (core/step.py): receipt deleted, ``.idx`` deleted, ``.bin``
committed, ``.idx`` committed, receipt written: at every instant the storage holds a finished shard, or a shard
without a receipt.

How a shard is built: read -> tokenize -> write, streaming. Memory stays near one text batch plus 20 bytes per
document; a huge document is tokenized in pieces (tokenize/long_documents.py), so it costs about its ids, not its
tokenizer state. When a fast tokenizer backend is in use, the first documents of every batch are re-tokenized with
the reference backend (a long one by its first piece, never whole); on any difference the shard is rebuilt with the
reference (never a silent divergence).
"""

import contextlib
import functools
import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import dagster as dg
import numpy as np
from pydantic import Field

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.lineage import WandbLineage
from nemotron_assets.core.pipeline import Assets, BlendScope
from nemotron_assets.core.reporting import (
    CheckOutcome,
    histogram_markdown,
    materialize_partitions,
    outcome_metadata,
    partitioned_asset,
    permanent_errors_fail_at_once,
    recorded_metadata,
    retry_transient_errors,
)
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.core.step import Outcome, Output, ShardBuild, ShardRun, Staged, planned_shard_builds
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.pretrain.checks import CHECKS, check_shard
from nemotron_assets.defs.pretrain.layout import field_suffixes, receipt_names, shard_prefix
from nemotron_assets.defs.pretrain.lineage import log_shard_lineage
from nemotron_assets.defs.sources.manifest import read_options
from nemotron_assets.formats.megatron import DType, IndexedDatasetWriter, dtype_for_vocab
from nemotron_assets.sources.files import is_remote
from nemotron_assets.sources.manifest import SourceManifest, iter_shard_texts
from nemotron_assets.sources.prefetch import InOrderThread, map_in_threads, prefetch
from nemotron_assets.sources.readers import ReadOptions, ReadStats
from nemotron_assets.tokenize.documents import DocumentOptions, LoadedTokenizer, ModelFileTokenizer, cached_tokenizer
from nemotron_assets.tokenize.encoders import first_mismatch
from nemotron_assets.tokenize.loading import TokenizerFiles, locate_any_tokenizer, vocab_size
from nemotron_assets.tokenize.long_documents import LONG_DOCUMENT_CHARS, LongDocuments, check_sample
from nemotron_assets.tokenize.model_files import ModelFile, TiktokenSettings
from nemotron_assets.tokenize.sentences import punkt_identity

FORMAT_VERSION = "megatron-mmidx/2"
RECEIPT_KIND = "pretrain_shard"
CROSS_CHECK_DOCS = 4  # documents per batch re-tokenized with the reference backend,
CROSS_CHECK_CHARS = 16_384  # at most this many of their characters: the reference is ~20x slower than fastokens
TOKENIZE_THREADS = min(4, len(os.sched_getaffinity(0)))  # batches tokenized at a time: every core, up to 4
HISTOGRAM_BUCKETS = 24  # token-length buckets [2^k, 2^(k+1)) for k < 24, the last one open
#: A run that reads less text than this (bytes) tokenizes with hf-tokenizers when the backend is ``auto``: parsing
#: fastokens costs more than it saves on so little text (bench/README.md, "A small run never parses fastokens").
FASTOKENS_FROM_BYTES = 4 << 20


# --- the asset ----------------------------------------------------------------------------------------------
class ShardConfig(dg.Config):
    force: bool = Field(False, description="Rebuild shards even when their receipt says they are up to date.")
    tokenizer_backend: str = Field("auto", description="auto (the fastest exact backend for the run's size), hf "
                                                       "or fastokens.")
    build_processes: int = Field(0, description="Shards of this run built at the same time, each in a process forked "
                                                "from the step: 0 = one per core (at most 8); 1 = one after the "
                                                "other in the step.")


def pretrain_shard_asset(blend_scope: BlendScope, upstream: Assets) -> dg.AssetsDefinition:
    """``pretrain_shard`` of one blend's full build (or of its samples), after ``upstream["source_split"]``."""
    blend, scope = blend_scope.blend, blend_scope.scope
    shard_key = dg.AssetKey(scope.key("pretrain_shard"))

    @partitioned_asset(
        scope.key("pretrain_shard"), group=scope.group, partitions_def=scope.dynamic("pretrain_shards"),
        kinds={"megatron"}, deps=[dg.AssetDep(upstream["source_split"], partition_mapping=dg.AllPartitionMapping())],
        checks=CHECKS, backfill_policy=dg.BackfillPolicy.single_run(),
        description="Tokenizes one shard of a dataset into a Megatron .bin/.idx pair (byte-identical to "
                    "Megatron-LM tools/preprocess_data.py --append-eod), then checks it.",
    )
    @retry_transient_errors
    def pretrain_shard(context: dg.AssetExecutionContext, config: ShardConfig, storage: StorageResource,
                       lineage: WandbLineage):
        store = storage.get()
        settings = PretrainSettings.of(blend, config.tokenizer_backend)
        manifests: dict[str, SourceManifest] = {}
        builds: dict[str, ShardBuild | Exception] = {}  # this run's shards, once planned
        built: list[tuple[str, dict]] = []

        @functools.cache  # once per step: before the builds fork, or at the first build in the step
        def loaded() -> LoadedTokenizer | ModelFileTokenizer:
            return load_tokenizer(context, settings, reads=sum(builds[p].cost for p in run.building()))

        def build(partition: str) -> dict:
            outcome = run.outcome(partition)
            stats = outcome.receipt.stats
            context.log.info(f"{partition}: {outcome.status}, {stats['documents']:,} documents, "
                             f"{stats['tokens']:,} tokens")
            sample, _ = scope.split(partition)
            metadata = shard_metadata(outcome, store.url(shard_prefix(scope.base(sample), ShardKey.parse(
                outcome.key))))
            built.append((outcome.key, metadata))
            return metadata

        def check(partition: str) -> list[CheckOutcome]:
            sample, shard = scope.split(partition)
            recorded = recorded_metadata(context.instance, shard_key, partition)
            problems = check_shard(store, shard_prefix(scope.base(sample), ShardKey.parse(shard)), recorded)
            return [CheckOutcome(name, not problem, {"problem": problem or "none"})
                    for name, problem in problems.items()]

        try:
            with ShardRun(store, context.log.info, force=config.force, processes=config.build_processes,
                          prepare=loaded) as run:
                if shard_key in context.selected_asset_keys:  # not when only the checks run
                    builds.update(shard_builds(store, settings, scope, context.partition_keys, manifests, loaded))
                    run.plan(builds)
                yield from materialize_partitions(context, shard_key, context.partition_keys, build, check)
        finally:
            if not scope.samples and built:
                log_shard_lineage(lineage, context, store, blend.name, built, manifests)

    return pretrain_shard


def load_tokenizer(context: dg.AssetExecutionContext, settings: "PretrainSettings",
                   reads: int) -> LoadedTokenizer | ModelFileTokenizer:
    """The step's tokenizer, loaded once per process and setting; a bad tokenizer fails the step, located.

    ``auto`` parses fastokens only for a run that ``reads`` enough bytes of text to repay the parse
    (``FASTOKENS_FROM_BYTES``; ``SourceManifest.shard_text_bytes``); a smaller run tokenizes with hf-tokenizers, the
    reference, into the same ids."""
    documents, small_run = settings.documents, None
    if documents.backend == "auto" and reads < FASTOKENS_FROM_BYTES:
        documents = replace(documents, backend="hf")
        small_run = (f"auto: this run reads about {reads:,} bytes of text, below the {FASTOKENS_FROM_BYTES:,} "
                     f"that repay parsing fastokens")
    with permanent_errors_fail_at_once():
        tokenizer = cached_tokenizer(settings.tokenizer_model, settings.tokenizer_revision, documents,
                                     settings.tiktoken)
    reason = small_run if small_run and isinstance(tokenizer, LoadedTokenizer) else tokenizer.backend_reason
    context.log.info(f"tokenizer {settings.tokenizer_model}: vocab {tokenizer.vocab_size:,}, backend "
                     f"{tokenizer.backend} ({reason})")
    return tokenizer


def shard_builds(store: Storage, settings: "PretrainSettings", scope, partitions: list[str],
                 manifests: dict[str, SourceManifest], loaded) -> dict[str, ShardBuild | Exception]:
    """Each partition's shard in its dataset's current plan (`core.step.planned_shard_builds`), with the tokenizer's
    identity read once, when the first partition has a plan."""
    tokenizer: dict | None = None

    def build(manifest: SourceManifest, key: ShardKey, base: str) -> ShardBuild:
        nonlocal tokenizer
        if tokenizer is None:
            with permanent_errors_fail_at_once():
                tokenizer = settings.tokenizer_identity()
        return shard_build(settings, manifest, key, base, tokenizer, loaded)

    return planned_shard_builds(store, settings.blend, scope, partitions, manifests, build)


# --- its metadata -----------------------------------------------------------------------------------------------
def shard_metadata(outcome: Outcome, prefix_url: str) -> dict:
    stats = outcome.receipt.stats
    return {
        **outcome_metadata(outcome),
        "seconds": dg.MetadataValue.float(round(outcome.seconds, 3)),
        "prefix": dg.MetadataValue.path(prefix_url),
        "rows": dg.MetadataValue.int(stats["rows"]),
        "documents": dg.MetadataValue.int(stats["documents"]),
        "empty_documents": dg.MetadataValue.int(stats["empty_documents"]),
        "tokens": dg.MetadataValue.int(stats["tokens"]),
        "dropped_by_reason": dg.MetadataValue.json(stats["dropped"]),
        "dropped_examples": dg.MetadataValue.md("\n".join(f"- {e}" for e in stats.get("dropped_examples", []))
                                                or "none"),
        "bin_bytes": dg.MetadataValue.int(stats["bin_bytes"]),
        "idx_bytes": dg.MetadataValue.int(stats["idx_bytes"]),
        "bin_sha256": dg.MetadataValue.text(stats["bin_sha256"]),
        "idx_sha256": dg.MetadataValue.text(stats["idx_sha256"]),
        "min_doc_tokens": dg.MetadataValue.int(stats["min_doc_tokens"]),
        "mean_doc_tokens": dg.MetadataValue.float(float(stats["mean_doc_tokens"])),
        "max_doc_tokens": dg.MetadataValue.int(stats["max_doc_tokens"]),
        "token_histogram": dg.MetadataValue.md(histogram_markdown(stats["histogram"])),
        "dtype": dg.MetadataValue.text(stats["dtype"]),
        "tokenizer_backend": dg.MetadataValue.text(stats["backend"]),
        "long_documents": dg.MetadataValue.json(stats.get("long_documents", {})),
        "vocab_size": dg.MetadataValue.int(stats["vocab_size"]),
        # a list text_field: the counts above are its first field's; each field's tokens and files' prefix
        **({"tokens_by_field": dg.MetadataValue.json({name: field["tokens"]
                                                      for name, field in stats["fields"].items()}),
            "field_prefixes": dg.MetadataValue.json({name: prefix_url + field["suffix"]
                                                     for name, field in stats["fields"].items()})}
           if "fields" in stats else {}),
    }


# --- what decides a shard's bytes -------------------------------------------------------------------------
@dataclass(frozen=True)
class PretrainSettings:
    """What of the blend the pretraining steps use: the tokenizer, how texts become documents, the dtype."""

    blend: str
    tokenizer_model: str
    tokenizer_revision: str | None
    documents: DocumentOptions  # add_bos, add_eos, eod_token, max_doc_tokens, sentences, the backend that encodes
    dtype: str | None  # the blend's override of Megatron's rule
    on_error: str
    reads: dict[str, ReadOptions]  # how each pretraining dataset's rows are read: its text field, an S3 endpoint
    tiktoken: TiktokenSettings = TiktokenSettings()  # how a TikTokenizer vocabulary is read (else unused)

    @classmethod
    def of(cls, blend: Blend, backend: str = "auto") -> "PretrainSettings":
        return cls(blend.name, blend.tokenizer_model, blend.tokenizer_revision,
                   DocumentOptions(add_bos=blend.add_bos, add_eos=blend.add_eos, eod_token=blend.eod_token,
                                   max_doc_tokens=blend.max_doc_tokens, backend=backend,
                                   split_sentences=blend.split_sentences,
                                   sentence_language=blend.sentence_language, keep_newlines=blend.keep_newlines),
                   blend.dtype, blend.on_error,
                   {entry.name: read_options(blend, entry) for entry in blend.datasets_of("pretrain")},
                   TiktokenSettings(blend.tiktoken_pattern, blend.tiktoken_num_special_tokens,
                                    blend.tiktoken_vocab_size))

    def tokenizer_files(self) -> TokenizerFiles | ModelFile:
        return locate_any_tokenizer(self.tokenizer_model, self.tokenizer_revision, self.tiktoken)

    def tokenizer_identity(self) -> dict:
        """What of the tokenizer decides the ids (the module docstring), without building it."""
        files = self.tokenizer_files()
        return {**files.identity(), "vocab_size": vocab_size(files)}

    def dtype_for(self, vocabulary: int) -> DType:
        return DType[self.dtype] if self.dtype else dtype_for_vocab(vocabulary)

    def field_suffixes(self, dataset: str) -> dict[str | None, str]:
        """The Megatron datasets a shard of ``dataset`` writes, by text field (layout.py)."""
        fields = self.reads[dataset].text_field
        return field_suffixes(None if isinstance(fields, str) else fields, self.documents.split_sentences)


def shard_inputs(settings: PretrainSettings, manifest: SourceManifest, index: int, tokenizer: dict) -> dict:
    """The receipt ``inputs`` of shard ``index`` of ``manifest`` built now (``tokenizer``: its identity)."""
    documents = settings.documents
    chosen = {"add_bos": documents.add_bos, "add_eos": documents.add_eos, "eod_token": documents.eod_token,
              "max_doc_tokens": documents.max_doc_tokens,
              "dtype": settings.dtype_for(tokenizer["vocab_size"]).name, "on_error": settings.on_error}
    if documents.split_sentences:
        chosen["sentences"] = punkt_identity(documents.sentence_language, documents.keep_newlines)
    return {"format": FORMAT_VERSION, "source": manifest.shard_fingerprint(index), "tokenizer": tokenizer,
            "settings": chosen}


def shard_output(settings: PretrainSettings, manifest: SourceManifest, key: ShardKey, base: str,
                 tokenizer: dict) -> Output:
    return Output(
        prefix=shard_prefix(base, key), inputs=shard_inputs(settings, manifest, key.index, tokenizer),
        kind=RECEIPT_KIND, key=str(key),
        extra={"blend": settings.blend, "split": manifest.split, "tokenizer_model": settings.tokenizer_model,
               "ranges": [{"file": manifest.files[r.file_index].url, "row_start": r.row_start,
                           "row_end": r.row_end} for r in manifest.shards[key.index].ranges]})


def shard_build(settings: PretrainSettings, manifest: SourceManifest, key: ShardKey, base: str, tokenizer: dict,
                loaded: Callable[[], LoadedTokenizer | ModelFileTokenizer]) -> ShardBuild:
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
        suffixes = settings.field_suffixes(key.dataset)

        def tokenize(position: int | None, suffix: str) -> tuple:
            """One Megatron dataset: the shard's documents, or one field's (``position`` in the rows' tuples)."""
            rows = ReadStats()
            batches = prefetch(iter_shard_texts(manifest, key.index, settings.reads[key.dataset], rows))
            if position is not None:
                batches = ([document[position] for document in batch] for batch in batches)
            stats = build_shard(batches, tokenizer_now, settings.dtype_for(tokenizer["vocab_size"]),
                                folder / f"shard{suffix}", progress=progress, log=log, threads=cores)
            stats.rows = rows.rows
            return stats, rows

        def tokenize_all() -> dict[str | None, tuple]:
            return {name: tokenize(None if name is None else position, suffix)
                    for position, (name, suffix) in enumerate(suffixes.items())}

        try:
            built = tokenize_all()
        except BackendMismatch as exc:  # a fast backend disagreed with the reference on real data
            if tokenizer_now.encoder is tokenizer_now.hf:
                raise
            log(f"{key}: {exc}; rebuilding with hf-tokenizers")
            tokenizer_now.use_reference(str(exc))
            built = tokenize_all()
        stats, rows = next(iter(built.values()))  # every field read the same rows
        if rows.dropped:
            log(f"{key}: skipped {sum(rows.dropped.values()):,} bad row(s) "
                f"({', '.join(f'{k}: {v:,}' for k, v in sorted(rows.dropped.items()))}); first: {rows.examples[0]}")
        files, digests = {}, {}
        for name, suffix in suffixes.items():
            field_stats = built[name][0]
            bin_name, idx_name = receipt_names(key, suffix)
            files[bin_name], files[idx_name] = folder / f"shard{suffix}.bin", folder / f"shard{suffix}.idx"
            digests[bin_name] = {"bytes": field_stats.bin_bytes, "sha256": field_stats.bin_sha256}
            digests[idx_name] = {"bytes": field_stats.idx_bytes, "sha256": field_stats.idx_sha256}
        by_field = {} if None in built else {"fields": {name: {**s.as_dict(), "suffix": suffixes[name]}
                                                        for name, (s, _) in built.items()}}
        return Staged(
            files=files, digests=digests,
            stats={**stats.as_dict(), "vocab_size": tokenizer_now.vocab_size, "dropped": dict(rows.dropped),
                   "dropped_examples": list(rows.examples), **by_field},
            delete_first=tuple(name for name in files if name.endswith(".idx")))  # never a new .bin beside an old .idx

    local = not any(is_remote(manifest.files[r.file_index].url) for r in manifest.shards[key.index].ranges)
    return ShardBuild(shard_output(settings, manifest, key, base, tokenizer), build, forkable=local,
                      cost=manifest.shard_text_bytes(key.index))


# --- building one shard's .bin/.idx ------------------------------------------------------------------
class BackendMismatch(Exception):
    """The fast backend disagreed with the reference on real data."""


@dataclass
class ShardStats:
    """Counts of one built shard; the same keys go to Dagster metadata and the shard's receipt."""

    rows: int = 0
    documents: int = 0
    empty_documents: int = 0
    tokens: int = 0
    min_doc_tokens: int = 0
    max_doc_tokens: int = 0
    histogram: list[int] = field(default_factory=lambda: [0] * HISTOGRAM_BUCKETS)
    bin_bytes: int = 0
    idx_bytes: int = 0
    bin_sha256: str = ""
    idx_sha256: str = ""
    dtype: str = ""
    backend: str = ""
    long_documents: LongDocuments = field(default_factory=LongDocuments)

    @property
    def mean_doc_tokens(self) -> float:
        nonempty = self.documents - self.empty_documents
        return self.tokens / nonempty if nonempty else 0.0

    def add_lengths(self, lengths: np.ndarray) -> None:
        nonempty = lengths[lengths > 0]
        self.documents += len(lengths)
        self.empty_documents += int(len(lengths) - len(nonempty))
        if len(nonempty):
            low, high = int(nonempty.min()), int(nonempty.max())
            self.min_doc_tokens = low if self.min_doc_tokens == 0 else min(self.min_doc_tokens, low)
            self.max_doc_tokens = max(self.max_doc_tokens, high)
            buckets = np.minimum(np.log2(nonempty).astype(np.int64), HISTOGRAM_BUCKETS - 1)
            counts = np.bincount(buckets, minlength=HISTOGRAM_BUCKETS)
            self.histogram = [a + int(b) for a, b in zip(self.histogram, counts)]

    def as_dict(self) -> dict:
        return {
            "rows": self.rows, "documents": self.documents, "empty_documents": self.empty_documents,
            "tokens": self.tokens, "min_doc_tokens": self.min_doc_tokens,
            "mean_doc_tokens": round(self.mean_doc_tokens, 3), "max_doc_tokens": self.max_doc_tokens,
            "histogram": self.histogram, "bin_bytes": self.bin_bytes,
            "idx_bytes": self.idx_bytes, "bin_sha256": self.bin_sha256, "idx_sha256": self.idx_sha256,
            "dtype": self.dtype, "backend": self.backend, "long_documents": self.long_documents.as_dict(),
        }


ProgressCallback = Callable[[int, int, float], None]  # (rows done, tokens, seconds)


def build_shard(batches: Iterable[list[str]], tokenizer: LoadedTokenizer | ModelFileTokenizer, dtype: DType,
                prefix: Path,
                progress: ProgressCallback | None = None, progress_every_s: float = 10.0,
                log: Callable[[str], None] | None = None, threads: int = TOKENIZE_THREADS) -> ShardStats:
    """Tokenize every batch into ``<prefix>.bin``/``.idx`` (local paths); returns the shard's counts.

    Each batch is cut into ``threads`` pieces tokenized at the same time in threads (``_tokenize_piece``; the
    backends let go of the GIL), while one more thread writes and hashes the finished pieces in order
    (``InOrderThread``: writing a GB into the page cache costs seconds of CPU in the kernel, and while this thread
    did it the tokenizers waited for work): a shard keeps every core busy on its own, and holds about one batch in
    tokenization, as with one thread. ``log`` (default: this module's logger) hears once per reason why a long
    document was tokenized whole."""
    stats = ShardStats(dtype=dtype.name, backend=tokenizer.backend)
    log = log or logging.getLogger(__name__).warning
    writer = IndexedDatasetWriter(prefix, dtype)
    appending = InOrderThread(lambda piece: writer.add_documents(piece.ids, piece.sequence_lengths, piece.sequences),
                              depth=1, name="shard_writer")
    started = last_report = time.monotonic()
    try:
        for batch in map_in_threads(partial(_tokenize_piece, tokenizer), _pieces(batches, threads), threads):
            for reason, count in batch.long_documents.whole.items():
                if reason not in stats.long_documents.whole:
                    log(f"a document of over {LONG_DOCUMENT_CHARS:,} characters was tokenized whole: {reason}")
                stats.long_documents.whole[reason] = stats.long_documents.whole.get(reason, 0) + count
            stats.long_documents.in_pieces += batch.long_documents.in_pieces
            appending.submit(batch)
            stats.rows += batch.rows
            stats.tokens += len(batch.ids)
            stats.add_lengths(batch.lengths)
            now = time.monotonic()
            if progress is not None and now - last_report >= progress_every_s:
                progress(stats.rows, stats.tokens, now - started)
                last_report = now
        appending.close()
        writer.close()
    except BaseException:
        with contextlib.suppress(BaseException):  # the error that stopped the build is the one to report
            appending.close()
        writer.abort()
        raise
    idx_bytes = Path(f"{prefix}.idx").read_bytes()
    stats.bin_bytes = stats.tokens * dtype.numpy.itemsize
    stats.idx_bytes = len(idx_bytes)
    stats.bin_sha256 = writer.bin_sha256
    stats.idx_sha256 = hashlib.sha256(idx_bytes).hexdigest()
    return stats


@dataclass
class _TokenizedPiece:
    rows: int
    ids: np.ndarray  # the finished documents, concatenated
    lengths: np.ndarray  # tokens per document, 0 for an empty one
    long_documents: LongDocuments  # this piece's own tally: pieces are tokenized concurrently
    sequences: np.ndarray | None = None  # split sentences: sequences per document (else one per non-empty document)
    sequence_lengths: np.ndarray | None = None  # ... and tokens per sequence

    def __post_init__(self) -> None:
        if self.sequence_lengths is None:
            self.sequence_lengths = self.lengths


def _pieces(batches: Iterable[list[str]], count: int) -> Iterator[tuple[list[str], bool]]:
    """Every batch as ``count`` consecutive pieces (fewer for a short batch), each with whether it is the batch's
    first: the cross-check looks at the first documents of each batch, as it would without the cut."""
    for texts in batches:
        size = max(1, -(-len(texts) // count))
        for start in range(0, len(texts), size):
            yield texts[start:start + size], start == 0


def _tokenize_piece(tokenizer: LoadedTokenizer | ModelFileTokenizer, piece: tuple[list[str], bool]) -> _TokenizedPiece:
    """One piece's documents; a batch's first piece is cross-checked against the reference when a fast backend
    made them."""
    texts, first = piece
    tally = LongDocuments()
    if tokenizer.splitter is None:
        ids, lengths = tokenizer.documents(texts, long_documents=tally)
        tokenized = _TokenizedPiece(len(texts), ids, lengths, tally)
    else:
        ids, sequence_lengths, sequences = tokenizer.sentence_documents(texts, long_documents=tally)
        document = np.repeat(np.arange(len(sequences)), sequences)
        lengths = np.bincount(document, weights=sequence_lengths, minlength=len(sequences)).astype(np.int64)
        tokenized = _TokenizedPiece(len(texts), ids, lengths, tally, sequences, sequence_lengths)
    if first and tokenizer.encoder is not tokenizer.hf:
        _cross_check(tokenizer, texts)
    return tokenized


def _cross_check(tokenizer: LoadedTokenizer, texts: list[str]) -> None:
    """The first documents of the batch, re-encoded with hf-tokenizers, ``CROSS_CHECK_CHARS`` characters in all.

    A long document stands in by a bounded sample (``check_sample``), and the last document checked by its first
    characters when the budget runs out: the two encoders must agree on any text, so a prefix is as good a test
    as the whole, and the check stays a small, fixed share of the work (all of the first 4 documents cost ~15 %
    of a shard's CPU time on 3 KB documents)."""
    samples, budget = [], CROSS_CHECK_CHARS
    for text in texts[:CROSS_CHECK_DOCS]:
        sample, special = check_sample(text, tokenizer.cutter)
        samples.append((sample[:budget], special))
        budget -= len(samples[-1][0])
        if budget <= 0:
            break
    for add_special_tokens in (True, False):
        sample = [text for text, special in samples if special == add_special_tokens]
        if not sample:
            continue
        bad = first_mismatch(tokenizer.encoder, tokenizer.hf, sample, add_special_tokens=add_special_tokens)
        if bad is not None:
            raise BackendMismatch(f"{tokenizer.backend} differs from hf-tokenizers on a document "
                                  f"({len(sample[bad])} characters)")
