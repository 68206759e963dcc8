"""Where and in which precision a model runs: CUDA in bf16 when present (or asked for), else CPU in fp32.

bf16 halves memory and is what GPUs are fast at, but its rounding depends on how a matrix product is split, so
results change slightly with batch composition. fp32 on CPU keeps scores reproducible enough to test that batching
and padding change nothing. On CPU, torch is given one thread per core this process may use.

``scoring.dtype`` overrides the precision: ``auto`` is the rule above, ``fp32`` or ``bf16`` force one. bf16 on CPU
is an opt-in for CPUs with bf16 matrix units (AMX, AVX-512 BF16), where the output layer's matrix products run
several times faster (bench/README.md "SFT, NLL and embeddings"); its scores then depend on batching as on CUDA.

The choice is logged by the caller and recorded in the output metadata (`DeviceChoice.as_metadata`).
"""

import os
from dataclasses import dataclass
from typing import Literal

from nemotron_assets.sources.errors import InputError

DeviceSetting = Literal["auto", "cpu", "cuda"]
DtypeSetting = Literal["auto", "fp32", "bf16"]
TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def resolved_dtype(setting: str, device: str) -> str:
    """The torch dtype name a ``scoring.dtype`` setting means on ``device`` (see the module docstring)."""
    if setting == "auto":
        return "bfloat16" if device == "cuda" else "float32"
    return TORCH_DTYPES[setting]


@dataclass(frozen=True)
class DeviceChoice:
    device: str  # "cpu" or "cuda"
    dtype: str  # "float32" or "bfloat16"
    name: str  # what it is: "cpu" or the GPU's name
    threads: int  # torch intra-op threads (CPU)

    def torch_dtype(self):
        import torch

        return getattr(torch, self.dtype)

    def as_metadata(self) -> dict[str, str | int]:
        return {"device": self.device, "device_name": self.name, "dtype": self.dtype, "threads": self.threads}

    def describe(self) -> str:
        return f"{self.device} ({self.name}, {self.dtype}, {self.threads} CPU threads)"


def usable_cores() -> int:
    """Cores this process may run on (the affinity mask, which containers and taskset narrow)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def choose_device(setting: str = "auto", field: str = "scoring.device", dtype: str = "auto") -> DeviceChoice:
    """Resolve ``auto``/``cpu``/``cuda`` against this machine, and the precision (`resolved_dtype`), and set torch's
    CPU thread count."""
    import torch

    if setting not in ("auto", "cpu", "cuda"):
        raise InputError(f"device must be auto, cpu or cuda, got {setting!r}", field=field)
    if dtype not in ("auto", *TORCH_DTYPES):
        raise InputError(f"dtype must be auto, fp32 or bf16, got {dtype!r}", field="scoring.dtype")
    cuda = torch.cuda.is_available()
    if setting == "cuda" and not cuda:
        raise InputError("device is cuda, but torch sees no CUDA device (torch "
                         f"{torch.__version__}, built {'with' if torch.version.cuda else 'without'} CUDA)", field=field)
    threads = usable_cores()
    torch.set_num_threads(threads)
    if setting == "cuda" or (setting == "auto" and cuda):
        return DeviceChoice("cuda", resolved_dtype(dtype, "cuda"), torch.cuda.get_device_name(0), threads)
    return DeviceChoice("cpu", resolved_dtype(dtype, "cpu"), "cpu", threads)
