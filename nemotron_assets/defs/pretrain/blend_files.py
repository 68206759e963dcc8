"""Megatron-Bridge ``blend.json`` and ``data_path.txt`` from the shards that are up to date.

A shard's weight is its dataset's weight times the shard's share of that dataset's tokens, so a dataset's
shards together weigh exactly what the user gave the dataset. Empty shards are left out (Megatron cannot
sample from them). Every planned shard must be up to date (records.py ``freshness``): a stale shard (built with
other settings, another tokenizer, or from other input) is always an error, because one training blend would mix
them; a missing one is an error unless ``allow_missing``.

Prefixes are absolute by default (local paths, or ``s3://`` URLs of an S3 root): Megatron-LM and Megatron-Bridge
read them as given, relative to the trainer's working directory. ``relative_prefixes: true`` in the blend writes
them relative to the ``pretrain/`` folder instead; the trainer must then run from that folder.
"""

import json
from dataclasses import dataclass, field

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import ShardKey, pretrain_dir, shard_prefix
from nemotron_assets.core.records import NotReady, SourceManifest, State, freshness
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.pretrain.inputs import shard_inputs
from nemotron_assets.formats import megatron

SHOWN = 10  # shard keys named in an error message


@dataclass
class BlendFiles:
    splits: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    outputs: dict[str, bytes] = field(default_factory=dict)
    shards_listed: int = 0
    empty_left_out: int = 0
    missing_left_out: int = 0
    tokens_by_split: dict[str, int] = field(default_factory=dict)


class StaleShards(NotReady):
    """Planned shards that were built from other inputs; the message names them and why."""


class MissingShards(NotReady):
    """Planned shards that are not built."""


def build_blend_files(store: Storage, blend: Blend, manifests: dict[str, SourceManifest], tokenizer: dict,
                      base: str | None = None, allow_missing: bool = False) -> BlendFiles:
    """The blend files of the shards under ``base`` (default the full build); ``tokenizer`` is the identity the
    shards must have been built with (pretrain/inputs.py)."""
    base = base or blend.name
    result = BlendFiles()
    missing: list[str] = []
    stale: dict[str, list[str]] = {}  # why -> shard keys
    for split, entries in blend.splits().items():
        pairs: list[tuple[float, str]] = []
        result.tokens_by_split[split] = 0
        for entry in entries:
            if entry.kind != "pretrain":
                continue  # post-training data takes the Harmony or the JSONL path, not the Megatron blend
            manifest = manifests[entry.name]
            shard_tokens: list[tuple[ShardKey, int]] = []
            for shard in manifest.shards:
                key = ShardKey(entry.name, shard.index)
                state = freshness(store, shard_prefix(base, key), shard_inputs(blend, manifest, shard.index, tokenizer))
                if state.state is State.STALE:
                    stale.setdefault(state.reason, []).append(str(key))
                elif state.state is State.MISSING:
                    missing.append(str(key))
                else:
                    shard_tokens.append((key, int(state.receipt.stats["tokens"])))
            dataset_tokens = sum(t for _, t in shard_tokens)
            result.tokens_by_split[split] += dataset_tokens
            for key, tokens in shard_tokens:
                if tokens == 0:
                    result.empty_left_out += 1
                    continue
                if entry.weight == 0:
                    continue
                pairs.append((entry.weight * tokens / dataset_tokens, _prefix(store, blend, base, key)))
        if pairs:
            result.splits[split] = pairs
            result.shards_listed += len(pairs)
    if stale:
        reasons = "; ".join(f"{len(keys)} {reason}: {_shown(keys)}" for reason, keys in stale.items())
        raise StaleShards(f"blend {blend.name!r}: {sum(map(len, stale.values()))} shard(s) are stale ({reasons}). "
                          f"Materialize {blend.name}/pretrain_shard to rebuild them.")
    if missing and not allow_missing:
        raise MissingShards(f"blend {blend.name!r}: {len(missing)} planned shard(s) are not built: "
                                f"{_shown(missing)}. Materialize {blend.name}/pretrain_shard for them, or set "
                                "allow_missing_shards.")
    result.missing_left_out = len(missing)
    if not result.splits:
        raise ValueError(f"blend {blend.name!r}: no non-empty shard with weight > 0 to list")
    folder = pretrain_dir(base)
    blend_json = json.dumps(megatron.blend_json(result.splits), indent=1) + "\n"
    data_path = megatron.data_path_args(result.splits, flat=blend.datasets is not None)
    result.outputs[f"{folder}/blend.json"] = blend_json.encode()
    result.outputs[f"{folder}/data_path.txt"] = data_path.encode()
    return result


def _prefix(store: Storage, blend: Blend, base: str, key: ShardKey) -> str:
    if blend.relative_prefixes:
        return f"{key.dataset}/shard_{key.index:05d}"
    return store.url(shard_prefix(base, key))


def _shown(keys: list[str]) -> str:
    return ", ".join(keys[:SHOWN]) + (f" and {len(keys) - SHOWN} more" if len(keys) > SHOWN else "")
