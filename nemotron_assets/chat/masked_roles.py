"""Where the text of the roles a model must never be trained on sits in a rendered sample, for the packed shards'
``no_trained_token_on_masked_role`` check.

Masked roles are ``system``, ``developer``, ``user`` and ``tool``. The check needs their places independently of the
trained spans (otherwise it would only restate the mask), found at render time:

- **Harmony** knows them exactly: every non-assistant message, whole (`harmony.HarmonyTemplate` returns them);
- **Jinja templates** write message content verbatim (or trimmed) between their own markup, so each masked message's
  content is searched for in the text, in conversation order (`masked_content_spans`). A cursor moves past every
  message found, assistant messages included (their reasoning, content, tool names and argument values), so the
  content of a tool result that echoes a call's argument is found in the result, not in the call. A system or
  developer message not found after the cursor is searched from the start (templates move system text to the front).
  After an assistant message the cursor also moves past the template's end-of-turn text (``<|im_end|>``), when it is
  known: that markup is trained, and short content (a tool result ``"|"``) would otherwise be "found" inside it.
  Content a template rewrites (escapes, reformats) is not found and gets no span: never a guessed one.

Character spans become token spans of the tokens lying *wholly* inside them (`token_spans`): a token that straddles
the edge of a message (``"?\\n"``) belongs to the markup as much as to the message, and a match that falls inside a
special token (content ``"|>"`` inside ``<|eot_id|>``) covers no whole token at all.
"""

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from nemotron_assets.chat.masks import TokenLocator
from nemotron_assets.chat.templates import Span

MASKED_ROLES = frozenset({"system", "developer", "user", "tool"})


def masked_content_spans(messages: Sequence[Mapping[str, Any]], text: str,
                         end_of_turn: str | None = None) -> tuple[Span, ...]:
    """Character spans of the content of each masked-role message found in `text` (module docstring);
    `end_of_turn`: what the template writes to close an assistant reply, if known."""
    spans: list[Span] = []
    cursor = 0
    for message in messages:
        if message.get("role") == "assistant":
            for piece, as_json in [*_assistant_pieces(message), *([(end_of_turn, False)] if end_of_turn else [])]:
                found = _find(text, piece, cursor, as_json)
                if found is not None:
                    cursor = found[1]
            continue
        content = message.get("content")
        if message.get("role") not in MASKED_ROLES or not isinstance(content, str) or not content.strip():
            continue
        found = _find(text, content, cursor)
        if found is None and message.get("role") in ("system", "developer"):
            found = _find(text, content, 0)
        if found is None:
            continue
        spans.append(found)
        cursor = max(cursor, found[1])
    return tuple(spans)


def _find(text: str, piece: str, start: int, as_json: bool = False) -> Span | None:
    """The first place at or after `start` where `piece` is written whole or trimmed (templates often trim content)
    or, with `as_json`, as a JSON string's inside (templates write tool-call arguments with ``tojson``, which escapes
    control characters: ``"\x1f"`` is written ``\u001f``); at the same place, the whole piece. The earliest place
    wins: a template that trims ``"  x"`` writes ``x`` where the message is, and ``"  x"`` may still occur later,
    quoted in a trained reply (or, for an escaped argument, written raw in a later message)."""
    best: Span | None = None
    candidates = [piece]  # each distinct one once: most pieces are their own trimmed and escaped forms
    for other in (piece.strip(), json.dumps(piece, ensure_ascii=False)[1:-1] if as_json else piece):
        if other not in candidates:
            candidates.append(other)
    for candidate in candidates:
        if candidate:
            at = text.find(candidate, start)
            if at >= 0 and (best is None or at < best[0]):
                best = (at, at + len(candidate))
    return best


def _assistant_pieces(message: Mapping[str, Any]) -> Iterator[tuple[str, bool]]:
    """What an assistant message writes, in the order templates write it, each with whether a template may write it
    as JSON: reasoning, content, then per tool call its name and its arguments' keys and values (JSON)."""
    for key in ("reasoning_content", "content"):
        if isinstance(message.get(key), str) and message[key].strip():
            yield message[key], False
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        if isinstance(function.get("name"), str):
            yield function["name"], False
        for piece in _value_pieces(function.get("arguments")):
            yield piece, True


def _value_pieces(value: Any) -> Iterator[str]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _value_pieces(item)
    elif isinstance(value, list):
        for item in value:
            yield from _value_pieces(item)
    elif isinstance(value, str):
        yield value
    elif value is not None:
        yield json.dumps(value, ensure_ascii=False)


def inner_probes(char_spans: Sequence[Span]) -> list[int]:
    """The characters whose tokens `inner_token_spans` needs: around each edge of each span."""
    return [char for start, end in char_spans for char in (start - 1, start, end - 1, end)]


def inner_token_spans(found: Sequence[int | None], n_tokens: int) -> list[tuple[int, int]]:
    """``[first, last + 1)`` token ranges of the tokens wholly inside each character span, from the tokens holding
    its `inner_probes` (module docstring); spans with no such token are left out."""
    spans = []
    for i in range(0, len(found), 4):
        before, first, last, after = found[i : i + 4]
        if first is None or last is None:
            continue
        if before is not None and before == first:
            first += 1  # the first token starts before the span
        if after is not None and after == last:
            last -= 1  # the last token runs past the span
        if first <= last < n_tokens:
            spans.append((first, last + 1))
    return spans


def token_spans(char_spans: Sequence[Span], locator: TokenLocator, n_tokens: int) -> list[tuple[int, int]]:
    """`inner_token_spans` of `char_spans` located with `locator`."""
    return inner_token_spans(locator.tokens_at(inner_probes(char_spans)), n_tokens) if char_spans else []
