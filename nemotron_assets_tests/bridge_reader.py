"""Megatron-Bridge's way of loading a packed SFT .npy, written out independently of the code under test: a plain
``np.load`` must refuse it (an object array), then a restricted unpickler that allows only Bridge's globals reads it.
Used by the packed-SFT writer tests and the SFT step tests."""

import io
import pickle

import numpy as np
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
