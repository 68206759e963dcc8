"""The checks of a packed SFT shard, on the committed files (the asset checks of ``sft_packed``, and ``verify``):

- ``bins_within_capacity``: every bin's samples satisfy ``sum(L - 1) <= pack_size``, ``seq_start_id`` starts at 0
  and cuts the bin into samples of at least 2 tokens, the loss mask is 0/1 with each sample's last position 0, and
  the ``.samples.parquet`` lists exactly the bins' samples (`writers.packed_shard_problems`);
- ``samples_match_plan``: the bins unpacked are exactly the planned samples: each stored sample's digest (ids, then
  shifted mask) equals the digest of its samples-file sample prepared as planned (truncation, padding), none
  missing, none extra (`packing.compare_samples`);
- ``no_trained_token_on_masked_role``: on the unshifted mask of each stored sample, no token of a system,
  developer, user or tool message is trained (the spans recorded at render time, `masked_roles.py`;
  `packing.masked_role_problems`).
"""

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq

from nemotron_assets.layout import SftShardKey, sft_packed_prefix
from nemotron_assets.records import Receipt
from nemotron_assets.sft.packing import compare_samples, masked_role_problems, planned_digest, unshift_mask
from nemotron_assets.sft.steps.pack_step import StoredSample, plan_rows, read_samples, settings_of, truncate_of
from nemotron_assets.sft.writers import iter_packed_bins, packed_shard_problems, stored_samples
from nemotron_assets.storage import Storage

BINS_WITHIN_CAPACITY = "bins_within_capacity"
SAMPLES_MATCH_PLAN = "samples_match_plan"
NO_TRAINED_TOKEN_ON_MASKED_ROLE = "no_trained_token_on_masked_role"
CHECKS = {
    BINS_WITHIN_CAPACITY: "every bin: sum(len - 1) <= pack_size, seq_start_id valid, each sample's last loss_mask 0",
    SAMPLES_MATCH_PLAN: "the bins unpacked are exactly the planned samples (ids and shifted mask, by digest)",
    NO_TRAINED_TOKEN_ON_MASKED_ROLE: "no token of a system, developer, user or tool message is trained (unshifted)",
}
SHOWN = 10


@contextlib.contextmanager
def local_files(store: Storage, relatives: list[str]) -> Iterator[list[Path]]:
    """Local paths of stored files: themselves on a local root, downloaded copies on S3 (so messages name them)."""
    if not store.is_s3:
        yield [Path(store.url(relative)) for relative in relatives]
        return
    with store.staging() as folder:
        paths = []
        for relative in relatives:
            local = folder / relative.replace("/", "__")
            store.fs.get_file(store.url(relative), str(local))
            paths.append(local)
        yield paths


def check_packed_shard(store: Storage, base: str, key: SftShardKey, plan: Receipt,
                       samples: dict[tuple[str, int], StoredSample] | None = None) -> dict[str, list[str]]:
    """Check name -> problems (empty: passed) of the committed shard ``key``, against the ``plan`` (its receipt).
    ``samples``: what the build just read from the samples files (`PackedOutcome.samples`), else read here."""
    prefix = sft_packed_prefix(base, key)
    settings, truncate = settings_of(plan), truncate_of(plan)
    rows = plan_rows(store, base, key)
    samples = read_samples(store, base, rows) if samples is None else samples
    with local_files(store, [f"{prefix}.parquet", f"{prefix}.samples.parquet"]) as (packed, listing):
        capacity = packed_shard_problems(packed, listing, settings.pack_size, limit=SHOWN)
        planned = []
        by_key = {}
        for file, row, copy in zip(*(rows.column(name).to_pylist() for name in ("file", "row", "copy"))):
            stored = samples[(file, row)]
            planned.append(((stored.dataset, stored.id, stored.sample, copy),
                            planned_digest(stored.pack_sample(copy), settings, truncate)))
            by_key[(stored.dataset, stored.id, stored.sample)] = stored
        matches = compare_samples(stored_samples(packed, listing), planned, limit=SHOWN)
        masked = _masked_role_problems(packed, listing, by_key) if not capacity else []
    return {BINS_WITHIN_CAPACITY: capacity, SAMPLES_MATCH_PLAN: matches, NO_TRAINED_TOKEN_ON_MASKED_ROLE: masked}


def _masked_role_problems(packed: Path, listing: Path, samples: dict) -> list[str]:
    """Trained tokens on masked-role spans, per stored sample (the listing says where each one is)."""
    table = pq.read_table(listing, columns=["bin", "offset", "length", "dataset", "id", "sample"])
    entries = list(zip(*(table.column(name).to_pylist() for name in table.column_names)))
    problems: list[str] = []
    at = 0
    for row, (_, loss_mask, _) in enumerate(iter_packed_bins(packed)):
        while at < len(entries) and entries[at][0] == row:
            _, offset, length, dataset, sample_id, sample = entries[at]
            at += 1
            stored = samples.get((dataset, sample_id, sample))
            if stored is None:
                continue  # not planned: samples_match_plan says so
            spans = [(int(a), min(int(b), length)) for a, b in stored.masked_spans.reshape(-1, 2) if a < length]
            mask = unshift_mask(loss_mask[offset : offset + length])
            problems += masked_role_problems(mask, spans, f"{packed} bin {row} sample {sample_id}#{sample}")
        if len(problems) >= SHOWN:
            return problems[:SHOWN]
    return problems
