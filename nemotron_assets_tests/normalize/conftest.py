"""The openai-harmony reference encoding for the normalize tests (the same fixture as the format tests)."""

from nemotron_assets_tests.formats.conftest import harmony_encoding  # noqa: F401 (a pytest fixture)
