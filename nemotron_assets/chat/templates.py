"""Jinja chat templates: a canonical conversation -> the text a trainer sees, plus the character spans it trains on.

Hugging Face chat templates are written for ``transformers``' ``apply_chat_template``, so a template only renders
what its author saw if it gets the same Jinja environment and the same variables. This module rebuilds both from
transformers 5.23.0 (``utils/chat_template_utils.py`` and ``tokenization_utils_base.apply_chat_template``), with
our own code:

- the environment: a sandbox that cannot change its inputs (``ImmutableSandboxedEnvironment``), ``trim_blocks``
  and ``lstrip_blocks`` on, the ``loopcontrols`` extension (``{% break %}``), a ``tojson`` filter that does not
  HTML-escape and accepts ``ensure_ascii``/``indent``/``separators``/``sort_keys``, the globals
  ``raise_exception``, ``strftime_now``, a ``dict`` that only builds dicts and a ``namespace`` that refuses
  ``_private`` attributes, and the ``{% generation %}...{% endgeneration %}`` tag;
- the variables: ``messages`` (prepared as below), ``tools`` (as given, None stays None), ``documents`` (None),
  ``add_generation_prompt`` (False) and the tokenizer's named special tokens (``bos_token``, ``eos_token``, ...);
- the messages: keys whose value is None are dropped (a template tests ``message.tool_calls is defined``, not
  ``is not none``), and a message with reasoning gets it under ``reasoning_content`` and ``thinking`` (the name
  gpt-oss templates read), exactly as `prepare_messages` documents.

Trained text: what a ``{% generation %}`` block writes. Its span starts at the length of the text the template
has *yielded so far* — transformers' rule, which we keep even where a block sits inside a macro (Jinja then
buffers the macro's output, and the span lands where transformers puts it, not where the text is).

A template without generation tags gets its spans by rendering prefixes: the trained text of assistant message
``k`` is what rendering ``messages[:k+1]`` adds to rendering ``messages[:k]`` with the generation prompt (the
``<|im_start|>assistant\\n`` a model would be given), i.e. the reply and its end-of-turn. Both prefix renders must
be prefixes of the whole render; a template that rewrites earlier turns (one that drops old reasoning, or counts
the messages up front) fails with `TemplateNotPrefixStable` naming it.

`strftime_now` reads a fixed clock (`RENDER_DATE` unless the caller passes another), not the wall clock:
transformers gives templates the current date, which would make outputs differ from one day to the next.
"""

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.sandbox
import jinja2.utils

from nemotron_assets.sources.errors import InputError

Span = tuple[int, int]  # [start, end) in characters of the rendered text
TEMPLATE_FIELD = "sft.chat_template"
#: What `strftime_now` returns a formatting of, unless a template is given another date: a fixed day, so the same
#: conversation renders to the same bytes on every day (Llama-3.1-style templates print "Today Date").
RENDER_DATE = datetime(2026, 1, 1)
#: transformers' test for "this template marks trained text" (``render_jinja_template``).
GENERATION_TAG = re.compile(r"\{\%-?\s*generation\s*-?\%\}")
#: Names a message's reasoning goes under; transformers fills the first and ``thinking`` from whichever is set.
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


@dataclass(frozen=True, slots=True)
class RenderedSample:
    """A rendered conversation: its text and the character spans a model is trained to produce, in text order.

    `masked_spans`: where the text of system, developer, user and tool messages is, when the template knows it
    exactly (Harmony); None lets `masked_roles.masked_content_spans` find it (Jinja templates)."""

    text: str
    trained_spans: tuple[Span, ...]
    masked_spans: tuple[Span, ...] | None = None


class TemplateRenderError(ValueError):
    """The template refused this conversation (``raise_exception`` or a failing expression): a row problem."""

    def __init__(self, template: str, reason: str) -> None:
        self.template = template
        self.reason = reason
        super().__init__(f"chat template {template!r}: {reason}")


class TemplateNotPrefixStable(InputError):
    """Rendering the first messages of a conversation does not give the start of rendering all of them, so spans
    cannot be found by prefix rendering (a problem of the template, not of the row)."""


# --- what the template sees -----------------------------------------------------------------------------------------


def prepare_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The messages as transformers hands them to a template (new dicts; nested values are shared, which is safe
    because the sandbox cannot modify them).

    1. Keys whose value is None are dropped (only at the top level: a tool call's ``id: None`` stays).
    2. If ``reasoning_content``, ``thinking`` or ``reasoning`` is set (the first of them that is not None wins), the
       message becomes ``{"thinking": r, **message, "reasoning_content": r}``: key order included, since a template
       may loop over ``message.items()``."""
    prepared = []
    for message in messages:
        plain = {key: value for key, value in message.items() if value is not None}
        for key in REASONING_FIELDS:
            if key in plain:
                reasoning = plain[key]
                plain = {"thinking": reasoning, **plain, "reasoning_content": reasoning}
                break
        prepared.append(plain)
    return prepared


def _tojson(value: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    """Jinja's own ``tojson`` escapes ``<``, ``>``, ``&`` and ``'`` for HTML; chat templates need the plain JSON
    text, with the `json.dumps` options transformers exposes."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


class _DictBuilder:
    """The ``dict`` global: builds dicts, and offers nothing else a template could reach through attributes."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


class _Namespace(jinja2.utils.Namespace):
    """``namespace(...)`` without ``_private`` attributes, the way into Python internals."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: B902  (Jinja's signature: `self` may be a keyword)
        self, args = args[0], args[1:]
        attributes = dict(*args, **kwargs)
        for name in attributes:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attributes)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"a namespace cannot hold the attribute {name!r}")


class _GenerationTracker(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}``: writes its body and records where it went.

    "Where" is the number of characters of the pieces the template has yielded before the block (transformers'
    measure: it joins the blocks yielded so far). The render loop appends each piece to `pieces`; the tracker adds
    up the lengths of the pieces it has not counted yet, so a render costs O(text) however many blocks it has."""

    tags = {"generation"}

    def __init__(self, environment: jinja2.Environment) -> None:
        super().__init__(environment)
        self.pieces: list[str] | None = None
        self.spans: list[Span] = []
        self._counted = 0  # pieces already added into _length
        self._length = 0

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation"), [], [], body).set_lineno(lineno)

    def _generation(self, caller: Any) -> str:
        text = caller()
        pieces = self.pieces
        if pieces is not None:
            while self._counted < len(pieces):
                self._length += len(pieces[self._counted])
                self._counted += 1
            self.spans.append((self._length, self._length + len(text)))
        return text

    @contextmanager
    def tracking(self, pieces: list[str]) -> Iterator[list[Span]]:
        """Record spans while the caller renders into `pieces`."""
        if self.pieces is not None:
            raise RuntimeError("a chat template cannot render two conversations at once (one per thread)")
        self.pieces, self.spans, self._counted, self._length = pieces, [], 0, 0
        try:
            yield self.spans
        finally:
            self.pieces = None


#: Every attribute a ``dict`` instance has (it has no instance attributes of its own).
_DICT_ATTRIBUTES = frozenset(dir(dict))


class _ChatSandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """The immutable sandbox, with ``message.role`` on a plain dict answered without the failed attribute lookup.

    For a ``dict`` and a name that is none of its attributes, the sandbox's ``getattr`` first tries the attribute,
    which raises ``AttributeError`` (the costliest part of a chat template's render, most of whose lookups are
    message fields), then returns the item or undefined. We go straight to that second part: the same value for
    the same cases, and every other lookup (dict methods, other types) still goes through the sandbox's checks."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        if type(obj) is dict and type(attribute) is str and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)
        return super().getattr(obj, attribute)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 (Jinja's names)
        """A ``{% generation %}`` block calls our own `_GenerationTracker._generation`: a method the sandbox would
        find safe and Jinja's context would call as it is (it asks for no context), so it is called directly, with
        the loop and block variables Jinja adds inside loops left out, and a StopIteration turned into undefined,
        as the context does. Every other call goes through the sandbox's checks."""
        if getattr(__obj, "__func__", None) is _GenerationTracker._generation:
            kwargs.pop("_loop_vars", None)
            kwargs.pop("_block_vars", None)
            try:
                return __obj(*args, **kwargs)
            except StopIteration:
                return __self.undefined("value was undefined because a callable raised a StopIteration exception")
        return super().call(__context, __obj, *args, **kwargs)


def _environment(now: datetime) -> jinja2.sandbox.ImmutableSandboxedEnvironment:
    environment = _ChatSandbox(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTracker, jinja2.ext.loopcontrols]
    )
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = now.strftime
    environment.globals["dict"] = _DictBuilder()
    environment.globals["namespace"] = _Namespace
    return environment


# --- the template ---------------------------------------------------------------------------------------------------

# Errors a template raises on data it cannot render (a failed `raise_exception`, `None + "x"`, a missing index).
_RENDER_FAILURES = (jinja2.TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError)


class JinjaChatTemplate:
    """A Hugging Face-style chat template, compiled once.

    `name` identifies it in errors (a file path, or ``chatml``); `special_tokens` are the tokenizer's named tokens
    (``{"bos_token": "<|begin_of_text|>", ...}``) that templates read as variables."""

    def __init__(self, source: str, name: str, special_tokens: Mapping[str, str] | None = None,
                 now: datetime = RENDER_DATE) -> None:
        self.name = name
        self.source = source
        self.special_tokens = dict(special_tokens or {})
        self.has_generation_tags = GENERATION_TAG.search(source) is not None
        environment = _environment(now)
        try:
            self._compiled = environment.from_string(source)
        except jinja2.TemplateSyntaxError as error:
            raise InputError(f"chat template syntax error: {error.message}", path=name, line=error.lineno,
                             field=TEMPLATE_FIELD) from None
        # Jinja keeps a template's globals as a ChainMap over the environment's, and copies them into a new dict at
        # every render, key by key in Python: the same names and values as one plain dict (this environment's
        # globals never change after `_environment`), copied in C.
        self._compiled.globals = dict(self._compiled.globals)
        self._tracker: _GenerationTracker = environment.extensions[_GenerationTracker.identifier]  # type: ignore

    def render_text(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None,
                    add_generation_prompt: bool = False) -> str:
        """The rendered text alone."""
        return self._render(prepare_messages(messages), tools, add_generation_prompt)[0]

    def render(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None,
               trained_from: int = 0) -> RenderedSample:
        """The text of the whole conversation and the spans of trained text.

        `trained_from` leaves untrained what the messages before that index render: spans are cut to start where
        the render of ``messages[:trained_from]`` ends (which must be a prefix of the whole render)."""
        prepared = prepare_messages(messages)
        text, spans = self._render(prepared, tools, False)
        if not self.has_generation_tags:
            spans = self._prefix_spans(prepared, tools, text, trained_from)
        elif trained_from > 0:
            start = len(self._prefix(prepared[:trained_from], tools, text, False, len(prepared)))
            spans = [(max(begin, start), end) for begin, end in spans if end > start]
        return RenderedSample(text, tuple(spans))

    def _render(self, messages: list[dict[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                add_generation_prompt: bool) -> tuple[str, list[Span]]:
        variables = {
            **self.special_tokens,
            "messages": messages,
            "tools": tools,
            "documents": None,
            "add_generation_prompt": add_generation_prompt,
        }
        pieces: list[str] = []
        with self._tracker.tracking(pieces) as spans:
            try:
                for piece in self._compiled.generate(variables):
                    pieces.append(piece)
            except _RENDER_FAILURES as error:
                raise TemplateRenderError(self.name, f"{type(error).__name__}: {error}") from None
            return "".join(pieces), spans

    def _prefix_spans(self, messages: list[dict[str, Any]], tools: Sequence[Mapping[str, Any]] | None, text: str,
                      trained_from: int) -> list[Span]:
        """Spans of a template without generation tags: per assistant message, from the end of the render of the
        messages before it with the generation prompt to the end of the render that includes it."""
        spans = []
        for k in range(trained_from, len(messages)):
            if messages[k].get("role") != "assistant":
                continue
            start = len(self._prefix(messages[:k], tools, text, True, len(messages)))
            end = len(self._prefix(messages[: k + 1], tools, text, False, len(messages)))
            spans.append((start, max(start, end)))
        return spans

    def _prefix(self, messages: list[dict[str, Any]], tools: Sequence[Mapping[str, Any]] | None, full_text: str,
                add_generation_prompt: bool, total: int) -> str:
        prefix = self._render(messages, tools, add_generation_prompt)[0]
        if not full_text.startswith(prefix):
            at = next((i for i, (a, b) in enumerate(zip(prefix, full_text)) if a != b), len(prefix))
            what = f"the first {len(messages)} of {total} messages" + (
                " with the generation prompt" if add_generation_prompt else "")
            consequence = ("the sample cannot be restricted to the messages after its last user turn"
                           if self.has_generation_tags else
                           "trained spans cannot be found by prefix rendering; mark the trained text with "
                           "{% generation %} ... {% endgeneration %}")
            raise TemplateNotPrefixStable(
                f"chat template is not prefix-stable: rendering {what} gives {prefix[at:at + 40]!r} at character "
                f"{at} where rendering all of them gives {full_text[at:at + 40]!r}, so {consequence}",
                path=self.name, field=TEMPLATE_FIELD)
        return prefix


# --- built-in templates and loading ---------------------------------------------------------------------------------

#: ChatML (``<|im_start|>role\\n...<|im_end|>\\n``), with tools declared in the system turn, tool calls as
#: ``<tool_call>`` JSON, tool results as ``tool`` turns and reasoning as ``<think>`` blocks. An assistant turn's
#: reply, reasoning, calls and ``<|im_end|>`` are trained; the newline after ``<|im_end|>`` is not.
CHATML = """\
{%- set has_system = messages and messages[0].role == 'system' -%}
{%- if tools -%}
<|im_start|>system
{% if has_system %}{{ messages[0].content }}

{% endif %}# Tools

You may call functions. Their signatures, one JSON object a line:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>

To call one, write {"name": <function name>, "arguments": <arguments object>} inside <tool_call></tool_call>.<|im_end|>
{% elif has_system %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages -%}
{%- if message.role == 'assistant' -%}
<|im_start|>assistant
{% generation %}
{%- if message.reasoning_content %}<think>
{{ message.reasoning_content }}
</think>

{% endif -%}
{{ message.content }}
{%- for call in message.tool_calls or [] %}
{%- if message.content or not loop.first %}{{ '\n' }}{% endif -%}
<tool_call>
{"name": {{ call.function.name | tojson }}, "arguments": {{ call.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>{% endgeneration %}

{% elif not (loop.first and has_system) -%}
<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif -%}
"""

BUILTIN_TEMPLATES = {"chatml": CHATML}


def load_template(spec: str, special_tokens: Mapping[str, str] | None = None,
                  now: datetime = RENDER_DATE) -> JinjaChatTemplate:
    """A Jinja template from the ``chat_template`` setting: ``chatml`` or a path to a ``.jinja`` file (``harmony``
    is not Jinja: see `nemotron_assets.chat.harmony`)."""
    if spec in BUILTIN_TEMPLATES:
        return JinjaChatTemplate(BUILTIN_TEMPLATES[spec], spec, special_tokens, now)
    path = Path(spec).expanduser()
    if path.suffix != ".jinja":
        raise InputError(f"expected harmony, {', '.join(BUILTIN_TEMPLATES)} or a path to a .jinja file, got {spec!r}",
                         field=TEMPLATE_FIELD)
    try:
        source = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("chat template file does not exist", path=spec, field=TEMPLATE_FIELD) from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read the chat template: {error}", path=spec, field=TEMPLATE_FIELD) from None
    return JinjaChatTemplate(source, spec, special_tokens, now)


def end_of_turn_text(template: JinjaChatTemplate) -> str:
    """What the template writes after an assistant reply inside its trained span (``<|eot_id|>`` for Llama-3,
    ``<|im_end|>`` for ChatML): the text a truncated sample must still end with.

    Found by rendering a probe conversation; fails if the reply is not at the start of the trained span's tail."""
    probe = "Probe0reply"
    rendered = template.render([{"role": "user", "content": "Probe0question"}, {"role": "assistant", "content": probe}])
    for start, end in rendered.trained_spans:
        trained = rendered.text[start:end]
        at = trained.find(probe)
        if at >= 0 and trained[at + len(probe):]:
            return trained[at + len(probe):]
    raise InputError("cannot find the end-of-turn text: the trained text of a probe reply does not end with text "
                     "after the reply", path=template.name, field=TEMPLATE_FIELD)
