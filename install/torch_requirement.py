#!/usr/bin/env python3
"""Which torch build run.sh installs, and from which index (standard library only: it runs
before the virtualenv exists).

  python3 install/torch_requirement.py [--choice auto|cpu|cuda|cu126 ...] [--system Linux|Darwin] [--probe]

Prints one line: the pip requirement, then the extra index URL if one is needed. With
--probe, an index that cannot be reached is replaced by the default index's torch, and a
one-line note says so on stderr.
"""
import argparse
import platform
import re
import shutil
import subprocess
import sys
import urllib.request

TORCH = "2.13.0"
PYTORCH_INDEX = "https://download.pytorch.org/whl/"


class ChoiceError(ValueError):
    pass


def derive(system: str, choice: str, has_gpu: bool = False):
    """(requirement, extra index URL or None) for a platform (uname -s) and PACKAUDIT_TORCH.

    cpu on Linux: the CPU-only build from PyTorch's CPU index (the default index's Linux torch
    pulls CUDA libraries). macOS: the default build, which is the only one. cuda: the default
    index's CUDA build. cuXXX: that CUDA version's build from PyTorch's index."""
    if choice == "auto":
        choice = "cuda" if has_gpu and system == "Linux" else "cpu"
    if system == "Darwin":
        if choice != "cpu":
            raise ChoiceError(f"PACKAUDIT_TORCH={choice}: there is no CUDA build of torch for macOS; use cpu or auto")
        return f"torch=={TORCH}", None
    if choice == "cpu":
        return f"torch=={TORCH}+cpu", PYTORCH_INDEX + "cpu"
    if choice == "cuda":
        return f"torch=={TORCH}", None
    if re.fullmatch(r"cu\d{3,}", choice):
        return f"torch=={TORCH}+{choice}", PYTORCH_INDEX + choice
    raise ChoiceError(f"PACKAUDIT_TORCH must be auto, cpu, cuda or a CUDA tag such as cu126 (got {choice!r})")


def with_fallback(req, index, reachable):
    """The default index's torch when the extra index cannot be reached; (req, index, note)."""
    if index is None or reachable(index):
        return req, index, None
    plain = f"torch=={TORCH}"
    cuda = " (on Linux the default index's build carries CUDA: several GB to download)" if req.endswith("+cpu") else ""
    return plain, None, f"note: {index} cannot be reached; installing {plain} from the default index instead{cuda}"


def _reachable(url, timeout=10):
    try:
        urllib.request.urlopen(url, timeout=timeout).close()
        return True
    except Exception:  # any failure to fetch the index page means: fall back
        return False


def _has_gpu():
    if not shutil.which("nvidia-smi"):
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--choice", default="auto", help="auto (default), cpu, cuda or a CUDA tag such as cu126")
    ap.add_argument("--system", default=platform.system(), help="uname -s (default: this machine's)")
    ap.add_argument("--probe", action="store_true", help="fall back to the default index if the extra one is unreachable")
    a = ap.parse_args(argv)
    try:
        req, index = derive(a.system, a.choice, a.choice == "auto" and _has_gpu())
    except ChoiceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.probe:
        req, index, note = with_fallback(req, index, _reachable)
        if note:
            print(note, file=sys.stderr)
    print(req if index is None else f"{req} {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
