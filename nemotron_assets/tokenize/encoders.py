"""Tokenizer backends that turn a batch of texts into one flat id array plus one length per text.

The reference is Hugging Face ``tokenizers`` called as Megatron calls it (post-processor on). ``fastokens``
is ~20x faster on real text and was exact on 61,502 real documents, but a fast backend is only used after
it agrees with the reference id for id on a probe set built from the tokenizer itself (`probe_texts`: every
added/special token literal inside text, empty and whitespace-only documents, unicode, CRLF, long repeats), and
callers cross-check samples of every shard (``sample_mismatch``). Anything else falls back to the reference.

Both kinds of tokenizer are parsed from the file here, once, by `parse_tokenizer`; the chat tokenizers of SFT
(chat/tokenizers.py) take the same two and the same probe texts, and check offsets too.
"""

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, Protocol

import numpy as np
from tokenizers import Tokenizer

from nemotron_assets.sources.errors import InputError


class Encoder(Protocol):
    name: str
    batch_chars: int  # characters worth encoding in one call: bounds the memory a call holds

    def encode(self, texts: Sequence[str], add_special_tokens: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(flat ids, lengths): ``ids[sum(lengths[:i]) : sum(lengths[:i+1])]`` are text i's tokens.

        ``add_special_tokens=False`` leaves out the post-processor's template (pieces of a long text)."""
        ...


class HFEncoder:
    """The reference: ``tokenizers.Tokenizer.encode_batch_fast(..., add_special_tokens=True)``.

    Its ``Encoding`` objects cost ~600 bytes per token (a 10 MB text holds ~1.5 GB), so texts are encoded
    in groups of about ``batch_chars`` characters and reduced to numpy ids before the next group.
    """

    name = "hf-tokenizers"
    batch_chars = 1 << 20

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    def encode(self, texts: Sequence[str], add_special_tokens: bool = True) -> tuple[np.ndarray, np.ndarray]:
        flats, lengths = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
        for group in _groups(texts, self.batch_chars):
            id_lists = [e.ids for e in self.tokenizer.encode_batch_fast(group, add_special_tokens=add_special_tokens)]
            counts = np.fromiter((len(ids) for ids in id_lists), dtype=np.int64, count=len(id_lists))
            flats.append(np.fromiter(chain.from_iterable(id_lists), dtype=np.int64, count=int(counts.sum())))
            lengths.append(counts)
        return np.concatenate(flats), np.concatenate(lengths)


def _groups(texts: Sequence[str], limit: int) -> Iterator[list[str]]:
    """Consecutive texts in lists that end as soon as they hold ``limit`` characters or more."""
    group: list[str] = []
    chars = 0
    for text in texts:
        group.append(text)
        chars += len(text)
        if chars >= limit:
            yield group
            group, chars = [], 0
    if group:
        yield group


#: fastokens' own threads per encode call (its ``FASTOKENS_BPE_THREADS``), unless the environment sets it. One,
#: because the pretraining build already encodes as many batch pieces at a time as there are cores
#: (``defs/pretrain/shard.TOKENIZE_THREADS``): on top of that, fastokens' default of one thread per core spins while it
#: waits for work, and a 250 MB shard cost 1.9-2.2 CPU-seconds to encode instead of 1.6 with one thread per call.
FASTOKENS_THREADS_PER_CALL = "1"


#: What fastokens raises for a file it cannot take, or when it is not installed: the reference is used instead.
FASTOKENS_ERRORS = (ImportError, ValueError, RuntimeError, OSError)


@dataclass
class ParsedTokenizer:
    """A tokenizer.json parsed by the reference and, when asked, by fastokens (None, with ``fast_error``, when
    fastokens could not take it). Neither pads nor truncates: transformers ignores a tokenizer.json's padding and
    truncation settings (sentence-transformers models pad to 128) unless asked, and so does Megatron."""

    reference: Tokenizer
    fast: Any = None  # a fastokens.Tokenizer
    fast_error: str = "fastokens not asked for"


def parse_fastokens(text: str, parsing: Callable[[], object] = lambda: None) -> tuple[Any, str]:
    """fastokens' parse of a tokenizer.json's ``text``, padding and truncation off: ``(tokenizer, "")``, or ``(None,
    why)`` when fastokens cannot take the file or is not installed. ``parsing`` is called just before the parse."""
    try:
        import fastokens

        # Read once per process, at fastokens' first encode: set before anything is encoded.
        os.environ.setdefault("FASTOKENS_BPE_THREADS", FASTOKENS_THREADS_PER_CALL)
        parsing()
        fast = fastokens.Tokenizer.from_json_str(text)
        fast.no_padding()
        fast.no_truncation()
        return fast, ""
    except FASTOKENS_ERRORS as exc:
        return None, f"fastokens unavailable ({exc})"


def parse_tokenizer(text: str, path: str, with_fast: bool, field: str | None = None) -> ParsedTokenizer:
    """Parse a tokenizer.json's ``text``: fastokens in a thread while the reference parses here. fastokens lets go of
    the GIL for most of its ~0.9 s on Llama-3, and the reference (~0.3 s) holds it, so the reference starts only once
    the thread is inside fastokens' parse: started at once, the reference held the GIL while the thread was still
    importing fastokens, and the two parses ran one after the other (1.2 s instead of 0.9 s, bench/README.md).

    The thread is joined before this returns, also when the reference refuses the file, so nothing parses on after
    the caller moved on. A file the reference refuses is an ``InputError`` naming ``path`` (and the blend ``field``
    that chose it)."""
    parsed = ParsedTokenizer(reference=None)  # type: ignore[arg-type]
    failed: list[BaseException] = []  # anything else the thread raised, raised again here
    fast_parsing = threading.Event()

    def parse_fast() -> None:
        try:
            fast, error = parse_fastokens(text, parsing=fast_parsing.set)
        except BaseException as exc:  # noqa: BLE001 - a thread's error would only be printed
            failed.append(exc)
            return
        finally:
            fast_parsing.set()  # also when it ended before parsing
        parsed.fast = fast
        if error:
            parsed.fast_error = error

    thread = threading.Thread(target=parse_fast, name="fastokens-parse") if with_fast else None
    if thread is not None:
        thread.start()
    try:
        if thread is not None:
            fast_parsing.wait()  # inside the try: a Ctrl-C here still joins the thread
        reference = Tokenizer.from_str(text)
    except Exception as exc:  # tokenizers raises a bare Exception on a malformed tokenizer.json
        raise InputError(f"not a valid tokenizer.json: {exc}", path=path, field=field) from None
    finally:
        if thread is not None:
            thread.join()
    if failed:
        raise failed[0]
    reference.no_padding()
    reference.no_truncation()
    parsed.reference = reference
    return parsed


class FastokensEncoder:
    """``fastokens.Tokenizer.encode_batch_flat``: ids come back as one uint32 buffer, no Python lists."""

    name = "fastokens"
    batch_chars = 1 << 23  # ~18 bytes per token: an 8 M-character call holds ~40 MB

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer  # a fastokens.Tokenizer (parse_tokenizer)

    def encode(self, texts: Sequence[str], add_special_tokens: bool = True) -> tuple[np.ndarray, np.ndarray]:
        ids, offsets = self.tokenizer.encode_batch_flat(list(texts), add_special_tokens=add_special_tokens)
        flat = np.frombuffer(ids, dtype="<u4")
        bounds = np.frombuffer(offsets, dtype="<u8").astype(np.int64)
        return flat, np.diff(bounds)


def probe_texts(tokenizer: Tokenizer) -> list[str]:
    """Texts on which a fast backend must agree with the reference before it is trusted."""
    specials = [t.content for t in tokenizer.get_added_tokens_decoder().values()][:512]
    texts = [
        "",
        " ",
        "   \n\t",
        "\n\n\n",
        "Hello, world! This is a plain English sentence.",
        "line one\r\nline two\r\n",
        "  leading and trailing spaces  ",
        "日本語のテキストと中文和한국어 😀🎉 emoji ZWJ 👩‍👩‍👧 combining é e\u0301",
        "Ünïcödé façade naïve — “quotes” ‘single’ … ½ ∑ ∞",
        "def f(x):\n    return x ** 2  # code\n\tindent\n",
        "numbers 1234567890 3.14159 1e-10 0xDEADBEEF",
        "a" * 5000,
        "ab " * 3000,
        "https://example.com/path?query=1&b=2#frag",
        "\u00a0non-breaking\u2009thin\u200bzero-width",
    ]
    for token in specials:
        texts.append(f"before {token} after")
        texts.append(f"{token}{token}glued{token}")
        texts.append(token)
    return texts


def first_mismatch(candidate: Encoder, reference: Encoder, texts: Sequence[str],
                   add_special_tokens: bool = True) -> int | None:
    """Index of the first text on which the two encoders differ, or None."""
    ids_a, len_a = candidate.encode(texts, add_special_tokens=add_special_tokens)
    ids_b, len_b = reference.encode(texts, add_special_tokens=add_special_tokens)
    if np.array_equal(len_a, len_b) and np.array_equal(ids_a.astype(np.int64), ids_b.astype(np.int64)):
        return None
    starts = np.concatenate([[0], np.cumsum(len_a)])
    starts_b = np.concatenate([[0], np.cumsum(len_b)])
    for i in range(len(texts)):
        a = ids_a[starts[i]:starts[i + 1]].astype(np.int64)
        b = ids_b[starts_b[i]:starts_b[i + 1]].astype(np.int64)
        if not np.array_equal(a, b):
            return i
    return 0


def choose_encoder(parsed: ParsedTokenizer, backend: str) -> tuple[Encoder, str]:
    """The fastest encoder that reproduces the reference on the probe set, and why it was chosen."""
    hf = HFEncoder(parsed.reference)
    if backend == "hf":
        return hf, "hf-tokenizers requested"
    if parsed.fast is None:
        if backend == "fastokens":
            raise InputError(f"tokenizer backend fastokens cannot be used: {parsed.fast_error}",
                             field="tokenizer_backend")
        return hf, f"{parsed.fast_error}; using hf-tokenizers"
    fast = FastokensEncoder(parsed.fast)
    probes = probe_texts(parsed.reference)
    for add_special_tokens in (True, False):  # False: how the pieces of a long text are encoded
        bad = first_mismatch(fast, hf, probes, add_special_tokens=add_special_tokens)
        if bad is not None:
            if backend == "fastokens":
                raise ValueError(f"fastokens differs from hf-tokenizers on probe text {bad}")
            return hf, f"fastokens differs from hf-tokenizers on probe text {bad}; using hf-tokenizers"
    return fast, "fastokens matched hf-tokenizers on every probe text"
