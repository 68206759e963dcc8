"""Nemotron-Competitive-Programming (``nvidia/Nemotron-Competitive-Programming-v1``): code solutions with reasoning.

Columns: the ``competitive_coding_*`` splits have ``uuid``, ``messages`` (assistant ``reasoning_content``; the
system instructions sit inside the user message), ``license``, ``used_in``, ``tools``, and the provenance of the
problem: ``dataset``, ``split``, ``index`` (the row of the original dataset, as strings, e.g. ``"10493"``),
``source`` (the judge), ``difficulty`` (a string) and ``question_id``. The ``infinibyte`` splits have only the first
five columns. Some user prompts are the placeholder ``"-"``: the problem statement was redacted, and ``dataset`` /
``split`` / ``index`` say where it is (kept as ``source_ref_*``; the row is flagged ``placeholder_prompt``).

Kept: ``difficulty`` as written (``source_difficulty``) and binned (``meta_difficulty_bin``), ``source``
(``source_origin``), ``question_id`` (``source_question_id``). The split becomes `meta_task`.

Difficulty bins. The problems come from TACO, APPS, CodeContests and Codeforces, each with its own scale, so
`difficulty_bin` reads each scale on its own terms (matching is case-insensitive):

==========================================  ======  ==========================================================
value                                       bin     scale
==========================================  ======  ==========================================================
``EASY``, ``introductory``                  low     TACO names, APPS levels
``MEDIUM``, ``MEDIUM_HARD``, ``interview``  medium
``HARD``, ``VERY_HARD``, ``competition``    high
``HARDER``, ``HARDEST``                     high    CodeContests ``Difficulty`` names
``"1"`` / ``"2"`` / ``"3"``-``"5"``         low / medium / high   CodeContests ``Difficulty`` codes EASY .. HARDEST
``"7"``, ``"8"``                            low     CodeContests codes of problem letters A, B
``"9"``, ``"10"``                           medium  letters C, D
``"11"``-``"29"``                           high    letters E .. V (later problems of a round are harder)
``"800"``-``"1399"``                        low     Codeforces ratings
``"1400"``-``"1999"``                       medium
``"2000"`` and above                        high
``"0"``, ``"6"``, ``"-"``, ``""``, null,    null    unknown / external (CodeContests 0 = UNKNOWN_DIFFICULTY,
``UNKNOWN_DIFFICULTY``, ``EXTERNAL``                6 = EXTERNAL)
==========================================  ======  ==========================================================

Any other value (``"30"``-``"799"``, an unknown name) gets no bin and the flag ``difficulty_unrecognized``.
"""

from typing import Any

from nemotron_assets.normalize.base import NormalizedRow, SourceFields, optional_text
from nemotron_assets.normalize.chat import chat_row

MAPPER_VERSION = 2

NAMED_BINS = {
    "easy": "low", "introductory": "low",
    "medium": "medium", "medium_hard": "medium", "interview": "medium",
    "hard": "high", "very_hard": "high", "competition": "high", "harder": "high", "hardest": "high",
}
UNKNOWN = frozenset({"", "-", "unknown", "unknown_difficulty", "external", "0", "6"})
CODE_CONTESTS_BINS = {1: "low", 2: "medium", 3: "high", 4: "high", 5: "high", 7: "low", 8: "low", 9: "medium",
                      10: "medium"}  # and 11..29 (letters E..V): high
LAST_CODE_CONTESTS_CODE = 29
RATING_LOW_BELOW, RATING_HIGH_FROM, RATING_MIN = 1400, 2000, 800


def map_row(raw: dict[str, Any], split: str | None = None, fields: SourceFields = SourceFields()) -> NormalizedRow:
    row = chat_row(raw, fields, domain="code", task=split or "competitive_programming")
    row.source_difficulty = optional_text(raw, "difficulty")
    row.meta_difficulty_bin, recognized = difficulty_bin(row.source_difficulty)
    if not recognized:
        row.flag("difficulty_unrecognized")
    row.source_origin = optional_text(raw, "source")
    row.source_question_id = optional_text(raw, "question_id")
    row.source_ref_dataset = optional_text(raw, "dataset")
    row.source_ref_split = optional_text(raw, "split")
    row.source_ref_index = optional_text(raw, "index")
    return row


def difficulty_bin(label: str | None) -> tuple[str | None, bool]:
    """The bin of a source difficulty label (see the table above) and whether the label was recognized."""
    if label is None:
        return None, True
    value = label.strip().lower()
    if value in UNKNOWN:
        return None, True
    if value in NAMED_BINS:
        return NAMED_BINS[value], True
    if not value.isascii() or not value.isdigit():
        return None, False
    number = int(value)
    if number in CODE_CONTESTS_BINS:
        return CODE_CONTESTS_BINS[number], True
    if 11 <= number <= LAST_CODE_CONTESTS_CODE:
        return "high", True
    if number >= RATING_MIN:
        return ("low" if number < RATING_LOW_BELOW else "medium" if number < RATING_HIGH_FROM else "high"), True
    return None, False
