"""``verify`` of the packed SFT outputs: every file hashed against its receipt (records.py ``freshness`` with
``read_content``), the row and bin counts against the receipts, the packed shards' checks run again
(`pack_checks.py`), and each ``.npy``'s header against its split's bin count. One `Problem` per file at fault."""

import numpy as np
import pyarrow.parquet as pq

from nemotron_assets.cli.status_report import Problem
from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import SftShardKey, sft_dir
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.sft import samples_file
from nemotron_assets.defs.sft.pack_checks import check_packed_shard
from nemotron_assets.defs.sft.states import SftOutput, receipt_of, sft_states
from nemotron_assets.sources.errors import InputError


def sft_problems(store: Storage, blend: Blend) -> list[Problem]:
    """Every problem of the full build's packed SFT (none for a blend without ``sft:``)."""
    if blend.sft is None:
        return []
    try:
        outputs = sft_states(store, blend, blend.name, read_content=True)
    except InputError as exc:
        return [Problem(exc.path or f"{blend.name} sft", str(exc))]
    plan = receipt_of(outputs, "sft_plan")
    problems = []
    for output in outputs:
        url = store.url(_main_file(blend, output))
        state = output.freshness
        if not state.done:
            where = f" partition '{output.key}'" if output.key else ""
            problems.append(Problem(url, f"{state.state.value}: {state.reason}: re-materialize "
                                         f"{blend.name}/{output.asset}{where}"))
            continue
        problems += _content_problems(store, blend, output, url, plan)
    return problems


def _main_file(blend: Blend, output: SftOutput) -> str:
    if output.asset == "sft_manifest":
        return f"{sft_dir(blend.name)}/manifest.json"
    if output.asset == "sft_samples":
        return f"{output.prefix}{samples_file.SUFFIX}"
    return f"{output.prefix}.parquet"


def _rows(store: Storage, relative: str) -> pq.FileMetaData:
    with store.open(relative) as stream:
        return pq.ParquetFile(stream).metadata


def _content_problems(store: Storage, blend: Blend, output: SftOutput, url: str, plan) -> list[Problem]:
    stats = output.freshness.receipt.stats
    if output.asset == "sft_samples":
        with store.open(f"{output.prefix}{samples_file.SUFFIX}") as stream:
            if not samples_file.file_schema(stream).equals(samples_file.SCHEMA):
                return [Problem(url, "its columns are not the samples schema (sft/samples_file.py)")]
            rows = sum(samples_file.row_counts(stream))
        return [Problem(url, f"holds {rows:,} samples, its receipt says {stats['samples']:,}")] \
            if rows != stats["samples"] else []
    if output.asset == "sft_plan":
        rows = _rows(store, f"{output.prefix}.parquet").num_rows
        planned = sum(shard["samples"] for shard in stats["shards"].values())
        return [Problem(url, f"holds {rows:,} rows, its receipt plans {planned:,} samples")] if rows != planned else []
    if output.asset == "sft_packed":
        found = []
        bins = _rows(store, f"{output.prefix}.parquet").num_rows
        listed = _rows(store, f"{output.prefix}.samples.parquet").num_rows
        if bins != stats["bins"]:
            found.append(Problem(url, f"holds {bins:,} bins, its receipt says {stats['bins']:,}"))
        if listed != stats["samples"]:
            found.append(Problem(store.url(f"{output.prefix}.samples.parquet"),
                                 f"lists {listed:,} samples, the receipt says {stats['samples']:,}"))
        checks = check_packed_shard(store, blend.name, SftShardKey.parse(output.key), plan)
        return found + [Problem(url, f"{check}: {problem}") for check, issues in checks.items() for problem in issues]
    return _npy_problems(store, blend, output)


def _npy_problems(store: Storage, blend: Blend, output: SftOutput) -> list[Problem]:
    """Each ``.npy``'s header: an object array of as many bins as its split has."""
    problems = []
    for split, counts in output.freshness.receipt.stats["splits"].items():
        relative = f"{sft_dir(blend.name)}/{split}.npy"
        if relative.rsplit("/", 1)[-1] not in output.freshness.receipt.files:
            continue
        with store.open(relative) as stream:
            version = np.lib.format.read_magic(stream)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, _, dtype = read_header(stream)
        if shape != (counts["bins"],) or dtype != np.dtype(object):
            problems.append(Problem(store.url(relative), f"holds a {dtype} array of shape {shape}, the split has "
                                                         f"{counts['bins']:,} bins"))
    return problems
