"""``sft_manifest``: what a trainer is pointed at, once every packed shard of the current plan is up to date.

Writes under ``<base>/sft/`` (formats/packed_sft.py for every format):

- ``manifest.json``: per split its shard files (relative to ``sft/``; Megatron-Bridge takes the glob
  ``<split>/shard_?????.parquet``), samples, bins, tokens, trained tokens, packing efficiency, drops by reason (the
  plan's: over-long, too short; the packer's), licenses and Bridge's packing numbers; for the whole build the
  tokenizer and template hashes, the EOS id, and what was left out before any split was known (``rows_filtered``
  and ``samples_dropped`` by the samples step, ``excluded`` by the plan's selection);
- ``packing_metadata.json``: Megatron-Bridge's packing metadata, one entry per split with bins (``pad_cu_seqlens``);
- with ``formats: [parquet, npy]``, ``<split>.npy`` per split with bins, streamed from its shards: the pickled
  object array NeMo's ``GPTSFTPackedDataset`` reads.

A packed shard that is missing or stale is refused (``NotReady`` naming every one). The receipt,
``.receipts/manifest.receipt.json``, lists these files by name (relative to ``sft/``); its inputs are the plan file,
every shard's files (by the names their receipts give them) and the formats (`inputs.manifest_inputs`).
"""

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.records import NotReady, Receipt, freshness, output_path, read_receipt
from nemotron_assets.core.step import Outcome, Output, Staged, build_output
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.sft.inputs import (
    PackedSft,
    current_plan,
    manifest_inputs,
    packed_inputs,
    template_sha256,
    tokenizer_sha256,
)
from nemotron_assets.defs.sft.layout import (
    SftShardKey,
    sft_dir,
    sft_manifest_prefix,
    sft_packed_prefix,
    sft_samples_prefix,
)
from nemotron_assets.defs.sft.pack_checks import local_files
from nemotron_assets.defs.sft.pack_step import settings_of
from nemotron_assets.defs.sft.stats import merged_counts
from nemotron_assets.formats.packed_sft import (
    MANIFEST_NAME,
    PACKING_METADATA_NAME,
    SplitSummary,
    npy_from_shards,
    npy_name,
    packing_metadata_json,
    sft_manifest,
)
from nemotron_assets.formats.packing import PackStats
from nemotron_assets.formats.splits import SPLITS

SHOWN = 10


def pack_stats_of(stats: dict) -> PackStats:
    """A packed shard's `PackStats` back from its receipt."""
    counts = {name: stats[name] for name in ("samples_in", "samples", "bins", "tokens", "positions",
                                             "trained_tokens", "pad_tokens", "truncated", "max_samples_per_bin")}
    return PackStats(pack_size=stats["pack_size"], min_bin_positions=stats["min_bin_positions"],
                     max_sample_positions=stats["max_sample_positions"], dropped=Counter(stats["dropped"]),
                     licenses=Counter(stats["licenses"]), **counts)


def current_shards(store: Storage, blend: str, base: str, plan: Receipt) -> dict[str, Receipt]:
    """Every planned packed shard's receipt; ``NotReady`` naming the ones that are not up to date."""
    done, not_done = {}, []
    for key in plan.stats["shards"]:
        state = freshness(store, sft_packed_prefix(base, SftShardKey.parse(key)), packed_inputs(plan, key))
        if state.done:
            done[key] = state.receipt
        else:
            not_done.append(f"{key} ({state.state.value}: {state.reason})")
    if not_done:
        shown = "; ".join(not_done[:SHOWN]) + (f"; and {len(not_done) - SHOWN} more" if len(not_done) > SHOWN else "")
        raise NotReady(f"packed SFT shards are not up to date: {shown}; materialize {blend}/sft_packed for "
                       "them first")
    return done


def split_summaries(plan: Receipt, shards: dict[str, Receipt]) -> dict[str, SplitSummary]:
    """Per split: its shard files (relative to ``sft/``), in shard order, and the merged counts."""
    pack_size = plan.inputs["packing"]["pack_size"]
    summaries = {split: SplitSummary([], PackStats(pack_size=pack_size)) for split in SPLITS}
    for key, receipt in shards.items():
        shard = SftShardKey.parse(key)
        summary = summaries[shard.split]
        for name, recorded in receipt.files.items():  # the bins and the .meta/ samples listing, relative to sft/
            summary.file_sha256[output_path(key, name)] = recorded["sha256"]
        summary.files.append(f"{key}.parquet")
        summary.stats.merge(pack_stats_of(receipt.stats))
    for split, summary in summaries.items():
        summary.stats.dropped.update(plan.stats["splits"][split]["dropped"])
    return summaries


def materialize_manifest(store: Storage, sft: PackedSft, base: str, force: bool = False,
                         log: Callable[[str], None] = print) -> tuple[Outcome, dict]:
    """The manifest, Bridge's packing metadata and the ``.npy`` files of the current plan's shards."""
    formats = sft.sft.formats
    plan = current_plan(store, sft, base)
    shards = current_shards(store, sft.blend, base, plan)
    folder = sft_dir(base)
    written: list[dict] = []

    def build(staging: Path) -> Staged:
        summaries = split_summaries(plan, shards)
        staged: dict[str, Path] = {}
        if "npy" in formats:
            for split, summary in summaries.items():
                if summary.stats.bins:
                    relatives = [f"{folder}/{name}" for name in summary.files]
                    with local_files(store, relatives) as paths:
                        npy_from_shards(paths, staging / npy_name(split))
                    staged[npy_name(split)] = staging / npy_name(split)
                    summary.npy = npy_name(split)
        manifest = manifest_body(store, base, plan, summaries, formats)
        written.append(manifest)
        staged[PACKING_METADATA_NAME] = staging / PACKING_METADATA_NAME
        staged[PACKING_METADATA_NAME].write_text(packing_metadata_json(
            {split: s.stats for split, s in summaries.items() if s.stats.bins}))
        staged[MANIFEST_NAME] = staging / MANIFEST_NAME
        staged[MANIFEST_NAME].write_text(json.dumps(manifest, indent=1) + "\n")  # splits in train/valid/test order
        stats = {"splits": {split: {k: manifest["splits"][split][k] for k in ("samples", "bins", "tokens")}
                            for split in manifest["splits"]}}
        return Staged(staged, stats)

    prefix = sft_manifest_prefix(base)
    output = Output(prefix, manifest_inputs(plan, shards, formats), "sft_manifest", prefix, extra={"blend": sft.blend})
    outcome = build_output(store, output, build, force, log)
    return outcome, written[0] if written else json.loads(store.read_bytes(f"{folder}/{MANIFEST_NAME}"))


def manifest_body(store: Storage, base: str, plan: Receipt, summaries: dict[str, SplitSummary],
                  formats: list[str]) -> dict:
    samples = [read_receipt(store, sft_samples_prefix(base, ShardKey.parse(key))) for key in plan.inputs["samples"]]
    manifest = sft_manifest(summaries, settings_of(plan), formats,
                            tokenizer_sha256=tokenizer_sha256(plan.inputs["tokenizer"]),
                            template_sha256=template_sha256(plan.inputs["template"]), eos_id=plan.stats["eos_id"])
    manifest["template"] = plan.inputs["template"]
    manifest["tokenizer"] = plan.inputs["tokenizer"]
    manifest["before_split"] = {
        "conversations": sum(r.stats["conversations"] for r in samples if r),
        "rows_filtered": merged_counts(r.stats["filtered"] for r in samples if r),
        "samples_dropped": merged_counts(r.stats["dropped"] for r in samples if r),
        "samples_rendered": sum(r.stats["samples"] for r in samples if r),
        "excluded_by_plan": plan.stats["excluded"],
    }
    manifest["licenses"] = merged_counts(s.stats.licenses for s in summaries.values())
    return manifest
