"""The ``sft_samples`` step's render workers: batches of Harmony rows rendered on every core, results in order.

Rendering Jinja is Python and holds the GIL, so one process uses one core however fast the tokenizer is. Each
worker builds the template and tokenizer once from the `ChatFormatSpec` (a few seconds for Llama-3: the tokenizer
and its fast path's probe check) and then runs what it is given (`in_order`; the step sends whole Harmony batches,
samples_step.py). The processes are started by core/workers.py ``in_order``; at most ``workers * ahead`` batches are
in flight, so memory stays bounded whatever the input size.

Starting workers: forking a process whose tokenizer thread pools already run can deadlock them, so workers are
started with ``spawn`` (a fresh interpreter that imports the code and loads the tokenizer: about 2 s for Llama-3,
in every worker at once), except when fastokens has never been imported in this process: then no fastokens
thread pool can exist here, and this process parses the tokenizer files once (`tokenizers.preload_files`, which
encodes nothing), forks the workers, which find the code imported and the files parsed, and drops its copy
(`_fork_after_preload`). Hugging Face ``tokenizers`` needs no such care: its own fork handler turns parallelism
off in a child forked after it was used. Each worker still checks fastokens against the reference itself.
"""

import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from nemotron_assets.chat.chat_format import ChatFormat, ChatFormatSpec, load_chat_format
from nemotron_assets.chat.o200k import O200K_HARMONY
from nemotron_assets.core import workers as processes
from nemotron_assets.core.allocator import give_back_free_memory

Result = TypeVar("Result")

_formats: dict[ChatFormatSpec, ChatFormat] = {}  # this process's templates and tokenizers
_default: ChatFormatSpec | None = None  # the spec a worker was started with


def format_of(spec: ChatFormatSpec) -> ChatFormat:
    """`spec`'s chat format, loaded once per process."""
    if spec not in _formats:
        _formats[spec] = load_chat_format(spec)
    return _formats[spec]


def default_spec() -> ChatFormatSpec | None:
    return _default


def _load(spec: ChatFormatSpec) -> None:
    global _default
    _default = spec
    format_of(spec)


def in_order(function: Callable[..., Result], tasks: Iterable[tuple], spec: ChatFormatSpec, workers: int = 2,
             ahead: int = 2) -> Iterator[Result]:
    """``function(*task)`` of each task, in order, computed by `workers` processes that loaded `spec`'s chat format
    first (``workers=1``: here, in this process, where `function` loads it on first use). An error raised by a
    task is raised here."""
    if workers <= 1:
        yield from processes.in_order(function, tasks, 1)
        return
    forked = _fork_after_preload(spec)
    yield from processes.in_order(function, tasks, workers, start="fork" if forked else "spawn", initializer=_load,
                                  initargs=(spec,), ahead=ahead, started=_forget_preloaded if forked else None)


def forks_workers(spec: ChatFormatSpec) -> bool:
    """Whether `in_order` would fork its workers for `spec` now (they start at once, the tokenizer parsed here)
    rather than spawn them (a few seconds each): only on Linux, for tokenizer.json tokenizers, and while fastokens
    has never been imported in this process (module docstring)."""
    return sys.platform == "linux" and "fastokens" not in sys.modules and spec.tokenizer_model != O200K_HARMONY


def _fork_after_preload(spec: ChatFormatSpec) -> bool:
    """Whether the workers can be forked from this process (`forks_workers`); if so, the tokenizer files are parsed
    here first (after this call fastokens has been imported: a process forks its render workers at most once)."""
    if not forks_workers(spec):
        return False
    from nemotron_assets.chat.tokenizers import preload_files
    from nemotron_assets.tokenize.loading import locate_tokenizer

    try:
        preload_files(locate_tokenizer(spec.tokenizer_model, spec.tokenizer_revision).tokenizer_json)
    except Exception:  # noqa: BLE001 - a missing or malformed tokenizer: spawned workers say what is wrong
        _forget_preloaded()
        return False
    return True


def _forget_preloaded() -> None:
    """Drop this process's parsed tokenizer (the forked workers have their own) and give its memory back to the
    system: a process running later steps would otherwise carry it in its peak RSS."""
    from nemotron_assets.chat.tokenizers import forget_preloaded

    forget_preloaded()
    give_back_free_memory()
