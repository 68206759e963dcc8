"""What a blend's pretraining outputs look like now (``status``), and whether they are intact (``verify``).

Two sources, each trusted for what only it knows:

- **storage** (the files): the plan is each dataset's ``manifest.json``; a shard is *done* when its receipt
  names the current plan (``source_fingerprint``) and its ``.bin``/``.idx`` have the sizes the receipt
  records. Tokens and rows come from the receipts, so they describe the bytes that are really there.
- **the Dagster instance**: whether the latest run that targeted a shard partition *failed* (the instance's
  partition status, what the UI shows), and the metadata each shard's last materialization recorded, which
  ``verify`` compares with the files and receipts.

``verify`` re-reads every planned shard: ``pretrain/verify.py``'s checks (``.idx``/``.bin`` consistency,
token ids below the vocabulary, document/token counts against receipt and materialization), the sha256
of both files against the receipt and the materialization, and ``blend.json``/``data_path.txt`` against
the shards that exist. Each problem names one file and says why.
"""

import hashlib
import json
from dataclasses import asdict, dataclass, field

import dagster as dg

from nemotron_assets.blend import Blend
from nemotron_assets.layout import ShardKey, manifest_path, pretrain_dir, pretrain_partitions_name, shard_prefix
from nemotron_assets.pretrain.blend_files import build_blend_files
from nemotron_assets.pretrain.verify import verify_shard
from nemotron_assets.sources.manifest import SourceManifest
from nemotron_assets.storage import Storage

HASH_CHUNK = 8 << 20
SHOWN_KEYS = 10  # shard keys listed per dataset in the text report; --json lists all


@dataclass(frozen=True)
class Problem:
    path: str  # the file at fault (local path or s3:// URL)
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


# --- what the instance recorded ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ShardHistory:
    """What the Dagster instance knows about a blend's shard partitions."""

    failed: frozenset[str] = frozenset()
    metadata: dict[str, dict] = field(default_factory=dict)  # latest materialization metadata per partition


def partition_statuses(instance: dg.DagsterInstance, asset_key: dg.AssetKey,
                       partitions_def: dg.PartitionsDefinition, keys: list[str]) -> dict[str, str | None]:
    """MATERIALIZED / FAILED / IN_PROGRESS (or None: never materialized) per key, as the UI shows them.

    FAILED means the latest run that targeted the partition failed, even if an older materialization exists.
    """
    if not keys:
        return {}
    statuses = instance.get_status_by_partition(asset_key, keys, partitions_def) or {}
    return {key: statuses[key].value if statuses.get(key) is not None else None for key in keys}


def latest_metadata(instance: dg.DagsterInstance, asset_key: dg.AssetKey, keys: list[str]) -> dict[str, dict]:
    """The metadata of each partition's latest materialization, newest events first, paging until all are seen."""
    wanted, found, cursor = set(keys), {}, None
    while wanted - found.keys():
        page = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=asset_key), limit=1000,
                                               cursor=cursor)
        for record in page.records:
            partition = record.partition_key
            if partition in wanted and partition not in found:
                found[partition] = {k: v.value for k, v in record.asset_materialization.metadata.items()}
        if not page.has_more:
            break
        cursor = page.cursor
    return found


def read_history(instance: dg.DagsterInstance, blend: str, keys: list[str],
                 with_metadata: bool = False) -> ShardHistory:
    """Failed partitions (and the latest metadata) of ``<blend>/pretrain_shard``, named as assets/pretrain.py
    names them; building the assets just for their names would cost a load and its warnings."""
    shard_asset = dg.AssetKey([blend, "pretrain_shard"])
    partitions = dg.DynamicPartitionsDefinition(name=pretrain_partitions_name(blend))
    statuses = partition_statuses(instance, shard_asset, partitions, keys)
    metadata = latest_metadata(instance, shard_asset, keys) if with_metadata else {}
    return ShardHistory(frozenset(k for k, s in statuses.items() if s == "FAILED"), metadata)


# --- what storage holds ---------------------------------------------------------------------------------
@dataclass
class DatasetStatus:
    dataset: str
    split: str
    planned: int
    done: int
    missing: list[str]  # planned shards that are not done (no receipt, stale receipt, or missing files)
    failed: list[str]  # planned shards whose latest Dagster run failed
    tokens: int  # over the done shards, from their receipts
    rows: int
    documents: int
    outputs: str  # folder of the dataset's shards
    note: str = ""


@dataclass
class BlendStatus:
    blend: str
    datasets: list[DatasetStatus]
    blend_json: str
    blend_json_exists: bool

    def total(self, name: str) -> int:
        values = [getattr(d, name) for d in self.datasets]
        return sum(len(v) if isinstance(v, list) else v for v in values)


def pretrain_entries(blend: Blend) -> list:
    """The datasets on the pretraining path (a ``family`` dataset takes the Harmony path, checked by its assets)."""
    return [entry for entry in blend.entries() if not entry.family]


def read_plans(store: Storage, blend: Blend) -> dict[str, SourceManifest | Problem]:
    """Each pretraining dataset's manifest, or the problem that stands in for it (which file, what to run)."""
    plans: dict[str, SourceManifest | Problem] = {}
    for entry in pretrain_entries(blend):
        path = manifest_path(blend.name, entry.name)
        if not store.exists(path):
            plans[entry.name] = Problem(store.url(path), f"does not exist: materialize {blend.name}/source_split "
                                                         f"partition {entry.name!r}")
            continue
        try:
            plans[entry.name] = SourceManifest.from_json(json.loads(store.read_bytes(path)))
        except (ValueError, KeyError, TypeError) as exc:  # JSONDecodeError is a ValueError
            plans[entry.name] = Problem(store.url(path), f"not a readable manifest: {exc}")
    return plans


def planned_keys(plans: dict[str, SourceManifest | Problem]) -> list[str]:
    return [str(ShardKey(m.dataset, s.index)) for m in plans.values() if isinstance(m, SourceManifest)
            for s in m.shards]


def shard_done(store: Storage, blend: str, manifest: SourceManifest, index: int) -> tuple[dict | None, str]:
    """(receipt, "") if the shard is done for the current plan, else (None, why not)."""
    prefix = shard_prefix(blend, ShardKey(manifest.dataset, index))
    receipt = _read_json(store, f"{prefix}.json")
    if receipt is None:
        return None, "has no readable receipt"
    if receipt.get("source_fingerprint") != manifest.shard_fingerprint(index):
        return None, "was built from another plan than the dataset's manifest (stale)"
    stats = receipt.get("stats", {})
    for ext in ("bin", "idx"):
        if not store.exists(f"{prefix}.{ext}"):
            return None, f"has no .{ext}"
        if store.size(f"{prefix}.{ext}") != stats.get(f"{ext}_bytes"):
            return None, f"has a .{ext} of another size than its receipt records"
    return receipt, ""


def blend_status(store: Storage, blend: Blend, plans: dict[str, SourceManifest | Problem],
                 history: ShardHistory) -> BlendStatus:
    datasets = []
    for entry in pretrain_entries(blend):
        plan = plans[entry.name]
        status = DatasetStatus(entry.name, blend.split_of(entry.name), 0, 0, [], [], 0, 0, 0,
                               store.url(f"{pretrain_dir(blend.name)}/{entry.name}"))
        if isinstance(plan, Problem):
            status.note = str(plan)
            datasets.append(status)
            continue
        for shard in plan.shards:
            key = str(ShardKey(entry.name, shard.index))
            status.planned += 1
            receipt, _ = shard_done(store, blend.name, plan, shard.index)
            if receipt is None:
                status.missing.append(key)
            else:
                status.done += 1
                status.tokens += int(receipt["stats"]["tokens"])
                status.rows += int(receipt["stats"]["rows"])
                status.documents += int(receipt["stats"]["documents"])
            if key in history.failed:
                status.failed.append(key)
        datasets.append(status)
    blend_json = f"{pretrain_dir(blend.name)}/blend.json"
    return BlendStatus(blend.name, datasets, store.url(blend_json), store.exists(blend_json))


def format_status(report: BlendStatus) -> str:
    """A fixed-width table per blend, then the keys of missing and failed shards."""
    if not report.datasets:
        return (f"blend {report.blend}: no pretraining datasets (its family datasets take the Harmony path; "
                "their asset checks cover them)")
    header = ("dataset", "split", "planned", "done", "missing", "failed", "tokens", "rows")
    rows = [(d.dataset, d.split, d.planned, d.done, len(d.missing), len(d.failed), d.tokens, d.rows)
            for d in report.datasets]
    rows.append(("total", "", *(report.total(n) for n in ("planned", "done", "missing", "failed", "tokens",
                                                             "rows"))))
    cells = [header] + [tuple(f"{v:,}" if isinstance(v, int) else v for v in row) for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = [f"blend {report.blend}: blend.json {report.blend_json}"
             + ("" if report.blend_json_exists else " (not written yet)")]
    for row in cells:
        lines.append("  " + "  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                                      for i, (c, w) in enumerate(zip(row, widths))).rstrip())
    for d in report.datasets:
        lines.append(f"  {d.dataset}: {d.note or d.outputs}")
        for label, keys in (("missing", d.missing), ("failed", d.failed)):
            if keys:
                more = f" and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else ""
                lines.append(f"    {label}: {', '.join(keys[:SHOWN_KEYS])}{more}")
    return "\n".join(lines)


def status_json(reports: list[BlendStatus]) -> str:
    return json.dumps({"blends": [asdict(r) for r in reports]}, indent=1)


def collect_status(instance: dg.DagsterInstance, store: Storage, blend: Blend) -> BlendStatus:
    plans = read_plans(store, blend)
    return blend_status(store, blend, plans, read_history(instance, blend.name, planned_keys(plans)))


# --- verify ---------------------------------------------------------------------------------------------
def sha256_of(store: Storage, relative: str) -> str:
    digest = hashlib.sha256()
    with store.open(relative) as stream:
        while chunk := stream.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def verify_shard_files(store: Storage, blend: str, manifest: SourceManifest, index: int,
                       recorded: dict | None) -> list[Problem]:
    """Every problem of one planned shard; the shard's files are read in full."""
    key = ShardKey(manifest.dataset, index)
    prefix = shard_prefix(blend, key)
    url = {ext: store.url(f"{prefix}.{ext}") for ext in ("bin", "idx", "json")}
    absent = [Problem(url[ext], "does not exist") for ext in ("idx", "bin", "json")
              if not store.exists(f"{prefix}.{ext}")]
    if len(absent) == len(url):  # never built: one line, with what to run
        return [Problem(url["bin"], f"does not exist (nor its .idx and receipt): materialize "
                                    f"{blend}/pretrain_shard partition {key}")]
    if absent:
        return absent
    receipt = _read_json(store, f"{prefix}.json")
    required = ("vocab_size", "stats")
    if receipt is None or any(k not in receipt for k in required):
        return [Problem(url["json"], f"not a readable receipt (JSON with {', '.join(required)})")]
    problems = []
    if receipt.get("source_fingerprint") != manifest.shard_fingerprint(index):
        problems.append(Problem(url["json"], f"built from another plan of {manifest.dataset!r} than its "
                                             f"manifest.json (stale): re-materialize {key}"))
    blamed = {"bin_idx_consistent": url["idx"], "token_ids_below_vocab": url["bin"],
              "counts_match_metadata": url["idx"]}
    reported = set()
    for check, issue in verify_shard(store, blend, key, recorded).items():
        if issue and issue not in reported:  # a format error fails all three checks with one message
            reported.add(issue)
            problems.append(_locate(issue, blamed[check], url.values(), check))
    for ext in ("bin", "idx"):
        actual = sha256_of(store, f"{prefix}.{ext}")
        for label, values in (("receipt", receipt["stats"]), ("materialization", recorded or {})):
            expected = values.get(f"{ext}_sha256")
            if expected is not None and expected != actual:
                problems.append(Problem(url[ext], f"sha256 {actual} differs from the {label}'s {expected}"))
    return problems


def verify_blend_files(store: Storage, blend: Blend, plans: dict[str, SourceManifest | Problem]) -> list[Problem]:
    """blend.json lists only existing non-empty planned shards, and both files match what the shards give."""
    folder = pretrain_dir(blend.name)
    blend_json = f"{folder}/blend.json"
    if not store.exists(blend_json):
        return [Problem(store.url(blend_json), f"does not exist: materialize {blend.name}/megatron_blend")]
    try:
        listed = json.loads(store.read_bytes(blend_json))
        prefixes = [p for items in listed.values() for p in items[1::2]]
    except (ValueError, AttributeError, TypeError) as exc:
        return [Problem(store.url(blend_json), f"not a Megatron-Bridge blend ({exc})")]
    manifests = {name: m for name, m in plans.items() if isinstance(m, SourceManifest)}
    planned = {}
    for manifest in manifests.values():
        for shard in manifest.shards:
            key = ShardKey(manifest.dataset, shard.index)
            planned[str(key)] = planned[store.url(shard_prefix(blend.name, key))] = (manifest, shard.index)
    problems = []
    for prefix in prefixes:
        if prefix not in planned:
            problems.append(Problem(store.url(blend_json), f"lists {prefix}, which is not a planned shard"))
            continue
        manifest, index = planned[prefix]
        receipt, why_not = shard_done(store, blend.name, manifest, index)
        if receipt is None:
            problems.append(Problem(store.url(blend_json), f"lists {prefix}, which {why_not}"))
        elif int(receipt["stats"]["tokens"]) == 0:
            problems.append(Problem(store.url(blend_json), f"lists {prefix}, which is empty"))
    if problems or len(manifests) < len(plans):
        return problems
    try:
        expected = build_blend_files(store, blend, manifests, allow_missing=True).outputs
    except ValueError as exc:  # no non-empty shard at all
        return [Problem(store.url(blend_json), str(exc))]
    for relative, data in expected.items():
        if not store.exists(relative):
            problems.append(Problem(store.url(relative), f"does not exist: materialize {blend.name}/megatron_blend"))
        elif store.read_bytes(relative) != data:
            problems.append(Problem(store.url(relative), "does not match the shards' current token counts and "
                                                          f"list: re-materialize {blend.name}/megatron_blend"))
    return problems


def verify_blend(store: Storage, blend: Blend, plans: dict[str, SourceManifest | Problem],
                 history: ShardHistory) -> list[Problem]:
    problems = []
    for name, plan in plans.items():
        if isinstance(plan, Problem):
            problems.append(plan)
            continue
        for shard in plan.shards:
            recorded = history.metadata.get(str(ShardKey(name, shard.index)))
            problems.extend(verify_shard_files(store, blend.name, plan, shard.index, recorded))
    if not plans:
        return problems  # no pretraining datasets: there is no blend.json to check
    return problems + verify_blend_files(store, blend, plans)


def collect_problems(instance: dg.DagsterInstance, store: Storage, blend: Blend) -> list[Problem]:
    plans = read_plans(store, blend)
    history = read_history(instance, blend.name, planned_keys(plans), with_metadata=True)
    return verify_blend(store, blend, plans, history)


def _read_json(store: Storage, relative: str) -> dict | None:
    if not store.exists(relative):
        return None
    try:
        data = json.loads(store.read_bytes(relative))
    except (ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _locate(issue: str, default: str, urls, check: str) -> Problem:
    """Messages of format errors start with the file they are about; others get the file the check reads."""
    for url in urls:
        if issue.startswith(f"{url}: "):
            return Problem(url, issue[len(url) + 2:])
    return Problem(default, f"{check}: {issue}")
