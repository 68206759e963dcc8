"""Embedding views of a pool: one short text per row to embed, for clustering and near-duplicate search.

- ``prompt``: what the user asked (every user message, in order).
- ``reasoning_excerpt``: the start of the model's reasoning (analysis channel), ``EXCERPT_CHARS`` at most.
- ``behavior``: what the assistant *did*, without any values: the tool-call sequence, the call count, the
  argument keys, whether tool results came back, and the kind of final answer. Two rows that used the same
  tools the same way get the same text, so a collapsed (degenerate) view shows up as few distinct texts.
"""

import json
import re
from pathlib import Path

import polars as pl

from nemotron_assets.formats.harmony import Message, parse_harmony
from nemotron_assets.layout import embedding_view_path, pool_path
from nemotron_assets.storage import Storage

VIEWS = ("prompt", "reasoning_excerpt", "behavior")
EXCERPT_CHARS = 1000
PASS_THROUGH = ("dataset", "meta_domain", "meta_correctness", "meta_difficulty_bin", "meta_reasoning_effort",
                "meta_tool_call_count", "source_reasoning", "source_capability_target")
_NUMBER = re.compile(r"^\s*[-+]?\d[\d,]*(\.\d+)?\s*$")
_BOXED = re.compile(r"\\boxed\{")


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
    sequence = " -> ".join(_tool_name(m.recipient) for m in calls) or "none"
    keys = sorted({key for m in calls for key in _argument_keys(m.content)})
    returned = "none" if not calls else ("all" if len(results) >= len(calls) else f"{len(results)}/{len(calls)}")
    answer = answer_type(finals[-1].content) if finals else "none"
    return (f"tools: {sequence}; calls: {len(calls)}; argument keys: {', '.join(keys) or 'none'}; "
            f"results returned: {returned}; answer: {answer}")


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


def word_count(text: str) -> int:
    return len(text.split())


def write_view(pool_file: str, view: str, out: Path, storage_options: dict | None) -> int:
    """The view's rows (id, embed_text, word_count, pass-through metadata) for one pool file; returns the count."""
    frame = pl.scan_parquet(pool_file, storage_options=storage_options).select("id", "text", *PASS_THROUGH).collect()
    texts = [embed_text(view, text) for text in frame["text"]]
    view_frame = frame.drop("text").with_columns(
        embed_text=pl.Series(texts, dtype=pl.String),
        word_count=pl.Series([word_count(t) for t in texts], dtype=pl.Int64),
    ).select("id", "embed_text", "word_count", *PASS_THROUGH)
    view_frame.write_parquet(out, compression="zstd")
    return len(view_frame)


def write_views(store: Storage, base: str, pool: str) -> int:
    """Every view of one committed pool, each staged and committed; returns the pool's rows."""
    rows = 0
    for view in VIEWS:
        with store.staging() as folder:
            staged = folder / "part-00000.parquet"
            rows = write_view(store.url(pool_path(base, pool)), view, staged, store.polars_options())
            store.commit(staged, embedding_view_path(base, view, pool))
    return rows
