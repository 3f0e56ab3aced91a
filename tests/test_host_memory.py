"""configure("cpu") keeps freed host memory for reuse, in huge pages (training/device.keep_freed_host_memory):
counted in the kernel's minor page faults of a process that allocates and frees a 64 MB
tensor 20 times, over the last five (numpy would ask for huge pages and hide the cost). By default glibc maps each such allocation afresh (16,384 new 4 KiB pages each time)."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT

PAGES = (64 << 20) // 4096  # pages of one 64 MB allocation

SNIPPET = """
import resource, sys
import torch
from training.device import configure, keep_freed_host_memory
applied = {"none": lambda: None, "configure": lambda: configure("cpu"), "keep": keep_freed_host_memory}[sys.argv[1]]()
# torch takes huge pages for buffers of 2 MB and more when THP_MEM_ALLOC_ENABLE was set before its
# first CPU allocation; it then aligns them to the page (else to 64 bytes, inside a heap chunk)
paged = torch.empty(1 << 20).data_ptr() % 4096 == 0
for _ in range(15):  # glibc's heap settles: tensors are allocated 64-byte aligned, and a freed
    a = torch.ones(16 << 20); del a  # chunk is reused once neighbours have merged with it
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    a = torch.ones(16 << 20); del a
print(applied, paged, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode, **env):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "THP_MEM_ALLOC"))}
    e.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **env)
    out = subprocess.run([sys.executable, "-c", SNIPPET, mode], env=e, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    applied, paged, n = out.stdout.split()
    return applied, paged == "True", int(n)


def glibc():
    try:
        return bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (ValueError, OSError):
        return False


@pytest.mark.skipif(not glibc(), reason="the setting is glibc's (mallopt); elsewhere it is a no-op by design")
def test_cpu_configure_reuses_freed_memory_and_respects_the_users_setting():
    _, paged, default = faults("none")
    assert default > 4 * PAGES and not paged  # the cost being removed: every allocation faults in fresh pages
    applied, paged, kept = faults("configure")
    assert applied == "None" and kept < PAGES // 8  # configure returns nothing; the memory is reused
    assert paged or not os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled")  # ... in huge pages
    applied, paged, user = faults("keep", MALLOC_TRIM_THRESHOLD_="131072")
    assert applied == "False" and user > 4 * PAGES and not paged  # a MALLOC_* variable set by the user stands
