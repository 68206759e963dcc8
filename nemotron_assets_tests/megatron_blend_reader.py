"""Megatron's own rules for reading a per-split blend file, written out independently of our code.

Megatron-LM (``megatron/training/utils/common_utils.py`` ``get_blend_and_blend_per_split`` with
``--per-split-data-args-path``) and Megatron-Bridge do, in this order:

1. ``json.load`` the file;
2. for each of ``"train"``, ``"valid"``, ``"test"``: index the dict (a missing key is a ``KeyError``); a string
   value is split on whitespace;
3. ``get_blend_from_list(value)`` (``megatron/core/datasets/utils.py``): ``None`` -> no dataset for that split;
   an odd-length list -> prefixes without weights; an even-length list -> ``zip(*pairs)`` of (weight, prefix),
   which raises ``ValueError`` on an empty list; weights are ``float(...)``, and if any is not a number, all of
   them must not be (then the whole list is prefixes).
"""

import json
from pathlib import Path


def read_blend_per_split(path: Path) -> list[tuple[list[str], list[float] | None] | None]:
    with open(path) as f:
        per_split = json.load(f)
    for split in ("train", "valid", "test"):
        if isinstance(per_split[split], str):
            per_split[split] = per_split[split].split()
    return [blend_from_list(per_split["train"]), blend_from_list(per_split["valid"]),
            blend_from_list(per_split["test"])]


def blend_from_list(blend: list[str] | None) -> tuple[list[str], list[float] | None] | None:
    if blend is None:
        return None
    if len(blend) % 2 == 1:
        return list(blend), None
    raw_weights, prefixes = zip(*[(blend[i], blend[i + 1]) for i in range(0, len(blend), 2)])
    weights = []
    for raw in raw_weights:
        try:
            weights.append(float(raw))
        except ValueError:
            weights.append(None)
    if any(w is None for w in weights):
        assert all(w is None for w in weights)
        return list(blend), None
    return list(prefixes), weights
