"""OpenMathReasoning (``nvidia/OpenMathReasoning``): splits ``cot``, ``tir``, ``genselect``.

Fields (dataset card, https://huggingface.co/datasets/nvidia/OpenMathReasoning): ``problem``,
``generated_solution`` (``<think>...</think>`` then the answer; TIR solutions interleave ```` ```python ````
blocks with ```` ```output ```` blocks inside the thought), ``generation_model``, ``problem_type``,
``expected_answer``, ``problem_source``, ``inference_mode`` (cot / tir / genselect), ``pass_rate_72b_tir`` (the
Qwen2.5-Math-72B TIR pass rate as a *string*: ``"0.3125"``, or ``"n/a"`` when not measured).

- correctness = ``float(pass_rate_72b_tir)``; ``"n/a"``, empty or unparsable -> null (no correctness meta).
- in TIR solutions each code block and the output after it become a python call and result on the analysis
  channel, so the tool-integrated reasoning looks the way gpt-oss writes it.
Assumption: the license is CC-BY-4.0 for the whole dataset (card), the row has no license field.
"""

import math
import re
from typing import Any

from nemotron_assets.formats.harmony import Message
from nemotron_assets.normalize.base import NormalizedRow, RowError, optional_text, require_text
from nemotron_assets.normalize.chat import split_think

LICENSE = "cc-by-4.0"
CODE_AND_OUTPUT = re.compile(r"```python\n(.*?)```\s*(?:```output\n(.*?)```)?", re.DOTALL)


def map_row(raw: dict[str, Any], split: str | None = None) -> NormalizedRow:
    problem = require_text(raw, "problem")
    solution = require_text(raw, "generated_solution")
    mode = (optional_text(raw, "inference_mode") or split or "").lower() or None
    reasoning, answer = split_think(solution)
    thought = tir_messages(reasoning) if mode == "tir" else ([Message.analysis(reasoning)] if reasoning else [])
    return NormalizedRow(
        messages=[Message.user(problem), *thought, Message.final(answer)],
        python_tool=any(m.recipient == "python" for m in thought),
        meta_domain="math",
        meta_task=mode,
        meta_correctness=pass_rate(raw.get("pass_rate_72b_tir")),
        source_license=LICENSE,
        source_category=optional_text(raw, "problem_source"),
        source_generator=optional_text(raw, "generation_model"),
        source_reasoning="on" if reasoning else "off",
    )


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


def tir_messages(reasoning: str) -> list[Message]:
    """Reasoning with ```` ```python ```` / ```` ```output ```` blocks -> analysis, python call, python result, ..."""
    messages: list[Message] = []
    position = 0
    for match in CODE_AND_OUTPUT.finditer(reasoning):
        before = reasoning[position : match.start()].strip()
        if before:
            messages.append(Message.analysis(before))
        messages.append(Message.python_call(match.group(1).rstrip("\n")))
        if match.group(2) is not None:
            messages.append(Message.python_result(match.group(2).rstrip("\n")))
        position = match.end()
    rest = reasoning[position:].strip()
    if rest:
        messages.append(Message.analysis(rest))
    return messages
