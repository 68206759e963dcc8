"""What says a samples file is up to date with its tokenizer (defs/sft/inputs.py ``tokenizer_identity``): a
tokenizer.json is known by its content's sha256, so any edit of the file, and nothing else, changes the identity
every SFT receipt records."""

import hashlib
from pathlib import Path

from tokenizers import Tokenizer

from nemotron_assets.defs.sft.inputs import tokenizer_identity
from nemotron_assets_tests.tokenize.builders import small_tokenizer


def test_a_tokenizer_json_is_known_by_its_content(tmp_path):
    path = Path(small_tokenizer(tmp_path))
    first = tokenizer_identity(str(path), None)
    assert first["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert tokenizer_identity(str(path), None) == first

    edited = Tokenizer.from_file(str(path))
    edited.add_special_tokens(["<|extra|>"])  # one more token: other ids for the same text
    edited.save(str(path))
    second = tokenizer_identity(str(path), None)
    assert second["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest() != first["sha256"]
    assert second != first
