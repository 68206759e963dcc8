"""The ``sft.tokenizer_model`` setting -> a chat tokenizer.

Its own module because it is the one place that knows both kinds: ``tokenizers.py`` (tokenizer.json tokenizers,
and the checks every fast path passes) and ``o200k.py`` (``o200k_harmony``, built on those checks).
"""

from nemotron_assets.chat.o200k import O200K_HARMONY, O200kHarmonyTokenizer
from nemotron_assets.chat.tokenizers import ChatTokenizer, HFChatTokenizer
from nemotron_assets.tokenize.loading import locate_tokenizer


def load_chat_tokenizer(spec: str, revision: str | None = None, backend: str = "auto") -> ChatTokenizer:
    """``o200k_harmony`` (built in), or anything `locate_tokenizer` accepts (``llama3``, a tokenizer.json, a
    folder, a hub id). `backend`: ``auto`` (the fast path when proven), ``reference`` or ``fastokens`` (fail if it
    cannot be proven)."""
    if spec == O200K_HARMONY:
        return O200kHarmonyTokenizer(backend)
    return HFChatTokenizer(locate_tokenizer(spec, revision), backend)
