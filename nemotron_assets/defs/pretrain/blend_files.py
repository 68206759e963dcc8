"""Megatron-Bridge ``blend.json`` and ``data_path.txt`` from the shards that are up to date.

A shard's weight is its dataset's weight times the shard's share of that dataset's tokens, so a dataset's
shards together weigh exactly what the user gave the dataset. Empty shards are left out (Megatron cannot
sample from them). Every planned shard must be up to date (core/records.py ``freshness``): a stale shard (built with
other settings, another tokenizer, or from other input) is always an error, because one training blend would mix
them; a missing one is an error unless ``allow_missing``.

A dataset with a list ``text_field`` has one Megatron dataset per field in each shard; the blend files list one
field's, the dataset's ``blend_key`` (default: its first field), weighted by that field's tokens.

Prefixes are absolute by default (local paths, or ``s3://`` URLs of an S3 root): Megatron-LM and Megatron-Bridge
read them as given, relative to the trainer's working directory. ``relative_prefixes: true`` in the blend writes
them relative to the ``pretrain/`` folder instead; the trainer must then run from that folder.
"""

import hashlib
import json
from dataclasses import dataclass, field

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.records import Freshness, NotReady, State, freshness, freshness_when_ready, require_manifest
from nemotron_assets.core.step import Output
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.pretrain.layout import field_suffixes, pretrain_dir, shard_prefix
from nemotron_assets.defs.pretrain.shard import PretrainSettings, shard_inputs
from nemotron_assets.formats import megatron
from nemotron_assets.sources.manifest import SourceManifest

SHOWN = 10  # shard keys named in an error message
BLEND_FORMAT = "megatron-blend/1"
BLEND_FILES = ("blend.json", "data_path.txt")


@dataclass(frozen=True)
class BlendListing:
    """What of the blend the blend files list: the pretraining datasets of each split with their weights, and how
    prefixes and the arguments are written."""

    name: str
    splits: dict[str, list[tuple[str, float]]]  # split -> [(dataset, weight)]
    relative_prefixes: bool
    flat: bool  # a flat ``datasets:`` list: data_path.txt is one --data-path
    listed_fields: dict[str, tuple[str, str]] = field(default_factory=dict)  # dataset -> (field, its suffix), for a
    # list text_field: the field whose shards are listed

    @classmethod
    def of(cls, blend: Blend) -> "BlendListing":
        splits = {split: [(e.name, e.weight) for e in entries if e.kind == "pretrain"]
                  for split, entries in blend.splits().items()}
        listed = {e.name: (e.listed_field, field_suffixes(e.text_fields, blend.split_sentences)[e.listed_field])
                  for e in blend.datasets_of("pretrain") if e.text_fields is not None}
        return cls(blend.name, splits, blend.relative_prefixes, blend.datasets is not None, listed)

    def tokens(self, dataset: str, stats: dict) -> int:
        """The tokens of the listed Megatron dataset of a shard whose receipt has ``stats``."""
        if dataset in self.listed_fields:
            return int(stats["fields"][self.listed_fields[dataset][0]]["tokens"])
        return int(stats["tokens"])

    def suffix(self, dataset: str) -> str:
        return self.listed_fields[dataset][1] if dataset in self.listed_fields else ""

    @property
    def datasets(self) -> list[str]:
        return [name for entries in self.splits.values() for name, _ in entries]


@dataclass
class BlendFiles:
    splits: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    outputs: dict[str, bytes] = field(default_factory=dict)  # blend.json and data_path.txt, by their path
    shards_listed: int = 0
    empty_left_out: int = 0
    missing_left_out: int = 0
    tokens_by_split: dict[str, int] = field(default_factory=dict)


class StaleShards(NotReady):
    """Planned shards that were built from other inputs; the message names them and why."""


class MissingShards(NotReady):
    """Planned shards that are not built."""


def build_blend_files(store: Storage, listing: BlendListing, settings: PretrainSettings,
                      manifests: dict[str, SourceManifest], tokenizer: dict, base: str,
                      allow_missing: bool = False) -> BlendFiles:
    """The blend files of the shards under ``base``; ``tokenizer`` is the identity the shards must have been built
    with (shard.py)."""
    result = BlendFiles()
    missing: list[str] = []
    stale: dict[str, list[str]] = {}  # why -> shard keys
    for split, entries in listing.splits.items():
        pairs: list[tuple[float, str]] = []
        result.tokens_by_split[split] = 0
        for dataset, weight in entries:
            manifest = manifests[dataset]
            shard_tokens: list[tuple[ShardKey, int]] = []
            for shard in manifest.shards:
                key = ShardKey(dataset, shard.index)
                inputs = shard_inputs(settings, manifest, shard.index, tokenizer)
                state = freshness(store, shard_prefix(base, key), inputs)
                if state.state is State.STALE:
                    stale.setdefault(state.reason, []).append(str(key))
                elif state.state is State.MISSING:
                    missing.append(str(key))
                else:
                    shard_tokens.append((key, listing.tokens(dataset, state.receipt.stats)))
            dataset_tokens = sum(t for _, t in shard_tokens)
            result.tokens_by_split[split] += dataset_tokens
            for key, tokens in shard_tokens:
                if tokens == 0:
                    result.empty_left_out += 1
                    continue
                if weight == 0:
                    continue
                pairs.append((weight * tokens / dataset_tokens, _prefix(store, listing, base, key)))
        if pairs:
            result.splits[split] = pairs
            result.shards_listed += len(pairs)
    if stale:
        reasons = "; ".join(f"{len(keys)} {reason}: {_shown(keys)}" for reason, keys in stale.items())
        raise StaleShards(f"blend {listing.name!r}: {sum(map(len, stale.values()))} shard(s) are stale ({reasons}). "
                          f"Materialize {listing.name}/pretrain_shard to rebuild them.")
    if missing and not allow_missing:
        raise MissingShards(f"blend {listing.name!r}: {len(missing)} planned shard(s) are not built: "
                            f"{_shown(missing)}. Materialize {listing.name}/pretrain_shard for them, or set "
                            "allow_missing_shards.")
    result.missing_left_out = len(missing)
    if not result.splits:
        raise ValueError(f"blend {listing.name!r}: no non-empty shard with weight > 0 to list")
    folder = pretrain_dir(base)
    blend_json = json.dumps(megatron.blend_json(result.splits), indent=1) + "\n"
    data_path = megatron.data_path_args(result.splits, flat=listing.flat)
    result.outputs[f"{folder}/blend.json"] = blend_json.encode()
    result.outputs[f"{folder}/data_path.txt"] = data_path.encode()
    return result


def blend_files_output(store: Storage, listing: BlendListing, settings: PretrainSettings, base: str,
                       allow_missing: bool = False, manifests: dict[str, SourceManifest] | None = None
                       ) -> tuple[dict[str, SourceManifest], BlendFiles, Output]:
    """The blend files of the shards under ``base`` as one output (core/step.py): its receipt is
    ``pretrain/.receipts/blend.receipt.json``. The files are a pure function of the shards' receipts and the blend's
    weights, so what decides their bytes (the receipt's inputs) is their content as that function gives it now.
    ``manifests``: the plans to judge the shards by (default: as recorded)."""
    if manifests is None:
        manifests = {name: require_manifest(store, listing.name, base, name) for name in listing.datasets}
    files = build_blend_files(store, listing, settings, manifests, settings.tokenizer_identity(), base,
                              allow_missing=allow_missing)
    folder = pretrain_dir(base)
    inputs = {"format": BLEND_FORMAT, **{name: hashlib.sha256(files.outputs[f"{folder}/{name}"]).hexdigest()
                                         for name in BLEND_FILES}}
    return manifests, files, Output(f"{folder}/blend.receipt", inputs, "megatron_blend", "blend")


def blend_files_freshness(store: Storage, listing: BlendListing, settings: PretrainSettings, base: str,
                          manifests: dict[str, SourceManifest] | None = None) -> Freshness:
    """The blend files' state by the one definition: stale if built while their shards are not all up to date."""
    return freshness_when_ready(store, f"{pretrain_dir(base)}/blend.receipt",
                                lambda: blend_files_output(store, listing, settings, base,
                                                           manifests=manifests)[2].inputs,
                                not_ready=(NotReady, ValueError))


def _prefix(store: Storage, listing: BlendListing, base: str, key: ShardKey) -> str:
    suffix = listing.suffix(key.dataset)
    if listing.relative_prefixes:
        return f"{key.dataset}/shard_{key.index:05d}{suffix}"
    return store.url(shard_prefix(base, key) + suffix)


def _shown(keys: list[str]) -> str:
    return ", ".join(keys[:SHOWN]) + (f" and {len(keys) - SHOWN} more" if len(keys) > SHOWN else "")
