"""sha256 of the local files that decide a step's output (a tokenizer, a chat template), once per version of each."""

import functools
import hashlib
import os
from pathlib import Path


def file_sha256(path: str | Path) -> str:
    """sha256 of a local file, computed once per version of it (path, size, modification time): a step asks for
    its tokenizer's or template's hash once per output it judges."""
    stat = os.stat(path)
    return _file_sha256(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    with open(path, "rb") as stream:
        return hashlib.file_digest(stream, "sha256").hexdigest()
