"""Megatron-Bridge's ways of loading packed SFT, written out independently of the code under test (Bridge cannot be
imported here: its package import pulls GPU-only libraries). A packed ``.npy``: a plain ``np.load`` must refuse it
(an object array), then a restricted unpickler that allows only Bridge's globals reads it. Packed Parquet given as a
folder: the files it resolves to, their columns and each row's invariants. Used by the packed-SFT writer tests, the
SFT step tests and the tests that point trainers at the output folders."""

import glob
import io
import os
import pickle
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

SAFE_GLOBALS = {  # Megatron-Bridge's rules for packed .npy files (utils/safe_pickle.py _NumpyRestrictedUnpickler)
    "builtins": {"list", "dict", "tuple", "set", "frozenset", "bytes", "bytearray", "str", "int", "float", "bool",
                 "complex", "slice", "range", "NoneType"},
    "collections": {"OrderedDict"},
    "numpy": {"ndarray", "dtype"},
    "numpy.core.multiarray": {"_reconstruct", "scalar"},
    "numpy._core.multiarray": {"_reconstruct", "scalar"},
    "_codecs": {"encode"},
}


class RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if name in SAFE_GLOBALS.get(module, ()):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refused {module}.{name}")


def load_like_bridge(data: bytes) -> np.ndarray:
    """Bridge's two steps: a plain np.load must refuse it (object array), then the restricted unpickler."""
    with pytest.raises(ValueError):
        np.load(io.BytesIO(data), allow_pickle=False)
    buffer = io.BytesIO(data)
    version = np.lib.format.read_magic(buffer)
    (np.lib.format.read_array_header_1_0 if version[0] == 1 else np.lib.format.read_array_header_2_0)(buffer)
    return np.asarray(RestrictedUnpickler(buffer).load(), dtype=object)


# --- packed Parquet: GPTSFTPackedParquetDataset (src/megatron/bridge/data/packing/parquet.py, paths.py) -----------
PACKED_COLUMNS = {"input_ids", "loss_mask", "seq_start_id"}


def resolve_like_bridge(spec: Path) -> list[Path]:
    """Bridge's ``_resolve_parquet_paths`` for a folder: every ``*.parquet`` and ``*.pq`` directly in it, found by
    ``glob`` (whose ``*`` skips names starting with a dot), sorted; none is an error."""
    found = sorted({*glob.glob(os.path.join(spec, "*.parquet")), *glob.glob(os.path.join(spec, "*.pq"))})
    if not found:
        raise ValueError(f"No Parquet files found in directory: {spec}")
    return [Path(path) for path in found]


def read_packed_like_bridge(spec: Path) -> list[dict]:
    """Every row of the packed Parquet files a folder resolves to, as Bridge loads and checks them: each file's
    schema must hold the three columns (its ``_load_dataset``), the whole must not be empty, and each row must hold
    ``validate_row``'s invariants: the mask as long as the ids, ``seq_start_id`` not empty and starting at 0, each
    start below the row's length and none below the one before."""
    rows = []
    for path in resolve_like_bridge(spec):
        missing = PACKED_COLUMNS - set(pq.read_schema(path).names)
        if missing:
            raise ValueError(f"Packed Parquet file '{path}' is missing required columns: {missing}")
        rows += pq.read_table(path, columns=sorted(PACKED_COLUMNS)).to_pylist()
    if not rows:
        raise ValueError(f"Packed Parquet dataset is empty (0 rows) for path: {spec}")
    for index, row in enumerate(rows):
        ids, mask, starts = row["input_ids"], row["loss_mask"], row["seq_start_id"]
        if len(mask) != len(ids):
            raise ValueError(f"Row {index}: loss_mask length ({len(mask)}) != input_ids length ({len(ids)})")
        if not starts or starts[0] != 0:
            raise ValueError(f"Row {index}: seq_start_id must start with 0")
        for at, start in enumerate(starts):
            if start >= len(ids) or (at and start < starts[at - 1]):
                raise ValueError(f"Row {index}: seq_start_id[{at}]={start} is out of order or past the row")
    return rows
