"""The JSONL files of one source shard, and the manifest listing them, built and committed as every output is
(core/step.py).

**A shard.** Its receipt is ``<base>/jsonl/<dataset>/.receipts/shard_NNNNN.json``; its files lie in the dataset's
folder, one per split that received rows, ``<split>/shard_NNNNN.jsonl[.zst]`` (the receipt names them by that path,
core/records.py ``output_path``), so a split's folder holds only JSONL. Its receipt ``inputs`` are everything that
decides the files' bytes:

- ``format``: the transforms' and writer's version (formats/transforms.py ``FORMAT_VERSION``);
- ``source``: the manifest's fingerprint of the shard's rows and file versions;
- ``transform`` (``Transform.spec``: the same however the blend spells it) and ``compression``;
- ``holdout`` (fractions and seed) and ``split``: the split every row of a dataset listed under the blend's
  ``valid:``/``test:`` goes to, in which case the holdout does not apply and is recorded as none.

Commit: receipt deleted; every file an earlier build may have left in a split or compression this build does not
write deleted (after the holdout or ``compression`` changed, yesterday's ``valid/shard_00000.jsonl`` must not stay
beside today's files); the new files committed; receipt written last.

**The manifest** ``<base>/jsonl/manifest.json`` (receipt ``.receipts/manifest.receipt.json``) lists per split the
files of every JSONL dataset in dataset then shard order, relative to ``root`` (the ``jsonl/`` folder), with counts
per dataset. It refuses planned shards that are not up to date (``NotReady`` naming them). Its inputs are each
shard's inputs hash and files' sha256 (a shard may have no file at all, and its counts are in the manifest), and
``root``.
"""

import json
from dataclasses import dataclass
from pathlib import Path

from nemotron_assets.core.blend import Blend, DatasetEntry
from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.records import Freshness, NotReady, Receipt, freshness_when_ready, require_manifest
from nemotron_assets.core.records import freshness as judged
from nemotron_assets.core.step import Outcome, Output, ShardBuild, Staged, build_output
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.jsonl.build import build_jsonl_shard
from nemotron_assets.defs.jsonl.layout import jsonl_dir, jsonl_manifest_path, jsonl_manifest_prefix, jsonl_shard_prefix
from nemotron_assets.defs.sources.manifest import read_options
from nemotron_assets.formats.splits import SPLITS, Holdout, Split
from nemotron_assets.formats.transforms import (
    FORMAT_VERSION,
    JsonlShardStats,
    Transform,
    jsonl_manifest,
    jsonl_name,
    parse_transform,
)
from nemotron_assets.sources.files import is_remote
from nemotron_assets.sources.manifest import SourceManifest
from nemotron_assets.sources.readers import ReadOptions

SHARD_KIND = "jsonl_shard"
MANIFEST_KIND = "jsonl_manifest"
MANIFEST_FORMAT = "jsonl-manifest/1"
SHOWN_NOT_READY = 5  # shards named in a NotReady message


@dataclass(frozen=True)
class JsonlDataset:
    """What of the blend transforming one dataset uses."""

    blend: str
    name: str
    transform: Transform
    compression: str | None
    holdout: Holdout | None  # None: no holdout, or a dataset listed under valid:/test: (``fixed_split``)
    holdout_settings: dict | None  # the holdout as the receipt records it
    fixed_split: Split | None  # the split every row of a dataset listed under valid: or test: goes to
    read: ReadOptions

    @classmethod
    def of(cls, blend: Blend, entry: DatasetEntry) -> "JsonlDataset":
        split = blend.split_of(entry.name)
        fixed = None if split == "train" else split
        holdout = blend.holdout if fixed is None else None
        return cls(blend.name, entry.name, parse_transform(entry.transform), entry.compression,
                   holdout.holdout() if holdout is not None else None,
                   holdout.model_dump() if holdout is not None else None, fixed, read_options(blend, entry))


def jsonl_datasets(blend: Blend) -> dict[str, JsonlDataset]:
    return {entry.name: JsonlDataset.of(blend, entry) for entry in blend.datasets_of("jsonl")}


# --- one shard ------------------------------------------------------------------------------------------------
def shard_inputs(dataset: JsonlDataset, manifest: SourceManifest, index: int) -> dict:
    """The receipt ``inputs`` of JSONL shard ``index`` of ``manifest`` built now."""
    return {"format": FORMAT_VERSION, "source": manifest.shard_fingerprint(index),
            "transform": dataset.transform.spec(), "compression": dataset.compression,
            "holdout": dataset.holdout_settings, "split": dataset.fixed_split}


def jsonl_freshness(store: Storage, dataset: JsonlDataset, base: str, manifest: SourceManifest, index: int,
                    read_content: bool = False) -> Freshness:
    """The one up-to-date test (core/records.py), for one planned JSONL shard."""
    prefix = jsonl_shard_prefix(base, ShardKey(manifest.dataset, index))
    return judged(store, prefix, shard_inputs(dataset, manifest, index), read_content=read_content)


def possible_files(index: int) -> list[str]:
    """Every file a build of shard ``index`` can write, named as its receipt names them."""
    return [f"{split}/{jsonl_name(index, compression)}" for split in SPLITS for compression in (None, "zstd")]


def shard_build(dataset: JsonlDataset, manifest: SourceManifest, key: ShardKey, base: str) -> ShardBuild:
    """JSONL shard ``key`` of ``manifest`` under ``base``: its output, and its build."""
    output = Output(jsonl_shard_prefix(base, key), shard_inputs(dataset, manifest, key.index), SHARD_KIND, str(key),
                    extra={"blend": dataset.blend, "split": manifest.split})

    def build(folder: Path, log, cores: int) -> Staged:
        stats = build_jsonl_shard(manifest, key.index, dataset.transform, dataset.read, folder,
                                  holdout=dataset.holdout, fixed_split=dataset.fixed_split,
                                  compression=dataset.compression)
        if stats.dropped:
            log(f"{key}: {sum(stats.dropped.values()):,} of {stats.rows_in:,} row(s) not written: "
                f"{dict(stats.dropped)}; first: {stats.examples[0]}")
        files = {f["path"]: {"bytes": f["bytes"], "sha256": f["sha256"]} for f in stats.files.values()}
        return Staged({name: folder / name for name in files}, stats.as_dict(), digests=files,
                      delete_first=tuple(name for name in possible_files(key.index) if name not in files))

    local = not any(is_remote(manifest.files[r.file_index].url) for r in manifest.shards[key.index].ranges)
    return ShardBuild(output, build, forkable=local)


# --- the manifest -----------------------------------------------------------------------------------------------
def current_shards(store: Storage, datasets: dict[str, JsonlDataset], base: str) -> list[tuple[ShardKey, Receipt]]:
    """Every planned JSONL shard with its receipt, in blend then shard order; ``NotReady`` naming the shards that
    are not up to date (or the dataset that has no plan)."""
    done, not_done = [], []
    blend = ""
    for dataset in datasets.values():
        blend = dataset.blend
        manifest = require_manifest(store, dataset.blend, base, dataset.name)
        for shard in manifest.shards:
            key = ShardKey(dataset.name, shard.index)
            state = jsonl_freshness(store, dataset, base, manifest, shard.index)
            if state.done:
                done.append((key, state.receipt))
            else:
                not_done.append(f"{key} ({state.state.value}: {state.reason})")
    if not_done:
        more = f" and {len(not_done) - SHOWN_NOT_READY} more" if len(not_done) > SHOWN_NOT_READY else ""
        raise NotReady(f"{len(not_done)} JSONL shard(s) of {blend} are not up to date: "
                       f"{'; '.join(not_done[:SHOWN_NOT_READY])}{more}: materialize {blend}/jsonl_shard first")
    return done


def manifest_inputs(store: Storage, base: str, shards: list[tuple[ShardKey, Receipt]]) -> dict:
    return {"format": MANIFEST_FORMAT, "root": store.url(jsonl_dir(base)),
            "shards": {str(key): {"inputs": receipt.inputs_sha256,
                                  "files": {name: recorded["sha256"] for name, recorded in receipt.files.items()}}
                       for key, receipt in shards}}


def materialize_jsonl_manifest(store: Storage, blend: str, datasets: dict[str, JsonlDataset], base: str,
                               force: bool = False, log=print) -> tuple[Outcome, dict]:
    """``<base>/jsonl/manifest.json`` of the shards under ``base``, or find it up to date; (outcome, manifest)."""
    shards = current_shards(store, datasets, base)
    inputs = manifest_inputs(store, base, shards)
    written: list[dict] = []

    def build(folder: Path) -> Staged:
        listing = jsonl_manifest([JsonlShardStats.from_dict(receipt.stats) for _, receipt in shards])
        manifest = {"format": listing.pop("format"), "blend": blend, "root": inputs["root"], **listing}
        written.append(manifest)
        (folder / "manifest.json").write_bytes(json.dumps(manifest, indent=1).encode() + b"\n")
        return Staged({"manifest.json": folder / "manifest.json"},
                      {"rows": manifest["rows"], "files": {split: len(manifest[split]) for split in SPLITS}})

    outcome = build_output(store, Output(jsonl_manifest_prefix(base), inputs, MANIFEST_KIND, "manifest"), build,
                           force, log)
    manifest = written[0] if written else json.loads(store.read_bytes(jsonl_manifest_path(base)))
    return outcome, manifest


def manifest_freshness(store: Storage, datasets: dict[str, JsonlDataset], base: str,
                       read_content: bool = False) -> Freshness:
    """The manifest's state by the one definition; while its shards are not all up to date it cannot be judged:
    stale if it was built, else missing (core/records.py ``freshness_when_ready``)."""
    return freshness_when_ready(store, jsonl_manifest_prefix(base),
                                lambda: manifest_inputs(store, base, current_shards(store, datasets, base)),
                                read_content=read_content)
