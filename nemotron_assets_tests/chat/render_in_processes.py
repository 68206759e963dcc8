"""Samples on several processes for the tests and the render bench: `samples_in_processes` renders batches of
conversations in order with the product's render workers (defs/sft/render_pool.py), each batch's samples sent back
as two flat arrays (`FlatBatch`) instead of one pickled object per sample."""

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from nemotron_assets.chat.chat_format import ChatFormatSpec
from nemotron_assets.chat.samples import ConversationSamples, Messages, Sample, Tools, samples_for_conversations
from nemotron_assets.defs.sft import render_pool
from nemotron_assets.defs.sft.render_pool import format_of

Conversation = tuple[Messages, Tools]


@dataclass(frozen=True)
class FlatBatch:
    """A batch's results as a worker sends them: sample i's ids are ``ids[offsets[i]:offsets[i+1]]``."""

    ids: np.ndarray  # int32, every sample's ids one after the other
    masks: np.ndarray  # uint8, the same layout
    offsets: np.ndarray  # int64, samples + 1
    masked: np.ndarray  # int32, every sample's flat masked-role token spans one after the other
    masked_offsets: np.ndarray  # int64, samples + 1
    user_turns: list[int | None]
    message_counts: list[int]
    samples_per_conversation: list[int]
    dropped: list[dict[str, int]]
    why: list[list[str]]


def flatten(results: Sequence[ConversationSamples]) -> FlatBatch:
    samples = [sample for result in results for sample in result.samples]
    lengths = [len(sample.ids) for sample in samples]
    return FlatBatch(
        ids=np.concatenate([s.ids for s in samples]) if samples else np.zeros(0, np.int32),
        masks=np.concatenate([s.assistant_mask for s in samples]) if samples else np.zeros(0, np.uint8),
        offsets=np.cumsum([0, *lengths], dtype=np.int64),
        masked=np.concatenate([s.masked_spans for s in samples]) if samples else np.zeros(0, np.int32),
        masked_offsets=np.cumsum([0, *(len(s.masked_spans) for s in samples)], dtype=np.int64),
        user_turns=[s.user_turn for s in samples],
        message_counts=[s.messages for s in samples],
        samples_per_conversation=[len(result.samples) for result in results],
        dropped=[dict(result.dropped) for result in results],
        why=[result.why for result in results],
    )


def expand(batch: FlatBatch) -> list[ConversationSamples]:
    bounds, masked = batch.offsets.tolist(), batch.masked_offsets.tolist()
    samples = [Sample(batch.ids[a:b], batch.masks[a:b], turn, count, batch.masked[c:d])
               for a, b, c, d, turn, count in zip(bounds[:-1], bounds[1:], masked[:-1], masked[1:],
                                                  batch.user_turns, batch.message_counts)]
    results, at = [], 0
    for count, dropped, why in zip(batch.samples_per_conversation, batch.dropped, batch.why):
        results.append(ConversationSamples(samples[at : at + count], Counter(dropped), why))
        at += count
    return results


@dataclass(frozen=True)
class FormattedBatch:
    """A batch rendered with its own chat format (e.g. Harmony with the rows' own reasoning effort) instead of the
    one `samples_in_processes` was given; a worker loads each format once (the tokenizer is shared)."""

    spec: ChatFormatSpec
    conversations: Sequence[Conversation]


Batch = Sequence[Conversation] | FormattedBatch


def _run(batch: Batch, default: ChatFormatSpec | None) -> list[ConversationSamples]:
    spec, conversations = (batch.spec, batch.conversations) if isinstance(batch, FormattedBatch) else (default, batch)
    if spec is None:
        raise RuntimeError("the worker was started without a chat format")
    chat_format = format_of(spec)
    return samples_for_conversations(conversations, chat_format.template, chat_format.tokenizer)


def _samples(batch: Batch) -> FlatBatch:
    return flatten(_run(batch, render_pool.default_spec()))


def samples_in_processes(batches: Iterable[Batch], spec: ChatFormatSpec, workers: int = 2,
                         ahead: int = 2) -> Iterator[list[ConversationSamples]]:
    """`samples_for_conversations` of each batch, in order, computed by `workers` processes (``workers=1``: in this
    process), with `spec`'s chat format or a `FormattedBatch`'s own. Errors raised for a batch (`InputError` for a
    non-canonical conversation) are raised here."""
    if workers <= 1:
        for batch in batches:
            yield _run(batch, spec)
        return
    for flat in render_pool.in_order(_samples, ((batch,) for batch in batches), spec, workers, ahead):
        yield expand(flat)
