"""Device choice: CPU + fp32 here (this torch has no CUDA), CUDA + bf16 where present, a clear error otherwise."""

import pytest
import torch

from nemotron_assets.errors import InputError
from nemotron_assets.scoring.device import choose_device, usable_cores


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
