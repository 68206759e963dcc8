"""Embeddings equal sentence-transformers' own ``encode`` for the same folder (the bundled all-MiniLM-L6-v2, and
copies of it with another pooling, without Normalize, or cased with ``do_lower_case``)."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nemotron_assets.defs.scoring.device import choose_device
from nemotron_assets.defs.scoring.embedding_parts import embed_view_part, read_embeddings
from nemotron_assets.defs.scoring.embeddings import SentenceEmbedder, read_sentence_config
from nemotron_assets.defs.scoring.model_files import DEFAULT_EMBEDDING_MODEL, ModelFiles, locate_model
from nemotron_assets.sources.errors import InputError
from nemotron_assets_tests.defs.scoring.tiny_llama import copy_folder

CPU = choose_device("cpu")
ATOL = 2e-6
TEXTS = [
    "What is the capital of France?",
    "",
    "   ",
    "Zürich ☀️ 21 °C — naïve café, 東京, Привет!",
    "tools: get_weather -> search; calls: 2; argument keys: city, query; results returned: all; answer: text",
    " ".join(f"word{i}" for i in range(400)),  # far past the 256-token limit: truncated
    "def f(x):\n    return x ** 2  # square\n",
    "What is the capital of France?",  # a duplicate
    "Short.",
    "A medium length sentence about prime numbers, proofs and the successor function S(n).",
] * 3


@pytest.fixture(scope="module")
def minilm() -> ModelFiles:
    return locate_model(DEFAULT_EMBEDDING_MODEL, field="scoring.embedding_model")


def sentence_transformers_encode(folder, texts):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu").encode(texts)


def test_embeddings_equal_sentence_transformers_encode(minilm):
    ours = SentenceEmbedder.load(minilm, CPU).embed(TEXTS)
    reference = sentence_transformers_encode(minilm.folder, TEXTS)
    assert ours.dtype == np.float32 and ours.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(ours, reference, atol=ATOL)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, rtol=1e-5)


def test_batch_size_does_not_change_embeddings(minilm):
    embedder = SentenceEmbedder.load(minilm, CPU, batch_tokens=1)
    one_by_one = embedder.embed(TEXTS[:10])
    embedder.batch_tokens, embedder.max_padding = 100_000, 1.0
    np.testing.assert_allclose(embedder.embed(TEXTS[:10]), one_by_one, atol=ATOL)


@pytest.mark.parametrize("pooling", ["cls", "max", "mean_sqrt_len_tokens"])
def test_other_pooling_modes_equal_sentence_transformers(minilm, tmp_path, pooling):
    folder = copy_folder(minilm.folder, tmp_path / "model")
    config = folder / "1_Pooling" / "config.json"
    settings = json.loads(config.read_text())
    settings["pooling_mode_mean_tokens"] = False
    settings[{"cls": "pooling_mode_cls_token", "max": "pooling_mode_max_tokens",
              "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens"}[pooling]] = True
    config.write_text(json.dumps(settings))
    modules = json.loads((folder / "modules.json").read_text())
    (folder / "modules.json").write_text(json.dumps([m for m in modules if not m["type"].endswith("Normalize")]))
    files = locate_model(str(folder))
    assert read_sentence_config(folder).pooling == pooling and not read_sentence_config(folder).normalize
    ours = SentenceEmbedder.load(files, CPU).embed(TEXTS[:10])
    np.testing.assert_allclose(ours, sentence_transformers_encode(folder, TEXTS[:10]), atol=1e-5, rtol=1e-5)
    assert not np.allclose(np.linalg.norm(ours, axis=1), 1.0)  # no Normalize module: raw pooled vectors


def test_do_lower_case_lowercases_before_tokenizing_as_sentence_transformers_does(minilm, tmp_path):
    """A cased copy (its normalizer no longer lowercases); do_lower_case in sentence_bert_config brings it back."""
    folder = copy_folder(minilm.folder, tmp_path / "model")
    tokenizer_json = json.loads((folder / "tokenizer.json").read_text())
    tokenizer_json["normalizer"]["lowercase"] = False
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer_json))
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**tokenizer_config, "do_lower_case": False}))
    texts = ["What Is The CAPITAL of FRANCE?", "PARIS"]
    cased = SentenceEmbedder.load(locate_model(str(folder)), CPU).embed(texts)
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 256, "do_lower_case": True}))
    lowered = SentenceEmbedder.load(locate_model(str(folder)), CPU).embed(texts)
    np.testing.assert_allclose(lowered, sentence_transformers_encode(folder, texts), atol=ATOL)
    assert not np.allclose(cased, lowered, atol=1e-3)  # the setting matters for this folder


def test_a_pipeline_with_other_modules_is_refused(minilm, tmp_path):
    folder = copy_folder(minilm.folder, tmp_path / "model")
    modules = json.loads((folder / "modules.json").read_text())
    modules.insert(2, {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(InputError, match="unsupported sentence-transformers pipeline Transformer -> Pooling -> Dense"):
        read_sentence_config(folder)


def test_a_view_part_becomes_fixed_size_float32_lists_in_row_order(minilm, tmp_path):
    ids = [f"id{i}" for i in range(len(TEXTS))]
    pq.write_table(pa.table({"id": ids, "embed_text": TEXTS, "word_count": [len(t.split()) for t in TEXTS]}),
                   tmp_path / "view.parquet")
    embedder = SentenceEmbedder.load(minilm, CPU)
    stats = embed_view_part(tmp_path / "view.parquet", tmp_path / "emb.parquet", embedder, minilm, window_rows=7)
    table = pq.read_table(tmp_path / "emb.parquet")
    assert table.schema.field("embedding").type == pa.list_(pa.float32(), 384)
    assert table.column("id").to_pylist() == ids and stats.rows == len(TEXTS)
    metadata = {k.decode(): v.decode() for k, v in table.schema.metadata.items()}
    assert metadata["model_id"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert metadata["model_revision"] == minilm.revision and metadata["pooling"] == "mean"
    read_ids, vectors = read_embeddings([tmp_path / "emb.parquet"])
    assert read_ids == ids
    np.testing.assert_allclose(vectors, sentence_transformers_encode(minilm.folder, TEXTS), atol=ATOL)
    again = embed_view_part(tmp_path / "view.parquet", tmp_path / "again.parquet", embedder, minilm, window_rows=7)
    assert again.sha256 == stats.sha256  # same input and settings: byte-identical output


def test_a_null_text_is_located(minilm, tmp_path):
    pq.write_table(pa.table({"id": ["a", "b"], "embed_text": ["x", None]}), tmp_path / "view.parquet")
    with pytest.raises(InputError, match=r"view.parquet row 1 field 'embed_text': embed_text is null"):
        embed_view_part(tmp_path / "view.parquet", tmp_path / "emb.parquet", SentenceEmbedder.load(minilm, CPU),
                        minilm)
