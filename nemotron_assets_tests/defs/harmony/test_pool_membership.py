"""Candidate pools (defs/harmony/pools.py): exact membership, both directions, for all 13 pools.

Each row of the table below says by hand which pools it belongs to; a pool must select exactly those rows (a row
it misses and a row it wrongly takes both fail). Boundary values sit on the thresholds (0.875, 0.25, 8192 tokens)
and next to them, and nulls are included.
"""

import polars as pl
import pytest

from nemotron_assets.defs.harmony.pools import POOL_NAMES, PoolThresholds, pool_predicate

DEFAULTS = {
    "quality_valid_harmony": True, "quality_completion_nonempty": True, "quality_valid_tool_schema": True,
    "quality_is_duplicate": False, "quality_placeholder_prompt": False, "meta_correctness": None,
    "meta_domain": "chat", "meta_correct_count": None, "quality_has_tool": False, "source_reasoning": None,
    "source_capability_target": None, "stats_approx_tokens": 100,
}
#: Would be in nearly every pool, if the base filter let it.
EVERYTHING = {"meta_correctness": 1.0, "meta_domain": "math", "meta_correct_count": 3, "quality_has_tool": True,
              "source_reasoning": "on", "source_capability_target": "chat", "stats_approx_tokens": 9000}

HIGH, MID, LOW, HAS, MISSING = "high_correctness", "mid_correctness", "low_correctness", "has_correctness_meta", \
    "missing_correctness_meta"
VERIFIED = "math_high_verified_correct"

# (id, columns that differ from DEFAULTS, pools it belongs to with the default thresholds)
TABLE = [
    ("c1.0_math_cc3", {"meta_correctness": 1.0, "meta_domain": "math", "meta_correct_count": 3}, {HIGH, HAS, VERIFIED}),
    ("c0.875_math_cc1", {"meta_correctness": 0.875, "meta_domain": "math", "meta_correct_count": 1},
     {HIGH, HAS, VERIFIED}),
    ("c0.875_math_cc0", {"meta_correctness": 0.875, "meta_domain": "math", "meta_correct_count": 0}, {HIGH, HAS}),
    ("c0.9_math_ccnull", {"meta_correctness": 0.9, "meta_domain": "math"}, {HIGH, HAS}),
    ("c0.9_chat_cc5", {"meta_correctness": 0.9, "meta_correct_count": 5}, {HIGH, HAS}),
    ("c0.8749", {"meta_correctness": 0.8749}, {MID, HAS}),
    ("c0.5_math_cc4", {"meta_correctness": 0.5, "meta_domain": "math", "meta_correct_count": 4}, {MID, HAS}),
    ("c0.2501", {"meta_correctness": 0.2501}, {MID, HAS}),
    ("c0.25", {"meta_correctness": 0.25}, {LOW, HAS}),
    ("c0.0", {"meta_correctness": 0.0}, {LOW, HAS}),
    ("c_null", {}, {MISSING}),
    ("tool", {"quality_has_tool": True}, {"tool_use", MISSING}),
    ("proof", {"meta_domain": "math_proof"}, {"proof", MISSING}),
    ("reasoning_on", {"source_reasoning": "on"}, {"reasoning_on", MISSING}),
    ("reasoning_off", {"source_reasoning": "off"}, {"reasoning_off", MISSING}),
    ("capability_chat", {"source_capability_target": "chat"}, {"capability_chat", MISSING}),
    ("capability_so", {"source_capability_target": "structured_outputs"}, {"capability_structured_outputs", MISSING}),
    ("tokens_8191", {"stats_approx_tokens": 8191}, {MISSING}),
    ("tokens_8192", {"stats_approx_tokens": 8192}, {"long_context", MISSING}),
    ("invalid_harmony", EVERYTHING | {"quality_valid_harmony": False}, set()),
    ("empty_completion", EVERYTHING | {"quality_completion_nonempty": False}, set()),
    ("bad_tool_schema", EVERYTHING | {"quality_valid_tool_schema": False}, set()),
    ("duplicate", EVERYTHING | {"quality_is_duplicate": True}, set()),
    ("placeholder", EVERYTHING | {"quality_placeholder_prompt": True}, set()),
]
PLACEHOLDER_POOLS = {HIGH, HAS, VERIFIED, "tool_use", "reasoning_on", "capability_chat", "long_context"}

ROWS = pl.DataFrame(
    [{"id": row_id, **DEFAULTS, **columns} for row_id, columns, _ in TABLE],
    schema={"id": pl.String, "quality_valid_harmony": pl.Boolean, "quality_completion_nonempty": pl.Boolean,
            "quality_valid_tool_schema": pl.Boolean, "quality_is_duplicate": pl.Boolean,
            "quality_placeholder_prompt": pl.Boolean, "meta_correctness": pl.Float64, "meta_domain": pl.String,
            "meta_correct_count": pl.Int64, "quality_has_tool": pl.Boolean, "source_reasoning": pl.String,
            "source_capability_target": pl.String, "stats_approx_tokens": pl.Int64},
)


def members(pool: str, thresholds: PoolThresholds = PoolThresholds()) -> set[str]:
    return set(ROWS.lazy().filter(pool_predicate(pool, thresholds)).select("id").collect()["id"])


@pytest.mark.parametrize("pool", POOL_NAMES)
def test_pool_holds_exactly_its_rows(pool):
    assert members(pool) == {row_id for row_id, _, pools in TABLE if pool in pools}


def test_the_table_covers_every_pool():
    assert set().union(*(pools for _, _, pools in TABLE)) == set(POOL_NAMES) and len(POOL_NAMES) == 13


@pytest.mark.parametrize("pool", POOL_NAMES)
def test_placeholder_prompts_enter_the_pools_only_when_asked(pool):
    expected = {row_id for row_id, _, pools in TABLE if pool in pools} | ({"placeholder"} if pool in PLACEHOLDER_POOLS
                                                                          else set())
    assert members(pool, PoolThresholds(include_placeholder_prompts=True)) == expected


def test_thresholds_are_configuration():
    strict = PoolThresholds(high_correctness=0.9, low_correctness=0.1, long_context_tokens=8191)
    assert members(HIGH, strict) == {"c1.0_math_cc3", "c0.9_math_ccnull", "c0.9_chat_cc5"}
    assert members(LOW, strict) == {"c0.0"}
    assert members(MID, strict) == {"c0.875_math_cc1", "c0.875_math_cc0", "c0.8749", "c0.5_math_cc4", "c0.2501",
                                    "c0.25"}
    assert members("long_context", strict) == {"tokens_8191", "tokens_8192"}


def test_unknown_pool_is_refused_naming_the_pools():
    with pytest.raises(KeyError, match="high_correctness"):
        pool_predicate("best_rows")
