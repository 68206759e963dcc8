"""The token-id scan of the shard checks finds numpy's maximum whatever sizes the stream's reads come in.

S3 streams may return fewer bytes than asked, splitting a token across two reads; the stream below does
exactly that on purpose, with read sizes drawn by hypothesis. The local-disk and S3 paths of the same scan
run in the asset-check and S3 tests.
"""

import io
from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nemotron_assets.defs.pretrain import checks as shard_checks
from nemotron_assets.formats.megatron import DType


class ShortReads(io.RawIOBase):
    """A byte stream whose readinto returns at most the next of ``sizes`` bytes (cycling)."""

    def __init__(self, data: bytes, sizes: list[int]):
        self.data, self.sizes, self.position, self.calls = data, sizes, 0, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        size = min(len(buffer), self.sizes[self.calls % len(self.sizes)], len(self.data) - self.position)
        self.calls += 1
        buffer[:size] = self.data[self.position:self.position + size]
        self.position += size
        return size


class OneFileStore:
    def __init__(self, stream: ShortReads):
        self.stream = stream

    def open(self, relative: str) -> ShortReads:
        return self.stream


@settings(max_examples=200, deadline=None)
@given(dtype=st.sampled_from([DType.uint16, DType.int32]),
       tokens=st.lists(st.integers(0, 65_535), max_size=600),
       sizes=st.lists(st.integers(1, 97), min_size=1, max_size=8),
       scan_bytes=st.sampled_from([8, 12, 64, 4096]))
def test_scan_finds_the_maximum_across_split_reads(dtype, tokens, sizes, scan_bytes):
    values = np.array(tokens, dtype=dtype.numpy)
    # small blocks: many refills, tokens split at every possible offset
    found = shard_checks.max_token_id(OneFileStore(ShortReads(values.tobytes(), sizes)), "x.bin",
                                SimpleNamespace(dtype=dtype), block_bytes=scan_bytes)
    assert found == (int(values.max()) if values.size else None)
