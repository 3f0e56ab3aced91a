"""Before confirmation, every checkpoint's official score must reproduce exactly.

As in the paper ("Source Exclusion in Streaming Pretraining: An Exact Audit of Minimum-Crop
Packing"), each final checkpoint is reloaded and scored again on the official stream; the
per-row sufficient statistics (nats, bytes, counted targets) and the stream fingerprint
must equal, bit for bit, the ones recorded in its official_rows.parquet, and the score in
summary.json must be the one those rows give. An edited recorded score, an edited row file
or a checkpoint that no longer gives its own score is refused before any confirmation pass.
"""
import numpy as np
import pyarrow.parquet as pq

from errors import DataError
from eval.official import evaluate_checkpoint, scores


def recorded_rows(path):
    try:
        t = pq.read_table(path)
        stats = {k: t.column(k).to_numpy() for k in ("nats", "bytes", "count")}
        stats["fingerprint"] = (t.schema.metadata or {}).get(b"fingerprint", b"").decode()
    except Exception as e:  # pyarrow raises its own types for a damaged file
        raise DataError(f"{path}: unreadable official rows ({type(e).__name__})") from None
    return stats


def reproduction_problem(run_dir, summary, ckpt, got):
    """Why a re-scoring `got` (eval.official's row statistics) of ckpt does not reproduce the run's
    recorded official rows and its summary's score (a records/training.py FinishedRun) bit for bit, in one line;
    None when it does.
    The gate below refuses on it; the GPU check reports it."""
    want = recorded_rows(run_dir / "official_rows.parquet")
    for k in ("nats", "bytes", "count"):
        if got[k].dtype != want[k].dtype or not np.array_equal(got[k], want[k]):
            bad = np.flatnonzero(got[k] != want[k]) if got[k].shape == want[k].shape else []
            where = f"first at row {int(bad[0])}" if len(bad) else "shape or type"
            return f"{run_dir}: re-scoring {ckpt.name} does not reproduce the recorded official {k} ({where})"
    if got["fingerprint"] != want["fingerprint"]:
        return f"{run_dir}: re-scoring {ckpt.name} read another official stream (fingerprint differs)"
    rec, now = {"bpb": summary.bpb, "ce": summary.ce}, scores(want)
    for k in ("bpb", "ce"):
        if rec[k] != now[k]:
            return (f"{run_dir / 'summary.json'}: official {k} {rec[k]!r} is not the {now[k]!r} its rows give "
                    f"(edited?)")
    return None


def check_reproduces(run_dir, summary, ckpt, data_dir, device, log=print):
    """Re-score ckpt; refuse unless the rows, the fingerprint and the summary's score all match exactly."""
    got, _ = evaluate_checkpoint(ckpt, data_dir, device)
    problem = reproduction_problem(run_dir, summary, ckpt, got)
    if problem:
        raise DataError(f"{problem}; refusing to confirm")
    log(f"{run_dir.name}: {ckpt.name} reloaded and re-scored: official rows reproduce exactly "
        f"(BPB {scores(got)['bpb']:.6f})")


def check_all_reproduce(runs, data_dir, device, log=print):
    for run_dir, summary, ckpt in runs:
        check_reproduces(run_dir, summary, ckpt, data_dir, device, log)
