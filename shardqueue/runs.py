"""A queue run in its folder, from its start to its summary: fresh, resumed after a kill, or finished (only
its summary written again); a return of a quarantined shard to the next rotation; a checkpoint's scores.

The same calibration folder gives every run the same pool, control and selection sets, decay shards and
(for the same seed) start state; the run plan (engine/plan.py) says what differs."""
import json
import time
from pathlib import Path

from errors import DataError
from records.queue_run import RunSummary
from shardqueue.calibration import check_calibrated, check_config, open_calibration, start_state
from shardqueue.checks.report import budget_shortfall, write_report
from shardqueue.checks.run_summary import SUMMARY, checked_summary, summarize
from shardqueue.engine.final_decay import final_decay
from shardqueue.engine.log import DecisionLog, read_log, record_sha256, verify_chain
from shardqueue.engine.plan import RunPlan
from shardqueue.engine.starts import resume as resume_runner
from shardqueue.engine.run_folder import (
    check_finished_log,
    check_start_record,
    corpus_identity,
    move_aside,
    read_state,
    relative_dir,
)
from shardqueue.engine.runner import Runner
from shardqueue.engine.scoring import final_score, score
from shardqueue.engine.state import apply
from shardqueue.engine.training import one_thread
from shardqueue.settings import check_seed
from shardqueue.world import sources
from training.checkpoint import load_checkpoint, save_checkpoint
from training.resume import remove_torn_writes
from training.trainer import build_model

BUDGET_SHARE = 0.6  # a plan without a budget: this share of the candidate shards' tokens


def run(out, calibration_dir=None, plan=RunPlan(), resume=False, fresh=False, device="cpu", log=print, report=True,
        observers=(), add_sources=(), data_dir=None) -> RunSummary:
    """One queue run (any policy) to the end, decay and scores included; returns its summary (also written
    to out/queue_summary.json). observers: of the runner's commits (the study's reference
    branches); add_sources: NAME=PATH of new sources, entering at the next rotation boundary; data_dir: the
    data root (default: the calibration's)."""
    with one_thread():
        return _run(Path(out), Path(calibration_dir or out), plan, resume, fresh, device, log, report, observers,
                    add_sources, data_dir)


def _run(out, calibration_dir, plan, resume, fresh, device, log, report, observers, add_sources, data_dir=None):
    if not resume:
        plan.check_new()
        check_calibrated(calibration_dir)
        check_config(calibration_dir)  # before the world is built on it
    log_path = out / "decisions.jsonl"
    earlier = _check_folder(out, resume, fresh)
    cfg, world, pool, calib = open_calibration(calibration_dir, device, data_dir)
    if not resume:  # before the folder is touched: a bad seed failed only once the run had written its first files
        check_seed(calib["seed"] if plan.seed is None else plan.seed,
                   "run seed" if plan.seed is not None else f"{calibration_dir / 'calibration.json'}: seed")
    if earlier:  # --fresh: the new sources read and checked first, so a refused one leaves the earlier run in place
        sources.check_new(world, pool, add_sources)
        dest, moved = move_aside(out, "calibration")
        log(f"moved the earlier run ({len(moved)} files) to {dest}")
    # new sources (add_sources: NAME=PATH) enter at the next rotation boundary; earlier ones are rebuilt
    nxt = 1
    if resume and add_sources:
        recs = read_log(log_path, log=lambda s: None)
        if any(r["event"] == "done" for r in recs):
            raise DataError(f"{out}: this run has finished; a new source can only enter a queue that is still running")
        nxt = recs[-1]["queue"]["rotation"] + 1
    pool = sources.prepare(out, world, pool, add_sources, nxt, log)
    plan = plan.resolved(calib["seed"], int(BUDGET_SHARE * sum(s["tokens"] for s in pool["shards"]
                                                               if s["id"] in pool["order"])))
    cfg = type(cfg)(**{**cfg.to_dict(), "seed": plan.seed})
    runner = Runner(cfg, world, pool, calib, out, plan, observers=observers, log=log,
                    calibration_dir=relative_dir(calibration_dir, out), corpus=corpus_identity(cfg))
    remove_torn_writes(out, log)
    if resume:
        recs = read_log(log_path, log=lambda s: None)
        check_start_record(recs[0], runner, log_path)
        if recs[-1]["event"] == "done":
            check_finished_log(out, recs)
            verify_chain(recs, log_path)
            if (out / SUMMARY).exists() and (not report or (out / "report.md").exists()):  # the report is last
                log(f"{out}: this run has finished; nothing to resume")
                return checked_summary(out / SUMMARY, recs, calib, pool)  # the log's, never a file edited since
            # killed after "done" but before its summary or report: both are written from the log, nothing reruns
        else:
            resume_runner(runner)
    else:
        runner.start_from(start_state(cfg, world, pool, calib, calibration_dir, plan.seed, out))
        runner.run()
    recs = read_log(log_path, log=lambda s: None)
    if not any(r["event"] == "done" for r in recs):
        final_decay(runner, final_score(runner, world, cfg))
        recs = read_log(log_path, log=lambda s: None)
    summary = summarize(recs, calib, pool)
    summary.write(out / SUMMARY)
    if report:
        write_report(out, recs, calib, pool, summary)
    return summary


def _check_folder(out, resume, fresh) -> bool:
    """A resume needs a log; a fresh run an empty folder, or --fresh, which moves an earlier run aside (the caller,
    once the calibration and the new sources are good): True when there is one to move."""
    log_path = out / "decisions.jsonl"
    if resume and not log_path.exists():
        raise DataError(f"{log_path}: nothing to resume")
    if not resume and (log_path.exists() or list(out.glob("ckpt_*.pt"))):
        if not fresh:
            raise DataError(f"{out}: holds an earlier run (decisions.jsonl); use --resume, another folder, or --fresh "
                            f"(moves the old run aside)")
        return True
    return False


def return_from_quarantine(out, shard, log=print):
    """One return of a quarantined shard to the next rotation; needs its inspection with no cause found."""
    out = Path(out)
    if not shard:
        raise DataError("give the shard id to return")
    recs = read_log(out / "decisions.jsonl", repair=True, log=log)
    verify_chain(recs, out / "decisions.jsonl")
    st = recs[-1]["queue"]
    _check_returnable(out, recs, shard)
    ckpts = sorted(out.glob("ckpt_*.pt"))
    if not ckpts:
        raise DataError(f"{out}: no queue checkpoint")
    payload, run_id = load_checkpoint(ckpts[-1]), recs[0]["run_id"]
    if payload.get("run_id") != run_id or payload["log_seq"] != len(recs):
        raise DataError(f"{ckpts[-1]}: not the newest state of run {run_id} (log has {len(recs)} records)")
    seen = next(r for r in reversed(recs) if r.get("shard") == shard and "sha256" in r)
    rec = {"seq": len(recs) + 1, "event": "return", "shard": shard, "time": round(time.time(), 3), "run_id": run_id,
           "inspection": f"inspection/{shard}.json", "sha256": seen["sha256"], "sources": seen["sources"]}
    rec["queue"] = apply(st, rec)
    rec["prev_sha256"] = record_sha256(recs[-1])
    payload.update(state=rec["queue"], log_seq=rec["seq"], records=[rec])
    save_checkpoint(out, rec["seq"], payload, keep=0)
    DecisionLog(out / "decisions.jsonl", seq=len(recs)).write(rec)
    log(f"{shard} returns to the next rotation (record {rec['seq']})")
    return 0


def _check_returnable(out, recs, shard):
    """A return needs a run that has not finished, the shard in quarantine, no return before, and an inspection that
    found no cause. A finished run has no rotation left: the shard would never train, yet read as no longer
    quarantined. (A run stopped before its end may still spend its budget before the next rotation: the shard then
    waits there, as a deferred one does, and the summary lists it among those pending.)"""
    st = recs[-1]["queue"]
    done = next((r for r in recs if r["event"] == "done"), None)
    if done is not None:
        raise DataError(f"{out}: this run has finished, so a returned shard would never train: no rotation follows "
                        f"(record {done['seq']}); a return applies to a run stopped before its end: interrupt a run, "
                        "return the shard, then run it again with --resume")
    if shard not in st["quarantined"]:
        raise DataError(f"{shard} is not in quarantine (quarantined: {', '.join(st['quarantined']) or 'none'})")
    if st["returns"].get(shard, 0) >= 1:
        raise DataError(f"{shard} has already returned from quarantine once")
    insp = [r for r in recs if r["event"] == "inspect" and r.get("shard") == shard]
    if not insp or not (out / "inspection" / f"{shard}.json").exists():
        raise DataError(f"{shard}: no inspection report (inspection/{shard}.json); a return needs one")
    found = json.loads((out / "inspection" / f"{shard}.json").read_text())
    if found.get("cause_found"):
        raise DataError(f"{shard}: its inspection found a cause ({'; '.join(found['causes'])}); it stays in quarantine")


def score_checkpoint(path, calibration_dir, device="cpu"):
    """score() of a queue checkpoint file (ckpt_*.pt, final.pt or calibrated_state.pt)."""
    cfg, world, _, calib = open_calibration(calibration_dir, device)
    path = Path(path)
    p = read_state(path, calib["state_sha256"]) if path.name == "calibrated_state.pt" else load_checkpoint(path)
    model = build_model(cfg, device)
    model.load_state_dict(p["trainer"]["model"])
    return score(model, world, cfg)


def describe_run(summary, out):
    """The line `run` prints, and the result line (or None) when the queue policy ended with a planted harmful
    shard accepted (the plain and random arms accept harm by design). That is what the finished run found, as
    report.md states first, not an error in its input."""
    line = (f"accepted {len(summary.accepted)} shards ({summary.accepted_tokens} targets), quarantined "
            f"{summary.quarantined}, rejections {summary.rejections}; report: {Path(out) / 'report.md'}")
    short = budget_shortfall(_start_record(out).get("budget_targets"), summary)
    if short:
        line += f"\nthe {short}"
    through = None
    if summary.harmful_accepted and summary.policy == "queue":
        through = (f"result: harmful shard(s) {', '.join(summary.harmful_accepted)} ended accepted without a return: "
                   "the queue let a planted harmful shard through (report.md's first section; queue_summary.json "
                   "harmful_accepted)")
    return line, through


def _start_record(out):
    """The first record of the run's log (its plan), or {} where there is none."""
    try:
        with open(Path(out) / "decisions.jsonl", encoding="utf-8") as f:
            return json.loads(f.readline() or "{}")
    except (OSError, ValueError):
        return {}
