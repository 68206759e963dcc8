"""Turning counts into Dagster metadata, and reporting several partitions from one run.

A backfill run covers many partitions, but ``MaterializeResult`` carries one metadata dict for all of
them. So a multi-partition step yields the run summary first and then one ``AssetMaterialization`` per
partition with that partition's own metadata; the latest event per partition (what the UI shows) is the
detailed one. A single-partition run reports its metadata directly.
"""

import contextlib
from collections.abc import Iterator, Mapping

import dagster as dg

from nemotron_assets.errors import InputError

_BAR_WIDTH = 30


def emit_partition_results(context: dg.AssetExecutionContext, per_partition: Mapping[str, dict],
                           summary: dict) -> Iterator:
    keys = list(per_partition)
    if len(keys) == 1:
        yield dg.MaterializeResult(metadata=per_partition[keys[0]])
        return
    yield dg.MaterializeResult(metadata=summary)
    for key in keys:
        yield dg.AssetMaterialization(asset_key=context.asset_key, partition=key, metadata=per_partition[key])


def histogram_markdown(counts: list[int], title: str = "Document length (tokens)") -> str:
    """Log2-bucketed histogram as a Markdown table with text bars."""
    nonzero = [i for i, c in enumerate(counts) if c]
    if not nonzero:
        return f"**{title}**: no non-empty documents"
    top = max(counts)
    rows = [f"**{title}**", "", "| tokens | documents | |", "|---:|---:|:---|"]
    for i in range(nonzero[0], nonzero[-1] + 1):
        low, high = 2**i, 2 ** (i + 1) - 1
        label = f"{low:,}+" if i == len(counts) - 1 else (f"{low:,}" if low == high else f"{low:,}–{high:,}")
        bar = "█" * max(1 if counts[i] else 0, round(_BAR_WIDTH * counts[i] / top))
        rows.append(f"| {label} | {counts[i]:,} | {bar} |")
    return "\n".join(rows)


@contextlib.contextmanager
def bad_input_fails_without_retry() -> Iterator[None]:
    """Bad input will be just as bad on a retry: fail the step at once with the located message.

    Retries (the shard asset's RetryPolicy) are for transient trouble such as a storage endpoint that drops
    a connection; an ``InputError`` names the dataset, file, line and field and ends the step.
    """
    try:
        yield
    except InputError as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from exc
