"""Errors that say where the bad input is.

A data engineer staring at a failed run needs the dataset, the file, the line (or row) and the field, not a
traceback from deep inside a reader. Every error about user input is an `InputError` whose message starts
with that location, e.g. ``dataset 'wiki': data/wiki.jsonl:1042 field 'text': missing`` (JSONL lines are
1-based; Parquet rows 0-based, printed as ``row N``).
"""

from dataclasses import dataclass


@dataclass
class InputError(Exception):
    """Bad user input (blend file, data file, tokenizer), located as precisely as we know."""

    reason: str
    dataset: str | None = None
    path: str | None = None
    line: int | None = None
    field: str | None = None
    row: int | None = None

    def __post_init__(self) -> None:
        super().__init__(str(self))

    def location(self) -> str:
        parts = []
        if self.dataset is not None:
            parts.append(f"dataset '{self.dataset}':")
        if self.path is not None:
            parts.append(f"{self.path}:{self.line}" if self.line is not None else self.path)
        elif self.line is not None:
            parts.append(f"line {self.line}")
        if self.row is not None:
            parts.append(f"row {self.row}")
        if self.field is not None:
            parts.append(f"field '{self.field}'")
        return " ".join(parts)

    def __str__(self) -> str:
        where = self.location()
        return f"{where}: {self.reason}" if where else self.reason

    def __reduce__(self):  # keep the fields (and any notes) when the error crosses a process boundary
        return (InputError, (self.reason, self.dataset, self.path, self.line, self.field, self.row), vars(self))
