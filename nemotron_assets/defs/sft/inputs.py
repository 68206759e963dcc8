"""What determines the bytes of each packed-SFT output: the receipts' ``inputs`` (core/records.py), in one place, so the
steps, ``status`` and ``verify`` judge "up to date" the same way.

- **samples** of one Harmony shard (``sft_samples``): the Harmony shard's file version (size and sha256 from its own
  receipt), the chat identity (`chat_identity`: the template, builtin name or the ``.jinja`` file's sha256; the
  tokenizer, its file's sha256 and special tokens; the render options) and `SAMPLES_FORMAT`. Not the holdout,
  weights, pools, ``used_in`` or packing settings: those only re-plan and re-pack, never re-render.
- **plan** (``sft_plan``): every samples file's sha256 (blend, then shard order), each dataset's dedup result, the
  pools of ``sft.from``, the holdout, the datasets' fixed splits (blend ``valid:``/``test:`` lists) and weights,
  ``from``, ``used_in``, the packing settings, the chat identity (its end-of-turn and pad ids go into the bins) and
  `PLAN_FORMAT`.
- **packed shard** (``sft_packed``): the sha256 of its plan rows, the versions of the samples files those rows
  read, the packing settings, the chat identity and `PACKED_FORMAT`.
- **manifest** (``sft_manifest``): the plan file, every packed shard's files, the formats and `MANIFEST_FORMAT`.

Each step first requires its inputs to be up to date themselves (``NotReady`` naming them otherwise), so
staleness is transitive: a changed template makes every samples file stale, then the plan, every packed shard and
the manifest; a changed ``pack_size`` only the plan, the packed shards and the manifest.
"""

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass

from nemotron_assets.chat.chat_format import ChatFormatSpec, default_tokenizer_model
from nemotron_assets.chat.o200k import O200K_BASE_SHA256, O200K_HARMONY
from nemotron_assets.chat.templates import RENDER_DATE
from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.records import Freshness, NotReady, Receipt, freshness, read_receipt, require_manifest
from nemotron_assets.core.sections import BUILTIN_TEMPLATES, POOL_NAMES, HoldoutSettings, SftSettings
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.downstream import Curation, dedup_inputs, duplicates_sha256, pool_inputs
from nemotron_assets.defs.harmony.layout import duplicates_prefix, pool_dir, pool_part_number
from nemotron_assets.defs.harmony.pools import PoolThresholds
from nemotron_assets.defs.harmony.shard import harmony_freshness
from nemotron_assets.defs.sft import samples_file
from nemotron_assets.defs.sft.batch_render import O200K_EOS
from nemotron_assets.defs.sft.layout import sft_plan_prefix, sft_samples_prefix
from nemotron_assets.formats.harmony import HARMONY_SPECIAL_TOKENS, LITERALS
from nemotron_assets.formats.packing import PackSettings
from nemotron_assets.formats.splits import SPLITS, Holdout
from nemotron_assets.sources.manifest import SourceManifest
from nemotron_assets.tokenize.file_hashes import file_sha256
from nemotron_assets.tokenize.loading import locate_tokenizer

#: 4: an Arrow IPC file (samples_file.py); 3: masked-role search finds tool-call arguments JSON-escaped too;
#: 2: masked-role spans at the earliest place, plain-encoded token columns
SAMPLES_FORMAT = "sft-samples/4"
PLAN_FORMAT = "sft-plan/2"  # 2: a split's shards of even sizes (plan_step.shard_bounds)
PACKED_FORMAT = "sft-packed/2"  # 2: plain-encoded token columns
MANIFEST_FORMAT = "sft-manifest/1"
#: o200k_harmony's end-of-sequence token: gpt-oss's tokenizer config names ``<|return|>`` (what Bridge pads with).


@dataclass(frozen=True)
class PackedSft:
    """What of the blend the packed SFT steps use, built from it in one place (`of`)."""

    blend: str
    sft: SftSettings  # the blend's sft: section
    curation: Curation  # the family datasets in blend order (their shards, dedup results and pools)
    chat: ChatFormatSpec  # the template and the tokenizer (its default: the blend's, or o200k_harmony for harmony)
    holdout: HoldoutSettings | None
    fixed_splits: dict[str, str | None]  # datasets listed under valid:/test: go wholly there
    weights: dict[str, float]  # a dataset's weight is its repeat factor

    @classmethod
    def of(cls, blend: Blend, backend: str = "auto") -> "PackedSft":
        if blend.sft is None:
            raise ValueError(f"blend {blend.name!r} has no sft: section")
        sft = blend.sft
        tokenizer = sft.tokenizer_model or default_tokenizer_model(sft.chat_template, blend.tokenizer_model)
        revision = sft.tokenizer_revision if sft.tokenizer_model else (
            None if tokenizer == O200K_HARMONY else blend.tokenizer_revision)
        family = blend.datasets_of("harmony")
        return cls(blend.name, sft, Curation.of(blend), ChatFormatSpec(sft.chat_template, tokenizer, revision, backend),
                   blend.holdout,
                   {e.name: (blend.split_of(e.name) if blend.split_of(e.name) in ("valid", "test") else None)
                    for e in family},
                   {e.name: e.weight for e in family})

    @property
    def datasets(self) -> list[str]:
        return list(self.curation.datasets)

    @property
    def holdout_split(self) -> Holdout | None:
        return self.holdout.holdout() if self.holdout is not None else None



def chat_identity(sft: PackedSft) -> dict:
    """The template, the tokenizer and the render options: what decides a conversation's ids and masks."""
    return {"template": template_identity(sft.chat.chat_template),
            "tokenizer": tokenizer_identity(sft.chat.tokenizer_model, sft.chat.tokenizer_revision),
            "render": {"render_date": RENDER_DATE.isoformat(), "harmony_reasoning_effort": "per row"}}


def template_identity(chat_template: str) -> dict:
    """A builtin template by name (its text is this code's, versioned by the formats), a file by its sha256."""
    if chat_template in BUILTIN_TEMPLATES:
        return {"builtin": chat_template}
    return {"sha256": file_sha256(chat_template)}


def tokenizer_identity(tokenizer_model: str, revision: str | None) -> dict:
    """``o200k_harmony``: its vocabulary file's sha256 and its special tokens; a tokenizer.json tokenizer: its
    identity (tokenize/loading.py: the file's sha256, which fixes its vocabulary, and its special-token names).
    Pretraining's identity adds the vocabulary size, which picks its token dtype; SFT has no use for it."""
    if tokenizer_model == O200K_HARMONY:
        specials = json.dumps([sorted(HARMONY_SPECIAL_TOKENS.items()), list(LITERALS), O200K_EOS]).encode()
        return {"name": O200K_HARMONY, "o200k_base_sha256": O200K_BASE_SHA256,
                "special_tokens_sha256": hashlib.sha256(specials).hexdigest()}
    return locate_tokenizer(tokenizer_model, revision).identity()


def template_sha256(identity: dict) -> str:
    """One hash of the template for the manifest: the file's, or of the builtin's name."""
    return identity.get("sha256") or hashlib.sha256(identity["builtin"].encode()).hexdigest()


def tokenizer_sha256(identity: dict) -> str:
    return identity.get("sha256") or identity["o200k_base_sha256"]


# --- samples -----------------------------------------------------------------------------------------------------
def harmony_version(store: Storage, sft: PackedSft, base: str, manifest: SourceManifest, index: int) -> dict:
    """The Harmony shard's file version (its receipt's ``.parquet`` entry), which must be up to date."""
    key = ShardKey(manifest.dataset, index)
    state = harmony_freshness(store, sft.curation.datasets[manifest.dataset], base, manifest, index)
    if not state.done:
        raise NotReady(f"Harmony shard {key} is {state.state.value}: {state.reason or 'not built'}; materialize "
                       f"{sft.blend}/harmony_shard partition '{key}' first")
    return dict(state.receipt.files[".parquet"])


def samples_inputs(store: Storage, sft: PackedSft, base: str, manifest: SourceManifest, index: int,
                   chat: dict) -> dict:
    return {"format": SAMPLES_FORMAT, "harmony_shard": harmony_version(store, sft, base, manifest, index), **chat}


def samples_freshness(store: Storage, sft: PackedSft, base: str, manifest: SourceManifest, index: int, chat: dict,
                      read_content: bool = False) -> Freshness:
    prefix = sft_samples_prefix(base, ShardKey(manifest.dataset, index))
    return freshness(store, prefix, samples_inputs(store, sft, base, manifest, index, chat),
                     read_content=read_content)


# --- plan --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SamplesFile:
    """One Harmony shard's samples file, as the plan reads it."""

    key: ShardKey
    path: str  # relative to the storage root
    receipt: Receipt


def current_samples(store: Storage, sft: PackedSft, base: str, chat: dict) -> list[SamplesFile]:
    """Every planned Harmony shard's samples file, in blend then shard order; ``NotReady`` naming every one that is
    not up to date (a plan over a mix of old and new samples would pack the wrong ids)."""
    files, not_done = [], []
    for dataset in sft.datasets:
        manifest = require_manifest(store, sft.blend, base, dataset)
        for shard in manifest.shards:
            key = ShardKey(dataset, shard.index)
            try:
                state = samples_freshness(store, sft, base, manifest, shard.index, chat)
            except NotReady as exc:
                not_done.append(f"{key} ({exc})")
                continue
            if not state.done:
                not_done.append(f"{key} ({state.state.value}: {state.reason})")
                continue
            files.append(SamplesFile(key, sft_samples_prefix(base, key) + samples_file.SUFFIX, state.receipt))
    if not_done:
        shown = "; ".join(not_done[:5]) + (f"; and {len(not_done) - 5} more" if len(not_done) > 5 else "")
        raise NotReady(f"SFT samples are not up to date: {shown}; materialize {sft.blend}/sft_samples first")
    return files


def current_duplicates(store: Storage, sft: PackedSft, base: str) -> dict[str, str]:
    """Each family dataset's dedup result (sha256), which must be up to date."""
    versions = {}
    for dataset in sft.datasets:
        prefix = duplicates_prefix(base, dataset)
        state = freshness(store, prefix, dedup_inputs(store, sft.curation, base, dataset)[0])
        if not state.done:
            raise NotReady(f"the dedup result of {dataset!r} is {state.state.value}: {state.reason or 'not built'}"
                           f"; materialize {sft.blend}/harmony_dedup partition {dataset!r} first")
        versions[dataset] = duplicates_sha256(state.receipt)
    return versions


def current_pool_parts(store: Storage, sft: PackedSft, base: str, pool: str) -> dict[str, str]:
    """``part-NNNNN.parquet`` -> sha256 of one pool named by ``sft.from``, which must be up to date.

    A candidate pool is judged by the one definition (its inputs: every shard and dedup result, and the thresholds
    it was built with). A scoring selection (``<pool>_easy``, ...) is laid out as a pool with a receipt per part;
    its inputs are the scoring steps' to judge, so here each part must have a receipt and be as committed."""
    folder = pool_dir(base, pool)
    parts = sorted(name.rsplit("/", 1)[-1] for name in store.list(folder)
                   if pool_part_number(name.rsplit("/", 1)[-1]) is not None)
    what = f"{sft.blend}/candidate_pool partition {pool!r}" if pool in POOL_NAMES else f"the selection {pool!r}"
    if not parts:
        raise NotReady(f"pool {pool!r} (sft.from) has no part under {store.url(folder)}: materialize {what} first")
    versions = {}
    for part in parts:
        prefix = f"{folder}/{part.rsplit('.', 1)[0]}"
        built = read_receipt(store, prefix)
        if built is None:
            raise NotReady(f"{store.url(prefix + '.parquet')} (pool {pool!r}) has no receipt: materialize {what} first")
        expected = (pool_inputs(store, sft.curation, base, PoolThresholds(**built.inputs["thresholds"]))
                    if pool in POOL_NAMES else built.inputs)
        state = freshness(store, prefix, expected)
        if not state.done:
            raise NotReady(f"pool {pool!r} is {state.state.value}: {state.reason}; materialize {what} first")
        versions[part] = state.receipt.files[".parquet"]["sha256"]
    return versions


def packing_settings(sft: SftSettings) -> dict:
    """The ``sft:`` keys that decide the bins, as the plan's receipt records them."""
    return {"pack_size": sft.pack_size, "packing": sft.packing, "pack_window": sft.pack_window,
            "pad_to_multiple": sft.pad_to_multiple, "overlong": sft.overlong, "seed": sft.seed,
            "shard_tokens": sft.shard_tokens}


def pack_settings(packing: dict, pad_id: int | None) -> PackSettings:
    """The one `PackSettings` of the plan and of every packed shard: from the packing settings the plan records
    (`packing_settings`) and the pad id (the tokenizer's EOS, used only with ``pad_to_multiple``)."""
    return PackSettings(pack_size=packing["pack_size"], packing=packing["packing"], pack_window=packing["pack_window"],
                        pad_to_multiple=packing["pad_to_multiple"], overlong=packing["overlong"], seed=packing["seed"],
                        pad_id=pad_id if packing["pad_to_multiple"] > 1 else None)


@dataclass(frozen=True)
class PlanInputs:
    """The plan's receipt inputs and what it reads: the samples files, in order."""

    inputs: dict
    samples: list[SamplesFile]


def plan_inputs(store: Storage, sft: PackedSft, base: str, chat: dict | None = None) -> PlanInputs:
    chat = chat_identity(sft) if chat is None else chat
    samples = current_samples(store, sft, base, chat)
    pools = ({pool: current_pool_parts(store, sft, base, pool) for pool in sft.sft.from_}
             if isinstance(sft.sft.from_, list) else {})
    inputs = {
        "format": PLAN_FORMAT,
        "samples": {str(f.key): f.receipt.files[samples_file.SUFFIX]["sha256"] for f in samples},
        "duplicates": current_duplicates(store, sft, base),
        "pools": pools,
        "holdout": sft.holdout.model_dump() if sft.holdout is not None else None,
        "fixed_splits": sft.fixed_splits,
        "weights": sft.weights,
        "from": sft.sft.from_,
        "used_in": list(sft.sft.used_in_values),
        "packing": packing_settings(sft.sft),
        **chat,
    }
    return PlanInputs(inputs, samples)


def plan_freshness(store: Storage, sft: PackedSft, base: str, chat: dict | None = None,
                   read_content: bool = False) -> Freshness:
    return freshness(store, sft_plan_prefix(base), plan_inputs(store, sft, base, chat).inputs,
                     read_content=read_content)


def current_plan(store: Storage, sft: PackedSft, base: str, chat: dict | None = None) -> Receipt:
    """The plan's receipt, which must be up to date (``NotReady`` naming it otherwise)."""
    state = plan_freshness(store, sft, base, chat)
    if not state.done:
        raise NotReady(f"the SFT plan {store.url(sft_plan_prefix(base) + '.parquet')} is {state.state.value}: "
                       f"{state.reason or 'not built'}; materialize {sft.blend}/sft_plan first")
    return state.receipt


# --- packed shards and the manifest -----------------------------------------------------------------------------
def packed_inputs(plan: Receipt, key: str) -> dict:
    """A packed shard's inputs, from the plan's receipt (which lists each shard's row digest and samples files)."""
    shard = plan.stats["shards"].get(key)
    if shard is None:
        planned = ", ".join(plan.stats["shards"]) or "none"
        raise NotReady(f"the current SFT plan has no shard {key!r} (it plans {planned}): materialize the plan again")
    samples = plan.inputs["samples"]
    return {"format": PACKED_FORMAT, "plan_rows": shard["rows_sha256"],
            "samples": {name: samples[name] for name in shard["files"]},
            "packing": plan.inputs["packing"], "template": plan.inputs["template"],
            "tokenizer": plan.inputs["tokenizer"]}


def manifest_inputs(plan: Receipt, shards: dict[str, Receipt], formats: Iterable[str]) -> dict:
    return {"format": MANIFEST_FORMAT, "plan": plan.files[".parquet"]["sha256"],
            "shards": {key: {name: entry["sha256"] for name, entry in sorted(receipt.files.items())}
                       for key, receipt in shards.items()},
            "formats": list(formats)}


def split_order(names: Iterable[str]) -> list[str]:
    return [s for s in SPLITS if s in set(names)]
