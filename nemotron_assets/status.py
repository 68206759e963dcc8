"""What a blend's pretraining outputs look like now: the ``status`` command.

Every planned shard (each dataset's ``manifest.json``) is in exactly one state:

- **done**: up to date by the one definition (receipts.py ``freshness``): its receipt names the inputs a build
  would use now, and its files are as committed;
- **stale**: built, but from other inputs (a setting, the tokenizer or the source changed) or its files changed
  since; the next ``materialize`` rebuilds it;
- **failed**: not done, and the latest Dagster attempt at its partition failed (run_history.py);
- **missing**: not built (or only partly).

Tokens, rows and documents come from the done shards' receipts. Samples (``--scale``/``--max-rows`` builds under
``<blend>/samples/<sample>/``) are reported separately, with the same states. Staging folders that killed processes
left behind are listed too: the next run removes them.
"""

import json
from dataclasses import asdict, dataclass, field

import dagster as dg

from nemotron_assets.blend import Blend
from nemotron_assets.errors import InputError
from nemotron_assets.layout import (
    ShardKey,
    base_dir,
    check_sample,
    manifest_path,
    pretrain_dir,
    samples_dir,
    shard_prefix,
)
from nemotron_assets.partitions import pretrain_partitions_name, sample_key, sample_partitions_name
from nemotron_assets.pretrain.inputs import blend_tokenizer_identity, shard_inputs
from nemotron_assets.receipts import Freshness, State, freshness
from nemotron_assets.run_history import PartitionHistory, partition_history
from nemotron_assets.sources.manifest import SourceManifest, read_manifest
from nemotron_assets.storage import Storage

SHOWN_KEYS = 10  # shard keys listed per dataset in the text report; --json lists all
PRETRAIN_SHARD = "pretrain_shard"


@dataclass(frozen=True)
class Problem:
    path: str  # the file at fault (local path or s3:// URL)
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


# --- the plan ---------------------------------------------------------------------------------------------
def pretrain_entries(blend: Blend) -> list:
    """The datasets on the pretraining path (a ``family`` dataset takes the Harmony path, checked by its assets)."""
    return [entry for entry in blend.entries() if not entry.family]


def read_plans(store: Storage, blend: Blend, base: str | None = None) -> dict[str, SourceManifest | Problem]:
    """Each pretraining dataset's manifest, or the problem that stands in for it (which file, what to run)."""
    base = base or blend.name
    plans: dict[str, SourceManifest | Problem] = {}
    for entry in pretrain_entries(blend):
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
    """The one up-to-date test (receipts.py), for one planned shard."""
    prefix = shard_prefix(base, ShardKey(manifest.dataset, index))
    return freshness(store, prefix, shard_inputs(blend, manifest, index, tokenizer), read_content=read_content)


# --- the report -----------------------------------------------------------------------------------------------
@dataclass
class DatasetStatus:
    dataset: str
    split: str
    planned: int = 0
    done: int = 0
    stale: dict[str, str] = field(default_factory=dict)  # shard key -> why it is stale
    failed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    tokens: int = 0  # over the done shards, from their receipts
    rows: int = 0
    documents: int = 0
    outputs: str = ""  # folder of the dataset's shards
    note: str = ""


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
    error: str = ""  # the blend file (or its tokenizer) cannot be used: nothing else could be checked

    def total(self, name: str) -> int:
        return _total(self.datasets, name)


def _total(datasets: list[DatasetStatus], name: str) -> int:
    values = [getattr(d, name) for d in datasets]
    return sum(len(v) if isinstance(v, (list, dict)) else v for v in values)


def dataset_statuses(store: Storage, blend: Blend, base: str, plans: dict[str, SourceManifest | Problem],
                     tokenizer: dict, history: PartitionHistory, sample: str | None = None) -> list[DatasetStatus]:
    datasets = []
    for entry in pretrain_entries(blend):
        plan = plans[entry.name]
        status = DatasetStatus(entry.name, blend.split_of(entry.name),
                               outputs=store.url(f"{pretrain_dir(base)}/{entry.name}"))
        if isinstance(plan, Problem):
            status.note = str(plan)
            datasets.append(status)
            continue
        for shard in plan.shards:
            key = str(ShardKey(entry.name, shard.index))
            status.planned += 1
            state = shard_freshness(store, blend, base, plan, shard.index, tokenizer)
            if state.done:
                status.done += 1
                status.tokens += int(state.receipt.stats["tokens"])
                status.rows += int(state.receipt.stats["rows"])
                status.documents += int(state.receipt.stats["documents"])
            elif sample_key(sample, key) in history.failed:
                status.failed.append(key)
            elif state.state is State.STALE:
                status.stale[key] = state.reason
            else:
                status.missing.append(key)
        datasets.append(status)
    return datasets


def collect_status(instance: dg.DagsterInstance, store: Storage, blend: Blend) -> BlendStatus:
    blend_json = f"{pretrain_dir(blend.name)}/blend.json"
    report = BlendStatus(blend.name, [], store.url(blend_json), store.exists(blend_json))
    if not pretrain_entries(blend):
        return report
    try:
        tokenizer = blend_tokenizer_identity(blend)
    except InputError as exc:
        report.error = str(exc)
        return report
    plans = read_plans(store, blend)
    history = partition_history(instance, dg.AssetKey([blend.name, PRETRAIN_SHARD]),
                                pretrain_partitions_name(blend.name),
                                [str(ShardKey(m.dataset, i)) for m, i in planned_shards(plans)])
    report.datasets = dataset_statuses(store, blend, blend.name, plans, tokenizer, history)
    for sample in sample_names(store, blend.name):
        base = base_dir(blend.name, sample)
        sample_plans = read_plans(store, blend, base)
        keys = [sample_key(sample, str(ShardKey(m.dataset, i))) for m, i in planned_shards(sample_plans)]
        sample_history = partition_history(instance, dg.AssetKey([blend.name, "samples", PRETRAIN_SHARD]),
                                           sample_partitions_name(blend.name, "pretrain_shards"), keys)
        report.samples.append(SampleStatus(
            sample, dataset_statuses(store, blend, base, sample_plans, tokenizer, sample_history, sample),
            store.exists(f"{pretrain_dir(base)}/blend.json")))
    return report


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
COLUMNS = ("planned", "done", "stale", "failed", "missing", "tokens", "rows")


def format_status(report: BlendStatus) -> str:
    """A fixed-width table per blend, the keys of shards that are not done, then the samples."""
    if report.error:
        return f"blend {report.blend}: cannot be checked: {report.error}"
    if not report.datasets:
        return (f"blend {report.blend}: no pretraining datasets (its family datasets take the Harmony path; "
                "their asset checks cover them)")
    lines = [f"blend {report.blend}: blend.json {report.blend_json}"
             + ("" if report.blend_json_exists else " (not written yet)")]
    lines += _table(report.datasets)
    for d in report.datasets:
        lines.append(f"  {d.dataset}: {d.note or d.outputs}")
        lines += _not_done(d, "    ")
    for sample in report.samples:
        done, planned = _total(sample.datasets, "done"), _total(sample.datasets, "planned")
        lines.append(f"  sample {sample.sample}: {done}/{planned} shard(s) done"
                     + ("" if sample.blend_json_exists else ", blend.json not written yet"))
        for d in sample.datasets:
            if d.note:
                lines.append(f"    {d.dataset}: {d.note}")
            lines += _not_done(d, "    ")
    return "\n".join(lines)


def _table(datasets: list[DatasetStatus]) -> list[str]:
    header = ("dataset", "split", *COLUMNS)
    rows = [(d.dataset, d.split, *(_total([d], name) for name in COLUMNS)) for d in datasets]
    rows.append(("total", "", *(_total(datasets, name) for name in COLUMNS)))
    cells = [header] + [tuple(f"{v:,}" if isinstance(v, int) else v for v in row) for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return ["  " + "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
            for row in cells]


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
