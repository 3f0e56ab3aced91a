"""A queue run's summary (queue_summary.json) from its decision log, its calibration and its pool (summarize), and a
written summary checked against it (checked_summary): the run writes the first; `reconstruct` and a resume of a
finished run check the file, which no record chains (nor the log's last record, which no later one does)."""
import json

from errors import DataError
from records.queue_run import RuleCalibration, RunSummary, Scores, ScreenAgreement
from shardqueue.checks.report import screen_agreement
from shardqueue.policy.rule import rate_kind
from shardqueue.world.pool import pool_roles

SUMMARY = "queue_summary.json"


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
                            "file, or the log's last record, was changed after the run wrote them")
    return want


def _short(v):
    text = json.dumps(v)
    return text if len(text) <= 80 else text[:77] + "..."
