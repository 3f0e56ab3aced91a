"""configure("cpu") keeps freed host memory for reuse, with torch's large buffers page-aligned
in huge pages (training/device.keep_freed_host_memory), and leaves a user's own choice alone.

Counted in the kernel's minor page faults of a process that allocates and frees a 64 MB
tensor 20 times, over the last five: by default glibc maps each such allocation afresh,
16,384 new 4 KiB pages each time. The process turns huge pages off for itself first
(PR_SET_THP_DISABLE), so a kernel set to "always" cannot hide that cost; torch's choice of
alignment, which the test also reads, does not depend on it.
"""
import os
import subprocess
import sys

import pytest

from conftest import ROOT

PAGES = (64 << 20) // 4096  # pages of one 64 MB allocation

SNIPPET = """
import ctypes, resource, sys
ctypes.CDLL(None).prctl(41, 1, 0, 0, 0)  # PR_SET_THP_DISABLE: 4 KiB pages whatever the kernel's default
import torch
from training.device import configure, keep_freed_host_memory
applied = {"configure": lambda: configure("cpu"), "keep": keep_freed_host_memory}[sys.argv[1]]()
# with THP_MEM_ALLOC_ENABLE=1 set before its first CPU allocation, torch aligns buffers of 2 MB
# and more to the page (else to 64 bytes, inside a heap chunk)
paged = torch.empty(1 << 20).data_ptr() % 4096 == 0
for _ in range(15):  # the heap settles
    a = torch.ones(16 << 20); del a
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    a = torch.ones(16 << 20); del a
print(applied, paged, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def run(mode, **env):
    """(what the call returned, whether torch page-aligned a 4 MB tensor, minor page faults of 5 x 64 MB)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "THP_MEM_ALLOC", "GLIBC_TUNABLES"))}
    e.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **env)
    out = subprocess.run([sys.executable, "-c", SNIPPET, mode], env=e, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    applied, paged, n = out.stdout.split()
    return applied, paged == "True", int(n)


def supported():
    try:
        return bool(os.confstr("CS_GNU_LIBC_VERSION")) and os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled")
    except (ValueError, OSError):
        return False


@pytest.mark.skipif(not supported(), reason="glibc's mallopt and the kernel's huge pages; elsewhere a no-op by design")
def test_cpu_configure_reuses_freed_memory_and_respects_the_users_setting():
    applied, paged, kept = run("configure")
    assert applied == "None", "configure returns nothing"
    assert paged, "torch did not read THP_MEM_ALLOC_ENABLE=1: large buffers are not page-aligned"
    assert kept < PAGES // 8, f"{kept} page faults: freed memory is not reused"
    for env in ({"THP_MEM_ALLOC_ENABLE": "0"}, {"MALLOC_TRIM_THRESHOLD_": "131072"},
                {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"}):
        applied, paged, default = run("keep", **env)  # the user's own choice: nothing is changed
        assert applied == "False" and not paged, env
        assert default > 4 * PAGES, (env, default)  # the cost being removed: every allocation faults in fresh pages
