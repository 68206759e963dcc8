"""Tokenizers that are one model file and no tokenizer.json: Megatron's ``GPTSentencePieceTokenizer`` and
``TikTokenizer``, read exactly as Megatron-LM reads them (``megatron/core/tokenizers/text/libraries/``
``sentencepiece_tokenizer.py`` and ``tiktoken_tokenizer.py``), so that our shards equal
``tools/preprocess_data.py --tokenizer-type <type> --tokenizer-model <file> --append-eod`` byte for byte.

**SentencePiece** (a ``.model`` file; Megatron's defaults: not ``legacy``, ``ignore_extra_whitespaces``): a
document's ids are ``SentencePieceProcessor.encode_as_ids(text)``, the EOD is the model's ``eos_id()``, the
vocabulary size (which picks the dtype) its ``get_piece_size()``. Special-token literals in the text are plain
text, as in Megatron.

**TikTokenizer** (a ``.json`` list of ``{"rank", "token_bytes", "token_str"}``, ranks 0, 1, ...; the first 256 are
the single bytes in order): the special tokens ``<unk> <s> </s> <mask> <pad> <cls> <sep>`` then ``<SPECIAL_7>`` ...
take ids ``0 .. num_special_tokens - 1``; the first ``vocab_size - num_special_tokens`` ranks follow, shifted by
``num_special_tokens``; the split pattern is ``v1`` or ``v2``. A document is ``tiktoken.Encoding.encode(text,
allowed_special="all")``, so a special-token literal in the text is that special token; the EOD is ``</s>`` (2);
the vocabulary size is the ``vocab_size`` setting (Megatron's ``--vocab-size``, default 131,072), not the file's
length. Pattern, special-token count and vocabulary size are blend settings (``TiktokenSettings``).
"""

import base64
import binascii
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Literal

import numpy as np
import orjson

from nemotron_assets.sources.errors import InputError
from nemotron_assets.tokenize.file_hashes import file_sha256

TIKTOKEN_PATTERNS = {  # Megatron-LM's _PATTERN_TIKTOKEN_V1 and _PATTERN_TIKTOKEN_V2
    "v1": r"[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
    "v2": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?"
          r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+",
}
TIKTOKEN_SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>"]  # ids 0..6
TIKTOKEN_FILLER = "<SPECIAL_{id}>"  # ids 7 .. num_special_tokens - 1
TIKTOKEN_ENTRY_KEYS = {"rank", "token_bytes", "token_str"}


@dataclass(frozen=True)
class TiktokenSettings:
    """Megatron's ``--tiktoken-pattern``, ``--tiktoken-num-special-tokens`` and ``--vocab-size`` (its defaults)."""

    pattern: Literal["v1", "v2"] = "v2"
    num_special_tokens: int = 1000
    vocab_size: int = 131_072

    def special_tokens(self) -> list[str]:
        fillers = range(len(TIKTOKEN_SPECIAL_TOKENS), self.num_special_tokens)
        return TIKTOKEN_SPECIAL_TOKENS + [TIKTOKEN_FILLER.format(id=i) for i in fillers]


@dataclass(frozen=True)
class ModelFile:
    """A SentencePiece ``.model`` or a TikTokenizer ``.json``: the file, its kind and, for TikTokenizer, its
    settings."""

    spec: str
    path: Path
    kind: Literal["sentencepiece", "tiktoken"]
    tiktoken: TiktokenSettings | None = None
    revision = None  # a local file: no hub revision

    @property
    def sha256(self) -> str:
        return file_sha256(self.path)

    def identity(self) -> dict:
        """What decides the ids: the file's content and, for TikTokenizer, its three settings (pretraining adds the
        vocabulary size, `vocab_size`). A tokenizer.json's identity has no ``kind``: its receipts stay as they were."""
        identity = {"kind": self.kind, "sha256": self.sha256}
        if self.tiktoken is not None:
            identity |= {"pattern": self.tiktoken.pattern, "num_special_tokens": self.tiktoken.num_special_tokens}
        return identity

    def vocab_size(self) -> int:
        if self.tiktoken is not None:
            return self.tiktoken.vocab_size
        return _sentencepiece_size(str(self.path), self.sha256)


def is_tiktoken_vocabulary(path: Path) -> bool:
    """A ``.json`` whose top level is a list (a tokenizer.json is an object)."""
    with open(path, "rb") as stream:
        return stream.read(256).lstrip()[:1] == b"["


# --- SentencePiece ---------------------------------------------------------------------------------------------
def sentencepiece_processor(path: Path):
    """The model loaded as Megatron loads it; a file SentencePiece cannot read is an ``InputError`` naming it."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor()
    try:
        processor.Load(str(path))
    except (OSError, RuntimeError) as exc:
        raise InputError(f"not a SentencePiece model: {exc}", path=str(path), field="tokenizer_model") from None
    return processor


@functools.lru_cache(maxsize=8)
def _sentencepiece_size(path: str, sha256: str) -> int:
    return sentencepiece_processor(Path(path)).get_piece_size()


class SentencePieceEncoder:
    """``SentencePieceProcessor.encode(texts)``, one thread per call: it lets go of the GIL while it encodes, and the
    shard build already encodes a batch's pieces in as many threads as it has cores (defs/pretrain/shard.py)."""

    name = "sentencepiece"
    batch_chars = 1 << 22

    def __init__(self, processor) -> None:
        self.processor = processor

    def encode(self, texts: Sequence[str], add_special_tokens: bool = True) -> tuple[np.ndarray, np.ndarray]:
        return _flatten(self.processor.encode(list(texts), out_type=int, num_threads=1))


# --- TikTokenizer ----------------------------------------------------------------------------------------------
def tiktoken_encoding(path: Path, settings: TiktokenSettings):
    """The ``tiktoken.Encoding`` Megatron's ``TikTokenTokenizer`` builds from the vocabulary at ``path``.

    A vocabulary of the wrong shape is an ``InputError`` naming the file and the entry (``[i].rank``) Megatron
    would stop at with an assertion: the first ``vocab_size - num_special_tokens`` entries are the ones read."""
    import tiktoken

    if not len(TIKTOKEN_SPECIAL_TOKENS) <= settings.num_special_tokens < settings.vocab_size:
        raise InputError(f"needs {len(TIKTOKEN_SPECIAL_TOKENS)} <= tiktoken_num_special_tokens "
                         f"({settings.num_special_tokens}) < tiktoken_vocab_size ({settings.vocab_size})",
                         field="tiktoken_num_special_tokens")
    ranks = _mergeable_ranks(path, settings.vocab_size - settings.num_special_tokens, settings.num_special_tokens)
    specials = {token: i for i, token in enumerate(settings.special_tokens())}
    return tiktoken.Encoding(name=path.parent.name, pat_str=TIKTOKEN_PATTERNS[settings.pattern],
                             mergeable_ranks=ranks, special_tokens=specials)


def _mergeable_ranks(path: Path, count: int, shift: int) -> dict[bytes, int]:
    """Megatron's ``reload_mergeable_ranks``: the first ``count`` entries, each id shifted by ``shift``."""
    def bad(reason: str, field: str | None = None) -> InputError:
        return InputError(f"not a Megatron TikTokenizer vocabulary: {reason}", path=str(path), field=field)

    try:
        vocabulary = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise bad(f"not JSON ({exc})") from None
    if not isinstance(vocabulary, list):
        raise bad(f"the top level is a {type(vocabulary).__name__}, not a list of entries")
    if len(vocabulary) < count:
        raise bad(f"{len(vocabulary):,} entries, fewer than tiktoken_vocab_size - tiktoken_num_special_tokens = "
                  f"{count:,}")
    ranks: dict[bytes, int] = {}
    for i, entry in enumerate(vocabulary[:count]):
        if not isinstance(entry, dict) or entry.keys() != TIKTOKEN_ENTRY_KEYS:
            keys = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
            raise bad(f"entry {i} has {keys}, not {sorted(TIKTOKEN_ENTRY_KEYS)}", f"[{i}]")
        if entry["rank"] != i:
            raise bad(f"entry {i} has rank {entry['rank']!r}", f"[{i}].rank")
        try:
            token = base64.b64decode(entry["token_bytes"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise bad(f"entry {i}: token_bytes is not base64", f"[{i}].token_bytes") from None
        if i < 256 and token != bytes([i]):
            raise bad(f"entry {i} is {token!r}: the first 256 entries must be the bytes 0..255 in order",
                      f"[{i}].token_bytes")
        if token in ranks:
            raise bad(f"entry {i} repeats entry {ranks[token] - shift} ({token!r})", f"[{i}].token_bytes")
        ranks[token] = i + shift
    return ranks


class TiktokenEncoder:
    """``tiktoken.Encoding.encode(text, allowed_special="all")``, text by text (each call lets go of the GIL)."""

    name = "tiktoken"
    batch_chars = 1 << 22

    def __init__(self, encoding) -> None:
        self.encoding = encoding

    def encode(self, texts: Sequence[str], add_special_tokens: bool = True) -> tuple[np.ndarray, np.ndarray]:
        return _flatten([self.encoding.encode(text, allowed_special="all") for text in texts])


def _flatten(id_lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter((len(ids) for ids in id_lists), dtype=np.int64, count=len(id_lists))
    return np.fromiter(chain.from_iterable(id_lists), dtype=np.int64, count=int(lengths.sum())), lengths
