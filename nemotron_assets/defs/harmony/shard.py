"""One normalized Harmony shard: the raw rows of one shard plan entry -> Parquet with the columns of
``normalize/record.py`` (build.py), built and committed as every output is (core/step.py).

What decides the shard's bytes (its receipt's ``inputs``):

- ``format``: this code's output format version (``FORMAT_VERSION``, bumped when the writer changes);
- ``source``: the manifest's fingerprint of the shard's rows and file versions;
- ``family`` and ``mapper_version``: the family mapper and its version (normalize/families.py, bumped
  whenever a mapper's output changes);
- ``settings``: the entry's ``split`` (some mappers read facts from it), ``messages_field``, ``tools_field``,
  ``text_field``, and the blend's ``on_error``.

The commit: receipt deleted, ``.parquet`` committed, receipt written. At every instant the storage holds a finished
shard, or a shard without a receipt (not done).
"""

from dataclasses import dataclass
from pathlib import Path

from nemotron_assets.core.blend import Blend, DatasetEntry
from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.records import Freshness, freshness
from nemotron_assets.core.step import Output, ShardBuild, Staged
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.build import build_harmony_shard, spreads_over_cores
from nemotron_assets.defs.harmony.layout import harmony_shard_prefix
from nemotron_assets.defs.sources.manifest import read_options
from nemotron_assets.normalize.families import mapper_version
from nemotron_assets.sources.files import is_remote
from nemotron_assets.sources.manifest import SourceManifest
from nemotron_assets.sources.readers import ReadOptions

RECEIPT_KIND = "harmony_shard"
FORMAT_VERSION = "harmony-parquet/1"


@dataclass(frozen=True)
class HarmonyDataset:
    """What of the blend normalizing one family dataset uses."""

    blend: str
    name: str
    family: str
    split: str | None  # the source split some mappers read facts from
    messages_field: str | None
    tools_field: str | None
    read: ReadOptions  # its text field, the blend's on_error, an S3 endpoint

    @classmethod
    def of(cls, blend: Blend, entry: DatasetEntry) -> "HarmonyDataset":
        return cls(blend.name, entry.name, entry.family, entry.split, entry.messages_field, entry.tools_field,
                   read_options(blend, entry))


def harmony_datasets(blend: Blend) -> dict[str, HarmonyDataset]:
    return {entry.name: HarmonyDataset.of(blend, entry) for entry in blend.datasets_of("harmony")}


def shard_inputs(dataset: HarmonyDataset, manifest: SourceManifest, index: int) -> dict:
    """The receipt ``inputs`` of Harmony shard ``index`` of ``manifest`` built now."""
    return {
        "format": FORMAT_VERSION,
        "source": manifest.shard_fingerprint(index),
        "family": dataset.family,
        "mapper_version": mapper_version(dataset.family),
        "settings": {"split": dataset.split, "messages_field": dataset.messages_field,
                     "tools_field": dataset.tools_field, "text_field": dataset.read.text_field,
                     "on_error": dataset.read.on_error},
    }


def harmony_freshness(store: Storage, dataset: HarmonyDataset, base: str, manifest: SourceManifest, index: int,
                      read_content: bool = False) -> Freshness:
    """The one up-to-date test (core/records.py), for one planned Harmony shard."""
    prefix = harmony_shard_prefix(base, ShardKey(manifest.dataset, index))
    return freshness(store, prefix, shard_inputs(dataset, manifest, index), read_content=read_content)


def shard_build(dataset: HarmonyDataset, manifest: SourceManifest, key: ShardKey, base: str) -> ShardBuild:
    """Harmony shard ``key`` of ``manifest`` under ``base``: its output, and its build."""
    output = Output(harmony_shard_prefix(base, key), shard_inputs(dataset, manifest, key.index), RECEIPT_KIND,
                    str(key), extra={"blend": dataset.blend, "split": manifest.split})

    def build(folder: Path, log, cores: int) -> Staged:
        staged = folder / "shard.parquet"
        stats = build_harmony_shard(manifest, key.index, dataset.family, dataset.split, dataset.read, staged,
                                    messages_field=dataset.messages_field, tools_field=dataset.tools_field,
                                    cores=cores)
        if stats.dropped:
            log(f"{key}: {sum(stats.dropped.values()):,} row(s) not written (unreadable, or skipped by their "
                f"family): {dict(stats.dropped)}; first: {stats.examples[0]}")
        return Staged({".parquet": staged}, stats.as_dict(),
                      digests={".parquet": {"bytes": stats.bytes, "sha256": stats.sha256}})

    local = not any(is_remote(manifest.files[r.file_index].url) for r in manifest.shards[key.index].ranges)
    return ShardBuild(output, build, forkable=local, spreads=spreads_over_cores(manifest, key.index))
