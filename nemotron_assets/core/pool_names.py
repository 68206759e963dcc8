"""The candidate pools' names, in their fixed order (partition keys of ``candidate_pool``).

Their own module, free of polars, because the blend validates ``sft.from`` and ``scoring.pools`` against them
when it loads; the predicates are in ``pools.py``.
"""

POOL_NAMES = (
    "high_correctness", "mid_correctness", "low_correctness", "has_correctness_meta", "missing_correctness_meta",
    "math_high_verified_correct", "tool_use", "proof", "reasoning_on", "reasoning_off", "capability_chat",
    "capability_structured_outputs", "long_context",
)
