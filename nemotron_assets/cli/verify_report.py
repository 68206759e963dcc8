"""Whether a blend's outputs are intact and current: the ``verify`` command.

For every planned shard: the one up-to-date test (records.py ``freshness``, here hashing every file, whatever
its stamp), the shard checks (pretrain/shard_checks.py: ``.idx``/``.bin`` structure, token ids below the
vocabulary, counts against the receipt and the materialization), and the files' sha256 against what the
shard's own materialization recorded. Then ``blend.json``/``data_path.txt`` against the shards. JSONL shards: the
same up-to-date test, then every file read back (posttrain/jsonl_files.py: it decompresses, each line is a JSON
object, the lines per split are as the receipt says), then the JSONL manifest. Each problem names one file and
says why. Staging folders are not outputs and are never looked at.
"""

import json

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

from nemotron_assets.cli.status_report import (
    HARMONY,
    JSONL,
    PRETRAIN_SHARD,
    Problem,
    harmony_freshness,
    planned_shards,
    read_plans,
    shard_freshness,
)
from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import (
    ShardKey,
    harmony_shard_prefix,
    jsonl_manifest_path,
    jsonl_shard_prefix,
    pretrain_dir,
    shard_prefix,
)
from nemotron_assets.core.partitions import pretrain_partitions_name
from nemotron_assets.core.records import NotReady, SourceManifest, State, output_path, receipt_path
from nemotron_assets.core.run_history import partition_history
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.downstream import downstream_states
from nemotron_assets.defs.harmony.harmony_shard import SCHEMA as HARMONY_SCHEMA
from nemotron_assets.defs.jsonl.files import shard_problems
from nemotron_assets.defs.jsonl.steps import jsonl_freshness, manifest_freshness
from nemotron_assets.defs.pretrain.blend_files import build_blend_files
from nemotron_assets.defs.pretrain.inputs import blend_tokenizer_identity
from nemotron_assets.defs.pretrain.shard_checks import check_shard
from nemotron_assets.defs.scoring.verify import scoring_problems
from nemotron_assets.defs.sft.verify import sft_problems
from nemotron_assets.sources.errors import InputError


def verify_shard_files(store: Storage, blend: Blend, manifest: SourceManifest, index: int, tokenizer: dict,
                       recorded: dict | None) -> list[Problem]:
    """Every problem of one planned shard of the full build; its files are read in full."""
    key = ShardKey(manifest.dataset, index)
    prefix = shard_prefix(blend.name, key)
    url = {ext: store.url(f"{prefix}{ext}") for ext in (".bin", ".idx", ".json")}
    absent = [ext for ext in (".idx", ".bin", ".json") if not store.exists(prefix + ext)]
    if len(absent) == len(url):  # never built: one line, with what to run
        return [Problem(url[".bin"], f"does not exist (nor its .idx and receipt): materialize "
                                     f"{blend.name}/pretrain_shard partition {key}")]
    if absent:
        return [Problem(url[ext], "does not exist") for ext in absent]
    state = shard_freshness(store, blend, blend.name, manifest, index, tokenizer, read_content=True)
    problems = []
    if state.state is State.MISSING:
        return [Problem(store.url(receipt_path(prefix)), f"{state.reason}: re-materialize {key}")]
    if state.state is State.STALE:
        changed = next((ext for ext in (".bin", ".idx") if f"its {ext} file" in state.reason), ".json")
        problems.append(Problem(url[changed], f"stale: {state.reason}: re-materialize {key}"))
    reported = set()
    blamed = {"bin_idx_consistent": url[".idx"], "token_ids_below_vocab": url[".bin"],
              "counts_match_metadata": url[".idx"]}
    for check, issue in check_shard(store, prefix, recorded).items():
        if issue and issue not in reported:  # a format error fails all three checks with one message
            reported.add(issue)
            problems.append(_locate(issue, blamed[check], url.values(), check))
    if recorded is None:
        problems.append(Problem(url[".json"], f"no materialization of {key} is recorded in the Dagster instance "
                                              "(the UI does not show it built): run materialize again to record it"))
        return problems
    for ext in (".bin", ".idx"):
        expected = recorded.get(f"{ext[1:]}_sha256")
        actual = state.receipt.files[ext]["sha256"]
        if expected is not None and expected != actual:
            problems.append(Problem(url[ext], f"sha256 {actual} of the receipt differs from the "
                                              f"materialization's {expected}"))
    return problems


def verify_blend_files(store: Storage, blend: Blend, plans: dict[str, SourceManifest | Problem],
                       tokenizer: dict) -> list[Problem]:
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
    planned = {}
    for manifest, index in planned_shards(plans):
        key = ShardKey(manifest.dataset, index)
        planned[str(key)] = planned[store.url(shard_prefix(blend.name, key))] = (manifest, index)
    problems = []
    for prefix in prefixes:
        if prefix not in planned:
            problems.append(Problem(store.url(blend_json), f"lists {prefix}, which is not a planned shard"))
            continue
        manifest, index = planned[prefix]
        state = shard_freshness(store, blend, blend.name, manifest, index, tokenizer)
        if not state.done:
            problems.append(Problem(store.url(blend_json), f"lists {prefix}, which is {state.state.value}: "
                                                           f"{state.reason}"))
        elif int(state.receipt.stats["tokens"]) == 0:
            problems.append(Problem(store.url(blend_json), f"lists {prefix}, which is empty"))
    manifests = {name: m for name, m in plans.items() if isinstance(m, SourceManifest)}
    if problems or len(manifests) < len(plans):
        return problems
    try:
        expected = build_blend_files(store, blend, manifests, tokenizer, allow_missing=True).outputs
    except (ValueError, NotReady) as exc:  # no non-empty shard at all, or stale shards (reported per shard)
        return [Problem(store.url(blend_json), str(exc))]
    for relative, data in expected.items():
        if not store.exists(relative):
            problems.append(Problem(store.url(relative), f"does not exist: materialize {blend.name}/megatron_blend"))
        elif store.read_bytes(relative) != data:
            problems.append(Problem(store.url(relative), "does not match the shards' current token counts and "
                                                          f"list: re-materialize {blend.name}/megatron_blend"))
    return problems


def collect_problems(instance: dg.DagsterInstance, store: Storage, blend: Blend) -> list[Problem]:
    """Every problem of the full build of ``blend`` (samples are not verified): its pretraining shards and
    blend.json, its Harmony shards and what was built from them, its JSONL shards and their manifest, and its
    packed SFT (sft/steps/verify.py)."""
    return (pretrain_problems(instance, store, blend) + harmony_problems(store, blend) + jsonl_problems(store, blend)
            + sft_problems(store, blend) + scoring_problems(store, blend))


def pretrain_problems(instance: dg.DagsterInstance, store: Storage, blend: Blend) -> list[Problem]:
    plans = read_plans(store, blend)
    if not plans:
        return []  # no pretraining datasets: there is no blend.json to check
    try:
        tokenizer = blend_tokenizer_identity(blend)
    except InputError as exc:
        return [Problem(exc.path or blend.tokenizer_model, str(exc))]
    keys = [str(ShardKey(m.dataset, i)) for m, i in planned_shards(plans)]
    history = partition_history(instance, dg.AssetKey([blend.name, PRETRAIN_SHARD]),
                                pretrain_partitions_name(blend.name), keys, with_metadata=True)
    problems = [plan for plan in plans.values() if isinstance(plan, Problem)]
    for manifest, index in planned_shards(plans):
        recorded = history.metadata.get(str(ShardKey(manifest.dataset, index)))
        problems.extend(verify_shard_files(store, blend, manifest, index, tokenizer, recorded))
    return problems + verify_blend_files(store, blend, plans, tokenizer)


def harmony_problems(store: Storage, blend: Blend) -> list[Problem]:
    """Each Harmony shard hashed against its receipt, its schema and row count checked; then the dedup results,
    pools, views and report by the same definition, and their row counts."""
    plans = read_plans(store, blend, kind=HARMONY)
    if not plans:
        return []
    problems = [plan for plan in plans.values() if isinstance(plan, Problem)]
    for manifest, index in planned_shards(plans):
        key = ShardKey(manifest.dataset, index)
        prefix = harmony_shard_prefix(blend.name, key)
        state = harmony_freshness(store, blend, blend.name, manifest, index, read_content=True)
        if not state.done:
            rerun = f"re-materialize {blend.name}/harmony_shard partition '{key}'"
            problems.append(Problem(store.url(f"{prefix}.parquet"), f"{state.state.value}: {state.reason}: {rerun}"))
            continue
        problems += _parquet_problems(store, f"{prefix}.parquet", state.receipt.stats["records"], HARMONY_SCHEMA)
    if problems:
        return problems  # what is built from the shards cannot be judged until they are right
    for output in downstream_states(store, blend, blend.name, read_content=True):
        suffix = ".md" if output.asset == "behavior_report" else ".parquet"
        url = store.url(output.prefix + suffix)
        what = f"{blend.name}/{output.asset}" + (f" partition '{output.key}'" if output.key else "")
        if not output.freshness.done:
            problems.append(Problem(url, f"{output.freshness.state.value}: {output.freshness.reason}: "
                                         f"re-materialize {what}"))
        elif suffix == ".parquet" and "rows" in output.freshness.receipt.stats and output.asset != "harmony_dedup":
            problems += _parquet_problems(store, output.prefix + suffix, output.freshness.receipt.stats["rows"])
    return problems


def jsonl_problems(store: Storage, blend: Blend) -> list[Problem]:
    """Each JSONL shard hashed against its receipt and read back line by line; then the manifest."""
    plans = read_plans(store, blend, kind=JSONL)
    if not plans:
        return []
    problems = [plan for plan in plans.values() if isinstance(plan, Problem)]
    for manifest, index in planned_shards(plans):
        key = ShardKey(manifest.dataset, index)
        prefix = jsonl_shard_prefix(blend.name, key)
        state = jsonl_freshness(store, blend, blend.name, manifest, index, read_content=True)
        if not state.done:
            rerun = f"re-materialize {blend.name}/jsonl_shard partition '{key}'"
            problems.append(Problem(_blamed_file(store, prefix, state.receipt, state.reason),
                                    f"{state.state.value}: {state.reason}: {rerun}"))
            continue
        read_back = shard_problems(store, prefix, state.receipt)
        problems += [Problem(store.url(path), why) for path, why in read_back.items()]
    if problems:
        return problems  # the manifest cannot be judged until the shards are right
    state = manifest_freshness(store, blend, blend.name, read_content=True)
    if not state.done:
        problems.append(Problem(store.url(jsonl_manifest_path(blend.name)), f"{state.state.value}: {state.reason}: "
                                                                         f"re-materialize {blend.name}/jsonl_manifest"))
    return problems


def _blamed_file(store: Storage, prefix: str, receipt, reason: str) -> str:
    """The file a freshness reason is about (``its train/shard_00000.jsonl.zst file changed ...``), else the
    receipt."""
    for name in receipt.files if receipt is not None else ():
        if f"its {name} file" in reason:
            return store.url(output_path(prefix, name))
    return store.url(receipt_path(prefix))


def _parquet_problems(store: Storage, relative: str, rows: int, schema: pa.Schema | None = None) -> list[Problem]:
    """The file's row count (and schema) against what its receipt records."""
    with store.open(relative) as stream:
        metadata = pq.ParquetFile(stream).metadata
        found_schema = metadata.schema.to_arrow_schema()
    problems = []
    if metadata.num_rows != rows:
        problems.append(Problem(store.url(relative), f"holds {metadata.num_rows:,} rows, its receipt says {rows:,}"))
    if schema is not None and not found_schema.equals(schema):
        missing = sorted(set(schema.names) - set(found_schema.names))
        problems.append(Problem(store.url(relative), f"its columns are not the normalized schema (missing: "
                                                     f"{', '.join(missing) or 'none'}; other types or order)"))
    return problems


def _locate(issue: str, default: str, urls, check: str) -> Problem:
    """Messages of format errors start with the file they are about; others get the file the check reads."""
    for url in urls:
        if issue.startswith(f"{url}: "):
            return Problem(url, issue[len(url) + 2:])
    return Problem(default, f"{check}: {issue}")
