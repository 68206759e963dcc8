"""Embedding views of a pool: one short text per row to embed, for clustering and near-duplicate search.

- ``prompt``: what the user asked (every user message, in order).
- ``reasoning_excerpt``: the start of the model's reasoning (analysis channel), ``EXCERPT_CHARS`` at most.
- ``behavior``: what the assistant *did*, without any values: the tool-call sequence, the call count, the
  argument keys, whether tool results came back, and the kind of final answer. Two rows that used the same
  tools the same way get the same text, so a collapsed (degenerate) view shows up as few distinct texts.

The views are defined on a row's Harmony messages: `embed_text` reads them from the Harmony text. A pool holds
only valid Harmony rows (pools.py ``base_filter``), whose text is exactly the rendering of their
canonical ``messages`` (normalize/to_harmony.py), so `view_texts` reads the same messages from that JSON column
instead, several times faster than parsing the text, with the same result
(the tests of this module check both agree on the sample data, the fixtures and
generated conversations). `write_view_files` builds all three views of a pool in one streaming pass, from the texts
a run computed once for every distinct row of the pools it views (row_texts.py), or from each row's messages.
"""

import json
import re
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.layout import pool_part_path
from nemotron_assets.defs.harmony.pools import pool_part_numbers
from nemotron_assets.formats.harmony import Message, parse_harmony
from nemotron_assets.normalize.to_harmony import PYTHON_TOOL_NAMES, arguments_text, python_code, reasoning_and_answer

VIEWS = ("prompt", "reasoning_excerpt", "behavior")
EXCERPT_CHARS = 1000
PASS_THROUGH = ("dataset", "meta_domain", "meta_correctness", "meta_difficulty_bin", "meta_reasoning_effort",
                "meta_tool_call_count", "source_reasoning", "source_capability_target")
#: Pool rows per record batch: a few MB of ``messages`` JSON, so memory stays small whatever the pool's size.
BATCH_ROWS = 4096
_NUMBER = re.compile(r"^\s*[-+]?\d[\d,]*(\.\d+)?\s*$")
_BOXED = re.compile(r"\\boxed\{")
#: The characters ``json.loads`` can find first in a JSON text without leading whitespace (object, array, string,
#: number, true, false, null, NaN, Infinity): an answer starting with any other is text, without trying to parse it.
_JSON_STARTS = frozenset('{["-0123456789tfnNI')


# --- the definition, on Harmony text -----------------------------------------------------------------------------
def embed_text(view: str, text: str) -> str:
    """The view's text for one Harmony conversation."""
    messages = [m for m in parse_harmony(text) if m.role not in ("system", "developer")]
    if view == "prompt":
        return "\n\n".join(m.content for m in messages if m.role == "user")
    if view == "reasoning_excerpt":
        return "\n".join(m.content for m in messages if m.role == "assistant" and m.channel == "analysis")[
            :EXCERPT_CHARS]
    if view == "behavior":
        return behavior_signature(messages)
    raise KeyError(f"unknown view {view!r} (views: {', '.join(VIEWS)})")


def behavior_signature(messages: list[Message]) -> str:
    calls = [m for m in messages if m.role == "assistant" and m.recipient]
    results = [m for m in messages if m.role == "tool"]
    finals = [m for m in messages if m.role == "assistant" and m.channel == "final"]
    return _signature([_tool_name(m.recipient) for m in calls],
                      {key for m in calls for key in _argument_keys(m.content)},
                      len(results), finals[-1].content if finals else None)


def _signature(tools: list[str], keys: set[str], results: int, final: str | None) -> str:
    """The behavior text from its parts (both readers end here, so they cannot word it differently)."""
    returned = "none" if not tools else ("all" if results >= len(tools) else f"{results}/{len(tools)}")
    answer = answer_type(final) if final is not None else "none"
    return (f"tools: {' -> '.join(tools) or 'none'}; calls: {len(tools)}; argument keys: "
            f"{', '.join(sorted(keys)) or 'none'}; results returned: {returned}; answer: {answer}")


def answer_type(content: str) -> str:
    """The kind of final answer, never its value: empty, number, boxed, code, json, or text."""
    stripped = content.strip()
    if not stripped:
        return "empty"
    if _NUMBER.match(stripped):
        return "number"
    if _BOXED.search(stripped):
        return "boxed"
    if "```" in stripped:
        return "code"
    if stripped[0] not in _JSON_STARTS:
        return "text"
    try:
        json.loads(stripped)
        return "json"
    except ValueError:
        return "text"


def _tool_name(recipient: str) -> str:
    return recipient.split(".", 1)[-1] if recipient.startswith("functions.") else recipient


def _argument_keys(content: str) -> list[str]:
    try:
        value = json.loads(content)
    except ValueError:
        return []
    return [str(k) for k in value] if isinstance(value, dict) else []


def word_counts(texts: Sequence[str]) -> pa.Array:
    """Each text's number of words: its runs of characters between whitespace, as ``str.split()`` finds them."""
    return pa.array([len(text.split()) for text in texts], pa.int64())


# --- the same views, read from the canonical messages -----------------------------------------------------------
@dataclass
class _Turns:
    """What the views need from a conversation, collected in one walk over its canonical messages."""

    prompts: list[str] = field(default_factory=list)
    analysis: list[str] = field(default_factory=list)  # reasoning and python-tool code, as Harmony's analysis
    tools: list[str] = field(default_factory=list)  # called tools, in order ("python" for the built-in tool)
    keys: set[str] = field(default_factory=set)
    results: int = 0
    final: str | None = None  # the last final answer

    def assistant(self, message: dict[str, Any]) -> None:
        """Mirrors normalize/to_harmony.py: reasoning is an analysis message; without calls the text is the final
        answer, with calls each call is a message (a python call's code on the analysis channel)."""
        reasoning, answer = reasoning_and_answer(message)
        if reasoning:
            self.analysis.append(reasoning)
        calls = message.get("tool_calls") or []
        if not calls:
            self.final = answer
        for call in calls:
            name, arguments = call["function"]["name"], call["function"].get("arguments")
            arguments = {} if arguments is None else arguments
            if name in PYTHON_TOOL_NAMES:
                code = python_code(arguments)
                self.analysis.append(code)
                self.tools.append("python")
                self.keys.update(_argument_keys(code))
                continue
            self.tools.append(name)
            if isinstance(arguments, dict):  # its JSON text's keys are its own: no need to write and read it
                self.keys.update(str(key) for key in arguments)
            else:
                self.keys.update(_argument_keys(arguments_text(arguments)))


def view_texts(messages_json: str | bytes) -> tuple[str, str, str]:
    """(prompt, reasoning_excerpt, behavior) of one valid pool row, from its ``messages`` column."""
    turns = _Turns()
    for message in orjson.loads(messages_json):
        role = message["role"]
        if role == "user":
            turns.prompts.append(message["content"])
        elif role == "assistant":
            turns.assistant(message)
        elif role == "tool":
            turns.results += 1
    return ("\n\n".join(turns.prompts), "\n".join(turns.analysis)[:EXCERPT_CHARS],
            _signature(turns.tools, turns.keys, turns.results, turns.final))


# --- writing -----------------------------------------------------------------------------------------------------
def view_schema(pool_schema: pa.Schema) -> pa.Schema:
    """``id``, ``embed_text``, ``word_count``, then the pass-through columns with the pool's types."""
    return pa.schema([pool_schema.field("id"), pa.field("embed_text", pa.string()),
                      pa.field("word_count", pa.int64()), *(pool_schema.field(name) for name in PASS_THROUGH)])


ViewArrays = dict[str, tuple[pa.Array, pa.Array]]  # view -> (embed_text, word_count) of a batch of pool rows
#: The view arrays of a batch of a pool's rows, given the number of its first row (row_texts.py ``views_of``).
ViewsOf = Callable[[int, pa.RecordBatch], ViewArrays]


def view_arrays(texts: Sequence[tuple[str, str, str]]) -> ViewArrays:
    """Each view's ``embed_text`` and ``word_count`` arrays of some rows, from their `view_texts`."""
    by_view = list(zip(*texts)) or [()] * len(VIEWS)
    return {view: (pa.array(embed, pa.string()), word_counts(embed)) for view, embed in zip(VIEWS, by_view)}


def views_from_messages(_first_row: int, batch: pa.RecordBatch) -> ViewArrays:
    """The view arrays of a batch of pool rows, each row's texts computed from its ``messages`` column."""
    return view_arrays([view_texts(messages) for messages in batch.column("messages").to_pylist()])


def write_view_files(pool_file: BinaryIO | Sequence[BinaryIO], out: dict[str, Path],
                     batch_rows: int = BATCH_ROWS, views_of: ViewsOf | None = None) -> int:
    """Every view of one pool file, or of a pool's part files one after the other (in the order given), in one
    pass, streamed: record batches in, one ParquetWriter per view (zstd) writing to ``out[view]``. The texts come
    from ``views_of`` (the texts a run computed once per distinct row, row_texts.py), or by default from each row's
    ``messages``. Returns the pool's rows."""
    parts = [pq.ParquetFile(f) for f in (pool_file if isinstance(pool_file, Sequence) else [pool_file])]
    schema = view_schema(parts[0].schema_arrow)
    columns = ["id", *PASS_THROUGH] if views_of else ["id", "messages", *PASS_THROUGH]
    views_of = views_of or views_from_messages
    writers = {view: pq.ParquetWriter(out[view], schema, compression="zstd") for view in VIEWS}
    rows = 0
    try:
        for batch in (batch for part in parts for batch in part.iter_batches(batch_size=batch_rows, columns=columns)):
            views = views_of(rows, batch)
            rows += batch.num_rows
            for view, (embed, words) in views.items():
                writers[view].write_table(pa.Table.from_arrays(
                    [batch.column("id"), embed, words, *(batch.column(name) for name in PASS_THROUGH)], schema=schema))
    finally:
        for writer in writers.values():
            writer.close()
    return rows


def stage_views(store: Storage, base: str, pool: str, folder: Path, views_of: ViewsOf | None = None
                ) -> tuple[int, dict[str, Path]]:
    """Every view of one committed pool (all its parts, in part order, into one file per view) in ``folder``;
    returns the pool's rows and each view's staged file."""
    with ExitStack() as files:
        parts = [files.enter_context(store.open(pool_part_path(base, pool, part)))
                 for part in pool_part_numbers(store, base, pool) or [0]]
        staged = {view: folder / f"{view}.parquet" for view in VIEWS}
        return write_view_files(parts, staged, views_of=views_of), staged
