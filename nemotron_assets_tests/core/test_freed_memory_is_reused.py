"""allocator.py on this machine's real glibc: a large block freed and asked for again costs no new page faults once
tuned, and one fresh fault per 4 KB page without; an environment that sets glibc's tunables itself keeps them.

Each case runs in a fresh interpreter: the settings last for the life of a process, and this test process may have
been tuned already by an in-process ``materialize``."""

import os
import subprocess
import sys

import pytest

from nemotron_assets.core.allocator import _mallopt

PROBE = """
import resource, sys
from nemotron_assets.core.allocator import tune_malloc_for_builds
applied = tune_malloc_for_builds() if sys.argv[1] == "tuned" else []
block = bytearray(20 << 20)  # 20 MB, every page written (zeroed)
del block
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
block = bytearray(20 << 20)  # the same size again
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, ",".join(applied) or "none")
"""
PAGES = (20 << 20) // 4096

pytestmark = pytest.mark.skipif(_mallopt() is None, reason="glibc's mallopt only")


def _faults_of_the_second_block(mode: str, **env: str) -> tuple[str, int]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    done = subprocess.run([sys.executable, "-c", PROBE, mode], env={**clean, **env}, capture_output=True, text=True,
                          timeout=60, check=True)
    faults, applied = done.stdout.strip().split(" ", 1)
    return applied, int(faults)


def test_a_freed_large_block_is_reused_without_new_page_faults_once_tuned():
    applied, faults = _faults_of_the_second_block("tuned")
    assert applied == "arenas,large blocks" and faults < PAGES // 20
    applied, faults = _faults_of_the_second_block("default")
    assert applied == "none" and faults > PAGES * 0.9  # glibc's default: a fresh block, every page faulted


def test_an_environment_that_sets_the_tunables_itself_keeps_them():
    applied, faults = _faults_of_the_second_block("tuned", MALLOC_TRIM_THRESHOLD_="0")
    assert applied == "arenas" and faults > PAGES * 0.9


GIVE_BACK = """
import pyarrow  # what the give-back imports, loaded before measuring
from nemotron_assets.core.allocator import give_back_free_memory, tune_malloc_for_builds
def rss_mb():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS")) // 1024
tune_malloc_for_builds()
rows = [b"%06d" % i * 333 for i in range(100_000)]  # 200 MB in blocks malloc takes from its heap (Python's own
del rows                                       # allocator keeps objects under 512 bytes elsewhere)
kept = rss_mb()  # freed, but kept by glibc (up to TRIM_THRESHOLD at the heap's top)
give_back_free_memory()
print(kept, rss_mb())
"""


def test_a_step_that_ends_gives_back_the_memory_it_freed():
    """What every building step does at its end (core/reporting.py retry_transient_errors): the next step run in the
    same process, and the builds it forks, start from what is in use."""
    done = subprocess.run([sys.executable, "-c", GIVE_BACK], capture_output=True, text=True, timeout=60, check=True)
    kept, after = map(int, done.stdout.split())
    assert kept - after > 150, (kept, after)
