"""One device and autocast policy for train.py, evaluation and the shard queue.

- resolve_device("auto" | "cpu" | "cuda" | "cuda:N"): the torch device string to use, or a
  DataError in one line (a malformed string; CUDA asked for where this torch build or
  machine has none; an index past the visible GPUs). Command lines turn it into exit 2.
- autocast(device, enabled): bf16 autocast of the device's type (the baseline's forward
  pass runs under bf16 autocast on CUDA).
- to_device(a, device): an array or tensor as a tensor on device (inputs follow the model).
- configure(device): the baseline's process settings on CUDA (docs/baseline.md, "Differences
  from the baseline's training step"): TF32 matmuls ("high") and expandable allocator
  segments. CPU is left as it is.
"""
import contextlib
import os
import re

import numpy as np
import torch

from corpus.errors import DataError

_SPEC = re.compile(r"^(auto|cpu|cuda|cuda:\d+)$")


def check_device_string(spec, where="device"):
    """Syntax only (a config may be checked on a machine without the device)."""
    if not isinstance(spec, str) or not _SPEC.match(spec):
        raise DataError(f"{where}: {spec!r} is not auto, cpu, cuda or cuda:N")


def resolve_device(spec="auto", where="device"):
    check_device_string(spec, where)
    if spec == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if spec == "cpu":
        return spec
    if not torch.cuda.is_available():
        raise DataError(f"{where}: {spec!r} asked for, but this torch build or machine has no CUDA "
                        f"(use cpu, or auto)")
    index = int(spec.split(":")[1]) if ":" in spec else 0
    if index >= torch.cuda.device_count():
        raise DataError(f"{where}: {spec!r} asked for, but {torch.cuda.device_count()} CUDA device(s) are visible")
    return spec


def bf16_autocast(device, setting="auto"):
    """Whether the forward runs under bf16 autocast: config bf16 "on", or "auto" on CUDA (as the baseline)."""
    return setting == "on" or (setting == "auto" and torch.device(device).type == "cuda")


def autocast(device, enabled=True):
    if not enabled:  # a null context: torch.autocast refuses device types it has no rules for (meta)
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)


def to_device(a, device):
    if isinstance(a, np.ndarray):
        a = torch.from_numpy(np.ascontiguousarray(a))
    return torch.as_tensor(a).to(device)


def configure(device):
    """Call before the first CUDA allocation: the allocator reads its settings once."""
    if torch.device(device).type != "cuda":
        return
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    torch.set_float32_matmul_precision("high")
