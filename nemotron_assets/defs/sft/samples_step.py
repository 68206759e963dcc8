"""``sft_samples``: one normalized Harmony shard -> its SFT samples (token ids, assistant mask, masked-role spans).

Rows are read a batch at a time (``id``, ``messages``, ``tools``, the quality flags, the reasoning effort and the
provenance columns of ``normalize/record.py``; never the Harmony ``text``), and a row is rendered only if it passes
the row-level part of the pools' base filter (defs/harmony/pools.py): a non-empty completion, a valid tool schema, not
answering a placeholder prompt, and valid Harmony when the template is ``harmony`` (a row that cannot be stored as
Harmony text can still be rendered by another template). Rows filtered out are counted by reason (``filtered``).
Duplicates are left to the plan, which reads the dedup result: rendering does not depend on it.

Each kept row is rendered, tokenized and masked by `samples.samples_for_conversations` (one sample for a
conversation without reasoning, one per user turn with reasoning; drops counted by reason with first examples).
For a large shard, a batch's whole work (filter, JSON decode, render, the batch's table) runs in worker processes
(`batch_render.render_batch` through `render_pool.in_order`): this process only reads batches and writes the tables the
workers send back, in order, so it never tokenizes and competes with them for a core only to read and write (when
it can fork the workers, it parses the tokenizer files once for all of them first: render_pool.py). Harmony renders each
row with its own reasoning effort (``meta_reasoning_effort``: the system message's ``Reasoning:`` line), as the row
was normalized.

Output ``<base>/sft/samples/<dataset>/shard_NNNNN.arrow`` (an Arrow IPC file, zstd, a record batch per batch:
samples_file.py says why not Parquet), one row per sample (`samples_file.SCHEMA`): ``id``, ``dataset``, ``row`` (the
row in the Harmony shard), ``sample`` (its index in the conversation), ``user_turn``, ``split_key``
(`splits.split_key`: the first user prompt), ``used_in``, ``license``, ``source_row`` (the row in the raw source
file), ``length``, ``trained`` (tokens with mask 1), ``input_ids`` (list<int32>), ``assistant_mask`` (list<uint8>,
unshifted) and ``masked_spans`` (list<int32>, flat ``[start, end)`` token ranges of system/developer/user/tool text,
`masked_roles.py`). The receipt (inputs: `inputs.samples_inputs`) also records what the later steps need from the
tokenizer without loading it: the EOS id (the pad id of ``pad_to_multiple``) and the template's end-of-turn ids
(what a truncated sample ends with).
"""

from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from nemotron_assets.chat.chat_format import ChatFormatSpec
from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.records import require_manifest
from nemotron_assets.core.step import Outcome, Output, Staged, build_output, file_digest
from nemotron_assets.core.storage import Storage
from nemotron_assets.core.workers import usable_cores
from nemotron_assets.defs.harmony.layout import harmony_shard_path
from nemotron_assets.defs.sft import samples_file
from nemotron_assets.defs.sft.batch_render import READ_COLUMNS, SamplesStats, render_batch, with_tokenizer_facts
from nemotron_assets.defs.sft.inputs import PackedSft, chat_identity, samples_inputs
from nemotron_assets.defs.sft.layout import sft_samples_prefix
from nemotron_assets.defs.sft.render_pool import forks_workers, in_order

BATCH_ROWS = 512  # conversations rendered (and written as one record batch) at a time
#: A Harmony shard this large renders on every core: 32 MB when the workers are spawned (seconds each to start), 4 MB
#: when they are forked after the tokenizer is parsed here (render_pool.forks_workers), which costs them nothing more.
#: On the SFT bench's 14,000 conversations (a 22 MB shard, Llama-3) the step took 5.1 s on one core, 3.1 s on two.
PARALLEL_BYTES = 32 << 20
FORKED_PARALLEL_BYTES = 4 << 20
#: What samples files were before ``sft-samples/4`` (inputs.SAMPLES_FORMAT): Parquet. A rebuild deletes such a file,
#: which nothing reads any more.
LEGACY_SUFFIX = ".parquet"


def build_samples_file(source, url: str, spec: ChatFormatSpec, out: Path, workers: int = 1) -> SamplesStats:
    """Render every kept row of one Harmony shard (``source``: a path or a binary file) into the samples file
    ``out`` (local); ``url`` names the shard in errors and examples. This process reads batches and writes their
    tables; `render_batch` does the rest, in `workers` processes."""
    stats = SamplesStats()
    with samples_file.writer(out) as writer:
        for table, batch_stats in in_order(render_batch, _tasks(source, spec, url), spec, workers):
            stats.add(batch_stats)
            writer.write_table(table)
    if not stats.tokenizer_backend:  # an empty shard: no batch told us the tokenizer's facts
        stats.add(with_tokenizer_facts(spec))
    digest = file_digest(out)
    stats.bytes, stats.sha256 = digest["bytes"], digest["sha256"]
    return stats


def _tasks(source, spec: ChatFormatSpec, url: str) -> Iterator[tuple[pa.RecordBatch, int, ChatFormatSpec, str]]:
    """`render_batch`'s arguments for each batch of the shard."""
    first_row = 0
    for batch in pq.ParquetFile(source).iter_batches(batch_size=BATCH_ROWS, columns=READ_COLUMNS):
        yield batch, first_row, spec, url
        first_row += batch.num_rows


def render_workers(shard_bytes: int, spec: ChatFormatSpec) -> int:
    """Processes to render a Harmony shard of `shard_bytes` with: every core for a large one (`PARALLEL_BYTES`)."""
    threshold = FORKED_PARALLEL_BYTES if forks_workers(spec) else PARALLEL_BYTES
    return usable_cores() if shard_bytes >= threshold else 1


# --- the step ----------------------------------------------------------------------------------------------------
def materialize_samples(store: Storage, sft: PackedSft, base: str, key: ShardKey, force: bool = False,
                        log: Callable[[str], None] = print, chat: dict | None = None,
                        workers: int | None = None) -> Outcome:
    """The samples of Harmony shard ``key`` under ``base``: skipped when up to date, else rendered and committed
    (the receipt last). ``workers``: processes to render with (default: every core for a large shard)."""
    manifest = require_manifest(store, sft.blend, base, key.dataset)
    chat = chat_identity(sft) if chat is None else chat
    inputs = samples_inputs(store, sft, base, manifest, key.index, chat)
    harmony = harmony_shard_path(base, key)
    if workers is None:
        workers = render_workers(inputs["harmony_shard"]["bytes"], sft.chat)

    def build(folder: Path) -> Staged:
        staged = folder / f"samples{samples_file.SUFFIX}"
        with store.open(harmony) as source:
            stats = build_samples_file(source, store.url(harmony), sft.chat, staged, workers)
        return Staged({samples_file.SUFFIX: staged}, stats.as_dict(),
                      digests={samples_file.SUFFIX: {"bytes": stats.bytes, "sha256": stats.sha256}},
                      delete_first=(LEGACY_SUFFIX,))

    output = Output(sft_samples_prefix(base, key), inputs, "sft_samples", str(key), extra={"blend": sft.blend})
    return build_output(store, output, build, force, log)
