"""What ``status`` and ``verify`` report, in the same words for every pipeline.

Every planned shard (each dataset's ``manifest.json``) is in exactly one state:

- **done**: up to date by the one definition (core/records.py ``freshness``): its receipt names the inputs a build
  would use now, and its files are as committed;
- **stale**: built, but from other inputs (a setting, the tokenizer, the family mapper or the source changed) or its
  files changed since; the next ``materialize`` rebuilds it;
- **failed**: not done, and the latest Dagster attempt at its partition failed (run_history.py);
- **missing**: not built (or only partly).

Every other output (a dedup result, a pool, a manifest, ...) is done, stale or missing by the same definition. A
pipeline reports its shards as `DatasetStatus` rows and its other outputs as `OutputStatus` rows, in one
`StatusSection` per table; ``verify`` reports `Problem`s, each naming one file and why.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

import dagster as dg

from nemotron_assets.core.blend import Blend, DatasetEntry
from nemotron_assets.core.layout import ShardKey, manifest_path
from nemotron_assets.core.partitions import sample_key
from nemotron_assets.core.records import Freshness, Receipt, State, read_manifest
from nemotron_assets.core.run_history import partition_history
from nemotron_assets.core.storage import Storage
from nemotron_assets.sources.manifest import SourceManifest

SHOWN_KEYS = 10  # keys listed per line in the text report; --json lists all


@dataclass(frozen=True)
class Problem:
    path: str  # the file at fault (local path or s3:// URL)
    reason: str
    skipped: bool = False  # not a fault: a file verify leaves alone and says so (an output the blend no longer asks)

    def __str__(self) -> str:
        return f"{self.path}: {'skipped: ' if self.skipped else ''}{self.reason}"


@dataclass
class DatasetStatus:
    """One dataset's shards."""

    dataset: str
    split: str
    path: str = "pretrain"  # which pipeline's shards: "pretrain", "harmony" or "jsonl"
    planned: int = 0
    done: int = 0
    stale: dict[str, str] = field(default_factory=dict)  # shard key -> why it is stale
    failed: list[str] = field(default_factory=list)
    failed_because: dict[str, str] = field(default_factory=dict)  # failed shard key -> its located error
    missing: list[str] = field(default_factory=list)
    rows: int = 0  # source rows read by the done shards, from their receipts
    tokens: int = 0  # pretraining: tokens of the done shards
    documents: int = 0  # pretraining: documents of the done shards
    written: int = 0  # Harmony and JSONL: rows written by the done shards
    outputs: str = ""  # folder of the dataset's shards
    note: str = ""


@dataclass
class OutputStatus:
    """One output that is not a shard: a dataset's dedup, a pool, a view, a report, a manifest, a plan."""

    asset: str
    key: str
    state: str  # done, stale or missing; NOT_IN_BLEND for an output kept on disk that the blend no longer asks for
    reason: str = ""
    rows: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # more counts of a done output (samples, tokens, ...)


NOT_IN_BLEND = "not_in_blend"
#: The reason given for an output the blend no longer asks for (status lists it, verify skips it, nothing deletes it).
KEPT_NOT_ASKED = "the blend no longer asks for it; kept on disk, not verified, not deleted"


@dataclass
class StatusSection:
    """One table of a blend's status: a pipeline's shards per dataset, or its other outputs."""

    title: str  # "Megatron shards", "Harmony shards", "Post-training outputs", ...
    columns: tuple[str, ...] = ()  # the shard table's counted columns
    datasets: list[DatasetStatus] = field(default_factory=list)
    outputs: list[OutputStatus] = field(default_factory=list)
    note: str = ""  # a line under the title (where blend.json is)
    error: str = ""  # this part cannot be checked (its template or tokenizer is missing)


@dataclass(frozen=True)
class OutputState:
    """An output after the shards, judged by the one definition: which asset and partition, where, its state."""

    asset: str
    key: str  # its partition (a dataset, a pool, "<view>/<pool>"), or "" for an unpartitioned asset
    prefix: str  # the output's path without suffix (its receipt: records.receipt_path)
    freshness: Freshness


def output_statuses(states: list[OutputState], counted: dict[str, dict[str, str]] | None = None
                    ) -> list[OutputStatus]:
    """`OutputStatus` rows of judged outputs: ``rows`` from a done output's receipt, and the receipt stats
    ``counted`` names per asset (stat -> label)."""
    rows = []
    for state in states:
        receipt = state.freshness.receipt if state.freshness.done else None
        counts = {label: int(receipt.stats[name]) for name, label in (counted or {}).get(state.asset, {}).items()
                  } if receipt else {}
        rows.append(OutputStatus(state.asset, state.key, state.freshness.state.value, state.freshness.reason,
                                 int(receipt.stats.get("rows", 0)) if receipt else 0, counts))
    return rows


# --- the plans and their shards ---------------------------------------------------------------------------------
class Plans:
    """Where ``status`` and ``verify`` get each dataset's plan. This one reads the plans as the last
    ``source_split`` recorded them; the command line's (defs/sources/current.py ``CurrentPlans``) makes them from
    the input files as they are now, so a shard is done only when its receipt matches the files."""

    def of(self, store: Storage, blend: Blend, base: str, entries: list[DatasetEntry]
           ) -> dict[str, SourceManifest | Problem]:
        return read_plans(store, blend, base, entries)

    def input_changes(self, dataset: str) -> list[tuple[str, str]]:
        """(file, "changed" / "added" / "removed") since the recorded plan."""
        return []

    def not_checked(self, dataset: str) -> str:
        """Why the dataset's inputs could not be compared with its plan ("" when they were)."""
        return ""

    def why_stale(self, dataset: str) -> str:
        """What to say of a stale shard of the dataset when its inputs changed ("" when they did not)."""
        changes = self.input_changes(dataset)
        if not changes:
            return ""
        more = f" and {len(changes) - 1} more" if len(changes) > 1 else ""
        return f"input {changes[0][1]}: {changes[0][0]}{more}"

    def input_problems(self, entries: list[DatasetEntry], troubled: set[str]) -> list[Problem]:
        """For ``verify``: inputs not checked, and each input file that changed since its dataset was planned when
        a shard of the dataset is not done (``troubled``): a file restored after a re-plan troubles no shard."""
        problems = []
        for entry in entries:
            if entry.name not in troubled and not self.not_checked(entry.name):
                continue
            problems += [Problem(url, f"input {what} since {entry.name!r} was planned: re-materialize the blend")
                         for url, what in self.input_changes(entry.name)]
            if self.not_checked(entry.name):
                problems.append(Problem(entry.path, self.not_checked(entry.name)))
        return problems


RECORDED = Plans()


def read_plans(store: Storage, blend: Blend, base: str, entries: list[DatasetEntry]
               ) -> dict[str, SourceManifest | Problem]:
    """Each dataset's manifest, or the problem that stands in for it (which file, what to run)."""
    plans: dict[str, SourceManifest | Problem] = {}
    for entry in entries:
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


@dataclass(frozen=True)
class ShardKind:
    """What differs between the kinds of shards, for their status: whose datasets, which asset, where, what counts."""

    path: str  # "pretrain", "harmony" or "jsonl" (DatasetEntry.kind), also the folder under the base
    asset: str  # "pretrain_shard", ...
    count: Callable[[DatasetStatus, Receipt], None]  # adds a done shard's receipt counts to its dataset's row


def shard_statuses(instance: dg.DagsterInstance, store: Storage, blend: Blend, base: str, sample: str | None,
                   kind: ShardKind, partitions_name: str,
                   state_of: Callable[[SourceManifest, int], Freshness], plans_of: Plans = RECORDED
                   ) -> list[DatasetStatus]:
    """One row per dataset of ``kind``; ``state_of(manifest, index)`` is a shard's freshness against the plan
    ``plans_of`` gives. A shard whose inputs could not be checked is never done."""
    entries = blend.datasets_of(kind.path)
    plans = plans_of.of(store, blend, base, entries)
    keys = [sample_key(sample, str(ShardKey(m.dataset, i))) for m, i in planned_shards(plans)]
    asset = [blend.name, kind.asset] if sample is None else [blend.name, "samples", kind.asset]
    history = partition_history(instance, dg.AssetKey(asset), partitions_name, keys)
    failed = history.failed
    datasets = []
    for entry in entries:
        plan = plans[entry.name]
        status = DatasetStatus(entry.name, blend.split_of(entry.name), kind.path,
                               outputs=store.url(f"{base}/{kind.path}/{entry.name}"))
        datasets.append(status)
        if isinstance(plan, Problem):
            status.note = str(plan)
            continue
        unchecked, changed = plans_of.not_checked(entry.name), plans_of.why_stale(entry.name)
        status.note = unchecked
        for shard in plan.shards:
            key = str(ShardKey(entry.name, shard.index))
            status.planned += 1
            state = state_of(plan, shard.index)
            if state.done and not unchecked:
                status.done += 1
                kind.count(status, state.receipt)
            elif sample_key(sample, key) in failed:
                status.failed.append(key)
                status.failed_because[key] = history.failed_because.get(sample_key(sample, key), "")
            elif state.state is State.STALE or (state.done and unchecked):
                # a shard stale because its source rows changed: name the input file instead of two hashes
                from_inputs = changed if 'source="' in state.reason else ""
                status.stale[key] = unchecked or from_inputs or state.reason
            else:
                status.missing.append(key)
    return datasets
