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
import gc; gc.freeze()  # as the command lines end (console/shutdown.py): no last scans of torch's objects at exit
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
    # the user's own choice: nothing is changed, and the cost being removed shows (every allocation
    # faults in fresh pages). One process here; the other choices are decided in-process below.
    applied, paged, default = run("keep", THP_MEM_ALLOC_ENABLE="0")
    assert applied == "False" and not paged
    assert default > 4 * PAGES, default


USER_CHOICES = ({"THP_MEM_ALLOC_ENABLE": "0"}, {"MALLOC_TRIM_THRESHOLD_": "131072"}, {"MALLOC_MMAP_MAX_": "65536"},
                {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"})


@pytest.mark.skipif(not supported(), reason="glibc's mallopt and the kernel's huge pages; elsewhere a no-op by design")
@pytest.mark.parametrize("choice", [None, *USER_CHOICES], ids=["none", *(next(iter(c)) for c in USER_CHOICES)])
def test_a_users_own_allocator_setting_is_left_alone(monkeypatch, choice):
    """The decision itself, in this process: with a setting of the user's, no mallopt call and
    THP_MEM_ALLOC_ENABLE as the user left it (glibc and torch read those at startup: their effect
    is measured in a fresh process above); without one, both settings. The mallopt calls are
    recorded, not made (this process made them at startup: tests/conftest.py)."""
    from training import device

    for k in [k for k in os.environ if k.startswith(("MALLOC_", "THP_MEM_ALLOC", "GLIBC_TUNABLES"))]:
        monkeypatch.delenv(k)
    for k, v in (choice or {}).items():
        monkeypatch.setenv(k, v)
    calls = []

    class Libc:
        def mallopt(self, param, value):
            calls.append((param, value))
            return 1

    monkeypatch.setattr(device.ctypes, "CDLL", lambda name: Libc())
    applied = device.keep_freed_host_memory()
    if choice is None:
        assert applied is True and os.environ["THP_MEM_ALLOC_ENABLE"] == "1"
        assert calls == [(device._M_MMAP_MAX, 0), (device._M_TRIM_THRESHOLD, 2**31 - 1)]
    else:
        assert applied is False and calls == [], choice
        assert os.environ.get("THP_MEM_ALLOC_ENABLE") == choice.get("THP_MEM_ALLOC_ENABLE"), choice
