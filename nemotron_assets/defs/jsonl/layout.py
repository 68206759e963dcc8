"""Where the JSONL outputs live under a base folder (``<blend>`` or ``<blend>/samples/<sample>``)::

    <base>/jsonl/<dataset>/<split>/shard_NNNNN.jsonl[.zst]  JSONL rows of one source shard in one split
    <base>/jsonl/<dataset>/.receipts/shard_NNNNN.json that source shard's receipt (every split's file)
    <base>/jsonl/manifest.json                        the files per split, for NeMo-RL
    <base>/jsonl/.receipts/manifest.receipt.json      its receipt

A split's folder holds only JSONL files, so ``datasets.load_dataset("json", data_dir=<split folder>)`` reads it.
"""

from nemotron_assets.core.layout import ShardKey


def jsonl_dir(base: str) -> str:
    return f"{base}/jsonl"


def jsonl_shard_prefix(base: str, key: ShardKey) -> str:
    """``<base>/jsonl/<dataset>/shard_NNNNN``: its receipt (``.receipts/shard_NNNNN.json``) lists one source shard's
    JSONL files, which lie in one folder per split, ``<split>/shard_NNNNN.jsonl[.zst]`` (core/records.py
    ``output_path``)."""
    return f"{jsonl_dir(base)}/{key.dataset}/shard_{key.index:05d}"


def jsonl_manifest_path(base: str) -> str:
    return f"{jsonl_dir(base)}/manifest.json"


def jsonl_manifest_prefix(base: str) -> str:
    """The manifest's receipt is ``<base>/jsonl/.receipts/manifest.receipt.json`` (its prefix is not ``manifest``:
    before ``.receipts/`` existed the receipt lay beside the manifest, and ``manifest.json`` is the manifest)."""
    return f"{jsonl_dir(base)}/manifest.receipt"
