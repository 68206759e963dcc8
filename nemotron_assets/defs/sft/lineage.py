"""W&B lineage of the packed SFT path (core/lineage.py says how lineage works): the sft_manifest run uses the Harmony
shards artifact of every family dataset (and, when ``sft.from`` names pools, each of them: a candidate pool's or a
selection's artifact) and logs ``<blend>-sft`` (type sft-packed: manifest.json, packing_metadata.json and the
manifest's receipt, checksummed; every packed shard's receipt, checksummed, and the Parquet files its receipt lists
(the bins and the ``.meta/`` samples listing) and each split's .npy by reference).
"""

from collections.abc import Iterable, Sequence

import dagster as dg

from nemotron_assets.core.lineage import WandbLineage, files_artifact, reference, shards_artifact
from nemotron_assets.core.records import output_path, read_receipt, receipt_path
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.lineage import HARMONY_SHARDS
from nemotron_assets.defs.scoring.lineage import ScoresInput, input_artifact


def log_sft(lineage: WandbLineage, context: dg.AssetExecutionContext, store: Storage, blend: str, metadata: dict,
            manifests: dict, files: Iterable[str], shards: Iterable[str], pools: Sequence[ScoresInput] = ()) -> None:
    """``manifests``: dataset -> SourceManifest of the family datasets; ``files``: the manifest's files
    (manifest.json, packing_metadata.json, the .npy), ``shards``: the packed shards' storage prefixes, both relative
    to the storage root; ``pools``: what ``sft.from`` names."""
    lineage.log(context, blend, "sft_manifest",
                used=lambda: [*(shards_artifact(store, blend, dataset, manifest, HARMONY_SHARDS)
                                for dataset, manifest in manifests.items()),
                              *(input_artifact(store, blend, pool) for pool in pools)],
                logged=lambda: [sft_artifact(store, blend, {"dagster_run_id": context.run_id, **metadata}, files,
                                             shards)])


def sft_artifact(store: Storage, blend: str, metadata: dict, files: Iterable[str], shards: Iterable[str]):
    """``<blend>-sft``: the manifest's files (checksummed but the .npy) and every packed shard's receipt and files."""
    references = [reference(store, relative, checksum=not relative.endswith(".npy")) for relative in files]
    for prefix in shards:
        receipt = read_receipt(store, prefix)
        references += [reference(store, receipt_path(prefix), checksum=True),
                       *(reference(store, output_path(prefix, name), checksum=False)
                         for name in (receipt.files if receipt else ()))]
    return files_artifact(f"{blend}-sft", "sft-packed", metadata, references)
