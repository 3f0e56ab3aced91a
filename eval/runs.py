"""Which runs an evaluation has: finished ones, and configured ones that are absent.

A finished run folder holds summary.json and its final checkpoint (ckpt_<updates>.pt).
The configured runs are the six of the study (three conditions x seeds 43, 44, the same
names in every preset) plus any other run folder under --runs; whatever is not finished
is reported as absent with its reason, never silently dropped.
"""
from pathlib import Path

from errors import DataError
from presets.six import condition_of, run_name, run_names
from protocols.protocol import MACHINE_KEYS
from records.training import FinishedRun
from training.config import TrainConfig

RUN_MARKERS = ("summary.json", "train_log.jsonl", "config.json")
# what may differ between two runs an exploratory pass compares: the condition (loader), the seed, and settings
# that change no number (a protocol's check allows the same, MACHINE_KEYS, and fixes loader and seed per run)
MAY_DIFFER = MACHINE_KEYS | {"name", "loader", "seed"}


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


def _what_it_is(run_dir, res):
    cfg = TrainConfig(**res.config).to_dict()  # keys added since a run was made take their defaults
    return run_name(condition_of(cfg["loader"]), cfg["seed"]), cfg


def check_matched(runs):
    """Without a protocol, runs are matched by what they are: a folder named as one of the six must hold that
    run (its recorded loader and seed), no two folders may hold the same condition and seed, and the runs may
    differ in nothing but loader and seed, or their deltas would mix the packer with budget, model or
    evaluation population. Raises DataError naming the first run that breaks this."""
    seen, (ref_dir, ref) = {}, (runs[0][0], _what_it_is(*runs[0][:2])[1])
    for run_dir, res, _ in runs:
        kind, cfg = _what_it_is(run_dir, res)
        if run_dir.name in run_names() and run_dir.name != kind:
            raise DataError(f"{run_dir}: holds a {kind} run (loader {cfg['loader']}, seed {cfg['seed']}), "
                            f"not {run_dir.name}; refusing to score it under that name")
        if kind in seen:
            raise DataError(f"{run_dir} and {seen[kind]} both hold a {kind} run; keep one")
        seen[kind] = run_dir
        diff = sorted(k for k in set(cfg) | set(ref) if k not in MAY_DIFFER and cfg.get(k) != ref.get(k))
        if diff:
            raise DataError(f"{run_dir}: differs from {ref_dir.name} in "
                            + ", ".join(f"{k} ({cfg.get(k)} vs {ref.get(k)})" for k in diff[:4])
                            + ("…" if len(diff) > 4 else "")
                            + "; runs compared must differ only in loader and seed")


def find_runs(runs_dir):
    runs, _ = survey_runs(runs_dir)
    if not runs:
        raise DataError(f"{runs_dir}: no finished runs (folders with summary.json and their final checkpoint)")
    return runs
