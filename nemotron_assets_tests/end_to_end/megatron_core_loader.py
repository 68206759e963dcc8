"""Megatron-Core's own dataset builder on a per-split ``blend.json``, run as a trainer runs it: a process of its own,
in whatever working directory it is started from, with a one-process gloo group. It shares no code with ours; the
test (test_megatron_core_reads_the_blend.py) checks what it reports against the .bin/.idx read independently.

    python megatron_core_loader.py BLEND_JSON CACHE_DIR OUT_JSON --sizes TRAIN VALID TEST --sequence-length L
        --vocab-size V --eod E

BLEND_JSON ``-``: read its path from the first line of stdin, so a caller can start this process (importing
megatron.core takes several seconds) while the file is still being built.

Writes to OUT_JSON, per split: the top-level dataset's class and length; each mid-level ``GPTDataset``'s prefix and
what Megatron sees of its ``.idx`` (sequences, tokens); for a blended split, how many samples come from each
dataset (``BlendedDataset.dataset_index``); and a few samples: Megatron's ``tokens``/``labels`` with the
``document_index`` entries and offsets that ``sample_index[shuffle_index[k]]`` and the next entry give.
"""

import argparse
import json
import os
import socket
import sys
from pathlib import Path

import numpy as np
import torch
from megatron.core.datasets.blended_dataset import BlendedDataset
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
from megatron.core.datasets.utils import get_blend_from_list

SPLITS = ("train", "valid", "test")
SAMPLES_PER_DATASET = 3  # the first samples the split draws from each contributing dataset, and its last sample


class Tokenizer:
    """What GPTDatasetConfig and GPTDataset use of a tokenizer: the token ids are already in the .bin files."""

    def __init__(self, vocab_size: int, eod: int):
        self.vocab_size = vocab_size
        self.eod = eod
        self.pad = -1  # no token id: nothing in the data is masked as padding (Megatron's own fallback value)
        self.unique_identifiers = {"class": type(self).__name__, "vocab_size": vocab_size, "eod": eod}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sample(dataset: BlendedDataset | GPTDataset, i: int) -> dict:
    """Sample ``i`` of the split as Megatron returns it, and where its mid-level dataset says it comes from."""
    if isinstance(dataset, BlendedDataset):
        which, k = int(dataset.dataset_index[i]), int(dataset.dataset_sample_index[i])
        g = dataset.datasets[which]
    else:
        which, k, g = 0, i, dataset
    item = dataset[i]
    j = int(g.shuffle_index[k])
    (first, first_offset), (last, last_offset) = g.sample_index[j], g.sample_index[j + 1]
    return {"index": i, "dataset": which, "tokens": item["tokens"].tolist(), "labels": item["labels"].tolist(),
            "documents": [int(d) for d in g.document_index[int(first):int(last) + 1]],
            "first_offset": int(first_offset), "last_offset": int(last_offset)}


def _report(dataset: BlendedDataset | GPTDataset) -> dict:
    blended = isinstance(dataset, BlendedDataset)
    members = dataset.datasets if blended else [dataset]
    report = {
        "class": type(dataset).__name__,
        "length": len(dataset),
        "datasets": [{"prefix": g.dataset_path, "sequences": int(g.dataset.sequence_lengths.shape[0]),
                      "tokens": int(g.dataset.sequence_lengths.sum()), "length": len(g)} for g in members],
    }
    if blended:
        index = np.asarray(dataset.dataset_index)
        report["counts"] = np.bincount(index, minlength=len(members)).tolist()
        chosen = {int(i) for which in range(len(members)) for i in np.flatnonzero(index == which)[:SAMPLES_PER_DATASET]}
    else:
        chosen = {0, len(dataset) // 2}
    chosen.add(len(dataset) - 1)
    report["samples"] = [_sample(dataset, i) for i in sorted(chosen)]
    return report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("blend_json", help="the per-split blend.json, or - to read its path from stdin")
    parser.add_argument("cache", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--sizes", type=int, nargs=3, required=True)
    parser.add_argument("--sequence-length", type=int, required=True)
    parser.add_argument("--vocab-size", type=int, required=True)
    parser.add_argument("--eod", type=int, required=True)
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()

    # As Megatron-LM's --per-split-data-args-path: json.load, then get_blend_from_list per split.
    blend_json = Path(sys.stdin.readline().strip() if args.blend_json == "-" else args.blend_json)
    per_split = json.loads(blend_json.read_text())
    blends = [get_blend_from_list(per_split[s].split() if isinstance(per_split[s], str) else per_split[s])
              for s in SPLITS]

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(_free_port())  # its own, so processes started side by side do not collide
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    try:
        config = GPTDatasetConfig(
            random_seed=args.seed, sequence_length=args.sequence_length, blend_per_split=blends,
            tokenizer=Tokenizer(args.vocab_size, args.eod), reset_position_ids=False, reset_attention_mask=False,
            eod_mask_loss=False, path_to_cache=str(args.cache), mid_level_dataset_surplus=0.005)
        built = BlendedMegatronDatasetBuilder(GPTDataset, args.sizes, lambda: True, config).build()
        result = {"cwd": os.getcwd(),
                  **{split: None if dataset is None else _report(dataset) for split, dataset in zip(SPLITS, built)}}
    finally:
        torch.distributed.destroy_process_group()
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
