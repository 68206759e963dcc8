"""Where the pretraining outputs live under a base folder (``<blend>`` or ``<blend>/samples/<sample>``)::

    <base>/pretrain/<dataset>/shard_NNNNN.bin|.idx    Megatron indexed dataset of one shard
    <base>/pretrain/<dataset>/shard_NNNNN_<field>_document.bin|.idx
                                                      ... one per field of a list text_field (Megatron's --json-keys
                                                      names; ``_sentence`` instead of ``_document`` with
                                                      split_sentences)
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


def field_suffixes(fields: tuple[str, ...] | None, sentences: bool) -> dict[str | None, str]:
    """The Megatron datasets one shard writes, by text field, each as what follows the shard's prefix in its name:
    one dataset at the prefix itself for a single ``text_field`` (None); for a list, ``_<field>_document`` per
    field, or ``_<field>_sentence`` with ``split_sentences``, as ``preprocess_data.py`` names its outputs."""
    if fields is None:
        return {None: ""}
    level = "sentence" if sentences else "document"
    return {field: f"_{field}_{level}" for field in fields}


def receipt_names(key: ShardKey, suffix: str) -> tuple[str, str]:
    """How the shard's receipt names the ``.bin`` and ``.idx`` of the dataset at ``suffix`` (core/records.py
    ``output_path``): by their suffix for the dataset at the prefix, else by their file names."""
    if not suffix:
        return ".bin", ".idx"
    stem = f"shard_{key.index:05d}{suffix}"
    return f"{stem}.bin", f"{stem}.idx"
