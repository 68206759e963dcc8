"""Hypothesis strategies for JSON values as rows hold them: what ``json`` writes and reads back but stricter parsers
refuse (NaN and the infinities, integers past 64 bits, text with lone surrogates), keys in any order."""

from hypothesis import strategies as st

#: Short text, or short text and a lone surrogate (Hypothesis's text has none).
SURROGATE_TEXT = st.text(max_size=4) | st.builds(lambda text, surrogate: text + surrogate, st.text(max_size=3),
                                                 st.sampled_from(["\ud800", "\udfff"]))


def json_values(max_leaves: int) -> st.SearchStrategy:
    """Nested lists and objects of null, booleans, floats of any size, integers past 64 bits and `SURROGATE_TEXT`."""
    return st.recursive(
        st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | SURROGATE_TEXT,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
        max_leaves=max_leaves,
    )
