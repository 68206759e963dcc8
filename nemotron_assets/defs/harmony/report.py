"""The behavior report: per pool, how many rows call tools and how many distinct behaviors there are.

It reads the ``behavior`` embedding view of every pool the blend builds (views.py). A view whose rows collapse into few
distinct signatures shows as low uniqueness: the pool teaches one way of using tools, whatever its size.

Only the two columns it counts are read, by polars' streaming engine: memory grows with the number of distinct
signatures (few, by design), not with the pool's rows.
"""

import polars as pl

from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.layout import embedding_view_path

TOP_SIGNATURES = 5


def behavior_markdown(store: Storage, base: str, pools: tuple[str, ...]) -> tuple[str, int]:
    """Per pool of ``pools``: rows, rows with tool calls, distinct behavior signatures, and the most common ones; and
    the rows reported, over those pools."""
    lines = ["| pool | rows | with tool calls | distinct signatures | uniqueness |", "|---|---:|---:|---:|---:|"]
    details, reported = [], 0
    for pool in pools:
        view = pl.scan_parquet(store.url(embedding_view_path(base, "behavior", pool)),
                               storage_options=store.polars_options()).select("embed_text", "meta_tool_call_count")
        rows, with_calls = view.select(pl.len(), (pl.col("meta_tool_call_count") > 0).sum()).collect(
            engine="streaming").row(0)
        counts = (view.group_by("embed_text").agg(pl.len().alias("n"))
                  .sort(["n", "embed_text"], descending=[True, False]).collect(engine="streaming"))
        distinct, reported = len(counts), reported + rows
        uniqueness = f"{distinct / rows:.2f}" if rows else "-"
        lines.append(f"| {pool} | {rows:,} | {with_calls or 0:,} | {distinct:,} | {uniqueness} |")
        if rows:
            details.append(f"\n**{pool}**: most common behaviors\n")
            details += [f"- {n} × `{text}`" for text, n in counts.head(TOP_SIGNATURES).iter_rows()]
    return "\n".join(["**Behavior signatures per pool**", "", *lines, *details]), reported
