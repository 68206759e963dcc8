"""The openai-harmony reference encoding as a fixture (nemotron_assets_tests/harmony_reference.py)."""

import pytest

from nemotron_assets_tests.harmony_reference import harmony_encoding as load_reference


@pytest.fixture(scope="session")
def harmony_encoding():
    return load_reference()
