"""Holdout splits and repeat weights (nemotron_assets/formats/splits.py): golden hashes worked out with hashlib here,
stability across processes, and the properties the issue asks for (same prompt -> same split, fractions, repeats)."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nemotron_assets.formats.splits import (
    Holdout,
    assign_split,
    first_user_text,
    holdout_split,
    repeat_count,
    split_key,
)

REPO = Path(__file__).resolve().parents[2]


def fraction_of(text: str) -> float:
    """The spec's 64-bit fraction, computed independently: sha256, first 8 bytes, big-endian, / 2**64."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") / 2**64


def test_golden_split_of_a_prompt():
    # sha256("42\x00What is 2+2?") starts with e0365737cec57fe7: the fraction is 0.8758...
    digest = hashlib.sha256(b"42\x00What is 2+2?").hexdigest()
    assert digest.startswith("e0365737cec57fe7")
    assert 0.8758 < fraction_of("42\x00What is 2+2?") < 0.8759
    assert holdout_split("What is 2+2?", Holdout(valid=0.01, test=0.01, seed=42)) == "train"
    assert holdout_split("What is 2+2?", Holdout(valid=0.9, test=0.0, seed=42)) == "valid"
    assert holdout_split("What is 2+2?", Holdout(valid=0.5, test=0.4, seed=42)) == "test"  # 0.5 <= 0.8758 < 0.9
    assert holdout_split("What is 2+2?", Holdout(valid=0.5, test=0.375, seed=42)) == "train"  # 0.8758 >= 0.875


def test_the_seed_changes_the_split():
    # sha256("7\x00What is 2+2?") starts with 34745df36e9615ea: fraction 0.2049...
    assert hashlib.sha256(b"7\x00What is 2+2?").hexdigest().startswith("34745df36e9615ea")
    assert holdout_split("What is 2+2?", Holdout(valid=0.25, test=0.0, seed=7)) == "valid"
    assert holdout_split("What is 2+2?", Holdout(valid=0.25, test=0.0, seed=42)) == "train"


def test_half_valid_is_exactly_the_keys_whose_hash_starts_with_a_zero_bit():
    holdout = Holdout(valid=0.5, test=0.0, seed=3)
    for i in range(500):
        key = f"prompt {i}"
        first_byte = hashlib.sha256(f"3\x00{key}".encode()).digest()[0]
        assert holdout_split(key, holdout) == ("valid" if first_byte < 0x80 else "train")


def test_fractions_are_what_the_holdout_asks_for():
    holdout = Holdout(valid=0.1, test=0.05, seed=42)
    splits = [holdout_split(f"problem number {i}", holdout) for i in range(20_000)]
    assert 0.09 < splits.count("valid") / len(splits) < 0.11
    assert 0.04 < splits.count("test") / len(splits) < 0.06


def test_all_or_nothing_fractions():
    keys = [f"k{i}" for i in range(200)]
    assert {holdout_split(k, Holdout(valid=1.0, seed=1)) for k in keys} == {"valid"}
    assert {holdout_split(k, Holdout(test=1.0, seed=1)) for k in keys} == {"test"}
    assert {holdout_split(k, Holdout(seed=1)) for k in keys} == {"train"}


@given(prompt=st.text(), answers=st.lists(st.text(), min_size=2, max_size=5), seed=st.integers(0, 2**32))
def test_every_solution_of_one_problem_lands_in_the_same_split(prompt, answers, seed):
    holdout = Holdout(valid=0.3, test=0.3, seed=seed)
    conversations = [[{"role": "system", "content": "be brief"}, {"role": "user", "content": prompt},
                      {"role": "assistant", "content": answer}] for answer in answers]
    splits = {assign_split(split_key(messages), holdout) for messages in conversations}
    assert len(splits) == 1


def test_the_split_key_is_the_first_user_message():
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "first"},
                {"role": "assistant", "content": "a"}, {"role": "user", "content": "second"}]
    assert split_key(messages) == "first"
    # content that is not a string is keyed by its canonical JSON (sorted keys, no spaces)
    parts = [{"type": "text", "text": "hé"}]
    assert first_user_text([{"role": "user", "content": parts}]) == '[{"text":"hé","type":"text"}]'
    assert first_user_text([{"role": "user", "content": None}]) == ""
    assert first_user_text([{"role": "assistant", "content": "x"}]) is None


def test_a_row_without_a_user_message_is_keyed_by_the_whole_row():
    row = {"b": 1, "a": [1, "é"]}
    assert split_key([], row) == json.dumps(row, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    assert split_key([{"role": "system", "content": "x"}], row) == '{"a":[1,"é"],"b":1}'
    with pytest.raises(ValueError, match="without a user message"):
        split_key([{"role": "system", "content": "x"}])


def test_datasets_listed_under_valid_or_test_go_wholly_there():
    holdout = Holdout(valid=0.5, test=0.5, seed=0)
    assert {assign_split(f"k{i}", holdout, fixed="test") for i in range(50)} == {"test"}
    assert {assign_split(f"k{i}", None, fixed="valid") for i in range(50)} == {"valid"}
    assert {assign_split(f"k{i}", None) for i in range(50)} == {"train"}
    with pytest.raises(ValueError, match="unknown split"):
        assign_split("k", holdout, fixed="validation")


def test_splits_are_the_same_in_another_process_with_another_hash_seed():
    keys = [f"prompt {i} ✓" for i in range(300)]
    holdout = Holdout(valid=0.2, test=0.2, seed=42)
    here = [holdout_split(k, holdout) for k in keys]
    script = ("import json, sys; from nemotron_assets.formats.splits import Holdout, holdout_split; "
              "keys = json.load(sys.stdin); h = Holdout(valid=0.2, test=0.2, seed=42); "
              "print(json.dumps([holdout_split(k, h) for k in keys]))")
    for hash_seed in ("1", "12345"):
        done = subprocess.run([sys.executable, "-c", script], input=json.dumps(keys), capture_output=True, text=True,
                              check=True, cwd=REPO, env={**os.environ, "PYTHONHASHSEED": hash_seed})
        assert json.loads(done.stdout) == here


@pytest.mark.parametrize("bad", [{"valid": -0.1}, {"test": 1.5}, {"valid": 0.6, "test": 0.5},
                                 {"valid": float("nan")}, {"seed": 1.5}, {"seed": True}])
def test_bad_holdout_settings_are_refused(bad):
    with pytest.raises(ValueError, match="holdout"):
        Holdout(**bad)


# --- repeat weights --------------------------------------------------------------------------------------------------


def test_golden_repeat_choice():
    # sha256("repeat\x000\x00row-a") starts with 4573bba423b0daf3: fraction 0.2713; row-b: 74b463c80ff428c3 = 0.4559
    assert hashlib.sha256(b"repeat\x000\x00row-a").hexdigest().startswith("4573bba423b0daf3")
    assert repeat_count(2.3, "row-a", seed=0) == 3
    assert repeat_count(2.27, "row-a", seed=0) == 2
    assert repeat_count(0.5, "row-b", seed=0) == 1
    assert repeat_count(0.45, "row-b", seed=0) == 0


@given(whole=st.integers(0, 20), key=st.text(), seed=st.integers(-(2**40), 2**40))
def test_an_integer_weight_repeats_every_row_exactly(whole, key, seed):
    assert repeat_count(whole, key, seed) == whole
    assert repeat_count(float(whole), key, seed) == whole


@given(whole=st.integers(0, 5), low=st.floats(0, 0.999), high=st.floats(0, 0.999), key=st.text(),
       seed=st.integers(0, 2**32))
def test_raising_the_weight_only_adds_copies(whole, low, high, key, seed):
    low, high = sorted((low, high))
    assert repeat_count(whole + low, key, seed) <= repeat_count(whole + high, key, seed) <= whole + 1
    assert repeat_count(whole + low, key, seed) >= whole


def test_the_fractional_part_keeps_that_share_of_rows():
    counts = [repeat_count(1.25, f"row {i}", seed=9) for i in range(20_000)]
    assert set(counts) == {1, 2}
    assert 0.235 < counts.count(2) / len(counts) < 0.265


def test_repeat_choice_is_independent_of_the_holdout_choice():
    holdout = Holdout(valid=0.5, seed=5)
    both = [(holdout_split(f"r{i}", holdout) == "valid", repeat_count(0.5, f"r{i}", seed=5) == 1)
            for i in range(4000)]
    agree = sum(a == b for a, b in both) / len(both)
    assert 0.45 < agree < 0.55  # a shared hash would make them agree always (or never)


@pytest.mark.parametrize("weight", [-1, float("inf"), float("nan")])
def test_bad_weights_are_refused(weight):
    with pytest.raises(ValueError, match="repeat weight"):
        repeat_count(weight, "k", 0)
