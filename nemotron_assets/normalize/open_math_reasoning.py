"""OpenMathReasoning (``nvidia/OpenMathReasoning``): splits ``cot``, ``tir``, ``genselect``, ``additional_problems``.

Columns (dataset card, https://huggingface.co/datasets/nvidia/OpenMathReasoning): ``problem``,
``generated_solution`` (``<think>...</think>`` then the answer), ``generation_model``, ``problem_type``
(``has_answer_extracted`` / ``no_answer_extracted`` / ``converted_proof``), ``expected_answer``,
``problem_source``, ``inference_mode`` (cot / tir / genselect), ``pass_rate_72b_tir`` (the Qwen2.5-Math-72B TIR
pass rate as a *string*: ``"0.3125"``, or ``"n/a"``), ``used_in_kaggle``.

- Kept: ``problem_type`` (``meta_problem_type``), ``expected_answer`` (``meta_expected_answer``),
  ``problem_source`` (``source_origin``), ``inference_mode`` (``meta_task``; the split name when absent),
  ``generation_model`` (``source_generators``).
- correctness = ``float(pass_rate_72b_tir)``; ``"n/a"`` or empty -> null; any other non-number is a `RowError`.
- TIR solutions run code inside the thought, written either as a ```` ```python ```` block or, after NeMo-Skills'
  preprocessing, as ``<tool_call>\\n...\\n</tool_call>``, each followed by a ```` ```output ```` block. Each
  becomes a call of NeMo-Skills' python tool ``stateful_python_code_exec`` (``{"code": ...}``) and its result, so
  the Harmony text uses the built-in python tool the way gpt-oss writes tool-integrated reasoning. A
  ``<tool_call>`` tag left anywhere after that is flagged ``tir_unparsed_tool_call`` (the row is invalid).
- ``additional_problems`` rows have no solution: skipped as ``no_solution``.
Assumption: the license is CC-BY-4.0 for the whole dataset (card); the rows have no license column.
"""

import math
import re
from typing import Any

from nemotron_assets.normalize.base import (
    NormalizedRow,
    RowError,
    Skipped,
    SourceFields,
    optional_text,
    require_text,
    text_list,
)
from nemotron_assets.normalize.canonical import assistant, split_think, tool_call, tool_result
from nemotron_assets.normalize.to_harmony import PYTHON_TOOL_NAMES

MAPPER_VERSION = 2
LICENSE = "cc-by-4.0"
PYTHON_TOOL = next(iter(PYTHON_TOOL_NAMES))
TIR_BLOCK = re.compile(
    r"(?:```python\n(?P<fenced>.*?)```|<tool_call>(?P<tagged>.*?)</tool_call>)(?:\s*```output\n(?P<output>.*?)```)?",
    re.DOTALL,
)
TOOL_CALL_TAG = re.compile(r"</?tool_call>")


def map_row(
    raw: dict[str, Any], split: str | None = None, fields: SourceFields = SourceFields()
) -> NormalizedRow | Skipped:
    problem = require_text(raw, "problem")
    solution = raw.get("generated_solution")
    if solution is None:
        return Skipped("no_solution")
    if not isinstance(solution, str):
        raise RowError("generated_solution", f"expected a string, got {type(solution).__name__}")
    mode = (optional_text(raw, "inference_mode") or split or "").lower() or None
    reasoning, answer = split_think(solution)
    turns = tir_turns(reasoning, answer) if mode == "tir" else [assistant(answer, reasoning)]
    row = NormalizedRow(
        messages=[{"role": "user", "content": problem}, *turns],
        meta_domain="math",
        meta_task=mode,
        meta_correctness=pass_rate(raw.get("pass_rate_72b_tir")),
        meta_expected_answer=optional_text(raw, "expected_answer"),
        meta_problem_type=optional_text(raw, "problem_type"),
        source_license=LICENSE,
        source_generators=text_list(raw.get("generation_model")),
        source_origin=optional_text(raw, "problem_source"),
        source_reasoning="on" if reasoning else "off",
    )
    for i, message in enumerate(row.messages):
        if message["role"] == "assistant" and _has_tool_call_tag(message):
            row.flag("tir_unparsed_tool_call", f"message {i}: a <tool_call> tag that is not a complete TIR call")
    return row


def _has_tool_call_tag(message: dict[str, Any]) -> bool:
    return any(TOOL_CALL_TAG.search(message.get(key, "")) for key in ("content", "reasoning_content"))


def pass_rate(value: Any) -> float | None:
    """``"0.25"`` -> 0.25; ``"n/a"``, null or anything that is not a number in [0, 1] -> None."""
    if value is None or isinstance(value, bool):
        return None
    try:
        rate = float(value)
    except (TypeError, ValueError):
        if isinstance(value, str) and value.strip().lower() in ("n/a", "na", "", "none"):
            return None
        raise RowError("pass_rate_72b_tir", f"not a number or 'n/a': {value!r}") from None
    return rate if math.isfinite(rate) and 0.0 <= rate <= 1.0 else None


def tir_turns(reasoning: str, answer: str) -> list[dict[str, Any]]:
    """Reasoning with code blocks and their outputs -> assistant turns calling the python tool, each followed by
    its result, then the last reasoning with the answer."""
    turns: list[dict[str, Any]] = []
    position = 0
    for number, match in enumerate(TIR_BLOCK.finditer(reasoning)):
        code = match["fenced"] if match["fenced"] is not None else match["tagged"]
        call_id = f"call_{number}"
        before = reasoning[position : match.start()].strip()
        turns.append(assistant("", before, [tool_call(call_id, PYTHON_TOOL, {"code": code.strip("\n")})]))
        if match["output"] is not None:
            turns.append(tool_result(match["output"].rstrip("\n"), call_id, PYTHON_TOOL))
        position = match.end()
    turns.append(assistant(answer, reasoning[position:].strip()))
    return turns
