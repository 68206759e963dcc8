"""Samples on every core: batches of conversations go to worker processes, results come back in input order.

Rendering Jinja is Python and holds the GIL, so one process uses one core however fast the tokenizer is. Each
worker builds the template and tokenizer once from the `ChatFormatSpec` (a few seconds for Llama-3: the tokenizer
and its fast path's probe check) and then runs what it is given: `samples_for_conversations` on a batch of
conversations (`samples_in_processes`), or any picklable function of a task (`in_order`; the ``sft_samples`` step
sends whole Harmony batches, samples_step.py). A batch's
samples travel back as two flat arrays (all ids, all masks) plus their lengths — pickling two arrays per sample
cost a quarter of the compute — and the caller gets `ConversationSamples` whose arrays are views into them. At most
``workers * ahead`` batches are in flight, so memory stays bounded whatever the input size.

Starting workers: forking a process whose tokenizer thread pools already run can deadlock them, so workers are
started with ``spawn`` (a fresh interpreter that imports the code and loads the tokenizer: about 2 s for Llama-3,
in every worker at once), except when fastokens has never been imported in this process: then no fastokens
thread pool can exist here, and this process parses the tokenizer files once (`tokenizers.preload_files`, which
encodes nothing), forks the workers, which find the code imported and the files parsed, and drops its copy
(`_fork_after_preload`). Hugging Face ``tokenizers`` needs no such care: its own fork handler turns parallelism
off in a child forked after it was used. Each worker still checks fastokens against the reference itself.
"""

import ctypes
import gc
import multiprocessing
import os
import sys
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from nemotron_assets.chat.chat_format import ChatFormat, ChatFormatSpec, load_chat_format
from nemotron_assets.chat.o200k import O200K_HARMONY
from nemotron_assets.chat.samples import ConversationSamples, Messages, Sample, Tools, samples_for_conversations

Conversation = tuple[Messages, Tools]
Result = TypeVar("Result")


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
_formats: dict[ChatFormatSpec, ChatFormat] = {}  # this process's templates and tokenizers
_default: ChatFormatSpec | None = None  # the spec of plain batches, in a worker


def format_of(spec: ChatFormatSpec) -> ChatFormat:
    """`spec`'s chat format, loaded once per process."""
    if spec not in _formats:
        _formats[spec] = load_chat_format(spec)
    return _formats[spec]


def _load(spec: ChatFormatSpec) -> None:
    global _default
    _default = spec
    format_of(spec)


def _run(batch: Batch, default: ChatFormatSpec | None) -> list[ConversationSamples]:
    spec, conversations = (batch.spec, batch.conversations) if isinstance(batch, FormattedBatch) else (default, batch)
    if spec is None:
        raise RuntimeError("the worker was started without a chat format")
    chat_format = format_of(spec)
    return samples_for_conversations(conversations, chat_format.template, chat_format.tokenizer)


def _samples(batch: Batch) -> FlatBatch:
    return flatten(_run(batch, _default))


def in_order(function: Callable[..., Result], tasks: Iterable[tuple], spec: ChatFormatSpec, workers: int = 2,
             ahead: int = 2) -> Iterator[Result]:
    """``function(*task)`` of each task, in order, computed by `workers` processes that loaded `spec`'s chat format
    first (``workers=1``: here, in this process, where `function` loads it on first use). At most
    ``workers * ahead`` tasks are in flight, so memory stays bounded whatever the input size; an error raised by a
    task is raised here."""
    if workers <= 1:
        for task in tasks:
            yield function(*task)
        return
    forked = _fork_after_preload(spec)
    context = multiprocessing.get_context("fork" if forked else "spawn")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_load, initargs=(spec,)) as pool:
        if forked:
            gc.freeze()  # the workers' collections skip what they inherit (nor copy its pages to mark it)
            try:
                pool.submit(_started)  # with fork, the first task forks every worker, here and now
            finally:
                gc.unfreeze()
            _forget_preloaded()
        pending: deque[Future] = deque()
        for task in tasks:
            pending.append(pool.submit(function, *task))
            if len(pending) >= workers * ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _fork_after_preload(spec: ChatFormatSpec) -> bool:
    """Whether the workers can be forked from this process (module docstring); if so, the tokenizer files are
    parsed here first. Only on Linux, for tokenizer.json tokenizers, and while fastokens has never been imported in
    this process (after this call it has: a process forks its render workers at most once)."""
    if sys.platform != "linux" or "fastokens" in sys.modules or spec.tokenizer_model == O200K_HARMONY:
        return False
    from nemotron_assets.chat.tokenizers import preload_files
    from nemotron_assets.tokenize.loading import locate_tokenizer

    try:
        preload_files(locate_tokenizer(spec.tokenizer_model, spec.tokenizer_revision).tokenizer_json)
    except Exception:  # noqa: BLE001 - a missing or malformed tokenizer: spawned workers say what is wrong
        _forget_preloaded()
        return False
    return True


def _started() -> int:
    return os.getpid()


def _forget_preloaded() -> None:
    """Drop this process's parsed tokenizer (the forked workers have their own) and give its memory back to the
    system: a process running later steps would otherwise carry it in its peak RSS."""
    from nemotron_assets.chat.tokenizers import forget_preloaded

    forget_preloaded()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the memory is reused by this process, not returned
        pass


def samples_in_processes(batches: Iterable[Batch], spec: ChatFormatSpec, workers: int = 2,
                         ahead: int = 2) -> Iterator[list[ConversationSamples]]:
    """`samples_for_conversations` of each batch, in order, computed by `workers` processes (``workers=1``: in this
    process), with `spec`'s chat format or a `FormattedBatch`'s own. Errors raised for a batch (`InputError` for a
    non-canonical conversation) are raised here."""
    if workers <= 1:
        for batch in batches:
            yield _run(batch, spec)
        return
    for flat in in_order(_samples, ((batch,) for batch in batches), spec, workers, ahead):
        yield expand(flat)
