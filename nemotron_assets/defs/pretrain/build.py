"""Build one pretraining shard: text batches in, a Megatron ``.bin``/``.idx`` pair out.

plan -> read -> tokenize -> write, streaming: memory stays near one text batch plus 20 bytes per document;
a huge document is tokenized in pieces (tokenize/long_documents.py), so it costs about its ids, not its
tokenizer state. When a fast tokenizer backend is in use, the first documents of every batch are
re-tokenized with the reference backend (a long one by its first piece, never whole); on any difference the
shard is rebuilt with the reference (never a silent divergence).
"""

import contextlib
import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from nemotron_assets.formats.megatron import DType, IndexedDatasetWriter
from nemotron_assets.sources.prefetch import InOrderThread, map_in_threads
from nemotron_assets.tokenize.documents import LoadedTokenizer
from nemotron_assets.tokenize.encoders import first_mismatch
from nemotron_assets.tokenize.long_documents import LONG_DOCUMENT_CHARS, LongDocuments, check_sample

CROSS_CHECK_DOCS = 4  # documents per batch re-tokenized with the reference backend,
CROSS_CHECK_CHARS = 16_384  # at most this many of their characters: the reference is ~20x slower than fastokens
TOKENIZE_THREADS = min(4, len(os.sched_getaffinity(0)))  # batches tokenized at a time: every core, up to 4
HISTOGRAM_BUCKETS = 24  # token-length buckets [2^k, 2^(k+1)) for k < 24, the last one open


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


def build_shard(batches: Iterable[list[str]], tokenizer: LoadedTokenizer, dtype: DType, prefix: Path,
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
    appending = InOrderThread(lambda piece: writer.add_documents(piece.ids, piece.lengths), depth=1,
                              name="shard_writer")
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


def _pieces(batches: Iterable[list[str]], count: int) -> Iterator[tuple[list[str], bool]]:
    """Every batch as ``count`` consecutive pieces (fewer for a short batch), each with whether it is the batch's
    first: the cross-check looks at the first documents of each batch, as it would without the cut."""
    for texts in batches:
        size = max(1, -(-len(texts) // count))
        for start in range(0, len(texts), size):
            yield texts[start:start + size], start == 0


def _tokenize_piece(tokenizer: LoadedTokenizer, piece: tuple[list[str], bool]) -> _TokenizedPiece:
    """One piece's documents; a batch's first piece is cross-checked against the reference when a fast backend
    made them."""
    texts, first = piece
    tally = LongDocuments()
    ids, lengths = tokenizer.documents(texts, long_documents=tally)
    if first and tokenizer.encoder is not tokenizer.hf:
        _cross_check(tokenizer, texts)
    return _TokenizedPiece(len(texts), ids, lengths, tally)


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
