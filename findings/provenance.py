"""What ran: code, software, hardware, data, date, stage times and output size of a run folder.

Written into SUMMARY.md and findings.json so a reader can cite a run and rerun it: the git
commit (and whether the working tree had uncommitted changes), the Python, torch and numpy
versions, CPU and GPU names, the prepared corpus's build id (a SHA256 over its arguments,
shard and tokenizer hashes; for the offline corpus the Python version defines the text),
the UTC date, main.py's per-stage wall times (stage_times.json) and the folder's size.
Read without importing torch, so the summary stays cheap.
"""
import datetime
import json
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


def folder_bytes(path):
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def collect(out, data_dir=None, source="stdlib"):
    out = Path(out)
    if data_dir is None:
        data_dir = default_data_dir()
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    try:
        times = json.loads((out / "stage_times.json").read_text())
    except (OSError, ValueError):
        times = {}
    return {
        "git_commit": commit or "unknown (not a git checkout)",
        "git_dirty": None if status is None else bool(status),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "numpy": _version("numpy"),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpu": cpu_name(),
        "gpus": gpu_names(),
        "corpus_source": source,
        "corpus_build_id": corpus_id(data_dir, source),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        # [stage, seconds] pairs in the main job's order (JSON objects are written with sorted keys)
        "stage_seconds": [[k, times[k]] for k in sorted(times, key=lambda k: (
            STAGE_ORDER.index(k) if k in STAGE_ORDER else len(STAGE_ORDER), k))],
        "run_folder_bytes": folder_bytes(out),
    }


def to_md(p) -> list:
    dirty = {True: " (working tree had uncommitted changes)", False: " (clean)", None: ""}[p["git_dirty"]]
    stages = ", ".join(f"{k} {v:,.0f} s" for k, v in p["stage_seconds"]) or "not recorded (no stage_times.json)"
    rows = [("code", f"git {p['git_commit']}{dirty}"),
            ("software", f"Python {p['python']}, torch {p['torch']}, numpy {p['numpy']} ({p['platform']})"),
            ("hardware", f"CPU: {p['cpu']}; GPU: {', '.join(p['gpus']) or 'none'}"),
            ("corpus", f"{p['corpus_source']}, build id {p['corpus_build_id'] or 'unknown (not prepared here)'}"
                       + (f" (the offline corpus is this Python's standard library: Python {p['python']})"
                          if p["corpus_source"] == "stdlib" else "")),
            ("date", p["date_utc"]),
            ("wall time per stage", stages),
            ("run folder size", f"{p['run_folder_bytes'] / 1e6:,.1f} MB")]
    return ["## Provenance: what ran", "", "| | |", "|---|---|", *[f"| {a} | {b} |" for a, b in rows], ""]
