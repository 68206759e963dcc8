"""Where the pretraining outputs live under a base folder (``<blend>`` or ``<blend>/samples/<sample>``)::

    <base>/pretrain/<dataset>/shard_NNNNN.bin|.idx    Megatron indexed dataset of one shard
    <base>/pretrain/<dataset>/.receipts/shard_NNNNN.json  the shard's receipt (core/records.py ``receipt_path``)
    <base>/pretrain/blend.json                        Megatron-Bridge per-split blend
    <base>/pretrain/data_path.txt                     the same as Megatron-LM --*-data-path arguments
    <base>/pretrain/.receipts/blend.receipt.json      their receipt
"""

from nemotron_assets.core.layout import ShardKey


def shard_prefix(base: str, key: ShardKey) -> str:
    return f"{base}/pretrain/{key.dataset}/shard_{key.index:05d}"


def pretrain_dir(base: str) -> str:
    return f"{base}/pretrain"
