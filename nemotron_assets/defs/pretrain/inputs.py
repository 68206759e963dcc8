"""What determines the bytes of a pretraining shard: its receipt's ``inputs`` (records.py).

A shard is up to date only when all of these are what they were when it was built:

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
"""

import functools
import hashlib
import os
from pathlib import Path

import orjson

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.records import SourceManifest
from nemotron_assets.formats.megatron import dtype_for_vocab
from nemotron_assets.sources.errors import InputError
from nemotron_assets.tokenize.documents import DocumentOptions
from nemotron_assets.tokenize.loading import TokenizerFiles, locate_tokenizer

FORMAT_VERSION = "megatron-mmidx/2"


def tokenizer_identity(files: TokenizerFiles, vocab_size: int | None = None) -> dict:
    """What of the tokenizer decides the ids: the model file's content, the special-token names, the vocabulary
    (``vocab_size`` when the caller has the tokenizer loaded already)."""
    sha256 = _file_sha256(str(files.tokenizer_json), *_file_version(files.tokenizer_json))
    if vocab_size is None:
        vocab_size = _vocab_size(str(files.tokenizer_json), sha256)
    return {"sha256": sha256, "eos_token": files.eos_token, "bos_token": files.bos_token,
            "sep_token": files.sep_token, "vocab_size": vocab_size}


def blend_tokenizer_identity(blend: Blend) -> dict:
    """The identity of the tokenizer the blend names, without building a tokenizing backend."""
    return tokenizer_identity(locate_tokenizer(blend.tokenizer_model, blend.tokenizer_revision))


def document_options(blend: Blend, backend: str = "auto") -> DocumentOptions:
    """How the blend's shards turn texts into documents (the settings above) with the chosen backend: the one key
    of the shard step's tokenizer, and of the one the build host loads (pretrain/build_host.py)."""
    return DocumentOptions(add_bos=blend.add_bos, add_eos=blend.add_eos, eod_token=blend.eod_token,
                           max_doc_tokens=blend.max_doc_tokens, backend=backend)


def _file_version(path) -> tuple[int, int]:
    stat = os.stat(path)
    return stat.st_size, stat.st_mtime_ns


@functools.lru_cache(maxsize=8)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    """sha256 of a file, cached per (path, size, modification time): a step asks for it once per shard."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@functools.lru_cache(maxsize=8)
def _vocab_size(path: str, sha256: str) -> int:
    """Base + added tokens of a tokenizer.json, counted as ``tokenizers`` counts them (distinct token strings of the
    model's vocabulary and the added tokens), from the JSON alone: building the tokenizer to ask it would take a
    second for Llama-3. Cached by content."""
    try:
        spec = orjson.loads(Path(path).read_bytes())
        vocab = spec["model"]["vocab"]
        tokens = set(vocab) if isinstance(vocab, dict) else {piece[0] for piece in vocab}  # Unigram: [token, score]
        tokens.update(added["content"] for added in spec.get("added_tokens") or [])
    except (orjson.JSONDecodeError, KeyError, TypeError, IndexError) as exc:
        raise InputError(f"not a valid tokenizer.json: {exc}", path=path, field="tokenizer_model") from None
    return len(tokens)


def shard_inputs(blend: Blend, manifest: SourceManifest, index: int, tokenizer: dict) -> dict:
    """The receipt ``inputs`` of shard ``index`` of ``manifest`` built now (``tokenizer``: its identity)."""
    return {
        "format": FORMAT_VERSION,
        "source": manifest.shard_fingerprint(index),
        "tokenizer": tokenizer,
        "settings": {"add_bos": blend.add_bos, "add_eos": blend.add_eos, "eod_token": blend.eod_token,
                     "max_doc_tokens": blend.max_doc_tokens,
                     "dtype": blend.dtype or dtype_for_vocab(tokenizer["vocab_size"]).name, "on_error": blend.on_error},
    }
