"""What ran, in one place: the code (git commit, uncommitted changes), the software and hardware, the corpus,
the date, a run folder's stage times and size. Three records cite it: the findings page's provenance table
(collect), the queue study's summary (study), and a queue run's start record, whose `machine` says where
two executions can agree bitwise (machine). Read without importing torch, so the summary stays cheap (the
start record's machine asks torch itself, which its run has loaded).
"""
import datetime
import json
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

from corpus.layout import default_data_dir

ROOT = Path(__file__).resolve().parents[1]
STAGE_ORDER = ("prepare", "audit", "train", "freeze", "eval", "queue", "queue_study", "summary")


def _git(*args):
    try:
        p = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def git_state():
    """(the checkout's commit, whether its tracked files have uncommitted changes); (None, None) outside git."""
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return commit, None if status is None else bool(status)


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _version(pkg):
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if platform.system() == "Darwin":
        try:
            return subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                  timeout=10).stdout.strip() or platform.machine()
        except (OSError, subprocess.TimeoutExpired):
            pass
    return platform.processor() or platform.machine() or "unknown"


def gpu_names():
    """GPU names from nvidia-smi (none listed when there is no NVIDIA driver)."""
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [x.strip() for x in p.stdout.splitlines() if x.strip()] if p.returncode == 0 else []


def corpus_id(data_dir, source):
    try:
        rec = json.loads((Path(data_dir) / source / "prepared.json").read_text())
    except (OSError, ValueError):
        return None
    return rec.get("build_id")


def folder_bytes(*paths):
    """The bytes of every file under the folders, each file once (a folder may lie inside another)."""
    files = {f.resolve() for p in paths for f in Path(p).rglob("*") if f.is_file()}
    return sum(f.stat().st_size for f in files)


def measured_folders(out, folders):
    """The run folder and every result folder outside it that exists: what the page describes."""
    out = Path(out)
    keep = [out]
    for f in map(Path, folders):
        if f.is_dir() and not any(f.resolve().is_relative_to(k.resolve()) for k in keep):
            keep.append(f)
    return keep


def collect(out, data_dir=None, source="stdlib", folders=()):
    """A run's provenance (SUMMARY.md's table, findings.json's `provenance`); folders: its result folders,
    measured with the run folder when they lie outside it (--train runs/six_paper --out runs/paper)."""
    out = Path(out)
    measured = measured_folders(out, folders)
    if data_dir is None:
        data_dir = default_data_dir()
    commit, dirty = git_state()
    try:
        times = json.loads((out / "stage_times.json").read_text())
    except (OSError, ValueError):
        times = {}
    return {
        "git_commit": commit or "unknown (not a git checkout)",
        "git_dirty": dirty,
        "python": platform.python_version(),
        "torch": _version("torch"),
        "numpy": _version("numpy"),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpu": cpu_name(),
        "gpus": gpu_names(),
        "corpus_source": source,
        "corpus_build_id": corpus_id(data_dir, source),
        "date_utc": utc_now(),
        # [stage, seconds] pairs in the main job's order (JSON objects are written with sorted keys)
        "stage_seconds": [[k, times[k]] for k in sorted(times, key=lambda k: (
            STAGE_ORDER.index(k) if k in STAGE_ORDER else len(STAGE_ORDER), k))],
        "run_folder_bytes": folder_bytes(*measured),
        "run_folders": [str(f) for f in measured],
    }


def study(root=ROOT):
    """The queue study's provenance: the date, the commit (and whether the tree was dirty), the machine in words."""
    commit, dirty = git_state()
    return {"date": utc_now(), "commit": commit or "unknown", "dirty": dirty,
            "machine": f"{cpu_name()}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}, "
                       f"Python {platform.python_version()}"}


def machine(device) -> dict:
    """What decides whether two executions can agree bitwise: software versions, CPU and device."""
    # late: a queue run has torch loaded already; the findings page, which reads this module, never needs it
    import numpy as np
    import torch

    dev = torch.device(device)
    return {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
            "cpu": cpu_name(), "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else dev.type}
