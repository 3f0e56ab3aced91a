"""A queue run's summary (queue_summary.json) from its decision log, its calibration and its pool (summarize), and a
written summary checked against it (checked_summary): the run writes the first; `reconstruct` and a resume of a
finished run check the file, which no record chains (nor the log's last record, which no later one does). Here, not
in checks/report.py, which writes the report."""
import json

import numpy as np

from errors import DataError
from records.queue_run import RuleCalibration, RunSummary, Scores, ScreenAgreement
from shardqueue.policy.rule import rate_kind
from shardqueue.world.pool import pool_roles

SUMMARY = "queue_summary.json"


# ---- the forward-only screen against the measured rise (the summary's screen agreement) ----------------------
def ranks(v):
    """Average ranks (1-based), ties sharing their mean rank."""
    v = np.asarray(v, dtype=float)
    order = np.argsort(v, kind="mergesort")
    r = np.empty(len(v))
    i = 0
    while i < len(v):
        j = i
        while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
            j += 1
        r[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(x, y):
    """Spearman's rho (Pearson correlation of average ranks); None below 3 points or with a constant side."""
    if len(x) < 3:
        return None
    rx, ry = ranks(x), ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def auc(scores, labels):
    """P(score of a positive > score of a negative), ties counted half; None without both classes."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=bool)
    pos, neg = y.sum(), (~y).sum()
    if pos == 0 or neg == 0:
        return None
    r = ranks(s)
    return float((r[y].sum() - pos * (pos + 1) / 2) / (pos * neg))


def max_rise(rec):
    """The largest rise over the reference in units of the threshold's sigma (k * sigma_d / k)."""
    thr = rec.get("thresholds") or {}
    return max((rec["deltas"][d] / thr[d] for d in thr if thr[d] > 0), default=None)


def screen_agreement(recs):
    """How well the forward-only screen predicts the training-based measurement (candidate shards)."""
    c = [r for r in recs if r["event"] == "train" and r["role"] == "candidate" and "screen" in r and max_rise(r) is not None]
    s = [r["screen"]["score"] for r in c]
    return {"n": len(c), "spearman_screen_vs_rise": spearman(s, [max_rise(r) for r in c]),
            "auc_screen_flagged": auc(s, [bool(r["flagged"]) for r in c]), "flagged": sum(bool(r["flagged"]) for r in c),
            "caveat": f"{len(c)} shards, {sum(bool(r['flagged']) for r in c)} flagged: a small sample; read as a sketch"}


# ---- the summary -------------------------------------------------------------------------------------
def accepted_targets(recs) -> int:
    """The targets of the trainings that were kept: each `accept` takes its shard's training just before it. An
    earlier try of the shard (rolled back, deferred, accepted later) is spent, not accepted; a recovery shard
    accepted twice (it goes back to the reserve) counts twice, as it trained twice."""
    last, total = {}, 0
    for r in recs:
        if r["event"] == "train" and r["role"] != "branch":
            last[r["shard"]] = r["targets"]
        elif r["event"] == "accept":
            total += last.get(r["shard"], 0)
    return total


def summarize(recs, calib, pool) -> RunSummary:
    """The run's summary from its decision log, its calibration and its pool (whose roles say which shards
    were harmful)."""
    st = recs[-1]["queue"]
    decay = [r for r in recs if r["event"] == "decay"]
    trains = [r for r in recs if r["event"] == "train"]
    shards, roles = {s["id"]: s for s in pool["shards"]}, pool_roles(pool)
    acc_targets = accepted_targets(recs)
    start = recs[0]
    return RunSummary(
        policy=start["policy"], seed=start["seed"], reject_rate=start["reject_rate"], run_id=start["run_id"],
        accepted=st["accepted"], quarantined=st["quarantined"], deferred_pending=deferred_pending(recs),
        undecided=st["undecided"], rejections=st["rejections"], returns=st["returns"], rotations=st["rotation"],
        accepted_tokens=sum(shards[s]["tokens"] for s in st["accepted"]), spent=recs[-1].get("spent") or {},
        final=Scores(**decay[-1]["scores"]) if decay else None, start_losses=start["losses"],
        calibration=RuleCalibration(calib.get("k"), calib.get("frac"), calib.get("sigma"), calib.get("false_rejections"),
                                    calib.get("transitions"), calib.get("upper95"), rate_kind(calib)),
        curve=[{"shard": r["shard"], "role": r["role"], "history_targets": r["history_targets"],
                "spent_targets": r["spent_targets"], "losses": r["losses"]} for r in trains],
        screen=ScreenAgreement(**screen_agreement(recs)), accepted_records_targets=acc_targets,
        harmful_accepted=[s for s in st["accepted"] if roles.get(s) == "harmful" and not st["returns"].get(s)],
        harmful_quarantined=[s for s in st["quarantined"] if roles.get(s) == "harmful"],
        confounded_recoveries=[list(x) for x in sorted({
            (r["tested"], r["shard"]) for r in trains if r["role"] == "recovery" and r["tested"] in st["quarantined"]
            and roles.get(r["tested"]) != "harmful" and roles.get(r["shard"]) == "harmful"})])


def deferred_pending(recs):
    """Every shard sent to a later rotation (deferred, returned by the branch check or from quarantine)
    and not decided since, in queue order: those of the rotation the run stopped in, then those
    waiting for the next one."""
    st = recs[-1]["queue"]
    sent = {r["shard"] for r in recs if r["event"] == "return"
            or (r["event"] == "reject" and r["outcome"] in ("deferred", "returned"))}
    return [s for s in st["pending"] + st["next_rotation"] if s in sent]


def checked_summary(path, recs, calib, pool) -> RunSummary:
    """The summary the log gives, where the file at path says the same; else one line naming the first field that
    differs (the file edited since, or the log's last record, whose edit no later record's chain would show)."""
    want = summarize(recs, calib, pool)
    try:
        written = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: cannot be read as the run's summary ({type(e).__name__})") from None
    given = json.loads(json.dumps(want.to_json()))  # as the file holds it: lists, not tuples
    for k, v in given.items():
        if written.get(k) != v:
            raise DataError(f"{path}: {k} is {_short(written.get(k))} where the decision log gives {_short(v)}: the "
                            "file or the log's last record was edited, or the file was written by another version of "
                            "this code; if the log is to be trusted, remove the file and `run --resume` writes it from "
                            "the log")
    return want


def _short(v):
    text = json.dumps(v)
    return text if len(text) <= 80 else text[:77] + "..."
