"""One device and autocast policy for train.py, evaluation and the shard queue.

- resolve_device("auto" | "cpu" | "cuda" | "cuda:N"): the torch device string to use, or a
  DataError in one line (a malformed string; CUDA asked for where this torch build or
  machine has none; an index past the visible GPUs). Command lines turn it into exit 2.
- autocast(device, enabled): bf16 autocast of the device's type (the baseline's forward
  pass runs under bf16 autocast on CUDA).
- to_device(a, device): an array or tensor as a tensor on device (inputs follow the model).
- configure(device): the process settings of every command line that trains, scores or runs
  the queue. CUDA: the baseline's TF32 matmuls ("high") and expandable allocator segments
  (docs/baseline.md, "Differences from the baseline's training step"), the same in train.py,
  evaluation and the queue, so a checkpoint scores alike wherever it is scored. CPU: freed
  host memory is kept for reuse (keep_freed_host_memory).
"""
import contextlib
import ctypes
import os
import re

import numpy as np
import torch

from errors import DataError

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
    """Call before the first tensor of the process: the CUDA allocator reads its settings once,
    and torch's CPU allocator reads THP_MEM_ALLOC_ENABLE at its first allocation."""
    if torch.device(device).type != "cuda":
        keep_freed_host_memory()
        return
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    torch.set_float32_matmul_precision("high")


_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's mallopt parameters (malloc.h)
_THP = "/sys/kernel/mm/transparent_hugepage/enabled"


def keep_freed_host_memory():
    """glibc with transparent huge pages only: large CPU tensors reuse freed memory instead of
    fresh pages from the kernel.

    By default glibc maps every allocation over 32 MB afresh and unmaps it when freed, and the
    kernel zeroes each new page: a tiny CPU run allocates and frees logits of 8 rows x 128
    positions x 8192 words x 4 bytes = 33.5 MB several times per update, and 16 of the 20 s
    of such a run went to system time (142 of the 151 s of the main job's evaluation). So:
    - large allocations come from the heap, and freed heap is kept (up to 2 GiB at its top;
      mallopt);
    - torch's CPU allocator aligns buffers of 2 MB and more to the page and asks for huge
      pages for them (THP_MEM_ALLOC_ENABLE, read at its first CPU allocation). Both or
      neither: with the kept heap alone, tensors stay 64-byte aligned, a freed block rarely
      fits the next request of the same size, and the heap fragments (the evaluation then
      peaked at 3-5 GB instead of 1.2 GB).
    Together: the same numbers bit for bit and half the wall time or less; peak memory about
    the same for evaluation, 1.3-1.7x for a tiny training run, whose peak now includes heap
    kept from earlier work in the process (training/bench.py measures it). Returns whether
    the settings were applied: not off glibc, not on a kernel without transparent huge pages,
    and not when the user has chosen for themselves (MALLOC_MMAP_MAX_, MALLOC_TRIM_THRESHOLD_,
    glibc.malloc tunables, or THP_MEM_ALLOC_ENABLE other than 1)."""
    env = os.environ
    if ("MALLOC_MMAP_MAX_" in env or "MALLOC_TRIM_THRESHOLD_" in env or "glibc.malloc" in env.get("GLIBC_TUNABLES", "")
            or env.get("THP_MEM_ALLOC_ENABLE", "1") != "1" or not os.path.exists(_THP)):
        return False
    try:
        os.confstr("CS_GNU_LIBC_VERSION")  # raises off glibc (macOS, musl)
        libc = ctypes.CDLL(None)
        if not (libc.mallopt(_M_MMAP_MAX, 0) and libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1)):
            return False
    except (ValueError, OSError, AttributeError):
        return False
    env["THP_MEM_ALLOC_ENABLE"] = "1"
    return True
