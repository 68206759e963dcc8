"""Megatron-Bridge ``blend.json`` and ``data_path.txt`` from the shards that exist.

A shard's weight is its dataset's weight times the shard's share of that dataset's tokens, so a dataset's
shards together weigh exactly what the user gave the dataset. Empty shards are left out (Megatron cannot
sample from them). A planned shard that is missing or was built from a different plan is an error unless
``allow_missing``: a blend silently missing data would train on the wrong mix.
"""

import json
from dataclasses import dataclass, field

from nemotron_assets.blend import Blend
from nemotron_assets.formats import megatron
from nemotron_assets.layout import ShardKey, pretrain_dir, shard_prefix
from nemotron_assets.pretrain.shard_step import read_receipt
from nemotron_assets.sources.manifest import SourceManifest
from nemotron_assets.storage import Storage


@dataclass
class BlendFiles:
    splits: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    outputs: dict[str, bytes] = field(default_factory=dict)
    shards_listed: int = 0
    empty_left_out: int = 0
    tokens_by_split: dict[str, int] = field(default_factory=dict)


def build_blend_files(store: Storage, blend: Blend, manifests: dict[str, SourceManifest],
                      allow_missing: bool = False) -> BlendFiles:
    result = BlendFiles()
    missing: list[str] = []
    for split, entries in blend.splits().items():
        pairs: list[tuple[float, str]] = []
        result.tokens_by_split[split] = 0
        for entry in entries:
            if entry.family:
                continue  # post-training data takes the Harmony path, not the Megatron blend
            manifest = manifests[entry.name]
            shard_tokens: list[tuple[ShardKey, int]] = []
            for shard in manifest.shards:
                key = ShardKey(entry.name, shard.index)
                receipt = read_receipt(store, shard_prefix(blend.name, key))
                if receipt is None or receipt.get("source_fingerprint") != manifest.shard_fingerprint(shard.index):
                    missing.append(str(key))
                    continue
                shard_tokens.append((key, int(receipt["stats"]["tokens"])))
            dataset_tokens = sum(t for _, t in shard_tokens)
            result.tokens_by_split[split] += dataset_tokens
            for key, tokens in shard_tokens:
                if tokens == 0:
                    result.empty_left_out += 1
                    continue
                if entry.weight == 0:
                    continue
                relative = f"{key.dataset}/shard_{key.index:05d}"
                prefix = store.url(shard_prefix(blend.name, key)) if blend.absolute_prefixes else relative
                pairs.append((entry.weight * tokens / dataset_tokens, prefix))
        if pairs:
            result.splits[split] = pairs
            result.shards_listed += len(pairs)
    if missing and not allow_missing:
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
        raise FileNotFoundError(f"blend {blend.name!r}: {len(missing)} planned shard(s) are not built (or were "
                                f"built from an older plan): {shown}. Materialize {blend.name}/pretrain_shard "
                                "for them, or set allow_missing_shards.")
    if not result.splits:
        raise ValueError(f"blend {blend.name!r}: no non-empty shard with weight > 0 to list")
    folder = pretrain_dir(blend.name)
    blend_json = json.dumps(megatron.blend_json(result.splits), indent=1) + "\n"
    data_path = megatron.data_path_args(result.splits, flat=blend.datasets is not None)
    result.outputs[f"{folder}/blend.json"] = blend_json.encode()
    result.outputs[f"{folder}/data_path.txt"] = data_path.encode()
    return result
