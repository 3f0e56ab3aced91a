"""Which runs an evaluation has: finished ones, and configured ones that are absent.

A finished run folder holds summary.json and its final checkpoint (ckpt_<updates>.pt).
The configured runs are the six of the study (three conditions x seeds 43, 44, the same
names in every preset) plus any other run folder under --runs; whatever is not finished
is reported as absent with its reason, never silently dropped.
"""
from pathlib import Path

from errors import DataError
from presets.six import run_names
from records.training import FinishedRun
from training.config import TrainConfig

RUN_MARKERS = ("summary.json", "train_log.jsonl", "config.json")


def read_summary(path: Path) -> FinishedRun:
    """A finished run's summary.json (records/training.py), its config checked as a training config."""
    run = FinishedRun.read(path)
    try:
        TrainConfig(**run.config)
    except (TypeError, ValueError) as e:
        raise DataError(f"{path}: 'config' is not a training config ({str(e).splitlines()[0]})") from None
    return run


def survey_runs(runs_dir):
    """([(run_dir, FinishedRun, final_ckpt)] finished, sorted by name; [(name, reason)] absent)."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise DataError(f"{runs_dir}: no such folder of runs")
    finished, absent = [], []
    folders = sorted(d for d in runs_dir.iterdir() if d.is_dir() and (
        any((d / m).exists() for m in RUN_MARKERS) or any(d.glob("ckpt_*.pt"))))
    for d in folders:
        if not (d / "summary.json").exists():
            absent.append((d.name, "unfinished: no summary.json"))
            continue
        res = read_summary(d / "summary.json")
        ckpt = d / f"ckpt_{res.updates:06d}.pt"
        if ckpt.exists():
            finished.append((d, res, ckpt))
        else:
            absent.append((d.name, f"final checkpoint {ckpt.name} missing"))
    seen = {d.name for d in folders}
    absent += [(n, "no run folder") for n in run_names() if n not in seen]
    return finished, sorted(absent)


def find_runs(runs_dir):
    runs, _ = survey_runs(runs_dir)
    if not runs:
        raise DataError(f"{runs_dir}: no finished runs (folders with summary.json and their final checkpoint)")
    return runs
