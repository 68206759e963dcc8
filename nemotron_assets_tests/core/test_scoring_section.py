"""The blend's scoring: section: defaults, and every bad value refused with a reason."""

import pytest
from pydantic import ValidationError

from nemotron_assets.core.sections import ScoringSettings


def test_defaults():
    settings = ScoringSettings(model="/models/m", pools=["tool_use"])
    assert (settings.batch_tokens, settings.max_tokens, settings.device, settings.dtype, settings.select_quantile,
            settings.near_dup_threshold, settings.diverse_k, settings.embedding_model) == (
        16384, 4096, "auto", "auto", 0.2, 0.95, None, "all-MiniLM-L6-v2")


@pytest.mark.parametrize(("changes", "message"), [
    ({"pools": ["nope"]}, "unknown pool"),
    ({"pools": ["tool_use", "tool_use"]}, "listed twice: tool_use"),
    ({"pools": []}, "at least 1 item"),
    ({"max_tokens": 9000, "batch_tokens": 8192}, "must not exceed batch_tokens"),
    ({"device": "tpu"}, "'auto', 'cpu' or 'cuda'"),
    ({"dtype": "fp16"}, "'auto', 'fp32' or 'bf16'"),
    ({"select_quantile": 0.5}, "less than 0.5"),
    ({"diverse_k": 0}, "greater than or equal to 1"),
    ({"temperature": 1.0}, "Extra inputs are not permitted"),
])
def test_bad_settings_are_refused(changes, message):
    with pytest.raises(ValidationError, match=message):
        ScoringSettings(**{"model": "/models/m", "pools": ["tool_use"], **changes})
