"""Sentence embeddings with ``transformers``, matching what ``sentence-transformers`` computes for the same folder.

A sentence-transformers model folder describes its pipeline in ``modules.json``: a Transformer, a Pooling module
(``1_Pooling/config.json``) and optionally Normalize. `read_sentence_config` reads that description and refuses
anything else (a Dense layer, several pooling modes at once) with a clear error, rather than computing something
different from what the model's authors meant. The computation is then short:

1. tokenize with the folder's tokenizer, truncated to ``max_seq_length`` (``sentence_bert_config.json``; else the
   tokenizer's limit, capped at the model's positions), lower-cased first if ``do_lower_case`` says so;
2. group texts by token length into padded batches (`batching.plan_batches`: a token budget, < 10 % padding);
3. run the encoder with the padding mask (an encoder attends in both directions, so pads must be masked);
4. pool the token states over the real tokens (mean, CLS, max or mean / sqrt(length)), in fp32;
5. L2-normalize if the pipeline has a Normalize module.

Sentence-transformers' ``encode`` sorts *all* inputs by character length and runs fixed batches of 32; sorting by
token length within a window and sizing batches by tokens gives the same vectors with less padding and fewer, fuller
forward passes for short texts.
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from nemotron_assets.defs.scoring.batching import MAX_PADDING, plan_batches
from nemotron_assets.defs.scoring.device import DeviceChoice
from nemotron_assets.defs.scoring.model_files import ModelFiles
from nemotron_assets.sources.errors import InputError

FIELD = "scoring.embedding_model"
POOLING_MODES = ("mean", "cls", "max", "mean_sqrt_len_tokens")
#: sentence-transformers' pre-v5 boolean keys, in the order it reads them.
LEGACY_POOLING_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                       "pooling_mode_mean_tokens": "mean", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                       "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
BATCH_TOKENS = 16384


@dataclass(frozen=True)
class SentenceConfig:
    """What a sentence-transformers folder says about turning token states into one vector."""

    pooling: str  # one of POOLING_MODES
    normalize: bool
    max_seq_length: int | None  # None: the tokenizer's own limit
    do_lower_case: bool


def read_sentence_config(folder: Path) -> SentenceConfig:
    """Parse ``modules.json``, the pooling config and ``sentence_bert_config.json`` (see the module docstring).
    A plain Hugging Face folder without ``modules.json`` gets what sentence-transformers gives it: mean pooling,
    no normalization."""
    modules = _json(folder / "modules.json", default=None)
    pooling, normalize = "mean", False
    if modules is not None:
        kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
        unsupported = [k for k in kinds if k not in ("Transformer", "Pooling", "Normalize")]
        if unsupported or kinds[:1] != ["Transformer"] or kinds.count("Pooling") != 1:
            raise InputError(f"unsupported sentence-transformers pipeline {' -> '.join(kinds)} (supported: "
                             "Transformer -> Pooling [-> Normalize])", path=str(folder / "modules.json"), field=FIELD)
        normalize = "Normalize" in kinds
        pooling_path = next(m.get("path", "") for m in modules if str(m.get("type", "")).endswith("Pooling"))
        pooling = _pooling_mode(folder / pooling_path / "config.json")
    sbert = _json(folder / "sentence_bert_config.json", default={})
    return SentenceConfig(pooling, normalize, sbert.get("max_seq_length"), bool(sbert.get("do_lower_case", False)))


def _pooling_mode(path: Path) -> str:
    config = _json(path, default={})
    mode = config.get("pooling_mode")
    if mode is None:
        active = [name for key, name in LEGACY_POOLING_KEYS.items() if config.get(key)]
        mode = active if len(active) > 1 else (active[0] if active else "mean")
    if isinstance(mode, list) and len(mode) == 1:
        mode = mode[0]
    if mode not in POOLING_MODES:
        raise InputError(f"unsupported pooling {mode!r} (supported: {', '.join(POOLING_MODES)})", path=str(path),
                         field=FIELD)
    return mode


def _json(path: Path, default):
    if not path.is_file():
        return default
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"not valid JSON: {error}", path=str(path), field=FIELD) from None


class SentenceEmbedder:
    """Embeds texts with a sentence-transformers-style model folder (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, tokenizer, config: SentenceConfig, device: DeviceChoice,
                 batch_tokens: int = BATCH_TOKENS, max_padding: float = MAX_PADDING) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = config
        self.device = device
        self.batch_tokens = batch_tokens
        self.max_padding = max_padding
        self.dimension = int(model.config.hidden_size)
        self.max_length = _max_length(config, tokenizer, model.config)
        if config.do_lower_case:
            _lowercase_first(tokenizer)

    @classmethod
    def load(cls, files: ModelFiles, device: DeviceChoice, **options) -> "SentenceEmbedder":
        from transformers import AutoModel, AutoTokenizer

        config = read_sentence_config(files.folder)
        tokenizer = AutoTokenizer.from_pretrained(files.folder, local_files_only=True)
        model = AutoModel.from_pretrained(files.folder, dtype=device.torch_dtype(), local_files_only=True)
        return cls(model.to(device.device), tokenizer, config, device, **options)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One float32 vector per text, in order: shape ``(len(texts), dimension)``."""
        encoded = self.tokenizer(list(texts), truncation=True, max_length=self.max_length, padding=False)["input_ids"]
        lengths = np.array([len(ids) for ids in encoded], dtype=np.int64)
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        with torch.inference_mode():
            for batch in plan_batches(lengths, self.batch_tokens, self.max_padding):
                out[batch.rows] = self._embed_batch([encoded[i] for i in batch.rows], batch.width)
        return out

    def _embed_batch(self, encoded: list[list[int]], width: int) -> np.ndarray:
        ids = np.full((len(encoded), width), self.tokenizer.pad_token_id or 0, dtype=np.int64)
        mask = np.zeros((len(encoded), width), dtype=np.int64)
        for b, row in enumerate(encoded):
            ids[b, : len(row)] = row
            mask[b, : len(row)] = 1
        input_ids = torch.from_numpy(ids).to(self.device.device)
        attention = torch.from_numpy(mask).to(self.device.device)
        states = self.model(input_ids=input_ids, attention_mask=attention).last_hidden_state.float()
        vectors = pool(states, attention, self.config.pooling)
        if self.config.normalize:
            vectors = torch.nn.functional.normalize(vectors, p=2, dim=1)
        return vectors.cpu().numpy()


def pool(states: torch.Tensor, attention: torch.Tensor, mode: str) -> torch.Tensor:
    """One vector per row from token states ``(rows, width, dim)`` over the tokens where `attention` is 1."""
    mask = attention.unsqueeze(-1).to(states.dtype)
    if mode == "cls":
        return states[:, 0]  # right padding: the first token is the row's first real token
    if mode == "max":
        return states.masked_fill(mask == 0, -1e9).max(dim=1).values
    summed, count = (states * mask).sum(dim=1), mask.sum(dim=1).clamp(min=1e-9)
    return summed / count if mode == "mean" else summed / count.sqrt()


def _max_length(config: SentenceConfig, tokenizer, model_config) -> int:
    """sentence-transformers' truncation length: ``max_seq_length`` if the folder sets it, else the tokenizer's
    ``model_max_length`` capped at the model's position embeddings."""
    if config.max_seq_length is not None:
        return int(config.max_seq_length)
    limit = int(tokenizer.model_max_length)
    positions = getattr(model_config, "max_position_embeddings", -1)
    return min(limit, positions) if positions and positions > 0 else limit


def _lowercase_first(tokenizer) -> None:
    """Put a Lowercase step in front of the fast tokenizer's normalizer, unless it has one (as sentence-transformers
    does for ``do_lower_case``; a BertNormalizer's own ``lowercase`` flag does not count, there either)."""
    from tokenizers import normalizers

    backend = tokenizer.backend_tokenizer
    current = backend.normalizer
    steps = list(current) if isinstance(current, normalizers.Sequence) else [current] if current is not None else []
    if any(isinstance(step, normalizers.Lowercase) for step in steps):
        return
    backend.normalizer = normalizers.Sequence([normalizers.Lowercase(), *steps])
