"""The packed chat SFT path of one blend, for blends with an ``sft:`` section (docs/architecture.md §4.4):

    harmony_shard (one partition per dataset shard)
        -> sft_samples (the same partitions): render, tokenize and mask the shard's rows
    sft_samples + harmony_dedup (+ candidate_pool when sft.from names pools, + selected_pool when it names a selection)
        -> sft_plan: select, split, repeat, plan the bins; registers the packed shards' partitions
        -> sft_packed (one partition per packed shard, ``<split>/shard_NNNNN``, with its three checks)
        -> sft_manifest: manifest.json, Bridge's packing_metadata.json, and the .npy files

A ``sft_packed`` run takes any range of shards and builds them at the same time in processes forked from its step
(core/step.py ``ShardRun``); ``sft_samples`` renders a large shard on every core (render_pool.py). The same factory
builds the sample twins (core/partitions.py).
"""

import dagster as dg

from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.lineage import WandbLineage
from nemotron_assets.core.partitions import register_block
from nemotron_assets.core.pipeline import Assets, BlendScope
from nemotron_assets.core.records import Receipt, receipt_path, require_manifest
from nemotron_assets.core.reporting import (
    CheckOutcome,
    histogram_markdown,
    materialize_partitions,
    outcome_metadata,
    partitioned_asset,
    permanent_errors_fail_at_once,
    retry_transient_errors,
)
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.core.step import Outcome, ShardBuild, ShardRun
from nemotron_assets.defs.harmony.assets import RebuildConfig, ShardRunConfig
from nemotron_assets.defs.harmony.lineage import CandidatePoolInput
from nemotron_assets.defs.scoring.lineage import ScoresInput, selection_artifact
from nemotron_assets.defs.sft import samples_file
from nemotron_assets.defs.sft.inputs import PackedSft, chat_identity, current_plan
from nemotron_assets.defs.sft.layout import (
    SftShardKey,
    sft_dir,
    sft_manifest_prefix,
    sft_packed_prefix,
    sft_plan_prefix,
    sft_samples_prefix,
)
from nemotron_assets.defs.sft.lineage import log_sft
from nemotron_assets.defs.sft.manifest_step import materialize_manifest
from nemotron_assets.defs.sft.pack_checks import CHECKS, check_packed_shard
from nemotron_assets.defs.sft.pack_step import ShardSamples, packed_build
from nemotron_assets.defs.sft.plan_step import materialize_plan
from nemotron_assets.defs.sft.samples_step import materialize_samples
from nemotron_assets.formats.splits import SPLITS


def build_sft_assets(blend_scope: BlendScope, upstream: Assets) -> Assets:
    """The packed SFT assets of one blend's full build (or of its samples); ``upstream`` holds the same scope's
    Harmony assets and, with a ``scoring:`` section, its selections (an upstream of the plan when ``sft.from`` names
    one)."""
    blend, scope = blend_scope.blend, blend_scope.scope
    sft = PackedSft.of(blend)
    selections = tuple(blend.scoring.selections()) if blend.scoring is not None else ()
    every = dg.AllPartitionMapping()
    reads_selections = isinstance(sft.sft.from_, list) and not set(sft.sft.from_).isdisjoint(selections)
    reads_pools = isinstance(sft.sft.from_, list) and not set(sft.sft.from_).isdisjoint(blend.pools())
    packed_key = dg.AssetKey(scope.key("sft_packed"))

    @partitioned_asset(
        scope.key("sft_samples"), group=scope.group, partitions_def=upstream["harmony_shard"].partitions_def,
        kinds={"arrow"}, deps=[upstream["harmony_shard"]],
        backfill_policy=dg.BackfillPolicy.single_run(),
        description="Renders, tokenizes and masks the rows of one Harmony shard with the blend's chat template: "
                    "token ids, unshifted assistant mask and masked-role spans per sample (an Arrow IPC file).",
    )
    @retry_transient_errors
    def sft_samples(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource):
        store = storage.get()
        chat = chat_identity(sft)

        def build(partition: str) -> dict:
            sample, shard = scope.split(partition)
            key = ShardKey.parse(shard)
            base = scope.base(sample)
            outcome = materialize_samples(store, sft, base, key, force=config.force, log=context.log.info, chat=chat)
            stats = outcome.receipt.stats
            context.log.info(f"{partition}: {outcome.status}, {stats['samples']:,} samples of "
                             f"{stats['conversations']:,} conversations, {stats['tokens']:,} tokens")
            return samples_metadata(outcome, store.url(sft_samples_prefix(base, key) + samples_file.SUFFIX))

        yield from materialize_partitions(context, dg.AssetKey(scope.key("sft_samples")), context.partition_keys,
                                          build)

    @dg.asset(
        key=scope.key("sft_plan"), group_name=scope.group, partitions_def=scope.partitions("blend", None),
        kinds={"parquet"},
        deps=[dg.AssetDep(sft_samples, partition_mapping=every),
              dg.AssetDep(upstream["harmony_dedup"], partition_mapping=every),
              *([dg.AssetDep(upstream["candidate_pool"], partition_mapping=every)] if reads_pools else []),
              *([dg.AssetDep(upstream["selected_pool"], partition_mapping=every)]
                if reads_selections and "selected_pool" in upstream else [])],
        description="Selects the samples (dedup, sft.from, used_in), assigns train/valid/test and repeat copies, "
                    "and plans the bins of every packed shard; registers the packed shards' partitions.",
    )
    @retry_transient_errors
    def sft_plan(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource):
        store = storage.get()
        sample = scope.sample_of(context)
        base = scope.base(sample)
        with permanent_errors_fail_at_once():
            outcome = materialize_plan(store, sft, base, config.force, log=context.log.info)
        register_block(context.instance, scope.dynamic_name("sft_shards"), f"{sample}/" if sample else "",
                       [scope.qualify(sample, key) for key in outcome.receipt.stats["shards"]])
        splits = outcome.receipt.stats["splits"]
        context.log.info(f"sft plan: {outcome.status}, " + ", ".join(
            f"{split} {splits[split]['samples']:,} samples in {splits[split]['bins']:,} bins "
            f"({splits[split]['shards']} shard(s))" for split in SPLITS))
        return dg.MaterializeResult(metadata=plan_metadata(outcome, store.url(sft_plan_prefix(base) + ".parquet")))

    @partitioned_asset(
        scope.key("sft_packed"), group=scope.group, partitions_def=scope.dynamic("sft_shards"), kinds={"parquet"},
        deps=[dg.AssetDep(sft_plan, partition_mapping=every)], checks=CHECKS,
        backfill_policy=dg.BackfillPolicy.single_run(),
        description="Packs the planned samples of one shard into bins (Megatron-Bridge's packed Parquet: input_ids, "
                    "loss_mask, seq_start_id) plus the samples file that says which sample sits where.",
    )
    @retry_transient_errors
    def sft_packed(context: dg.AssetExecutionContext, config: ShardRunConfig, storage: StorageResource):
        store = storage.get()
        plans: dict[str, Receipt] = {}
        read_by_build: dict[str, ShardSamples] = {}  # shard key -> the samples its build read, for its checks next

        def plan_of(base: str) -> Receipt:
            if base not in plans:
                plans[base] = current_plan(store, sft, base)
            return plans[base]

        def builds() -> dict[str, ShardBuild | Exception]:
            found: dict[str, ShardBuild | Exception] = {}
            for partition in context.partition_keys:
                sample, shard = scope.split(partition)
                base = scope.base(sample)
                try:
                    found[partition] = packed_build(store, sft.blend, base, SftShardKey.parse(shard), plan_of(base),
                                                    read_by_build)
                except Exception as exc:  # noqa: BLE001 - reported as this partition's failure
                    found[partition] = exc
            return found

        def build(partition: str) -> dict:
            outcome = run.outcome(partition)
            stats = outcome.receipt.stats
            context.log.info(f"{partition}: {outcome.status}, {stats['samples']:,} samples in {stats['bins']:,} bins, "
                             f"packing efficiency {stats['packing_efficiency']:.1%}")
            sample, _ = scope.split(partition)
            url = store.url(sft_packed_prefix(scope.base(sample), SftShardKey.parse(outcome.key)) + ".parquet")
            return packed_metadata(outcome, url)

        def check(partition: str) -> list[CheckOutcome]:
            sample, shard = scope.split(partition)
            base = scope.base(sample)
            problems = check_packed_shard(store, base, SftShardKey.parse(shard), plan_of(base),
                                          read_by_build.pop(shard, None))
            read_by_build.clear()  # one shard's samples at most: its checks run right after its build
            return [CheckOutcome(name, not found, {"problems": len(found), "first": "; ".join(found[:3]) or "none"})
                    for name, found in problems.items()]

        with ShardRun(store, context.log.info, force=config.force, processes=config.build_processes) as run:
            if packed_key in context.selected_asset_keys:
                run.plan(builds())
            yield from materialize_partitions(context, packed_key, context.partition_keys, build, check)

    @dg.asset(
        key=scope.key("sft_manifest"), group_name=scope.group, partitions_def=scope.partitions("blend", None),
        deps=[dg.AssetDep(sft_packed, partition_mapping=every)], kinds={"json"},
        description="sft/manifest.json (per split: files, samples, bins, tokens, drops), Megatron-Bridge's "
                    "packing_metadata.json and, with formats [parquet, npy], one .npy per split for NeMo; refuses "
                    "packed shards that are not up to date.",
    )
    @retry_transient_errors
    def sft_manifest(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource,
                     lineage: WandbLineage):
        store = storage.get()
        base = scope.base(scope.sample_of(context))
        with permanent_errors_fail_at_once():
            outcome, manifest = materialize_manifest(store, sft, base, config.force, log=context.log.info)
        metadata = manifest_metadata(outcome, manifest, store.url(sft_dir(base) + "/manifest.json"))
        if not scope.samples:
            manifests = {name: require_manifest(store, blend.name, base, name) for name in sft.datasets}
            files = [f"{sft_dir(base)}/{name}" for name in outcome.receipt.files]
            files.append(receipt_path(sft_manifest_prefix(base)))
            shards = [sft_packed_prefix(base, SftShardKey.parse(key)) for key in outcome.receipt.inputs["shards"]]
            log_sft(lineage, context, store, blend.name, metadata, manifests, files, shards,
                    pools_read(sft, selections))
        return dg.MaterializeResult(metadata=metadata)

    return {"sft_samples": sft_samples, "sft_plan": sft_plan, "sft_packed": sft_packed, "sft_manifest": sft_manifest}


def pools_read(sft: PackedSft, selections: tuple[str, ...]) -> list[ScoresInput]:
    """The pools ``sft.from`` names, as lineage inputs: a scoring selection's artifact, or a candidate pool's."""
    if sft.sft.from_ == "all":
        return []
    return [selection_artifact(sft.blend, name) if name in selections else CandidatePoolInput(name)
            for name in sft.sft.from_]


def _examples(examples: list[str]) -> dg.MetadataValue:
    return dg.MetadataValue.md("\n".join(f"- {e}" for e in examples) or "none")


def samples_metadata(outcome: Outcome, url: str) -> dict:
    stats = outcome.receipt.stats
    return {
        **outcome_metadata(outcome),
        "path": dg.MetadataValue.path(url),
        "rows": dg.MetadataValue.int(stats["rows"]),
        "conversations": dg.MetadataValue.int(stats["conversations"]),
        "samples": dg.MetadataValue.int(stats["samples"]),
        "tokens": dg.MetadataValue.int(stats["tokens"]),
        "trained_tokens": dg.MetadataValue.int(stats["trained_tokens"]),
        "filtered_by_reason": dg.MetadataValue.json(stats["filtered"]),
        "dropped_by_reason": dg.MetadataValue.json(stats["dropped"]),
        "dropped_examples": _examples(stats["dropped_examples"]),
        "sample_length_histogram": dg.MetadataValue.md(histogram_markdown(stats["histogram"],
                                                                          "Sample length (tokens)")),
        "max_sample_tokens": dg.MetadataValue.int(stats["max_length"]),
        "tokenizer_backend": dg.MetadataValue.text(stats["tokenizer_backend"]),
        "bytes": dg.MetadataValue.int(stats["bytes"]),
        "sha256": dg.MetadataValue.text(stats["sha256"]),
    }


def plan_metadata(outcome: Outcome, url: str) -> dict:
    stats = outcome.receipt.stats
    splits = stats["splits"]
    return {
        **outcome_metadata(outcome),
        "path": dg.MetadataValue.path(url),
        "samples_considered": dg.MetadataValue.int(stats["samples_considered"]),
        "excluded_by_reason": dg.MetadataValue.json(stats["excluded"]),
        "samples_per_split": dg.MetadataValue.json({s: splits[s]["samples"] for s in SPLITS}),
        "bins_per_split": dg.MetadataValue.json({s: splits[s]["bins"] for s in SPLITS}),
        "shards_per_split": dg.MetadataValue.json({s: splits[s]["shards"] for s in SPLITS}),
        "packing_efficiency": dg.MetadataValue.json({s: splits[s]["packing_efficiency"] for s in SPLITS}),
        "dropped_by_reason": dg.MetadataValue.json({s: splits[s]["dropped"] for s in SPLITS}),
        "shards": dg.MetadataValue.int(len(stats["shards"])),
    }


def packed_metadata(outcome: Outcome, url: str) -> dict:
    stats = outcome.receipt.stats
    return {
        **outcome_metadata(outcome),
        "path": dg.MetadataValue.path(url),
        "bins": dg.MetadataValue.int(stats["bins"]),
        "samples": dg.MetadataValue.int(stats["samples"]),
        "tokens": dg.MetadataValue.int(stats["tokens"]),
        "trained_tokens": dg.MetadataValue.int(stats["trained_tokens"]),
        "pad_tokens": dg.MetadataValue.int(stats["pad_tokens"]),
        "truncated": dg.MetadataValue.int(stats["truncated"]),
        "packing_efficiency": dg.MetadataValue.float(round(stats["packing_efficiency"], 6)),
        "max_samples_per_bin": dg.MetadataValue.int(stats["max_samples_per_bin"]),
        "dropped_by_reason": dg.MetadataValue.json(stats["dropped"]),
        "licenses": dg.MetadataValue.json(stats["licenses"]),
        "sample_length_histogram": dg.MetadataValue.md(histogram_markdown(stats["sample_histogram"],
                                                                          "Sample length (tokens)")),
        "bin_length_histogram": dg.MetadataValue.md(histogram_markdown(stats["bin_histogram"],
                                                                       "Bin length (positions, sum of len - 1)")),
    }


def manifest_metadata(outcome: Outcome, manifest: dict, url: str) -> dict:
    splits = manifest["splits"]
    return {
        "status": dg.MetadataValue.text(outcome.status),
        "manifest": dg.MetadataValue.path(url),
        "splits": dg.MetadataValue.json({split: {key: value[key] for key in (
            "files", "npy", "samples", "bins", "tokens", "trained_tokens", "packing_efficiency", "dropped")}
            for split, value in splits.items()}),
        "before_split": dg.MetadataValue.json(manifest["before_split"]),
        "licenses": dg.MetadataValue.json(manifest["licenses"]),
        "eos_id": dg.MetadataValue.int(manifest["eos_id"]) if manifest["eos_id"] is not None
        else dg.MetadataValue.text("none"),
        "tokenizer_sha256": dg.MetadataValue.text(manifest["tokenizer_sha256"]),
        "template_sha256": dg.MetadataValue.text(manifest["template_sha256"]),
    }
