"""Device choice: CPU + fp32 here (this torch has no CUDA), CUDA + bf16 where present, a clear error otherwise."""

import pytest
import torch

from nemotron_assets.core.records import Receipt
from nemotron_assets.core.sections import ScoringSettings
from nemotron_assets.defs.scoring.device import choose_device, usable_cores
from nemotron_assets.defs.scoring.inputs import judged_device, precision_inputs
from nemotron_assets.sources.errors import InputError


def test_cpu_runs_fp32_on_every_usable_core():
    choice = choose_device("cpu")
    assert (choice.device, choice.dtype, choice.threads) == ("cpu", "float32", usable_cores())
    assert torch.get_num_threads() == usable_cores() and choice.torch_dtype() is torch.float32
    assert choice.as_metadata() == {"device": "cpu", "device_name": "cpu", "dtype": "float32",
                                    "threads": usable_cores()}


def test_auto_uses_cuda_exactly_when_torch_sees_it():
    choice = choose_device("auto")
    expected = ("cuda", "bfloat16") if torch.cuda.is_available() else ("cpu", "float32")
    assert (choice.device, choice.dtype) == expected


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_asking_for_cuda_without_it_is_a_clear_error():
    with pytest.raises(InputError, match="field 'scoring.device': device is cuda, but torch sees no CUDA device"):
        choose_device("cuda")


def test_an_unknown_device_is_refused():
    with pytest.raises(InputError, match="device must be auto, cpu or cuda"):
        choose_device("tpu")


def test_bf16_on_cpu_is_an_opt_in_and_fp32_stays_the_cpu_default():
    assert choose_device("cpu", dtype="auto").dtype == "float32"
    bf16 = choose_device("cpu", dtype="bf16")
    assert (bf16.device, bf16.dtype, bf16.torch_dtype()) == ("cpu", "bfloat16", torch.bfloat16)
    with pytest.raises(InputError, match="field 'scoring.dtype': dtype must be auto, fp32 or bf16"):
        choose_device("cpu", dtype="fp16")


def test_only_cpu_fp32_scores_leave_the_precision_out_of_their_inputs():
    """CPU fp32 is batch-invariant, so its receipts (as before this option existed) record no precision; every other
    precision is recorded, so a CPU bf16 part is stale under the default and the reverse."""
    assert precision_inputs("cpu", "float32") == {}
    assert precision_inputs("cpu", "bfloat16") == {"device": {"device": "cpu", "dtype": "bfloat16"}}
    assert precision_inputs("cuda", "bfloat16") == {"device": {"device": "cuda", "dtype": "bfloat16"}}

    def settings(**changes) -> ScoringSettings:
        return ScoringSettings(model="/m", pools=["tool_use"], **changes)

    def built(device: str, dtype: str) -> Receipt:
        return Receipt("nll_scores", "k", precision_inputs(device, dtype), {}, {})

    assert judged_device(settings(), None) == ("cpu", "float32")
    assert judged_device(settings(dtype="bf16"), None) == ("cpu", "bfloat16")
    assert judged_device(settings(), built("cuda", "bfloat16")) == ("cuda", "bfloat16")  # auto: as recorded
    assert judged_device(settings(), built("cpu", "bfloat16")) == ("cpu", "float32")  # stale under the default
    assert judged_device(settings(device="cpu", dtype="fp32"), built("cuda", "bfloat16")) == ("cpu", "float32")
