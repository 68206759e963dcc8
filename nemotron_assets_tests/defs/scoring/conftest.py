"""The scoring tests' fixtures: the tiny random Llama of tiny_llama.py, built once per session, and the same model
and tokenizer loaded by transformers alone for the direct computations."""

from pathlib import Path

import pytest

from nemotron_assets_tests.defs.scoring.tiny_llama import build_tiny_llama


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny_llama") / "model")


@pytest.fixture(scope="session")
def reference_model(tiny_llama):
    """The tiny model loaded by transformers alone, fp32, for the direct computations."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_llama).eval()


@pytest.fixture(scope="session")
def reference_tokenizer(tiny_llama):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_llama)
