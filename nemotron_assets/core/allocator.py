"""Memory settings of the processes that build: glibc's ``malloc`` (few arenas, large blocks kept for reuse), the
freed memory given back when a step ends (`give_back_free_memory`), Python's cycle collector paused while a step
makes many objects and no cycles (`collector_paused`), and what a process keeps to its end frozen out of the
collector's reach once loaded (`loading_for_good`).

The two ``malloc`` settings are glibc's documented tunables (``man 3 mallopt``), set by every step that builds
(core/reporting.py ``materialize_partitions``), whoever launched its run; the processes it forks (the builds of a
run's shards) inherit them. An arena limit set after threads started limits the arenas made from then on. Without
glibc (musl, macOS) nothing changes.

**Arenas.** A pretraining shard runs five threads that allocate (reader, two tokenizers, writer, the step), and
glibc gives each its own arena that keeps up to ~64 MB of freed memory: on 1 GB of input the CLI's peak RSS varied
from 0.89 to 1.03 GB between identical runs, against 0.73-0.87 GB with ``ARENAS`` arenas, at the same speed (one
arena was 10 % slower).

**Large blocks.** A build works in blocks of megabytes: 8 MB reads of the input, the ids of a batch from the
tokenizer, the 8 MB byte mask that counts a block's newlines. By default glibc gives a block that large its own
``mmap`` and returns it to the kernel when it is freed; the next block is a fresh mapping whose every page the
kernel must fault in and zero again. On the 1 GB pretraining bench that was ~530,000 page faults, at ~5 us each on
these VMs. With blocks up to ``MMAP_THRESHOLD`` taken from the heap, and up to ``TRIM_THRESHOLD`` of free memory at
the heap's top kept, faults fell to ~340,000, the source split of 1 GB from ~1.0 s to ~0.7 s, and peak RSS did not
grow (bench/README.md, "Page faults"). An environment that sets either tunable itself (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``) is left as it is.
"""

import contextlib
import ctypes
import gc
import os
import sys
from collections.abc import Iterator

ARENAS = 2
MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed value on 64-bit machines
TRIM_THRESHOLD = 256 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8  # glibc's malloc.h
_OWN_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def tune_malloc_for_builds() -> list[str]:
    """Apply the settings this system takes; their names (none off glibc)."""
    mallopt = _mallopt()
    if mallopt is None:
        return []
    applied = ["arenas"] if mallopt(_M_ARENA_MAX, ARENAS) else []
    if not any(name in os.environ for name in _OWN_SETTINGS):
        if mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD):
            applied.append("large blocks")
    return applied


def give_back_free_memory() -> None:
    """Return to the system the memory this process has freed: what glibc keeps at its heap's top (up to
    ``TRIM_THRESHOLD``, kept for speed while a step builds) and what Arrow's allocator keeps of freed buffers.

    Every building step does it when it ends (core/reporting.py ``retry_transient_errors``): the command line runs
    a blend's steps one after the other in one process, and without it a step started from the last one's peak, and
    so did the builds it forks (a forked process counts the pages it shares in its RSS). On the whole-corpus chat
    SFT bench the largest process then peaked above 1 GiB in ``sft_packed`` (bench/README.md)."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    trim = libc_function("malloc_trim")
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
        trim(0)


def _mallopt():
    """glibc's ``mallopt``, or None (not Linux, or a C library without it). Looked up among the symbols this process
    has loaded already (``CDLL(None)``): ``ctypes.util.find_library`` would run ``ldconfig`` at every command start."""
    mallopt = libc_function("mallopt")
    if mallopt is not None:
        mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt


def libc_function(name: str):
    """A C library function by ``name`` among the symbols this process has loaded (``CDLL(None)``), or None (not
    Linux, or a C library without it)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError, TypeError):
        return None


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for a block that makes many objects and no reference cycles: rows of
    nested dicts and lists, a packed shard's samples, their arrays and bins, all freed by reference counting alone.

    With the collector on, every 700 new objects start a pass that walks the young ones, and the survivors are
    walked again by the older generations' passes (each full pass walks every object of the process, a Dagster
    run's included): about a quarter of the CPU time of normalizing Agentic rows, and a third of the packing step's,
    spent finding nothing (bench/README.md). A caller that may leave cycles collects the young generation itself
    (``gc.collect(0)``) between batches."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextlib.contextmanager
def loading_for_good() -> Iterator[None]:
    """A block that loads what the process keeps to its end: the modules a command imports (Dagster and the
    pipelines), the code location's definitions (definitions.py). The cycle collector is off while the block runs
    (`collector_paused`). At the end of the process's first such block, every object the process holds is frozen
    (``gc.freeze``): moved to a generation that no collection walks. They are still freed when nothing refers to
    them; only a reference cycle among them would stay (a caller of the Python API keeps its own objects of that
    moment frozen too). A later block freezes nothing: the modules are loaded by then, and a freeze would also keep
    whatever garbage the process's runs had left; a reload of the code location refreezes (`refreeze_after_reload`).

    Importing the code location makes ~170,000 objects (a ``materialize`` command's imports ~220,000), and a full
    collection walks every object of the process: three ran during that import, four during the command's, and the
    interpreter runs one more when a process exits through it (``dagster asset materialize``, the UI's code server).
    Frozen, they are walked by none: a process that imports the code location took 1.12 s instead of 1.62 s, the
    trivial ``dagster asset materialize --select sample/megatron_blend`` 2.30 s instead of 2.76 s (medians;
    bench/README.md, "Start-up: what the process keeps, frozen")."""
    first = gc.get_freeze_count() == 0
    with collector_paused():
        yield
    if first:
        gc.freeze()


def refreeze_after_reload() -> None:
    """After the code location is loaded again in a process (the Python API's next ``materialize``): the last load's
    objects that nothing uses now, frozen then, and the garbage its runs left are collected, and what is kept is frozen
    again. Without it, each ``materialize`` call kept ~5,000-10,000 more objects."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
