"""What ``status`` and ``verify`` say of the packed SFT path (core/status.py says what the states mean).

Outputs: each planned Harmony shard's samples file, the plan, each packed shard the plan lists, the manifest, in
pipeline order, by the one definition (core/records.py ``freshness``, with inputs.py). An output whose inputs cannot
be judged yet (an upstream output missing or stale) is stale if it was built, else missing.

**status**: the section "Packed SFT": per asset its outputs done / stale / missing, with the samples, tokens and bins
of the done ones.

**verify**: every file hashed against its receipt (``read_content``), the row and bin counts against the receipts,
the packed shards' checks run again (pack_checks.py), and each ``.npy``'s header against its split's bin count. One
`Problem` per file at fault.
"""

import dagster as dg
import numpy as np
import pyarrow.parquet as pq

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import ShardKey, base_dir
from nemotron_assets.core.pipeline import StatusRequest
from nemotron_assets.core.records import NotReady, Receipt, freshness_when_ready, read_manifest, stored_path
from nemotron_assets.core.status import RECORDED, OutputState, Plans, Problem, StatusSection, output_statuses
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.sft import samples_file
from nemotron_assets.defs.sft.inputs import (
    PackedSft,
    chat_identity,
    manifest_inputs,
    packed_inputs,
    plan_inputs,
    samples_inputs,
)
from nemotron_assets.defs.sft.layout import (
    SftShardKey,
    packed_samples_path,
    sft_dir,
    sft_manifest_prefix,
    sft_packed_prefix,
    sft_plan_prefix,
    sft_samples_prefix,
)
from nemotron_assets.defs.sft.pack_checks import check_packed_shard
from nemotron_assets.formats.splits import SPLITS
from nemotron_assets.sources.errors import InputError

#: Receipt stats summed over the done outputs of an asset, and how status names them.
COUNTED = {"sft_samples": {"samples": "samples", "tokens": "tokens", "trained_tokens": "trained tokens"},
           "sft_packed": {"bins": "bins", "samples": "samples", "tokens": "tokens"}}


def sft_states(store: Storage, sft: PackedSft, base: str, read_content: bool = False) -> list[OutputState]:
    """Every packed-SFT output of the build under ``base``, in pipeline order. ``InputError`` when the chat
    template or tokenizer cannot be located (nothing can be judged then)."""
    chat = chat_identity(sft)
    outputs = []

    def judged(asset: str, key: str, prefix: str, inputs_of) -> OutputState:
        return OutputState(asset, key, prefix, freshness_when_ready(store, prefix, inputs_of,
                                                                    read_content=read_content))

    for dataset in sft.datasets:
        try:
            manifest = read_manifest(store, base, dataset)
        except (FileNotFoundError, ValueError):
            continue  # no plan of the dataset: the Harmony shards' status says what to run
        for shard in manifest.shards:
            key = ShardKey(dataset, shard.index)
            outputs.append(judged("sft_samples", str(key), sft_samples_prefix(base, key),
                                  lambda m=manifest, i=shard.index: samples_inputs(store, sft, base, m, i, chat)))
    plan = judged("sft_plan", "", sft_plan_prefix(base), lambda: plan_inputs(store, sft, base, chat).inputs)
    outputs.append(plan)
    recorded = plan.freshness.receipt
    packed = []
    for key in list(recorded.stats["shards"]) if recorded is not None else []:
        def inputs_of(key=key) -> dict:
            if not plan.freshness.done:
                raise NotReady(f"the plan is {plan.freshness.state.value}")
            return packed_inputs(recorded, key)

        packed.append(judged("sft_packed", key, sft_packed_prefix(base, SftShardKey.parse(key)), inputs_of))
    outputs += packed

    def manifest_of() -> dict:
        if not plan.freshness.done or not all(p.freshness.done for p in packed):
            raise NotReady("the plan or a packed shard is not up to date")
        return manifest_inputs(recorded, {p.key: p.freshness.receipt for p in packed}, sft.sft.formats)

    outputs.append(judged("sft_manifest", "", sft_manifest_prefix(base), manifest_of))
    return outputs


def sft_status(request: StatusRequest) -> list[StatusSection]:
    if request.sample is not None:
        return []
    section = StatusSection("Packed SFT")
    try:
        states = sft_states(request.store, PackedSft.of(request.blend), base_dir(request.blend.name))
    except InputError as exc:
        section.error = str(exc)
        return [section]
    section.outputs = output_statuses(states, COUNTED)
    for state, row in zip(states, section.outputs):
        if state.asset == "sft_plan" and state.freshness.done:
            splits = state.freshness.receipt.stats["splits"]
            row.counts.update({f"{split} samples": splits[split]["samples"] for split in SPLITS})
    return [section]


# --- verify -------------------------------------------------------------------------------------------------------
def sft_problems(instance: dg.DagsterInstance, store: Storage, blend: Blend, plans_of: Plans = RECORDED
                 ) -> list[Problem]:
    """Every problem of the full build's packed SFT."""
    try:
        outputs = sft_states(store, PackedSft.of(blend), blend.name, read_content=True)
    except InputError as exc:
        return [Problem(exc.path or f"{blend.name} sft", str(exc))]
    plan = next((o.freshness.receipt for o in outputs if o.asset == "sft_plan"), None)
    problems = []
    for output in outputs:
        url = store.url(_main_file(blend, output))
        state = output.freshness
        if not state.done:
            where = f" partition '{output.key}'" if output.key else ""
            problems.append(Problem(url, f"{state.state.value}: {state.reason}: re-materialize "
                                         f"{blend.name}/{output.asset}{where}"))
            continue
        problems += _content_problems(store, blend, output, url, plan)
    return problems


def _main_file(blend: Blend, output: OutputState) -> str:
    if output.asset == "sft_manifest":
        return f"{sft_dir(blend.name)}/manifest.json"
    if output.asset == "sft_samples":
        return f"{output.prefix}{samples_file.SUFFIX}"
    return f"{output.prefix}.parquet"


def _rows(store: Storage, relative: str) -> pq.FileMetaData:
    with store.open(relative) as stream:
        return pq.ParquetFile(stream).metadata


def _content_problems(store: Storage, blend: Blend, output: OutputState, url: str, plan: Receipt) -> list[Problem]:
    stats = output.freshness.receipt.stats
    if output.asset == "sft_samples":
        with store.open(f"{output.prefix}{samples_file.SUFFIX}") as stream:
            if not samples_file.file_schema(stream).equals(samples_file.SCHEMA):
                return [Problem(url, "its columns are not the samples schema (defs/sft/samples_file.py)")]
            rows = sum(samples_file.row_counts(stream))
        return [Problem(url, f"holds {rows:,} samples, its receipt says {stats['samples']:,}")] \
            if rows != stats["samples"] else []
    if output.asset == "sft_plan":
        rows = _rows(store, f"{output.prefix}.parquet").num_rows
        planned = sum(shard["samples"] for shard in stats["shards"].values())
        return [Problem(url, f"holds {rows:,} rows, its receipt plans {planned:,} samples")] if rows != planned else []
    if output.asset == "sft_packed":
        found = []
        key = SftShardKey.parse(output.key)
        listing = stored_path(store, packed_samples_path(blend.name, key))  # at its legacy place until moved
        bins = _rows(store, f"{output.prefix}.parquet").num_rows
        listed = _rows(store, listing).num_rows
        if bins != stats["bins"]:
            found.append(Problem(url, f"holds {bins:,} bins, its receipt says {stats['bins']:,}"))
        if listed != stats["samples"]:
            found.append(Problem(store.url(listing),
                                 f"lists {listed:,} samples, the receipt says {stats['samples']:,}"))
        checks = check_packed_shard(store, blend.name, key, plan)
        return found + [Problem(url, f"{check}: {problem}") for check, issues in checks.items() for problem in issues]
    return _npy_problems(store, blend, output)


def _npy_problems(store: Storage, blend: Blend, output: OutputState) -> list[Problem]:
    """Each ``.npy``'s header: an object array of as many bins as its split has."""
    problems = []
    for split, counts in output.freshness.receipt.stats["splits"].items():
        relative = f"{sft_dir(blend.name)}/{split}.npy"
        if relative.rsplit("/", 1)[-1] not in output.freshness.receipt.files:
            continue
        with store.open(relative) as stream:
            version = np.lib.format.read_magic(stream)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, _, dtype = read_header(stream)
        if shape != (counts["bins"],) or dtype != np.dtype(object):
            problems.append(Problem(store.url(relative), f"holds a {dtype} array of shape {shape}, the split has "
                                                         f"{counts['bins']:,} bins"))
    return problems
