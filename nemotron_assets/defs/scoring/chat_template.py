"""Find a model folder's own chat template where ``transformers`` (5.23) looks for it.

A tokenizer loaded with ``AutoTokenizer.from_pretrained(folder)`` gets its template from, in this order:

1. template *files*: ``chat_template.jinja`` (the template named ``default``) and
   ``additional_chat_templates/<name>.jinja``; if any exists, the tokenizer config's entry is ignored;
2. otherwise ``chat_template`` in ``tokenizer_config.json``: a string, or a list of ``{"name", "template"}``.

One template is the template. Several are picked by name per conversation: ``tool_use`` when the conversation has
tools and such a template exists, else ``default``; with neither, transformers refuses, and so do we.

A *Harmony tokenizer* (gpt-oss: ``<|start|>``, ``<|channel|>``, ``<|message|>``, ... among its added tokens) is
rendered with Harmony, not with its Jinja template (see `ChatTemplates.harmony`).
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

from nemotron_assets.sources.errors import InputError

CHAT_TEMPLATE_FILE = "chat_template.jinja"
CHAT_TEMPLATE_DIR = "additional_chat_templates"
TOKENIZER_CONFIG = "tokenizer_config.json"
DEFAULT, TOOL_USE = "default", "tool_use"
#: Added tokens that make a tokenizer a Harmony tokenizer (o200k_harmony, the gpt-oss tokenizer).
HARMONY_TOKENS = frozenset({"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>"})
FIELD = "scoring.model"


@dataclass(frozen=True)
class Template:
    """One Jinja template and where it was read (a file, or ``tokenizer_config.json:chat_template[name]``)."""

    name: str
    source: str
    where: str


@dataclass(frozen=True)
class ChatTemplates:
    """A model folder's templates by name, or ``harmony=True`` for a Harmony tokenizer."""

    folder: Path
    templates: dict[str, Template] = field(default_factory=dict)
    harmony: bool = False

    def select(self, has_tools: bool) -> Template:
        """The template transformers' ``apply_chat_template`` would use for a conversation with or without tools."""
        if self.harmony:
            raise ValueError("a Harmony tokenizer is rendered with Harmony, not with a Jinja template")
        if len(self.templates) == 1 and DEFAULT in self.templates:
            return self.templates[DEFAULT]
        if has_tools and TOOL_USE in self.templates:
            return self.templates[TOOL_USE]
        if DEFAULT in self.templates:
            return self.templates[DEFAULT]
        raise InputError(f"the model has several chat templates ({', '.join(sorted(self.templates))}) and none is "
                         f"named {DEFAULT!r}", path=str(self.folder), field=FIELD)


def find_chat_templates(folder: Path) -> ChatTemplates:
    """The folder's chat templates (see the module docstring); `InputError` if it has none."""
    if is_harmony_tokenizer(folder):
        return ChatTemplates(folder, harmony=True)
    templates = _template_files(folder) or _config_templates(folder)
    if not templates:
        raise InputError(f"the model has no chat template (no {CHAT_TEMPLATE_FILE}, no {CHAT_TEMPLATE_DIR}/*.jinja, "
                         f"no chat_template in {TOKENIZER_CONFIG})", path=str(folder), field=FIELD)
    return ChatTemplates(folder, templates)


def is_harmony_tokenizer(folder: Path) -> bool:
    """Whether the folder's ``tokenizer.json`` declares every Harmony special token."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        return False
    added = {token.get("content") for token in _read_json(path).get("added_tokens") or []}
    return HARMONY_TOKENS <= added


def _template_files(folder: Path) -> dict[str, Template]:
    templates = {}
    default = folder / CHAT_TEMPLATE_FILE
    if default.is_file():
        templates[DEFAULT] = Template(DEFAULT, _read_text(default), str(default))
    extra = folder / CHAT_TEMPLATE_DIR
    if extra.is_dir():
        for path in sorted(extra.glob("*.jinja")):
            name = path.name.removesuffix(".jinja")
            templates[name] = Template(name, _read_text(path), str(path))
    return templates


def _config_templates(folder: Path) -> dict[str, Template]:
    path = folder / TOKENIZER_CONFIG
    if not path.is_file():
        return {}
    value = _read_json(path).get("chat_template")
    where = f"{path}:chat_template"
    if value is None:
        return {}
    if isinstance(value, str):
        return {DEFAULT: Template(DEFAULT, value, where)}
    if isinstance(value, list) and all(isinstance(t, dict) and isinstance(t.get("name"), str)
                                       and isinstance(t.get("template"), str) for t in value):
        return {t["name"]: Template(t["name"], t["template"], f"{where}[{t['name']}]") for t in value}
    raise InputError("chat_template must be a string or a list of {name, template} objects", path=str(path),
                     field="chat_template")


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read the chat template: {error}", path=str(path), field=FIELD) from None


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"not valid JSON: {error}", path=str(path), field=FIELD) from None
    if not isinstance(value, dict):
        raise InputError("expected a JSON object", path=str(path), field=FIELD)
    return value
