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
    """Call before the first allocation on the device: the CUDA allocator reads its settings once."""
    if torch.device(device).type != "cuda":
        keep_freed_host_memory()
        return
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    torch.set_float32_matmul_precision("high")


_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's mallopt parameters (malloc.h)


def keep_freed_host_memory():
    """glibc only: large CPU tensors reuse freed memory instead of fresh pages from the kernel.

    By default glibc maps every allocation over 32 MB afresh and unmaps it when freed, and the
    kernel zeroes each new page: a tiny CPU run allocates and frees logits of 8 rows x 128
    positions x 8192 words x 4 bytes = 33.5 MB several times per update, and 16 of the 20 s
    of such a run went to system time (142 of the 151 s of the main job's evaluation). So:
    - large allocations come from the heap, and freed heap is never given back (mallopt);
    - torch's CPU allocator asks for huge pages for buffers of 2 MB and more
      (THP_MEM_ALLOC_ENABLE, read at its first CPU allocation, so call this before any
      tensor exists). Without it, the kept heap fragments: tensors are allocated 64-byte
      aligned, and a freed block rarely fits the next request of the same size (the
      evaluation then peaked at 3-5 GB instead of 1.2 GB).
    Together: the same numbers bit for bit, half the wall time or less, about the same peak
    memory (training/bench.py measures the three). Returns whether the heap setting was
    applied: not off glibc, and not when the user has set MALLOC_MMAP_MAX_ or
    MALLOC_TRIM_THRESHOLD_ (their choice stands, THP_MEM_ALLOC_ENABLE likewise)."""
    if "MALLOC_MMAP_MAX_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    try:
        os.confstr("CS_GNU_LIBC_VERSION")  # raises off glibc (macOS, musl)
        libc = ctypes.CDLL(None)
        applied = bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
    except (ValueError, OSError, AttributeError):
        return False
    if os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled"):  # a kernel without THP: torch would warn
        os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    return applied
