"""What a family mapper returns, and the small readers every mapper shares.

A mapper turns one raw row into one of two things:

- a `NormalizedRow`: the conversation in canonical OpenAI form (``canonical.py``), the reasoning effort, and the
  metadata the pools filter on; `record.to_record` renders the Harmony text and the shard columns from it;
- `Skipped(reason)`: a readable row the family does not turn into a conversation (an OpenMathReasoning problem
  without a solution, a Llama-Nemotron RL prompt without an answer). The shard counts it as ``skipped:<reason>``.

A row the mapper cannot read at all (a required field missing or of the wrong type, an unknown role) raises
`RowError` naming the field; the shard then fails naming file, line and field, or with ``on_error: skip`` counts it
as ``unreadable:<field>``. Problems in a readable row never raise: they become quality flags (``record.py``).
"""

import re
from dataclasses import dataclass, field
from typing import Any

from nemotron_assets.formats.harmony import REASONING_EFFORTS
from nemotron_assets.sources.errors import InputError

DEFAULT_EFFORT = "medium"
#: Correctness at or above this is an easy problem (difficulty "low"); at or below `HARD_AT_MOST` a hard one. The same
#: numbers as the default high/low correctness pools (``defs/harmony/pools.py``).
EASY_AT_LEAST = 0.875
HARD_AT_MOST = 0.25
DIFFICULTY_BINS: tuple[str, ...] = ("low", "medium", "high")


class RowError(ValueError):
    """A raw row the family mapper cannot read: `field` names what is missing or invalid (``messages[3].role``)."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")

    def located(self, dataset: str | None = None, path: str | None = None, row: int | None = None) -> InputError:
        """The same error with the dataset, file and row the caller knows, as the project's `InputError`."""
        return InputError(self.reason, dataset=dataset, path=path, row=row, field=self.field)


@dataclass(frozen=True)
class Skipped:
    """A readable row that the family deliberately does not normalize; `reason` is a short countable code."""

    reason: str


@dataclass(frozen=True)
class SourceFields:
    """Which columns of a raw row hold the conversation: the blend entry's ``messages_field``, ``tools_field`` and
    ``text_field``. None means the family's own column (``messages``, ``tools``; Llama-Nemotron's ``input``)."""

    messages: str | None = None
    tools: str | None = None
    text: str = "text"

    def messages_or(self, default: str) -> str:
        return self.messages or default

    def tools_or(self, default: str) -> str:
        return self.tools or default


def note_flag(flags: list[str], reasons: list[str], code: str, reason: str | None = None) -> None:
    """Note `code` once in `flags` (and its reason, if it has one, in `reasons`)."""
    if code not in flags:
        flags.append(code)
    if reason is not None:
        reasons.append(reason)


@dataclass
class NormalizedRow:
    """What a family mapper knows about one raw row; `record.to_record` turns it into shard columns.

    `messages` and `tools` are the canonical conversation (``canonical.py``): system turns included, Harmony's
    fixed system/developer prelude not. `flags` are countable codes for what the mapper noticed or converted
    (``content_object_as_json``, ``metadata_not_json``); a few of them make the row invalid (`record.INVALID_FLAGS`),
    and `reasons` then says why in words.
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    reasoning_effort: str | None = None
    meta_domain: str | None = None
    meta_task: str | None = None
    meta_correctness: float | None = None
    meta_pass_k: int | None = None
    meta_correct_count: int | None = None
    meta_eval_best_setting: str | None = None
    meta_difficulty_bin: str | None = None
    meta_expected_answer: str | None = None
    meta_answer_changed_to_majority: bool | None = None
    meta_problem_type: str | None = None
    source_uuid: str | None = None
    source_license: str | None = None
    source_used_in: list[str] = field(default_factory=list)
    source_reasoning: str | None = None
    source_capability_target: str | None = None
    source_category: str | None = None
    source_generators: list[str] = field(default_factory=list)
    source_origin: str | None = None
    source_difficulty: str | None = None
    source_question_id: str | None = None
    source_ref_dataset: str | None = None
    source_ref_split: str | None = None
    source_ref_index: str | None = None
    flags: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def flag(self, code: str, reason: str | None = None) -> None:
        note_flag(self.flags, self.reasons, code, reason)


# --- small readers the mappers share --------------------------------------------------------------------------------


def require(raw: dict[str, Any], name: str) -> Any:
    """`raw[name]`, which must be present and not null."""
    value = raw.get(name)
    if value is None:
        raise RowError(name, "missing" if name not in raw else "is null")
    return value


def require_text(raw: dict[str, Any], name: str) -> str:
    """`raw[name]` as a string (empty allowed: an empty prompt is flagged as a placeholder, not refused)."""
    value = require(raw, name)
    if not isinstance(value, str):
        raise RowError(name, f"expected a string, got {type(value).__name__}")
    return value


def optional_text(raw: dict[str, Any], name: str) -> str | None:
    """`raw[name]` as text, None when absent or null; numbers (a Parquet ``index`` column) become their digits."""
    value = raw.get(name)
    return None if value is None else str(value)


def text_list(value: Any) -> list[str]:
    """A list of names: a JSON list (``["nano_v3"]``) or one comma-separated string (``"Ultra, Super"``)."""
    if isinstance(value, list):
        return [str(item).strip() for item in value if item is not None and str(item).strip()]
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return []


def used_in(raw: dict[str, Any], *names: str) -> list[str]:
    """The ``used_in`` provenance from the first of `names` that holds any (a list or a comma-separated string)."""
    for name in names or ("used_in",):
        values = text_list(raw.get(name))
        if values:
            return values
    return []


def effort_from_split(split: str | None) -> str | None:
    """``high_part00`` / ``medium`` / ``low`` -> the reasoning effort the split was generated with."""
    if not split:
        return None
    head = re.split(r"[_.\-]", split.lower(), maxsplit=1)[0]
    return head if head in REASONING_EFFORTS else None


def effort_for_reasoning(reasoning: str | None) -> str | None:
    """Reasoning ``off`` rows have no chain of thought, which Harmony writes as the lowest effort; ``on`` (or
    unknown) keeps the default. Harmony has no "off", so `source_reasoning` keeps the original switch."""
    return "low" if (reasoning or "").strip().lower() == "off" else None


def difficulty_from_correctness(correctness: float | None) -> str | None:
    """A problem most samples solve is easy (``low``), one few solve is hard (``high``); thresholds match the
    high/low correctness pools (defs/harmony/pools.py)."""
    if correctness is None:
        return None
    if correctness >= EASY_AT_LEAST:
        return "low"
    if correctness <= HARD_AT_MOST:
        return "high"
    return "medium"
