"""Samples on every core: batches of conversations go to worker processes, results come back in input order.

Rendering Jinja is Python and holds the GIL, so one process uses one core however fast the tokenizer is. Each
worker builds the template and tokenizer once from the `ChatFormatSpec` (a few seconds for Llama-3: the tokenizer
and its fast path's probe check) and then runs `samples_for_conversations` on the batches it is given. A batch's
samples travel back as two flat arrays (all ids, all masks) plus their lengths — pickling two arrays per sample
cost a quarter of the compute — and the caller gets `ConversationSamples` whose arrays are views into them. At most
``workers * ahead`` batches are in flight, so memory stays bounded whatever the input size. Workers are started with
``spawn``: forking a process whose tokenizer thread pools already run can deadlock them.
"""

import multiprocessing
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from nemotron_assets.sft.chat_format import ChatFormat, ChatFormatSpec, load_chat_format
from nemotron_assets.sft.samples import ConversationSamples, Messages, Sample, Tools, samples_for_conversations

Conversation = tuple[Messages, Tools]


@dataclass(frozen=True)
class FlatBatch:
    """A batch's results as a worker sends them: sample i's ids are ``ids[offsets[i]:offsets[i+1]]``."""

    ids: np.ndarray  # int32, every sample's ids one after the other
    masks: np.ndarray  # uint8, the same layout
    offsets: np.ndarray  # int64, samples + 1
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
        user_turns=[s.user_turn for s in samples],
        message_counts=[s.messages for s in samples],
        samples_per_conversation=[len(result.samples) for result in results],
        dropped=[dict(result.dropped) for result in results],
        why=[result.why for result in results],
    )


def expand(batch: FlatBatch) -> list[ConversationSamples]:
    bounds = batch.offsets.tolist()
    samples = [Sample(batch.ids[a:b], batch.masks[a:b], turn, count)
               for a, b, turn, count in zip(bounds[:-1], bounds[1:], batch.user_turns, batch.message_counts)]
    results, at = [], 0
    for count, dropped, why in zip(batch.samples_per_conversation, batch.dropped, batch.why):
        results.append(ConversationSamples(samples[at : at + count], Counter(dropped), why))
        at += count
    return results


_format: ChatFormat | None = None  # the worker's template and tokenizer


def _load(spec: ChatFormatSpec) -> None:
    global _format
    _format = load_chat_format(spec)


def _samples(batch: Sequence[Conversation]) -> FlatBatch:
    if _format is None:
        raise RuntimeError("the worker was started without a chat format")
    return flatten(samples_for_conversations(batch, _format.template, _format.tokenizer))


def samples_in_processes(batches: Iterable[Sequence[Conversation]], spec: ChatFormatSpec, workers: int = 2,
                         ahead: int = 2) -> Iterator[list[ConversationSamples]]:
    """`samples_for_conversations` of each batch, in order, computed by `workers` processes (``workers=1``: in this
    process). Errors raised for a batch (`InputError` for a non-canonical conversation) are raised here."""
    if workers <= 1:
        chat_format = load_chat_format(spec)
        for batch in batches:
            yield samples_for_conversations(batch, chat_format.template, chat_format.tokenizer)
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_load, initargs=(spec,)) as pool:
        pending: deque[Future] = deque()
        for batch in batches:
            pending.append(pool.submit(_samples, batch))
            if len(pending) >= workers * ahead:
                yield expand(pending.popleft().result())
        while pending:
            yield expand(pending.popleft().result())
