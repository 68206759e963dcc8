"""Embed one embedding-view part: ``embedding/<view>/<pool>/part-NNNNN.parquet`` (``id``, ``embed_text``) ->
``scores/embedding/<view>/<pool>/part-NNNNN.parquet`` (``id``, ``embedding``).

Streaming like `nll_parts`: windows of ``window_rows`` rows are read, embedded and written as one row group each,
in the view's row order. ``embedding`` is ``fixed_size_list<float32>[dimension]``; the model id, revision,
dimension, pooling and whether vectors are normalized go into the file's key-value metadata (`file_metadata`).
"""

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from nemotron_assets.defs.scoring.embeddings import SentenceEmbedder
from nemotron_assets.defs.scoring.model_files import ModelFiles
from nemotron_assets.sources.errors import InputError

VIEW_COLUMNS = ("id", "embed_text")
WINDOW_ROWS = 4096


def embedding_schema(dimension: int, metadata: dict[str, str] | None = None) -> pa.Schema:
    return pa.schema([("id", pa.string()), ("embedding", pa.list_(pa.float32(), dimension))], metadata=metadata)


def file_metadata(embedder: SentenceEmbedder, model: ModelFiles) -> dict[str, str]:
    return {"model_id": model.model_id, "model_revision": model.revision, "dimension": str(embedder.dimension),
            "pooling": embedder.config.pooling, "normalized": str(embedder.config.normalize).lower()}


@dataclass
class EmbeddingPartStats:
    rows: int = 0
    dimension: int = 0
    bytes: int = 0
    sha256: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def embed_view_part(view_part: str | Path | BinaryIO, out_path: Path, embedder: SentenceEmbedder, model: ModelFiles,
                    window_rows: int = WINDOW_ROWS, name: str | None = None) -> EmbeddingPartStats:
    """Embed every row of `view_part` into `out_path` (see the module docstring)."""
    name = name or str(view_part)
    source = pq.ParquetFile(view_part)
    missing = [c for c in VIEW_COLUMNS if c not in source.schema_arrow.names]
    if missing:
        raise InputError(f"the embedding view has no column {', '.join(missing)}", path=name, field=missing[0])
    schema = embedding_schema(embedder.dimension, file_metadata(embedder, model))
    stats = EmbeddingPartStats(dimension=embedder.dimension)
    with pq.ParquetWriter(out_path, schema, compression="zstd") as writer:
        for batch in source.iter_batches(batch_size=window_rows, columns=list(VIEW_COLUMNS)):
            texts = batch.column("embed_text").to_pylist()
            if None in texts:
                row = stats.rows + texts.index(None)
                raise InputError("embed_text is null", path=name, row=row, field="embed_text")
            vectors = embedder.embed(texts)
            writer.write_table(pa.table({"id": batch.column("id"), "embedding": as_fixed_size_list(vectors)},
                                        schema=schema))
            stats.rows += len(texts)
    data = Path(out_path).read_bytes()
    stats.bytes, stats.sha256 = len(data), hashlib.sha256(data).hexdigest()
    return stats


def as_fixed_size_list(vectors: np.ndarray) -> pa.FixedSizeListArray:
    """A ``(rows, dimension)`` float32 array as an Arrow column, without copying row by row."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), vectors.shape[1])


def read_embeddings(paths: list[str | Path]) -> tuple[list[str], np.ndarray]:
    """Ids and the ``(rows, dimension)`` float32 matrix of embedding parts, in order (for near-duplicates and
    diversity; memory: the vectors themselves, ``rows x dimension x 4`` bytes)."""
    ids: list[str] = []
    blocks: list[np.ndarray] = []
    dimension = 0
    for path in paths:
        table = pq.read_table(path, columns=["id", "embedding"])
        column = table.column("embedding").combine_chunks()
        dimension = column.type.list_size
        ids.extend(table.column("id").to_pylist())
        blocks.append(column.flatten().to_numpy().reshape(-1, dimension))
    return ids, np.concatenate(blocks) if blocks else np.zeros((0, 0), dtype=np.float32)
