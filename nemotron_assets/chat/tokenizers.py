"""Tokenizers for chat SFT: one call per batch of rendered texts -> per text, the ids and where each character is.

A sample is tokenized once, whole, and its trained character spans are mapped onto its tokens (`masks.py`), so a
mask can never drift from the ids. The char -> token answer must be the one Hugging Face ``tokenizers`` gives
(``Encoding.char_to_token``), because transformers computes its assistant mask with it.

Every tokenizer has a *reference* that is exact by definition, and may have a *fast path* that is used only once
it is shown to agree with the reference:

- ``tokenizer.json`` tokenizers (`HFChatTokenizer`): the reference is ``tokenizers.Tokenizer.encode_batch(...,
  add_special_tokens=False)`` (what ``apply_chat_template`` calls), whose encodings carry character offsets
  (~0.5 M tokens per CPU-second). ``o200k_harmony`` (`o200k.py`): the reference is tiktoken.
- the fast path is ``fastokens`` (~20x faster), which gives ids but no offsets. For a byte-level BPE tokenizer
  every token stands for a fixed run of bytes and the runs concatenate to the text's UTF-8, so a token's byte
  range is a running sum over a per-id length table, and its character offsets are the characters those bytes
  belong to (a character split over several tokens belongs to each of them): `ByteOffsets`.

The fast path is trusted only after (1) on probe texts built from the tokenizer (every added token inside text,
characters split across tokens, whitespace runs, ...) its ids and offsets equal the reference's for every token,
and (2) on every batch, the first text it can map again agrees with the reference; a disagreement switches the
tokenizer to the reference for good, with the reason in `backend_reason`. A text whose token bytes do not add up to
its UTF-8 length goes through the reference (`texts_through_reference` counts them).
"""

import functools
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from tokenizers import Encoding, Tokenizer

from nemotron_assets.chat.masks import TokenLocator
from nemotron_assets.sources.errors import InputError
from nemotron_assets.tokenize.encoders import ParsedTokenizer, parse_fastokens, parse_tokenizer, probe_texts
from nemotron_assets.tokenize.loading import TokenizerFiles

BACKENDS = ("auto", "reference", "fastokens")
#: With the ``auto`` backend, a `HFChatTokenizer` that renders in its own process (no forked workers: a small shard)
#: tokenizes this many characters with hf-tokenizers before it parses fastokens (`CheckedTokenizer.load_fast_later`).
#: Parsing Llama-3 with fastokens takes ~1.3 s and hf-tokenizers tokenizes ~4 MB/s with its offsets on two threads,
#: so a smaller input (a test's, the samples of a small dataset) never waits for the parse, and a larger one spends
#: about a second more.
FAST_PATH_AFTER_CHARS = 4 << 20
TOKENIZER_FIELD = "sft.tokenizer_model"
BACKEND_FIELD = "sft.tokenizer_backend"


@dataclass(frozen=True, slots=True)
class TokenizedText:
    """One text's token ids (int32) and where its characters are among them."""

    ids: np.ndarray
    locator: TokenLocator


class ChatTokenizer(Protocol):
    """What the SFT code needs from a tokenizer."""

    name: str
    #: Named special tokens a Jinja template reads as variables (``bos_token``, ``eos_token``, ...).
    template_tokens: dict[str, str]
    #: Literals that must not occur in a conversation's text (rows holding one are dropped).
    literals: "TokenLiterals"

    def encode_batch(self, texts: Sequence[str]) -> list[TokenizedText]: ...

    def token_ids(self, text: str) -> list[int]: ...


# --- where characters are -------------------------------------------------------------------------------------------


class EncodingLocator:
    """`TokenLocator` of a Hugging Face ``tokenizers.Encoding`` (the reference)."""

    __slots__ = ("encoding",)

    def __init__(self, encoding: Encoding) -> None:
        self.encoding = encoding

    def tokens_at(self, chars: Sequence[int]) -> list[int | None]:
        return [self.encoding.char_to_token(char) if char >= 0 else None for char in chars]

    def char_offsets(self) -> list[tuple[int, int]]:
        return [tuple(offset) for offset in self.encoding.offsets]


class ByteOffsets:
    """`TokenLocator` of a text whose tokens' bytes concatenate to its UTF-8 encoding.

    `cumulative[i]` is the byte offset after token i, counted from `base`: a slice of a whole batch's running byte
    count, so nothing is copied per text. The token holding character ``c`` is the one whose byte range holds the
    first byte of ``c`` (for a character split over tokens, the first of them, as with Hugging Face offsets)."""

    __slots__ = ("text", "cumulative", "base")

    def __init__(self, text: str, cumulative: np.ndarray, base: int) -> None:
        self.text = text
        self.cumulative = cumulative
        self.base = base

    def tokens_at(self, chars: Sequence[int]) -> list[int | None]:
        if not chars:
            return []
        size = len(self.text)
        inside = [0 <= char < size for char in chars]
        positions = np.asarray([char if ok else 0 for char, ok in zip(chars, inside)], dtype=np.int64)
        if not self.text.isascii():
            positions = _character_starts(self.text)[positions]
        found = np.searchsorted(self.cumulative, positions + self.base, side="right").tolist()
        return [token if ok else None for token, ok in zip(found, inside)]

    def char_offsets(self) -> list[tuple[int, int]]:
        """Every token's (start, end) in characters, as Hugging Face ``tokenizers`` reports offsets."""
        utf8 = np.frombuffer(self.text.encode("utf-8"), dtype=np.uint8)
        char_of_byte = np.cumsum((utf8 & 0xC0) != 0x80) - 1
        ends = (self.cumulative - self.base).tolist()
        starts = [0, *ends[:-1]]
        return [(int(char_of_byte[start]), int(char_of_byte[end - 1]) + 1) for start, end in zip(starts, ends)]


def _character_starts(text: str) -> np.ndarray:
    """The byte offset in UTF-8 where each character of `text` starts."""
    utf8 = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    return np.flatnonzero((utf8 & 0xC0) != 0x80)


def utf8_length(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def split_by_byte_lengths(texts: Sequence[str], flat_ids: np.ndarray, bounds: Sequence[int],
                          byte_lengths: np.ndarray) -> list[TokenizedText | None]:
    """Cut a batch's flat ids (text i has ``flat_ids[bounds[i]:bounds[i+1]]``) into per-text results; None where the
    tokens' bytes do not add up to the text's UTF-8 length."""
    cumulative = np.concatenate([[0], np.cumsum(byte_lengths[flat_ids])])  # byte offset before token i of the batch
    ids32 = flat_ids.astype(np.int32)
    results: list[TokenizedText | None] = []
    for i, text in enumerate(texts):
        a, b = bounds[i], bounds[i + 1]
        base = int(cumulative[a])
        if int(cumulative[b]) - base != utf8_length(text):
            results.append(None)
        else:
            results.append(TokenizedText(ids32[a:b], ByteOffsets(text, cumulative[a + 1 : b + 1], base)))
    return results


# --- special and added token literals -------------------------------------------------------------------------------


class TokenLiterals:
    """Finds a tokenizer's special/added token literals in text. Tokenizing the whole rendered text would turn such a
    literal inside a message into the control token itself, so a row holding one is dropped
    (``special_token_literal``). Whitespace-only added tokens (some tokenizers add ``"\\n\\n"``) are ordinary text
    and are left out, as transformers leaves them out of its control tokens."""

    def __init__(self, tokens: Iterable[str]) -> None:
        kept = {t for t in tokens if t and not t.isspace() and "\0" not in t}  # NUL joins texts in one search
        self.tokens = tuple(sorted(kept, key=lambda t: (-len(t), t)))
        self._prefix = _common_prefix(self.tokens)  # every literal starts with it (``<|`` for most tokenizers)
        self._by_length = [(length, {t for t in self.tokens if len(t) == length})
                           for length in sorted({len(t) for t in self.tokens}, reverse=True)]
        # Without a common prefix, one regex of every literal, longest first. With one, no regex: compiling one of
        # o200k_harmony's 1,100 literals took 0.2-0.4 s of every process that renders with it.
        self._pattern = re.compile("|".join(map(re.escape, self.tokens))) if self.tokens and not self._prefix else None

    def first_in(self, text: str) -> str | None:
        """The first literal in `text` (the longest one at that position), or None."""
        if self._pattern is not None:
            match = self._pattern.search(text)
            return match.group() if match else None
        if not self.tokens:
            return None
        start = text.find(self._prefix)  # a literal can start only where the prefix does
        while start >= 0:
            for length, literals in self._by_length:
                if text[start:start + length] in literals:
                    return text[start:start + length]
            start = text.find(self._prefix, start + 1)
        return None


def _common_prefix(tokens: Sequence[str]) -> str:
    if not tokens:
        return ""
    low, high = min(tokens), max(tokens)
    size = next((i for i, (a, b) in enumerate(zip(low, high)) if a != b), min(len(low), len(high)))
    return low[:size]


# --- reference + checked fast path ----------------------------------------------------------------------------------


class CheckedTokenizer:
    """The reference/fast-path logic shared by every tokenizer here (see the module docstring). A subclass sets
    `reference_name` and implements `_reference`; `_enable_fast` switches the fast path on after the probe check."""

    reference_name = "reference"

    def __init__(self) -> None:
        self.fast: Any = None  # a fastokens.Tokenizer once proven
        self.byte_lengths: np.ndarray | None = None
        self.backend_reason = f"{self.reference_name} requested"
        self.texts_through_reference = 0
        # A fast path whose loading costs more than the reference would spend on a small input (`load_fast_later`).
        self._load_fast: Callable[[], None] | None = None
        self._chars_before_fast = 0

    @property
    def backend(self) -> str:
        return "fastokens" if self.fast is not None else self.reference_name

    def _reference(self, texts: Sequence[str]) -> list[TokenizedText]:
        raise NotImplementedError

    def _enable_fast(self, fast: Any, byte_lengths: np.ndarray, probes: Sequence[str], required: bool) -> None:
        self.fast, self.byte_lengths = fast, byte_lengths
        bad = self._first_disagreement(probes)
        if bad is None:
            self.backend_reason = f"fastokens ids and offsets matched {self.reference_name} on every probe text"
            return
        self._disable_fast(f"fastokens differs from {self.reference_name} on probe text {bad}", required)

    def load_fast_later(self, load: Callable[[], None], after_chars: int) -> None:
        """Tokenize with the reference until it has taken `after_chars` characters in this process, then call `load`
        (which tries the fast path as the constructor would have). For a fast path that takes seconds to load: an
        input smaller than that is done sooner by the reference, and a large one pays at most the reference's time
        on its first `after_chars` characters more."""
        self._load_fast, self._chars_before_fast = load, after_chars
        self.backend_reason = (f"fastokens loads once {self.reference_name} has tokenized {after_chars:,} characters "
                               "in this process")

    def _disable_fast(self, reason: str, required: bool = False) -> None:
        self.fast, self.byte_lengths = None, None
        if required:
            raise InputError(f"tokenizer backend fastokens cannot be used: {reason}", field=BACKEND_FIELD)
        self.backend_reason = f"{reason}; using {self.reference_name}"

    def _encode_fast(self, texts: Sequence[str]) -> list[TokenizedText | None]:
        ids, bounds = self.fast.encode_batch_flat(list(texts), add_special_tokens=False)
        flat = np.frombuffer(ids, dtype="<u4")
        return split_by_byte_lengths(texts, flat, np.frombuffer(bounds, dtype="<u8").tolist(), self.byte_lengths)

    def _first_disagreement(self, texts: Sequence[str]) -> int | None:
        """The index of the first text the fast path does not tokenize exactly as the reference (or cannot map)."""
        for i, (ours, reference) in enumerate(zip(self._encode_fast(texts), self._reference(texts))):
            if ours is None or not _same(ours, reference):
                return i
        return None

    def encode_batch(self, texts: Sequence[str]) -> list[TokenizedText]:
        """Ids and locators of `texts`, tokenized as ``apply_chat_template`` does (no special tokens added)."""
        if not texts:
            return []
        if self.fast is None and self._load_fast is not None:
            self._chars_before_fast -= sum(map(len, texts))
            if self._chars_before_fast <= 0:
                load, self._load_fast = self._load_fast, None
                load()
        if self.fast is None:
            return self._reference(texts)
        results = self._encode_fast(texts)
        checked = next((i for i, result in enumerate(results) if result is not None), None)
        if checked is not None and not _same(results[checked], self._reference([texts[checked]])[0]):
            self._disable_fast(f"fastokens differed from {self.reference_name} on a real text")
            return self._reference(texts)
        missing = [i for i, result in enumerate(results) if result is None]
        if missing:
            self.texts_through_reference += len(missing)
            for i, result in zip(missing, self._reference([texts[i] for i in missing])):
                results[i] = result
        return results  # type: ignore[return-value]


def _same(ours: TokenizedText, reference: TokenizedText) -> bool:
    """Same ids, and every token at the same character offsets."""
    return np.array_equal(ours.ids, reference.ids) and (
        ours.locator.char_offsets() == reference.locator.char_offsets())  # type: ignore[attr-defined]


def check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise InputError(f"tokenizer backend must be one of {', '.join(BACKENDS)}, not {backend!r}",
                         field=BACKEND_FIELD)


# --- Hugging Face tokenizer.json ------------------------------------------------------------------------------------


def _byte_level_alphabet() -> set[str]:
    """The characters of the byte-level BPE alphabet (GPT-2's), one per byte: the printable Latin-1 characters stand
    for themselves, the other bytes for ``chr(256 + n)``."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    return {chr(b) for b in printable} | {chr(256 + n) for n in range(256 - len(printable))}


def is_byte_level_bpe(tokenizer: Tokenizer) -> bool:
    """A BPE model whose pre-tokenizer (or one in its sequence) is ``ByteLevel``: its vocabulary is written in the
    byte-level alphabet, one character per byte."""
    if type(tokenizer.model).__name__ != "BPE" or tokenizer.pre_tokenizer is None:
        return False
    pre_tokenizer = json.loads(tokenizer.pre_tokenizer.__getstate__())  # its tokenizer.json entry
    steps = pre_tokenizer.get("pretokenizers", []) if pre_tokenizer.get("type") == "Sequence" else [pre_tokenizer]
    return any(step.get("type") == "ByteLevel" for step in steps)


def byte_level_lengths(tokenizer: Tokenizer) -> np.ndarray | None:
    """Bytes each id stands for, for a byte-level BPE (added tokens stand for their UTF-8 content); None for other
    tokenizers (SentencePiece, WordPiece, ...) and for a vocabulary with a hole or an empty token."""
    if not is_byte_level_bpe(tokenizer):
        return None
    alphabet = _byte_level_alphabet()
    added = {token_id: token.content for token_id, token in tokenizer.get_added_tokens_decoder().items()}
    lengths = np.zeros(tokenizer.get_vocab_size(with_added_tokens=True), dtype=np.int64)
    for token_id in range(len(lengths)):
        if token_id in added:
            lengths[token_id] = len(added[token_id].encode("utf-8"))
            continue
        token = tokenizer.id_to_token(token_id)
        if token is None or not alphabet.issuperset(token):
            return None
        lengths[token_id] = len(token)  # one alphabet character per byte
    return None if (lengths <= 0).any() else lengths  # every token stands for at least one byte


#: tokenizer.json path -> that file parsed (the reference and fastokens) and the reference's `byte_level_lengths`, made
#: by `preload_files` in a process about to fork its render workers (defs/sft/render_pool.py): each worker then
#: builds its `HFChatTokenizer` from these instead of parsing the file again (over a second for Llama-3). Only
#: parsing is done ahead: nothing is encoded, so no tokenizer thread pool runs when the workers are forked.
_PRELOADED: dict[str, tuple[ParsedTokenizer, np.ndarray | None]] = {}


def _parse(tokenizer_json: Path, with_fast: bool) -> ParsedTokenizer:
    return parse_tokenizer(tokenizer_json.read_text(encoding="utf-8"), str(tokenizer_json), with_fast,
                           field=TOKENIZER_FIELD)


def preload_files(tokenizer_json: Path) -> None:
    """Parse a tokenizer.json for `HFChatTokenizer`s made later in this process or its forked children."""
    parsed = _parse(tokenizer_json, with_fast=True)
    _PRELOADED[str(tokenizer_json)] = (parsed, byte_level_lengths(parsed.reference))


def forget_preloaded() -> None:
    """Drop what `preload_files` parsed (once the workers that use it are forked)."""
    _PRELOADED.clear()


class HFChatTokenizer(CheckedTokenizer):
    """A ``tokenizer.json`` tokenizer (Llama-3, Qwen, ...), exact to Hugging Face ``tokenizers``."""

    reference_name = "hf-tokenizers"

    def __init__(self, files: TokenizerFiles, backend: str = "auto") -> None:
        check_backend(backend)
        super().__init__()
        self.files = files
        self.name = files.spec
        preloaded = _PRELOADED.get(str(files.tokenizer_json))
        # fastokens is parsed now when asked for or parsed ahead (forked workers); with ``auto`` in a process of its
        # own, only once the reference has taken FAST_PATH_AFTER_CHARS
        parse_fast_now = backend == "fastokens" or (backend == "auto" and preloaded is not None)
        parsed = preloaded[0] if preloaded else _parse(files.tokenizer_json, with_fast=parse_fast_now)
        self.reference = parsed.reference
        self.vocab_size = self.reference.get_vocab_size(with_added_tokens=True)
        self.template_tokens = {name: token for name, token in (("bos_token", files.bos_token),
                                ("eos_token", files.eos_token), ("sep_token", files.sep_token)) if token is not None}
        self.literals = TokenLiterals(t.content for t in self.reference.get_added_tokens_decoder().values())
        if backend == "reference":
            return
        byte_lengths = preloaded[1] if preloaded else byte_level_lengths(self.reference)
        if parse_fast_now or byte_lengths is None:
            self._try_fastokens(parsed, byte_lengths, required=backend == "fastokens")
        else:
            self.load_fast_later(functools.partial(self._parse_fastokens_now, byte_lengths, files.sha256),
                                 FAST_PATH_AFTER_CHARS)

    def _parse_fastokens_now(self, byte_lengths: np.ndarray, sha256: str) -> None:
        """fastokens parses the file the reference was parsed from (``sha256``), or is never used."""
        data = self.files.tokenizer_json.read_bytes()
        if hashlib.sha256(data).hexdigest() != sha256:
            return self._disable_fast(f"{self.files.tokenizer_json} changed after it was loaded")
        fast, error = parse_fastokens(data.decode("utf-8"))
        self._try_fastokens(ParsedTokenizer(self.reference, fast, error), byte_lengths, required=False)

    def _try_fastokens(self, parsed: ParsedTokenizer, byte_lengths: np.ndarray | None, required: bool) -> None:
        if byte_lengths is None:
            return self._disable_fast("not a byte-level BPE tokenizer (offsets cannot be derived from ids)", required)
        if parsed.fast is None:
            return self._disable_fast(parsed.fast_error, required)
        probes = probe_texts(self.reference)
        probes += [f"{text}\n\n{text.upper()} 👩‍👩‍👧 ok" for text in probes[:20]]
        self._enable_fast(parsed.fast, byte_lengths, probes, required)

    def _reference(self, texts: Sequence[str]) -> list[TokenizedText]:
        encodings = self.reference.encode_batch(list(texts), add_special_tokens=False)
        return [TokenizedText(np.asarray(e.ids, dtype=np.int32), EncodingLocator(e)) for e in encodings]

    def token_ids(self, text: str) -> list[int]:
        return self.reference.encode(text, add_special_tokens=False).ids
