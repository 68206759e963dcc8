"""One batch of Harmony rows -> its SFT samples table: what a render worker of ``sft_samples`` runs.

Its own module, importing only what rendering needs (no blend, storage or receipt code): each worker process
imports it when it starts, and that import is part of every ``sft_samples`` run's start-up. The step
(samples_step.py) reads the batches and writes the tables; the columns and the filter are described there.
"""

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from itertools import groupby

import numpy as np
import orjson
import pyarrow as pa

from nemotron_assets.chat.chat_format import ChatFormat, ChatFormatSpec
from nemotron_assets.chat.harmony import HARMONY
from nemotron_assets.chat.samples import ConversationSamples, check_conversation, samples_for_conversations
from nemotron_assets.defs.sft.render_pool import format_of
from nemotron_assets.defs.sft.samples_file import METADATA_COLUMNS, SCHEMA
from nemotron_assets.defs.sft.stats import MAX_EXAMPLES, add_histograms, log2_histogram
from nemotron_assets.formats.harmony import HARMONY_SPECIAL_TOKENS
from nemotron_assets.formats.splits import split_key
from nemotron_assets.sources.errors import InputError

O200K_EOS = "<|return|>"  # o200k_harmony's end of sequence (Bridge pads with it)

READ_COLUMNS = ["id", "dataset", "messages", "tools", "quality_valid_harmony", "quality_completion_nonempty",
                "quality_valid_tool_schema", "quality_placeholder_prompt", "meta_reasoning_effort", "source_used_in",
                "source_license", "source_row"]
DEFAULT_EFFORT = "medium"


@dataclass
class SamplesStats:
    rows: int = 0  # rows of the Harmony shard
    conversations: int = 0  # rows that passed the filter and were rendered
    filtered: Counter = field(default_factory=Counter)
    samples: int = 0
    tokens: int = 0
    trained_tokens: int = 0
    dropped: Counter = field(default_factory=Counter)
    dropped_examples: list[str] = field(default_factory=list)
    histogram: list[int] = field(default_factory=lambda: log2_histogram([]))
    max_length: int = 0
    eos_id: int | None = None
    end_of_turn_ids: list[int] = field(default_factory=list)
    tokenizer_backend: str = ""
    bytes: int = 0
    sha256: str = ""

    def add(self, other: "SamplesStats") -> None:
        """Count a batch's stats into these (the first batch's tokenizer facts are kept: all batches share them)."""
        self.rows += other.rows
        self.conversations += other.conversations
        self.filtered.update(other.filtered)
        self.samples += other.samples
        self.tokens += other.tokens
        self.trained_tokens += other.trained_tokens
        self.dropped.update(other.dropped)
        self.dropped_examples += other.dropped_examples[: max(0, MAX_EXAMPLES - len(self.dropped_examples))]
        self.histogram = add_histograms(self.histogram, other.histogram)
        self.max_length = max(self.max_length, other.max_length)
        if not self.tokenizer_backend:
            self.eos_id, self.end_of_turn_ids = other.eos_id, other.end_of_turn_ids
            self.tokenizer_backend = other.tokenizer_backend

    def as_dict(self) -> dict:
        return {"rows": self.rows, "conversations": self.conversations, "filtered": dict(sorted(self.filtered.items())),
                "samples": self.samples, "tokens": self.tokens, "trained_tokens": self.trained_tokens,
                "dropped": dict(sorted(self.dropped.items())), "dropped_examples": self.dropped_examples,
                "histogram": self.histogram, "max_length": self.max_length, "eos_id": self.eos_id,
                "end_of_turn_ids": self.end_of_turn_ids, "tokenizer_backend": self.tokenizer_backend,
                "bytes": self.bytes, "sha256": self.sha256}


def filtered_reason(row: dict, harmony: bool) -> str | None:
    """Why a row is not rendered (the row-level part of the pools' base filter), or None."""
    if harmony and not row["quality_valid_harmony"]:
        return "invalid_harmony"
    if not row["quality_completion_nonempty"]:
        return "empty_completion"
    if not row["quality_valid_tool_schema"]:
        return "invalid_tool_schema"
    if row["quality_placeholder_prompt"]:
        return "placeholder_prompt"
    return None


@dataclass(frozen=True)
class KeptRow:
    row: int  # in the Harmony shard
    record: dict
    messages: list
    tools: list | None


def _kept_rows(batch: pa.RecordBatch, first_row: int, url: str, harmony: bool,
               stats: SamplesStats) -> Iterator[KeptRow]:
    """The batch's rows that pass the filter, with their decoded conversation; a conversation that is not canonical
    is an `InputError` naming the shard, row and field."""
    for index, record in enumerate(batch.to_pylist(), start=first_row):
        stats.rows += 1
        reason = filtered_reason(record, harmony)
        if reason is not None:
            stats.filtered[reason] += 1
            continue
        try:
            messages = orjson.loads(record["messages"])
            tools = orjson.loads(record["tools"]) if record["tools"] else None
            check_conversation(messages, tools or None)
        except orjson.JSONDecodeError as error:
            raise InputError(f"not valid JSON: {error}", path=url, row=index, field="messages") from None
        except InputError as error:
            raise InputError(error.reason, dataset=record["dataset"], path=url, row=index,
                             field=error.field) from None
        yield KeptRow(index, record, messages, tools or None)


def with_tokenizer_facts(spec: ChatFormatSpec) -> SamplesStats:
    """Empty stats holding what the later steps need from the tokenizer (the receipt records them)."""
    chat_format = format_of(spec)
    return SamplesStats(eos_id=eos_id(chat_format), end_of_turn_ids=list(chat_format.end_of_turn_ids()),
                        tokenizer_backend=chat_format.tokenizer.backend)  # type: ignore[attr-defined]


def render_batch(batch: pa.RecordBatch, first_row: int, spec: ChatFormatSpec, url: str) -> tuple[pa.Table,
                                                                                                  SamplesStats]:
    """One batch of Harmony rows (``first_row``: the shard row of its first) -> its samples table and stats: filter,
    decode, render, tokenize, mask. Runs in a worker process (`render_pool.in_order`), so the process that reads
    and writes the files does nothing else. Harmony renders consecutive rows of one reasoning effort together."""
    stats = with_tokenizer_facts(spec)
    harmony = spec.chat_template == HARMONY
    kept = list(_kept_rows(batch, first_row, url, harmony, stats))
    results: list[ConversationSamples] = []
    for effort, group in groupby(kept, key=lambda k: (k.record["meta_reasoning_effort"] or DEFAULT_EFFORT)
                                 if harmony else None):
        rendering = format_of(replace(spec, reasoning_effort=effort))
        results += samples_for_conversations([(k.messages, k.tools) for k in group], rendering.template,
                                             rendering.tokenizer, checked=True)  # by _kept_rows
    stats.conversations = len(kept)
    return _table(kept, results, url, stats), stats


def _list_column(parts: list[np.ndarray], value_type: pa.DataType) -> pa.Array:
    offsets = np.zeros(len(parts) + 1, dtype=np.int32)
    np.cumsum([len(part) for part in parts], out=offsets[1:])
    values = np.concatenate(parts) if parts else np.zeros(0, dtype=value_type.to_pandas_dtype())
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=value_type), type=pa.list_(value_type))


def _table(rows: list[KeptRow], results: list[ConversationSamples], url: str, stats: SamplesStats) -> pa.Table:
    columns: dict[str, list] = {name: [] for name in SCHEMA.names}
    for kept, result in zip(rows, results):
        stats.dropped.update(result.dropped)
        for why in result.why[: max(0, MAX_EXAMPLES - len(stats.dropped_examples))]:
            stats.dropped_examples.append(f"{url} row {kept.row}: {why}")
        if not result.samples:
            continue
        record = kept.record
        key = split_key(kept.messages, {"messages": kept.messages, "tools": kept.tools})
        for number, sample in enumerate(result.samples):
            for name, value in (("id", record["id"]), ("dataset", record["dataset"]), ("row", kept.row),
                                ("sample", number), ("user_turn", sample.user_turn), ("split_key", key),
                                ("used_in", record["source_used_in"] or []), ("license", record["source_license"]),
                                ("source_row", record["source_row"]), ("length", len(sample.ids)),
                                ("trained", int(np.count_nonzero(sample.assistant_mask))),
                                ("input_ids", sample.ids), ("assistant_mask", sample.assistant_mask),
                                ("masked_spans", sample.masked_spans)):
                columns[name].append(value)
    lengths = np.asarray(columns["length"], dtype=np.int64)
    stats.samples += len(lengths)
    stats.tokens += int(lengths.sum())
    stats.trained_tokens += sum(columns["trained"])
    stats.histogram = add_histograms(stats.histogram, log2_histogram(lengths))
    stats.max_length = max(stats.max_length, int(lengths.max()) if len(lengths) else 0)
    arrays = [pa.array(columns[name], type=SCHEMA.field(name).type) for name in METADATA_COLUMNS]
    arrays += [_list_column(columns["input_ids"], pa.int32()), _list_column(columns["assistant_mask"], pa.uint8()),
               _list_column(columns["masked_spans"], pa.int32())]
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def eos_id(chat_format: ChatFormat) -> int | None:
    """The tokenizer's end-of-sequence id (Bridge pads with it), None when its config names none."""
    if chat_format.spec.tokenizer_model == "o200k_harmony":
        return HARMONY_SPECIAL_TOKENS[O200K_EOS]
    token = chat_format.tokenizer.template_tokens.get("eos_token")
    return chat_format.tokenizer.reference.token_to_id(token) if token else None  # type: ignore[attr-defined]
