"""The blend's ``sft:`` rendering settings -> a ready template and tokenizer (`load_chat_format`).

``chat_template``: ``harmony``, ``chatml`` or a path to a ``.jinja`` file. ``tokenizer_model``: as at the top
level of a blend (``llama3``, a tokenizer.json, a folder, a hub id) or ``o200k_harmony``; by default the blend's,
and ``o200k_harmony`` for ``harmony``. `ChatFormatSpec` is a small frozen value, so worker processes can rebuild
the same format from it (defs/sft/render_pool.py) and a receipt can record it.
"""

import functools
import json
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from nemotron_assets.chat.harmony import HARMONY, HarmonyTemplate
from nemotron_assets.chat.masks import truncate_sample
from nemotron_assets.chat.o200k import O200K_HARMONY
from nemotron_assets.chat.samples import ChatTemplate
from nemotron_assets.chat.templates import RENDER_DATE, JinjaChatTemplate, end_of_turn_text, load_template
from nemotron_assets.chat.tokenizer_choice import load_chat_tokenizer
from nemotron_assets.chat.tokenizers import ChatTokenizer
from nemotron_assets.tokenize.loading import locate_tokenizer


@dataclass(frozen=True)
class ChatFormatSpec:
    """Everything that decides how a conversation becomes ids and a mask."""

    chat_template: str
    tokenizer_model: str = "llama3"
    tokenizer_revision: str | None = None
    tokenizer_backend: str = "auto"  # auto | reference | fastokens
    reasoning_effort: str | None = "medium"  # harmony: the system message's "Reasoning:" line
    render_date: datetime = RENDER_DATE  # Jinja: what strftime_now formats


def default_tokenizer_model(chat_template: str, blend_tokenizer_model: str) -> str:
    """``o200k_harmony`` for Harmony, otherwise the blend's tokenizer."""
    return O200K_HARMONY if chat_template == HARMONY else blend_tokenizer_model


@dataclass
class ChatFormat:
    spec: ChatFormatSpec
    template: ChatTemplate
    tokenizer: ChatTokenizer
    _end_of_turn: list[int] | None = field(default=None, repr=False)

    def end_of_turn_ids(self) -> list[int]:
        """The template's end-of-turn token ids, which a truncated sample must still end with."""
        if self._end_of_turn is None:
            if isinstance(self.template, JinjaChatTemplate):
                text = end_of_turn_text(self.template)
            else:
                text = self.template.end_of_turn  # type: ignore[attr-defined]
            self._end_of_turn = self.tokenizer.token_ids(text)
        return self._end_of_turn

    def truncate(self, ids: np.ndarray, mask: np.ndarray, max_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """`masks.truncate_sample` with this format's end-of-turn: the ``truncate`` the packer calls for
        ``overlong: truncate``."""
        return truncate_sample(ids, mask, max_tokens, self.end_of_turn_ids())


def cached_chat_tokenizer(spec: str, revision: str | None, backend: str) -> ChatTokenizer:
    """One tokenizer per process, setting and tokenizer file content: Llama-3 with its fast path's probe check costs
    seconds to load, and a file replaced between two builds in one process (the Python API) is loaded again."""
    identity = None if spec == O200K_HARMONY else locate_tokenizer(spec, revision).identity()
    return _chat_tokenizer(spec, revision, backend, json.dumps(identity, sort_keys=True))


@functools.lru_cache(maxsize=4)
def _chat_tokenizer(spec: str, revision: str | None, backend: str, identity: str) -> ChatTokenizer:
    """The load behind `cached_chat_tokenizer`; ``identity`` (the files' JSON identity) is only part of the key."""
    return load_chat_tokenizer(spec, revision, backend)


def load_chat_format(spec: ChatFormatSpec) -> ChatFormat:
    tokenizer = cached_chat_tokenizer(spec.tokenizer_model, spec.tokenizer_revision, spec.tokenizer_backend)
    template: ChatTemplate
    if spec.chat_template == HARMONY:
        template = HarmonyTemplate(spec.reasoning_effort)
    else:
        template = load_template(spec.chat_template, tokenizer.template_tokens, spec.render_date)
    return ChatFormat(spec, template, tokenizer)
