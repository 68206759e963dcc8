"""Score one pool part: ``pools/<pool>/part-NNNNN.parquet`` -> ``scores/nll/<pool>/part-NNNNN.parquet``.

The pool part is read in windows of ``window_rows`` rows (Parquet record batches), each window is rendered
(`rendering`), truncated (`samples.scoring_sample`), scored (`nll.NllScorer`) and written as one row group before
the next is read, so memory stays at one window whatever the pool's size. Rows come out in the pool's order.

Output columns (`NLL_SCHEMA`): ``id``; ``nll_mean`` (null when no token was scored, e.g. every trained token was
past ``max_tokens``); ``nll_sum``; ``tokens_scored``; ``truncated``; ``model_id`` and ``model_revision``
(`model_files.ModelFiles`). A row the renderer drops is not written; it is counted under its reason
(`NllPartStats.dropped`), with the first few locations in ``examples``.
"""

import hashlib
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from nemotron_assets.defs.scoring.model_files import ModelFiles
from nemotron_assets.defs.scoring.nll import NllScorer, NllScores
from nemotron_assets.defs.scoring.rendering import ConversationRenderer, conversation_from_row
from nemotron_assets.defs.scoring.samples import ScoringSample, scoring_sample
from nemotron_assets.sources.errors import InputError

NLL_SCHEMA = pa.schema([
    ("id", pa.string()), ("nll_mean", pa.float64()), ("nll_sum", pa.float64()), ("tokens_scored", pa.int64()),
    ("truncated", pa.bool_()), ("model_id", pa.string()), ("model_revision", pa.string()),
])
POOL_COLUMNS = ("id", "messages", "tools")
WINDOW_ROWS = 2048
MAX_EXAMPLES = 5


@dataclass
class NllPartStats:
    rows: int = 0  # pool rows read
    scored_rows: int = 0  # rows written
    tokens_scored: int = 0
    truncated: int = 0
    without_scored_tokens: int = 0  # written with nll_mean null
    dropped: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    batches: int = 0
    token_slots: int = 0  # tokens computed, padding included
    tokens: int = 0  # real tokens among them
    bytes: int = 0
    sha256: str = ""

    @property
    def padding_fraction(self) -> float:
        return 0.0 if self.token_slots == 0 else 1.0 - self.tokens / self.token_slots

    def drop(self, reason: str, example: str) -> None:
        self.dropped[reason] += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(example)

    def add(self, samples: list[ScoringSample], scores: NllScores) -> None:
        self.scored_rows += len(samples)
        self.tokens_scored += int(scores.tokens_scored.sum())
        self.truncated += sum(s.truncated for s in samples)
        self.without_scored_tokens += int((scores.tokens_scored == 0).sum())
        self.batches += scores.batches
        self.token_slots += scores.token_slots
        self.tokens += scores.tokens

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "dropped": dict(self.dropped), "padding_fraction": self.padding_fraction}


def score_pool_part(pool_part: str | Path | BinaryIO, out_path: Path, render: ConversationRenderer,
                    scorer: NllScorer, model: ModelFiles, max_tokens: int, window_rows: int = WINDOW_ROWS,
                    name: str | None = None) -> NllPartStats:
    """Score every row of `pool_part` into `out_path` (see the module docstring). `name` is how errors name the
    input (default: the path)."""
    name = name or str(pool_part)
    source = pq.ParquetFile(pool_part)
    missing = [c for c in POOL_COLUMNS if c not in source.schema_arrow.names]
    if missing:
        raise InputError(f"the pool part has no column {', '.join(missing)} (rows need their canonical "
                         "conversation to be scored)", path=name, field=missing[0])
    stats = NllPartStats()
    with pq.ParquetWriter(out_path, NLL_SCHEMA, compression="zstd") as writer:
        for batch in source.iter_batches(batch_size=window_rows, columns=list(POOL_COLUMNS)):
            rows = batch.to_pylist()
            first, stats.rows = stats.rows, stats.rows + len(rows)
            ids, samples = _render_window(rows, first, name, render, max_tokens, stats)
            scores = scorer.score(samples)
            writer.write_table(_scores_table(ids, samples, scores, model))
            stats.add(samples, scores)
    data = Path(out_path).read_bytes()
    stats.bytes, stats.sha256 = len(data), hashlib.sha256(data).hexdigest()
    return stats


def _render_window(rows: list[dict], first: int, name: str, render: ConversationRenderer, max_tokens: int,
                   stats: NllPartStats) -> tuple[list[str], list[ScoringSample]]:
    """Ids and samples of the window's rows that render; the others are counted as dropped."""
    conversations = [conversation_from_row(row, name, first + i) for i, row in enumerate(rows)]
    try:
        rendered = render(conversations)
    except InputError as error:
        raise _located(error, name, first, rows, render) from None
    ids, samples = [], []
    for i, (row, result) in enumerate(zip(rows, rendered)):
        if result.dropped is not None:
            stats.drop(result.dropped, f"{name} row {first + i} (id {row['id']}): {result.dropped}: {result.detail}")
            continue
        ids.append(row["id"])
        samples.append(scoring_sample(result.ids, result.trained, max_tokens))
    return ids, samples


def _scores_table(ids: list[str], samples: list[ScoringSample], scores: NllScores, model: ModelFiles) -> pa.Table:
    return pa.table({
        "id": ids,
        "nll_mean": pa.array(scores.nll_mean, pa.float64(), mask=scores.tokens_scored == 0),
        "nll_sum": scores.nll_sum,
        "tokens_scored": scores.tokens_scored,
        "truncated": [s.truncated for s in samples],
        "model_id": [model.model_id] * len(ids),
        "model_revision": [model.revision] * len(ids),
    }, schema=NLL_SCHEMA)


def _located(error: InputError, name: str, first: int, rows: list[dict], render: ConversationRenderer) -> InputError:
    """The renderer's error about one conversation of a window, with the pool file and row added (found by
    rendering the window's rows one at a time, which only happens on this error path)."""
    for i, row in enumerate(rows):
        try:
            render([conversation_from_row(row, name, first + i)])
        except InputError as single:
            return InputError(single.reason, path=name, row=first + i, field=single.field)
    return InputError(error.reason, path=name, field=error.field)


def read_scores(paths: list[str | Path]) -> tuple[list[str], np.ndarray]:
    """Ids and nll_mean (NaN where null) of NLL parts, in order: the input of `selection.select_by_nll`."""
    ids: list[str] = []
    means: list[np.ndarray] = []
    for path in paths:
        table = pq.read_table(path, columns=["id", "nll_mean"])
        ids.extend(table.column("id").to_pylist())
        means.append(table.column("nll_mean").to_numpy(zero_copy_only=False).astype(np.float64))
    return ids, np.concatenate(means) if means else np.zeros(0)
