"""One pool part -> one NLL part: columns, row order, values, drops, truncation, determinism, errors."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nemotron_assets.defs.scoring.device import choose_device
from nemotron_assets.defs.scoring.model_files import locate_model
from nemotron_assets.defs.scoring.nll import NllScorer
from nemotron_assets.defs.scoring.nll_parts import score_pool_part
from nemotron_assets.defs.scoring.rendering import ModelRenderer
from nemotron_assets.sources.errors import InputError
from nemotron_assets_tests.defs.scoring.tiny_llama import CONVERSATIONS, direct_nll_sum, transformers_render

LITERAL_ROW = ([{"role": "user", "content": "echo <|eot_id|>"}, {"role": "assistant", "content": "no"}], None)


def write_pool(path, conversations, ids=None):
    ids = ids or [f"row{i}" for i in range(len(conversations))]
    pq.write_table(pa.table({
        "id": ids,
        "dataset": ["d"] * len(ids),
        "messages": [json.dumps(m) for m, _ in conversations],
        "tools": [json.dumps(t) if t is not None else None for _, t in conversations],
    }), path)
    return path


@pytest.fixture(scope="module")
def model(tiny_llama):
    files = locate_model(str(tiny_llama))
    return files, ModelRenderer(files), NllScorer.load(files, choose_device("cpu"), batch_tokens=2048)


def test_a_pool_part_is_scored_in_pool_order_with_its_drops_counted(model, tmp_path, reference_model,
                                                                     reference_tokenizer):
    files, renderer, scorer = model
    conversations = CONVERSATIONS[:3] + [LITERAL_ROW] + CONVERSATIONS[3:]
    pool = write_pool(tmp_path / "part-00000.parquet", conversations)
    stats = score_pool_part(pool, tmp_path / "nll.parquet", renderer, scorer, files, max_tokens=150, window_rows=4)
    table = pq.read_table(tmp_path / "nll.parquet")
    assert table.schema.names == ["id", "nll_mean", "nll_sum", "tokens_scored", "truncated", "model_id",
                                  "model_revision"]
    assert table.column("id").to_pylist() == ["row0", "row1", "row2", "row4", "row5", "row6"]
    assert stats.rows == 7 and stats.scored_rows == 6 and stats.dropped == {"special_token_literal": 1}
    assert "row 3 (id row3)" in stats.examples[0]
    kept = CONVERSATIONS
    expected_sum, expected_tokens, expected_truncated = [], [], []
    for messages, tools in kept:
        ids, mask = transformers_render(reference_tokenizer, messages, tools)
        expected_truncated.append(len(ids) > 150)
        ids, mask = ids[:150], mask[:150]
        expected_sum.append(direct_nll_sum(reference_model, ids, mask))
        expected_tokens.append(int(mask[1:].sum()))
    np.testing.assert_allclose(table.column("nll_sum").to_numpy(), expected_sum, rtol=1e-5)
    assert table.column("tokens_scored").to_pylist() == expected_tokens
    assert table.column("truncated").to_pylist() == expected_truncated and any(expected_truncated)
    means = table.column("nll_mean").to_pylist()
    for mean, total, tokens in zip(means, expected_sum, expected_tokens):
        assert mean == pytest.approx(total / tokens, rel=1e-5)
    assert set(table.column("model_id").to_pylist()) == {str(files.folder)}
    assert set(table.column("model_revision").to_pylist()) == {files.revision}
    assert stats.tokens_scored == sum(expected_tokens) and stats.truncated == sum(expected_truncated)
    assert stats.padding_fraction < 0.10


def test_a_row_whose_trained_tokens_are_all_cut_off_gets_a_null_mean(model, tmp_path):
    files, renderer, scorer = model
    pool = write_pool(tmp_path / "pool.parquet", [CONVERSATIONS[5]])
    stats = score_pool_part(pool, tmp_path / "nll.parquet", renderer, scorer, files, max_tokens=20)
    row = pq.read_table(tmp_path / "nll.parquet").to_pylist()[0]
    assert row["nll_mean"] is None and row["tokens_scored"] == 0 and row["truncated"] is True
    assert stats.without_scored_tokens == 1


def test_the_same_part_gives_byte_identical_output_whatever_the_window(model, tmp_path):
    files, renderer, scorer = model
    pool = write_pool(tmp_path / "pool.parquet", CONVERSATIONS * 2)
    first = score_pool_part(pool, tmp_path / "a.parquet", renderer, scorer, files, max_tokens=4096, window_rows=5)
    second = score_pool_part(pool, tmp_path / "b.parquet", renderer, scorer, files, max_tokens=4096, window_rows=5)
    assert first.sha256 == second.sha256
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    other = score_pool_part(pool, tmp_path / "c.parquet", renderer, scorer, files, max_tokens=4096, window_rows=1000)
    a, c = pq.read_table(tmp_path / "a.parquet"), pq.read_table(tmp_path / "c.parquet")
    assert a.column("id").to_pylist() == c.column("id").to_pylist()
    np.testing.assert_allclose(a.column("nll_sum").to_numpy(), c.column("nll_sum").to_numpy(), rtol=1e-5)
    assert other.rows == first.rows == 12


def test_an_empty_pool_part_gives_an_empty_scores_part(model, tmp_path):
    files, renderer, scorer = model
    pool = write_pool(tmp_path / "pool.parquet", [])
    stats = score_pool_part(pool, tmp_path / "nll.parquet", renderer, scorer, files, max_tokens=64)
    assert stats.rows == 0 and pq.read_table(tmp_path / "nll.parquet").num_rows == 0


def test_a_conversation_that_is_not_canonical_is_located_by_file_and_row(model, tmp_path):
    files, renderer, scorer = model
    bad = ([{"role": "wizard", "content": "hi"}], None)
    pool = write_pool(tmp_path / "pool.parquet", [CONVERSATIONS[0], CONVERSATIONS[1], bad])
    with pytest.raises(InputError, match=r"pool.parquet row 2 field 'messages\[0\].role'"):
        score_pool_part(pool, tmp_path / "nll.parquet", renderer, scorer, files, max_tokens=64)


def test_a_pool_part_without_conversations_is_refused(model, tmp_path):
    files, renderer, scorer = model
    pq.write_table(pa.table({"id": ["a"], "text": ["x"]}), tmp_path / "pool.parquet")
    with pytest.raises(InputError, match="field 'messages': the pool part has no column messages, tools"):
        score_pool_part(tmp_path / "pool.parquet", tmp_path / "nll.parquet", renderer, scorer, files, max_tokens=64)
