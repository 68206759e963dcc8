"""The state of every packed-SFT output by the one definition (records.py ``freshness``, with `inputs.py`), for
``status`` (`sft_status`, the "Packed SFT" part) and ``verify`` (`verify.py`).

Outputs: each planned Harmony shard's samples file, the plan, each packed shard the plan lists, the manifest. An
output whose inputs cannot be judged yet (an upstream output missing or stale) is stale if it was built, else
missing, as for the outputs after the Harmony shards (posttrain/downstream.py).
"""

from collections.abc import Callable
from dataclasses import dataclass, field

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import (
    SftShardKey,
    ShardKey,
    sft_manifest_prefix,
    sft_packed_prefix,
    sft_plan_prefix,
    sft_samples_prefix,
)
from nemotron_assets.core.records import (
    Freshness,
    NotReady,
    Receipt,
    State,
    freshness_when_ready,
    read_manifest,
)
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.sft.inputs import (
    chat_identity,
    family_entries,
    manifest_inputs,
    packed_inputs,
    plan_inputs,
    samples_inputs,
    sft_settings,
)
from nemotron_assets.formats.splits import SPLITS
from nemotron_assets.sources.errors import InputError

ASSETS = ("sft_samples", "sft_plan", "sft_packed", "sft_manifest")
SHOWN_KEYS = 10


@dataclass(frozen=True)
class SftOutput:
    asset: str  # sft_samples, sft_plan, sft_packed or sft_manifest
    key: str  # a Harmony shard (samples), a packed shard ("train/shard_00000"), or "" (plan, manifest)
    prefix: str  # the receipt is prefix + ".json"
    freshness: Freshness


def _judged(store: Storage, asset: str, key: str, prefix: str, inputs_of: Callable[[], dict],
            read_content: bool) -> SftOutput:
    return SftOutput(asset, key, prefix, freshness_when_ready(store, prefix, inputs_of, read_content=read_content))


def sft_states(store: Storage, blend: Blend, base: str, read_content: bool = False) -> list[SftOutput]:
    """Every packed-SFT output of the build under ``base``, in pipeline order. ``InputError`` when the chat
    template or tokenizer cannot be located (nothing can be judged then)."""
    chat = chat_identity(blend)
    outputs = []
    for entry in family_entries(blend):
        try:
            manifest = read_manifest(store, base, entry.name)
        except (FileNotFoundError, ValueError):
            continue  # no plan of the dataset: the Harmony shards' status says what to run
        for shard in manifest.shards:
            key = ShardKey(entry.name, shard.index)
            outputs.append(_judged(store, "sft_samples", str(key), sft_samples_prefix(base, key),
                                   lambda m=manifest, i=shard.index: samples_inputs(store, blend, base, m, i, chat),
                                   read_content))
    plan = _judged(store, "sft_plan", "", sft_plan_prefix(base),
                   lambda: plan_inputs(store, blend, base, chat).inputs, read_content)
    outputs.append(plan)
    recorded = plan.freshness.receipt
    shard_keys = list(recorded.stats["shards"]) if recorded is not None else []
    packed = []
    for key in shard_keys:
        def inputs_of(key=key) -> dict:
            if not plan.freshness.done:
                raise NotReady(f"the plan is {plan.freshness.state.value}")
            return packed_inputs(recorded, key)

        packed.append(_judged(store, "sft_packed", key, sft_packed_prefix(base, SftShardKey.parse(key)), inputs_of,
                              read_content))
    outputs += packed

    def manifest_of() -> dict:
        if not plan.freshness.done or not all(p.freshness.done for p in packed):
            raise NotReady("the plan or a packed shard is not up to date")
        return manifest_inputs(recorded, {p.key: p.freshness.receipt for p in packed}, sft_settings(blend).formats)

    outputs.append(_judged(store, "sft_manifest", "", sft_manifest_prefix(base), manifest_of, read_content))
    return outputs


# --- the status report's part ---------------------------------------------------------------------------------
@dataclass
class SftAssetStatus:
    asset: str
    done: int = 0
    stale: dict[str, str] = field(default_factory=dict)  # key -> why
    missing: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # from the done outputs' receipts

    @property
    def total(self) -> int:
        return self.done + len(self.stale) + len(self.missing)


@dataclass
class SftStatus:
    """The "Packed SFT" part of ``status``: per asset, its outputs done / stale / missing, with counts."""

    assets: list[SftAssetStatus] = field(default_factory=list)
    error: str = ""

    def lines(self) -> list[str]:
        lines = ["  Packed SFT:"]
        if self.error:
            return lines + [f"    cannot be checked: {self.error}"]
        for status in self.assets:
            counts = ", ".join(f"{value:,} {name}" for name, value in status.counts.items())
            lines.append(f"  {status.asset:<16} {status.done}/{status.total} done" + (f", {counts}" if counts else ""))
            for label, keys in (("stale", list(status.stale)), ("missing", status.missing)):
                if keys:
                    more = f" and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else ""
                    why = f" ({status.stale[keys[0]]})" if label == "stale" else ""
                    lines.append(f"    {label}: {', '.join(k or status.asset for k in keys[:SHOWN_KEYS])}{more}{why}")
        return lines


#: Receipt stats summed over the done outputs of an asset, and how status names them.
COUNTED = {"sft_samples": {"samples": "samples", "tokens": "tokens", "trained_tokens": "trained tokens"},
           "sft_packed": {"bins": "bins", "samples": "samples", "tokens": "tokens"}}


def sft_status(store: Storage, blend: Blend, base: str) -> SftStatus:
    try:
        outputs = sft_states(store, blend, base)
    except InputError as exc:
        return SftStatus(error=str(exc))
    report = SftStatus([SftAssetStatus(asset) for asset in ASSETS])
    by_asset = {status.asset: status for status in report.assets}
    for output in outputs:
        status = by_asset[output.asset]
        state = output.freshness
        if state.done:
            status.done += 1
            for name, label in COUNTED.get(output.asset, {}).items():
                status.counts[label] = status.counts.get(label, 0) + int(state.receipt.stats[name])
            if output.asset == "sft_plan":
                splits = state.receipt.stats["splits"]
                status.counts.update({f"{split} samples": splits[split]["samples"] for split in SPLITS})
        elif state.state is State.STALE:
            status.stale[output.key] = state.reason
        else:
            status.missing.append(output.key)
    return report


def receipt_of(outputs: list[SftOutput], asset: str) -> Receipt | None:
    found = [o.freshness.receipt for o in outputs if o.asset == asset]
    return found[0] if found else None
