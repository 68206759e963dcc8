"""NLL scores against a direct, unbatched torch computation, a hand-derived value, and invariances.

The rows are rendered by transformers (`conftest.transformers_render`), so these tests do not depend on the SFT
renderer; CPU, fp32 throughout.
"""

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nemotron_assets.defs.scoring.device import choose_device
from nemotron_assets.defs.scoring.model_files import locate_model
from nemotron_assets.defs.scoring.nll import NllScorer
from nemotron_assets.defs.scoring.samples import scoring_sample
from nemotron_assets.sources.errors import InputError
from nemotron_assets_tests.defs.scoring.tiny_llama import (
    CONVERSATIONS,
    LLAMA3_VOCAB,
    direct_nll_sum,
    direct_token_nll,
    transformers_render,
)

CPU = choose_device("cpu")
RTOL = 1e-5


@pytest.fixture(scope="module")
def scorer(tiny_llama):
    return NllScorer.load(locate_model(str(tiny_llama)), CPU, batch_tokens=4096)


@pytest.fixture(scope="module")
def rendered(reference_tokenizer):
    return [transformers_render(reference_tokenizer, messages, tools) for messages, tools in CONVERSATIONS]


def test_nll_sum_equals_direct_masked_cross_entropy(scorer, reference_model, rendered):
    samples = [scoring_sample(ids, mask, max_tokens=4096) for ids, mask in rendered]
    scores = scorer.score(samples)
    expected = [direct_nll_sum(reference_model, ids, mask) for ids, mask in rendered]
    np.testing.assert_allclose(scores.nll_sum, expected, rtol=RTOL)
    np.testing.assert_array_equal(scores.tokens_scored, [int(mask[1:].sum()) for _, mask in rendered])
    np.testing.assert_allclose(scores.nll_mean, np.array(expected) / scores.tokens_scored, rtol=RTOL)
    assert min(expected) > 0 and max(scores.tokens_scored) > 50  # real work was checked, not empty rows


def test_a_uniform_model_scores_log_vocabulary_per_token(tiny_llama, rendered):
    """Hand-derived golden value: with a zero output layer every logit is 0, p = 1 / 128256 for every token, so each
    scored token costs exactly ln(128256)."""
    scorer = NllScorer.load(locate_model(str(tiny_llama)), CPU, batch_tokens=4096)
    with torch.no_grad():
        scorer.head.weight.zero_()  # tied: the input embedding is zero too, the model still runs
    scores = scorer.score([scoring_sample(ids, mask, 4096) for ids, mask in rendered])
    np.testing.assert_allclose(scores.nll_sum, scores.tokens_scored * math.log(LLAMA3_VOCAB), rtol=1e-6)
    np.testing.assert_allclose(scores.nll_mean, math.log(LLAMA3_VOCAB), rtol=1e-6)


def test_batching_and_padding_change_nothing(tiny_llama, rendered):
    samples = [scoring_sample(ids, mask, 4096) for ids, mask in rendered]
    files = locate_model(str(tiny_llama))
    one_by_one = NllScorer.load(files, CPU, batch_tokens=1)  # every row alone: no padding at all
    together = NllScorer.load(files, CPU, batch_tokens=100_000, max_padding=1.0)  # one batch, heavily padded
    alone, padded = one_by_one.score(samples), together.score(samples)
    assert alone.batches == len(samples) and alone.token_slots == alone.tokens
    assert padded.batches == 1 and padded.token_slots > 2 * padded.tokens
    np.testing.assert_allclose(padded.nll_sum, alone.nll_sum, rtol=RTOL)


def test_opt_in_bf16_on_cpu_scores_the_same_tokens_close_to_fp32(tiny_llama, scorer, rendered):
    """bf16 rounds the model's products (an opt-in, not batch-invariant): same tokens scored, sums within 1 %."""
    samples = [scoring_sample(ids, mask, 4096) for ids, mask in rendered]
    bf16 = NllScorer.load(locate_model(str(tiny_llama)), choose_device("cpu", dtype="bf16"), batch_tokens=4096)
    assert bf16.head.weight.dtype == torch.bfloat16
    fp32, low = scorer.score(samples), bf16.score(samples)
    np.testing.assert_array_equal(low.tokens_scored, fp32.tokens_scored)
    np.testing.assert_allclose(low.nll_sum, fp32.nll_sum, rtol=1e-2)
    assert not np.array_equal(low.nll_sum, fp32.nll_sum)  # it did run in another precision


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_rows_in_any_batching_match_the_direct_computation(scorer, reference_model, data):
    n_rows = data.draw(st.integers(1, 6))
    rows = []
    for _ in range(n_rows):
        length = data.draw(st.integers(1, 40))
        ids = np.array(data.draw(st.lists(st.integers(0, LLAMA3_VOCAB - 1), min_size=length, max_size=length)))
        mask = np.array(data.draw(st.lists(st.integers(0, 1), min_size=length, max_size=length)), dtype=np.uint8)
        rows.append((ids, mask))
    batch_tokens = data.draw(st.integers(1, 200))
    local = NllScorer(scorer.model, CPU, batch_tokens=batch_tokens, max_padding=data.draw(st.sampled_from([0.1, 1.0])))
    scores = local.score([scoring_sample(ids, mask, 4096) for ids, mask in rows])
    expected = [direct_nll_sum(reference_model, ids, mask) if len(ids) > 1 else 0.0 for ids, mask in rows]
    np.testing.assert_allclose(scores.nll_sum, expected, rtol=RTOL, atol=1e-9)


def test_masked_tokens_contribute_nothing(scorer, reference_model, rendered):
    ids, mask = rendered[1]
    base = scorer.score([scoring_sample(ids, mask, 4096)])
    # An untrained tail (any tokens) changes nothing: it is neither scored nor seen by earlier positions.
    tail = np.array([9906, 1917, 0, 128000, 42], dtype=np.int64)
    longer = scorer.score([scoring_sample(np.concatenate([ids, tail]), np.concatenate([mask, np.zeros(5, np.uint8)]),
                                          4096)])
    np.testing.assert_allclose(longer.nll_sum, base.nll_sum, rtol=RTOL)
    assert longer.tokens_scored[0] == base.tokens_scored[0]
    # Untraining one trained token removes exactly that token's direct cross-entropy.
    position = int(np.flatnonzero(mask)[3])
    fewer = mask.copy()
    fewer[position] = 0
    less = scorer.score([scoring_sample(ids, fewer, 4096)])
    token = direct_token_nll(reference_model, ids)[position - 1]
    np.testing.assert_allclose(base.nll_sum - less.nll_sum, [token], rtol=1e-4)
    assert less.tokens_scored[0] == base.tokens_scored[0] - 1


def test_a_row_without_trained_tokens_scores_zero_and_has_no_mean(scorer, rendered):
    ids, mask = rendered[0]
    scores = scorer.score([scoring_sample(ids, np.zeros_like(mask), 4096)])
    assert scores.nll_sum[0] == 0.0 and scores.tokens_scored[0] == 0 and np.isnan(scores.nll_mean[0])


def test_the_first_token_is_never_scored(scorer, reference_model):
    ids = np.array([128000, 9906, 1917, 0], dtype=np.int64)
    scores = scorer.score([scoring_sample(ids, np.ones(4, np.uint8), 4096)])
    assert scores.tokens_scored[0] == 3
    np.testing.assert_allclose(scores.nll_sum, [direct_token_nll(reference_model, ids).sum()], rtol=RTOL)


def test_a_truncated_row_scores_its_head(scorer, reference_model, rendered):
    ids, mask = rendered[5]
    sample = scoring_sample(ids, mask, max_tokens=150)
    assert sample.truncated and len(sample) == 150 and len(ids) > 150
    scores = scorer.score([sample])
    np.testing.assert_allclose(scores.nll_sum, [direct_nll_sum(reference_model, ids[:150], mask[:150])], rtol=RTOL)


def test_same_rows_give_identical_scores(scorer, rendered):
    samples = [scoring_sample(ids, mask, 4096) for ids, mask in rendered]
    first, second = scorer.score(samples), scorer.score(samples)
    assert first.nll_sum.tobytes() == second.nll_sum.tobytes()


def test_token_ids_outside_the_vocabulary_are_refused(scorer):
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        scorer.score([scoring_sample(np.array([1, LLAMA3_VOCAB]), np.array([0, 1]), 4096)])


def test_a_model_that_post_processes_its_logits_is_refused(tmp_path):
    """Gemma-2 soft-caps its logits (tanh(x / cap) * cap): scoring lm_head(hidden) would be wrong, so it is refused."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(0)
    config = Gemma2Config(vocab_size=300, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                          num_attention_heads=2, num_key_value_heads=1, head_dim=8, final_logit_softcapping=0.5,
                          initializer_range=0.5)
    with pytest.raises(InputError, match="post-processes"):
        NllScorer(Gemma2ForCausalLM(config), CPU, batch_tokens=64)
