"""Ids become the dataset dtype exactly, or the cast is refused: values outside the dtype are never wrapped.
Expected bytes are packed with ``struct`` from the Python integers."""

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemotron_assets.formats.megatron import DType, FormatError, to_token_dtype

SOURCES = ["<u2", "<u4", "<i4", "<i8", "<u8"]
LIMITS = {"<u2": (0, 2**16 - 1), "<u4": (0, 2**32 - 1), "<i4": (-(2**31), 2**31 - 1), "<i8": (-(2**40), 2**40),
          "<u8": (0, 2**40)}
PACK = {DType.uint16: "<H", DType.int32: "<i"}


@st.composite
def id_arrays(draw):
    source = draw(st.sampled_from(SOURCES))
    low, high = LIMITS[source]
    values = draw(st.lists(st.one_of(st.integers(0, min(high, 200_000)), st.integers(low, high)), max_size=40))
    return source, values


@settings(max_examples=300, deadline=None)
@given(case=id_arrays(), dtype=st.sampled_from([DType.uint16, DType.int32]))
def test_cast_is_exact_or_refused(case, dtype):
    source, values = case
    fits = all(0 <= v <= (2**16 - 1 if dtype == DType.uint16 else 2**31 - 1) for v in values)
    ids = np.array(values, dtype=source)
    if not fits:
        with pytest.raises(FormatError, match=f"does not fit dtype {dtype.name}"):
            to_token_dtype(ids, dtype)
        return
    cast = to_token_dtype(ids, dtype)
    assert cast.dtype == np.dtype(PACK[dtype])
    assert cast.tobytes() == b"".join(struct.pack(PACK[dtype], v) for v in values)


def test_same_width_ids_are_reinterpreted_not_copied():
    ids = np.array([0, 7, 128_255, 2**31 - 1], dtype="<u4")  # fastokens' uint32
    cast = to_token_dtype(ids, DType.int32)
    assert np.shares_memory(cast, ids)
    assert cast.tolist() == [0, 7, 128_255, 2**31 - 1]
    with pytest.raises(FormatError, match="token id 2147483648 does not fit dtype int32"):
        to_token_dtype(np.array([5, 2**31], dtype="<u4"), DType.int32)
