"""What ``status`` and ``verify`` say of the pretraining path (core/status.py says what the states mean).

**status**: the table "Megatron shards": per dataset its shards planned / done / stale / failed / missing, tokens
and rows, and where blend.json is.

**verify**: every planned shard of the full build by the one up-to-date test, hashing every file whatever its stamp;
the shard checks (checks.py: ``.idx``/``.bin`` structure, token ids below the vocabulary, counts against the
receipt and the materialization); the files' sha256 against what the shard's own materialization recorded. Then
``blend.json``/``data_path.txt`` against the shards. Each problem names one file and says why.
"""

import json

import dagster as dg

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import ShardKey, base_dir
from nemotron_assets.core.partitions import Scope
from nemotron_assets.core.pipeline import StatusRequest
from nemotron_assets.core.records import (
    Freshness,
    NotReady,
    Receipt,
    State,
    freshness,
    output_path,
    receipt_path,
    stored_path,
)
from nemotron_assets.core.run_history import partition_history
from nemotron_assets.core.status import (
    RECORDED,
    DatasetStatus,
    OutputStatus,
    Plans,
    Problem,
    ShardKind,
    StatusSection,
    planned_shards,
    shard_statuses,
)
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.pretrain.blend_files import BlendListing, blend_files_freshness, build_blend_files
from nemotron_assets.defs.pretrain.checks import check_shard
from nemotron_assets.defs.pretrain.layout import pretrain_dir, receipt_names, shard_prefix
from nemotron_assets.defs.pretrain.shard import PretrainSettings, shard_inputs
from nemotron_assets.sources.errors import InputError
from nemotron_assets.sources.manifest import SourceManifest

PRETRAIN_SHARD = "pretrain_shard"


def _count(status: DatasetStatus, receipt: Receipt) -> None:
    status.rows += int(receipt.stats["rows"])
    status.tokens += int(receipt.stats["tokens"])
    status.documents += int(receipt.stats["documents"])


SHARDS = ShardKind("pretrain", PRETRAIN_SHARD, _count)
COLUMNS = ("planned", "done", "stale", "failed", "missing", "tokens", "rows")


def shard_freshness(store: Storage, settings: PretrainSettings, base: str, manifest: SourceManifest, index: int,
                    tokenizer: dict, read_content: bool = False) -> Freshness:
    """The one up-to-date test (core/records.py), for one planned pretraining shard."""
    prefix = shard_prefix(base, ShardKey(manifest.dataset, index))
    return freshness(store, prefix, shard_inputs(settings, manifest, index, tokenizer), read_content=read_content)


def pretrain_status(request: StatusRequest) -> list[StatusSection]:
    blend, store = request.blend, request.store
    base = base_dir(blend.name, request.sample)
    blend_json = f"{pretrain_dir(base)}/blend.json"
    section = StatusSection("Megatron shards", COLUMNS, note=f"blend.json {store.url(blend_json)}"
                            + ("" if store.exists(blend_json) else " (not written yet)"))
    listing = BlendListing.of(blend)
    settings = PretrainSettings.of(blend)
    try:
        tokenizer = settings.tokenizer_identity()
    except InputError as exc:
        section.error = str(exc)
        return [section]
    scope = Scope(blend.name, samples=request.sample is not None)
    section.datasets = shard_statuses(
        request.instance, store, blend, base, request.sample, SHARDS, scope.dynamic_name("pretrain_shards"),
        lambda manifest, index: shard_freshness(store, settings, base, manifest, index, tokenizer),
        request.plans_of)
    if request.sample is None:
        plans = request.plans_of.of(store, blend, base, blend.datasets_of("pretrain"))
        manifests = {name: plan for name, plan in plans.items() if not isinstance(plan, Problem)}
        state = blend_files_freshness(store, listing, settings, base,
                                      manifests if len(manifests) == len(plans) else None)
        listed = {"shards listed": int(state.receipt.stats["shards"])} if state.done else {}
        section.outputs.append(OutputStatus("megatron_blend", "", state.state.value, state.reason, counts=listed))
    return [section]


# --- verify -------------------------------------------------------------------------------------------------------
def pretrain_problems(instance: dg.DagsterInstance, store: Storage, blend: Blend, plans_of: Plans = RECORDED
                      ) -> list[Problem]:
    plans = plans_of.of(store, blend, blend.name, blend.datasets_of("pretrain"))
    if not plans:
        return []  # no pretraining datasets: there is no blend.json to check
    settings = PretrainSettings.of(blend)
    try:
        tokenizer = settings.tokenizer_identity()
    except InputError as exc:
        return [Problem(exc.path or blend.tokenizer_model, str(exc))]
    keys = [str(ShardKey(m.dataset, i)) for m, i in planned_shards(plans)]
    history = partition_history(instance, dg.AssetKey([blend.name, PRETRAIN_SHARD]),
                                Scope(blend.name).dynamic_name("pretrain_shards"), keys, with_metadata=True)
    problems, troubled = [plan for plan in plans.values() if isinstance(plan, Problem)], set()
    for manifest, index in planned_shards(plans):
        recorded = history.metadata.get(str(ShardKey(manifest.dataset, index)))
        found = verify_shard_files(store, blend.name, settings, manifest, index, tokenizer, recorded)
        troubled |= {manifest.dataset} if found else set()
        problems.extend(found)
    problems = plans_of.input_problems(blend.datasets_of("pretrain"), troubled) + problems
    return problems + verify_blend_files(store, blend, settings, plans, tokenizer)


def verify_shard_files(store: Storage, blend: str, settings: PretrainSettings, manifest: SourceManifest, index: int,
                       tokenizer: dict, recorded: dict | None) -> list[Problem]:
    """Every problem of one planned shard of the full build; its files are read in full."""
    key = ShardKey(manifest.dataset, index)
    prefix = shard_prefix(blend, key)
    # each Megatron dataset's .idx and .bin (one per field of a list text_field; the first one's names are the
    # ones the materialization's sha256 values are about), then the receipt, at its legacy place until moved
    names = [name for suffix in settings.field_suffixes(manifest.dataset).values()
             for name in reversed(receipt_names(key, suffix))]
    first_idx, first_bin = names[0], names[1]
    files = {**{name: output_path(prefix, name) for name in names}, ".json": stored_path(store, receipt_path(prefix))}
    url = {name: store.url(path) for name, path in files.items()}
    absent = [name for name in files if not store.exists(files[name])]
    if len(absent) == len(url):  # never built: one line, with what to run
        return [Problem(url[first_bin], f"does not exist (nor its .idx and receipt): materialize "
                                        f"{blend}/pretrain_shard partition {key}")]
    if absent:
        return [Problem(url[name], "does not exist") for name in absent]
    state = shard_freshness(store, settings, blend, manifest, index, tokenizer, read_content=True)
    problems = []
    if state.state is State.MISSING:
        return [Problem(url[".json"], f"{state.reason}: re-materialize {key}")]
    if state.state is State.STALE:
        changed = next((name for name in names if f"its {name} file" in state.reason), ".json")
        problems.append(Problem(url[changed], f"stale: {state.reason}: re-materialize {key}"))
    reported = set()
    blamed = {"bin_idx_consistent": url[first_idx], "token_ids_below_vocab": url[first_bin],
              "counts_match_metadata": url[first_idx]}
    for check, issue in check_shard(store, prefix, recorded).items():
        if issue and issue not in reported:  # a format error fails all three checks with one message
            reported.add(issue)
            problems.append(_locate(issue, blamed[check], url.values(), check))
    if recorded is None:
        problems.append(Problem(url[".json"], f"no materialization of {key} is recorded in the Dagster instance "
                                              "(the UI does not show it built): run materialize again to record it"))
        return problems
    for ext, name in ((".bin", first_bin), (".idx", first_idx)):
        expected = recorded.get(f"{ext[1:]}_sha256")
        actual = state.receipt.files[name]["sha256"]
        if expected is not None and expected != actual:
            problems.append(Problem(url[name], f"sha256 {actual} of the receipt differs from the "
                                               f"materialization's {expected}"))
    return problems


def verify_blend_files(store: Storage, blend: Blend, settings: PretrainSettings,
                       plans: dict[str, SourceManifest | Problem], tokenizer: dict) -> list[Problem]:
    """blend.json lists only existing non-empty planned shards, and both files match what the shards give."""
    folder = pretrain_dir(blend.name)
    blend_json = f"{folder}/blend.json"
    if not store.exists(blend_json):
        return [Problem(store.url(blend_json), f"does not exist: materialize {blend.name}/megatron_blend")]
    try:
        listed = json.loads(store.read_bytes(blend_json))
        prefixes = [p for items in listed.values() if items for p in items[1::2]]
    except (ValueError, AttributeError, TypeError) as exc:
        return [Problem(store.url(blend_json), f"not a Megatron-Bridge blend ({exc})")]
    listing = BlendListing.of(blend)
    planned = {}
    for manifest, index in planned_shards(plans):
        key, suffix = ShardKey(manifest.dataset, index), listing.suffix(manifest.dataset)
        planned[f"{key}{suffix}"] = planned[store.url(shard_prefix(blend.name, key) + suffix)] = (manifest, index)
    problems = []
    for prefix in prefixes:
        if prefix not in planned:
            problems.append(Problem(store.url(blend_json), f"lists {prefix}, which is not a planned shard"))
            continue
        manifest, index = planned[prefix]
        state = shard_freshness(store, settings, blend.name, manifest, index, tokenizer)
        if not state.done:
            problems.append(Problem(store.url(blend_json), f"lists {prefix}, which is {state.state.value}: "
                                                           f"{state.reason}"))
        elif listing.tokens(manifest.dataset, state.receipt.stats) == 0:
            problems.append(Problem(store.url(blend_json), f"lists {prefix}, which is empty"))
    manifests = {name: m for name, m in plans.items() if isinstance(m, SourceManifest)}
    if problems or len(manifests) < len(plans):
        return problems
    try:
        expected = build_blend_files(store, listing, settings, manifests, tokenizer, blend.name,
                                     allow_missing=True).outputs
    except (ValueError, NotReady) as exc:  # no non-empty shard at all, or stale shards (reported per shard)
        return [Problem(store.url(blend_json), str(exc))]
    for relative, data in expected.items():
        if not store.exists(relative):
            problems.append(Problem(store.url(relative), f"does not exist: materialize {blend.name}/megatron_blend"))
        elif store.read_bytes(relative) != data:
            problems.append(Problem(store.url(relative), "does not match the shards' current token counts and "
                                                          f"list: re-materialize {blend.name}/megatron_blend"))
    return problems


def _locate(issue: str, default: str, urls, check: str) -> Problem:
    """Messages of format errors start with the file they are about; others get the file the check reads."""
    for url in urls:
        if issue.startswith(f"{url}: "):
            return Problem(url, issue[len(url) + 2:])
    return Problem(default, f"{check}: {issue}")
