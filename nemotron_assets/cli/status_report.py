"""What a blend's outputs look like now: the ``status`` command.

Every planned shard (each dataset's ``manifest.json``), tokenized (pretraining), normalized (Harmony) or transformed
(JSONL), is in exactly one state:

- **done**: up to date by the one definition (records.py ``freshness``): its receipt names the inputs a build
  would use now, and its files are as committed;
- **stale**: built, but from other inputs (a setting, the tokenizer, the family mapper or the source changed) or
  its files changed since; the next ``materialize`` rebuilds it;
- **failed**: not done, and the latest Dagster attempt at its partition failed (run_history.py);
- **missing**: not built (or only partly).

Counts come from the done shards' receipts. Samples (``--scale``/``--max-rows`` builds under
``<blend>/samples/<sample>/``) are reported separately, with the same states.
"""

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import dagster as dg

from nemotron_assets.core.blend import Blend, DatasetEntry
from nemotron_assets.core.layout import (
    ShardKey,
    base_dir,
    check_sample,
    harmony_shard_prefix,
    manifest_path,
    pretrain_dir,
    samples_dir,
    shard_prefix,
)
from nemotron_assets.core.partitions import (
    harmony_partitions_name,
    jsonl_partitions_name,
    pretrain_partitions_name,
    sample_key,
    sample_partitions_name,
)
from nemotron_assets.core.records import Freshness, Receipt, SourceManifest, State, freshness, read_manifest
from nemotron_assets.core.run_history import PartitionHistory, partition_history
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony import harmony_step
from nemotron_assets.defs.harmony.downstream import downstream_states
from nemotron_assets.defs.jsonl.steps import jsonl_freshness, manifest_freshness
from nemotron_assets.defs.pretrain.inputs import blend_tokenizer_identity, shard_inputs
from nemotron_assets.defs.scoring.states import scoring_states
from nemotron_assets.defs.sft.states import SftStatus, sft_status
from nemotron_assets.sources.errors import InputError

SHOWN_KEYS = 10  # shard keys listed per dataset in the text report; --json lists all
PRETRAIN_SHARD = "pretrain_shard"
HARMONY_SHARD = "harmony_shard"
JSONL_SHARD = "jsonl_shard"


@dataclass(frozen=True)
class Problem:
    path: str  # the file at fault (local path or s3:// URL)
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


# --- the kinds of shards ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ShardKind:
    """What differs between pretraining, Harmony and JSONL shards, for status: which datasets, which asset, where."""

    path: str  # "pretrain", "harmony" or "jsonl" (DatasetEntry.kind)
    asset: str
    partitions_name: Callable[[str], str]
    entries: Callable[[Blend], list[DatasetEntry]]
    folder: str  # below the base folder


PRETRAIN = ShardKind("pretrain", PRETRAIN_SHARD, pretrain_partitions_name,
                     lambda blend: blend.datasets_of("pretrain"), "pretrain")
HARMONY = ShardKind("harmony", HARMONY_SHARD, harmony_partitions_name,
                    lambda blend: blend.datasets_of("harmony"), "harmony")
JSONL = ShardKind("jsonl", JSONL_SHARD, jsonl_partitions_name, lambda blend: blend.datasets_of("jsonl"), "jsonl")


# --- the plan ---------------------------------------------------------------------------------------------
def read_plans(store: Storage, blend: Blend, base: str | None = None,
               kind: ShardKind = PRETRAIN) -> dict[str, SourceManifest | Problem]:
    """Each dataset's manifest, or the problem that stands in for it (which file, what to run)."""
    base = base or blend.name
    plans: dict[str, SourceManifest | Problem] = {}
    for entry in kind.entries(blend):
        try:
            plans[entry.name] = read_manifest(store, base, entry.name)
        except FileNotFoundError as exc:
            plans[entry.name] = Problem(str(exc), f"does not exist: materialize {blend.name}/source_split "
                                                  f"partition {entry.name!r}")
        except ValueError as exc:
            plans[entry.name] = Problem(store.url(manifest_path(base, entry.name)), str(exc))
    return plans


def planned_shards(plans: dict[str, SourceManifest | Problem]) -> list[tuple[SourceManifest, int]]:
    return [(m, s.index) for m in plans.values() if isinstance(m, SourceManifest) for s in m.shards]


def shard_freshness(store: Storage, blend: Blend, base: str, manifest: SourceManifest, index: int,
                    tokenizer: dict, read_content: bool = False) -> Freshness:
    """The one up-to-date test (records.py), for one planned pretraining shard."""
    prefix = shard_prefix(base, ShardKey(manifest.dataset, index))
    return freshness(store, prefix, shard_inputs(blend, manifest, index, tokenizer), read_content=read_content)


def harmony_freshness(store: Storage, blend: Blend, base: str, manifest: SourceManifest, index: int,
                      read_content: bool = False) -> Freshness:
    """The one up-to-date test (records.py), for one planned Harmony shard."""
    prefix = harmony_shard_prefix(base, ShardKey(manifest.dataset, index))
    inputs = harmony_step.shard_inputs(blend, blend.entry(manifest.dataset), manifest, index)
    return freshness(store, prefix, inputs, read_content=read_content)


# --- the report -----------------------------------------------------------------------------------------------
@dataclass
class DatasetStatus:
    dataset: str
    split: str
    path: str = "pretrain"  # "pretrain" (Megatron shards), "harmony" (normalized shards) or "jsonl"
    planned: int = 0
    done: int = 0
    stale: dict[str, str] = field(default_factory=dict)  # shard key -> why it is stale
    failed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    rows: int = 0  # source rows read by the done shards, from their receipts
    tokens: int = 0  # pretraining: tokens of the done shards
    documents: int = 0  # pretraining: documents of the done shards
    written: int = 0  # Harmony and JSONL: rows written by the done shards
    outputs: str = ""  # folder of the dataset's shards
    note: str = ""


@dataclass
class OutputStatus:
    """One output after the shards: a dataset's dedup, a pool, a view of a pool, the report, the JSONL manifest."""

    asset: str
    key: str
    state: str  # done, stale or missing
    reason: str = ""
    rows: int = 0


@dataclass
class SampleStatus:
    sample: str
    datasets: list[DatasetStatus]
    blend_json_exists: bool


@dataclass
class BlendStatus:
    blend: str
    datasets: list[DatasetStatus]
    blend_json: str
    blend_json_exists: bool
    samples: list[SampleStatus] = field(default_factory=list)
    outputs: list[OutputStatus] = field(default_factory=list)  # dedup, pools, views, report (post-training)
    sft: SftStatus | None = None  # packed SFT (sft/steps/states.py), for a blend with an sft: section
    scores: list[OutputStatus] = field(default_factory=list)  # scoring outputs (scoring/states.py), with scoring:
    error: str = ""  # the blend file (or its tokenizer) cannot be used: nothing else could be checked

    def total(self, name: str) -> int:
        return _total(self.datasets, name)


def _total(datasets: list[DatasetStatus], name: str) -> int:
    values = [getattr(d, name) for d in datasets]
    return sum(len(v) if isinstance(v, (list, dict)) else v for v in values)


def dataset_statuses(store: Storage, blend: Blend, base: str, kind: ShardKind, state_of: Callable,
                     history: PartitionHistory, sample: str | None = None) -> list[DatasetStatus]:
    """One status per dataset of ``kind``; ``state_of(manifest, index)`` is the shard's freshness."""
    plans = read_plans(store, blend, base, kind)
    datasets = []
    for entry in kind.entries(blend):
        plan = plans[entry.name]
        status = DatasetStatus(entry.name, blend.split_of(entry.name), kind.path,
                               outputs=store.url(f"{base}/{kind.folder}/{entry.name}"))
        if isinstance(plan, Problem):
            status.note = str(plan)
            datasets.append(status)
            continue
        for shard in plan.shards:
            key = str(ShardKey(entry.name, shard.index))
            status.planned += 1
            state = state_of(plan, shard.index)
            if state.done:
                status.done += 1
                _count(status, state.receipt)
            elif sample_key(sample, key) in history.failed:
                status.failed.append(key)
            elif state.state is State.STALE:
                status.stale[key] = state.reason
            else:
                status.missing.append(key)
        datasets.append(status)
    return datasets


def _count(status: DatasetStatus, receipt: Receipt) -> None:
    stats = receipt.stats
    if status.path == "jsonl":  # rows read, and rows written per split
        status.rows += int(stats["rows_in"])
        status.written += sum(int(n) for n in stats["rows"].values())
        return
    status.rows += int(stats["rows"])
    if status.path == "pretrain":
        status.tokens += int(stats["tokens"])
        status.documents += int(stats["documents"])
    else:
        status.written += int(stats["records"])


def collect_status(instance: dg.DagsterInstance, store: Storage, blend: Blend) -> BlendStatus:
    blend_json = f"{pretrain_dir(blend.name)}/blend.json"
    report = BlendStatus(blend.name, [], store.url(blend_json), store.exists(blend_json))
    tokenizer = None
    if PRETRAIN.entries(blend):
        try:
            tokenizer = blend_tokenizer_identity(blend)
        except InputError as exc:
            report.error = str(exc)
            return report
    report.datasets = _statuses(instance, store, blend, None, tokenizer)
    if HARMONY.entries(blend):
        report.outputs = [OutputStatus(o.asset, o.key, o.freshness.state.value, o.freshness.reason,
                                       int(o.freshness.receipt.stats.get("rows", 0)) if o.freshness.done else 0)
                          for o in downstream_states(store, blend, blend.name)]
    if JSONL.entries(blend):
        state = manifest_freshness(store, blend, blend.name)
        written = sum(state.receipt.stats["rows"].values()) if state.done else 0
        report.outputs.append(OutputStatus("jsonl_manifest", "", state.state.value, state.reason, written))
    if blend.sft is not None:
        report.sft = sft_status(store, blend, blend.name)
    report.scores = [OutputStatus(o.asset, o.key, o.freshness.state.value, o.freshness.reason,
                                  int(o.freshness.receipt.stats.get("rows", 0)) if o.freshness.done else 0)
                     for o in scoring_states(store, blend, blend.name)]
    for sample in sample_names(store, blend.name):
        base = base_dir(blend.name, sample)
        report.samples.append(SampleStatus(sample, _statuses(instance, store, blend, sample, tokenizer),
                                           store.exists(f"{pretrain_dir(base)}/blend.json")))
    return report


def _statuses(instance: dg.DagsterInstance, store: Storage, blend: Blend, sample: str | None,
              tokenizer: dict | None) -> list[DatasetStatus]:
    base = base_dir(blend.name, sample)
    kinds = [(PRETRAIN, lambda m, i: shard_freshness(store, blend, base, m, i, tokenizer)),
             (HARMONY, lambda m, i: harmony_freshness(store, blend, base, m, i)),
             (JSONL, lambda m, i: jsonl_freshness(store, blend, base, m, i))]
    statuses = []
    for kind, state_of in kinds:
        if not kind.entries(blend):
            continue
        keys = [sample_key(sample, str(ShardKey(m.dataset, i)))
                for m, i in planned_shards(read_plans(store, blend, base, kind))]
        asset = [blend.name, kind.asset] if sample is None else [blend.name, "samples", kind.asset]
        partitions = (kind.partitions_name(blend.name) if sample is None
                      else sample_partitions_name(blend.name, f"{kind.path}_shards"))
        history = partition_history(instance, dg.AssetKey(asset), partitions, keys)
        statuses += dataset_statuses(store, blend, base, kind, state_of, history, sample)
    return statuses


def sample_names(store: Storage, blend: str) -> list[str]:
    """The samples built for a blend (folders under ``<blend>/samples/`` named like a sample)."""
    names = []
    for name in store.list_dirs(samples_dir(blend)):
        try:
            names.append(check_sample(name))
        except ValueError:
            continue  # not ours
    return names


# --- formatting -------------------------------------------------------------------------------------------
COLUMNS = {"pretrain": ("planned", "done", "stale", "failed", "missing", "tokens", "rows"),
           "harmony": ("planned", "done", "stale", "failed", "missing", "written", "rows"),
           "jsonl": ("planned", "done", "stale", "failed", "missing", "written", "rows")}
TITLES = {"pretrain": "Megatron shards", "harmony": "Harmony shards", "jsonl": "JSONL shards"}


def format_status(report: BlendStatus) -> str:
    """Per blend: a fixed-width table per path (Megatron, Harmony, JSONL), the keys of shards that are not done, then
    the samples."""
    if report.error:
        return f"blend {report.blend}: cannot be checked: {report.error}"
    paths = [path for path in COLUMNS if any(d.path == path for d in report.datasets)]
    lines = [f"blend {report.blend}"
             + (f": blend.json {report.blend_json}" + ("" if report.blend_json_exists else " (not written yet)")
                if "pretrain" in paths else "")]
    for path in paths:
        datasets = [d for d in report.datasets if d.path == path]
        lines.append(f"  {TITLES[path]}:")
        lines += _table(datasets, COLUMNS[path])
        for d in datasets:
            lines.append(f"  {d.dataset}: {d.note or d.outputs}")
            lines += _not_done(d, "    ")
    if report.outputs:
        lines.append("  Post-training outputs:")
        lines += _outputs_table(report.outputs)
    if report.sft is not None:
        lines += report.sft.lines()
    if report.scores:
        lines.append("  Scores:")
        lines += _outputs_table(report.scores)
    for sample in report.samples:
        done, planned = _total(sample.datasets, "done"), _total(sample.datasets, "planned")
        lines.append(f"  sample {sample.sample}: {done}/{planned} shard(s) done"
                     + ("" if sample.blend_json_exists or not any(d.path == "pretrain" for d in sample.datasets)
                        else ", blend.json not written yet"))
        for d in sample.datasets:
            if d.note:
                lines.append(f"    {d.dataset}: {d.note}")
            lines += _not_done(d, "    ")
    return "\n".join(lines)


def _table(datasets: list[DatasetStatus], columns: tuple[str, ...]) -> list[str]:
    header = ("dataset", "split", *columns)
    rows = [(d.dataset, d.split, *(_total([d], name) for name in columns)) for d in datasets]
    rows.append(("total", "", *(_total(datasets, name) for name in columns)))
    cells = [header] + [tuple(f"{v:,}" if isinstance(v, int) else v for v in row) for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return ["  " + "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
            for row in cells]


def _outputs_table(outputs: list[OutputStatus]) -> list[str]:
    lines = []
    for asset in dict.fromkeys(o.asset for o in outputs):
        mine = [o for o in outputs if o.asset == asset]
        done = [o for o in mine if o.state == "done"]
        lines.append(f"  {asset:<16} {len(done)}/{len(mine)} done, {sum(o.rows for o in done):,} rows")
        for state in ("stale", "missing"):
            keys = [o for o in mine if o.state == state]
            if keys:
                more = f" and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else ""
                lines.append(f"    {state}: {', '.join(o.key or asset for o in keys[:SHOWN_KEYS])}{more} "
                             f"({keys[0].reason})")
    return lines


def _not_done(d: DatasetStatus, indent: str) -> list[str]:
    lines = []
    for label, keys in (("stale", list(d.stale)), ("failed", d.failed), ("missing", d.missing)):
        if keys:
            more = f" and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else ""
            why = f" ({d.stale[keys[0]]})" if label == "stale" else ""
            lines.append(f"{indent}{label}: {', '.join(keys[:SHOWN_KEYS])}{more}{why}")
    return lines


def status_json(reports: list[BlendStatus], orphaned_staging: list) -> str:
    return json.dumps({"blends": [asdict(r) for r in reports],
                       "orphaned_staging": [asdict(o) for o in orphaned_staging]}, indent=1)
