"""`reconstruct`: replay a queue folder's decision log and check every record.

Checks, for every record: consecutive seq, one run id, the queue state it carries equals
the replay (state.apply) of the records before it; a shard's SHA256 and source mix
equal the pool's; a rotation's order, composition and manifest file (with its .sha256
sidecar) agree; every measured record's deltas are its losses minus its reference, the
reference is the losses of the last accepted state, its thresholds are k * sigma_d of the
calibration, and the flag (policy queue) is what the rule gives; a recovery record's
unrecovered domains are what the recovery criterion gives, and a recovery shard is undone
without a rollback only for the candidate whose acceptance reaches the budget; a branch check's rises and
verdict are what the rule gives for the run's kind of check, and a shard is returned
exactly when the verdict blames the phase; a rollback restores the parameters recorded
at the last accepted state. The files the log vouches for are checked too: each rotation
manifest against its .sha256, queue_summary.json against the summary the records give, and
the final state (final.pt, named by the `decay` record) as checkpoints are: its sidecar's
SHA256 and size and a plain-tensor load, then its parameters' SHA256, run id and scores
against that record. Prints one line per failure (the first is enough to fail) or a summary.
"""
import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

from errors import DataError
from shardqueue.calibration import open_calibration
from shardqueue.checks.run_summary import SUMMARY, checked_summary
from shardqueue.engine.log import read_log, verify_chain
from shardqueue.engine.run_folder import corpus_identity
from shardqueue.engine.start_record import settings_differences
from shardqueue.engine.state import apply, initial_state
from shardqueue.engine.training import params_sha256
from shardqueue.policy.rule import branch_verdict, rises, unrecovered
from shardqueue.world.rotation import load_rotation
from shardqueue.world.sources import read, with_records
from training.checkpoint import load_checkpoint


def _close(a, b):
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def check_records(recs, pool, calib, folder):
    """check_records_strictly, with a malformed record or calibration named in one line."""
    try:
        return check_records_strictly(recs, pool, calib, folder)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise DataError(f"{Path(folder) / 'decisions.jsonl'}: a record or the calibration is malformed "
                        f"({type(e).__name__}: {e}); it cannot be checked") from None


def check_records_strictly(recs, pool, calib, folder):
    verify_chain(recs, Path(folder) / "decisions.jsonl")
    shards = {s["id"]: s for s in pool["shards"]}
    st = initial_state(pool["order"], pool.get("reserve", []))
    run_id = recs[0].get("run_id")
    if recs[0]["event"] != "start":
        raise DataError("record 1 is not the start record")
    start = recs[0]
    sigma, k, frac = calib["sigma"], calib["k"], calib["frac"]
    ref, flag_losses, verdict, candidate, rolled_back = None, None, None, None, False
    for r in recs:
        where = f"record {r['seq']} ({r['event']})"
        if r.get("run_id") != run_id:
            raise DataError(f"{where}: run id {r.get('run_id')} differs from the log's {run_id}")
        sid = r.get("shard")
        if sid is not None:
            if sid not in shards:
                raise DataError(f"{where}: shard {sid} is not in the pool")
            if r.get("sha256") != shards[sid]["sha256"] or r.get("sources") != shards[sid]["sources"]:
                raise DataError(f"{where}: SHA256 or source mix of {sid} differs from pool.json")
        if r["event"] == "start":
            if r["pool_sha256"] != pool["_sha256"]:
                raise DataError(f"{where}: made on another pool ({r['pool_sha256'][:12]}…)")
            if r["calibration"] != {"k": k, "frac": frac, "sigma": sigma}:
                raise DataError(f"{where}: its calibration differs from calibration.json")
            ref = r["losses"]
        if r["event"] == "rotation":
            path = Path(folder) / r["manifest"]
            man = load_rotation(path)
            if man["_sha256"] != r["manifest_sha256"] or man["order"] != r["order"]:
                raise DataError(f"{path}: the rotation manifest differs from record {r['seq']} (SHA256 or order)")
            if [s["sha256"] for s in man["shards"]] != [shards.get(s, {}).get("sha256") for s in man["order"]]:
                raise DataError(f"{path}: shard hashes differ from pool.json")
        if r["event"] in ("train", "branch") and "losses" in r:
            if r["event"] == "train" and r.get("ref") != ref:
                raise DataError(f"{where}: its reference is not the last accepted state's losses")
            for d, v in r["deltas"].items():
                if not _close(v, r["losses"][d] - ref[d]):
                    raise DataError(f"{where}: delta of {d} is not losses minus reference")
            if r["event"] == "train" and start["policy"] == "queue":
                for d, thr in r["thresholds"].items():
                    if not _close(thr, k * sigma[d]):
                        raise DataError(f"{where}: threshold of {d} is not k * sigma_d")
                if r["role"] == "candidate" and r["flagged"] != rises(ref, r["losses"], sigma, k):
                    raise DataError(f"{where}: flagged {r['flagged']} is not what the rule gives")
                if r["role"] == "recovery":
                    want = unrecovered(ref, r["losses"], sigma, k, frac, flag_losses["flagged"])
                    if r["unrecovered"] != want:
                        raise DataError(f"{where}: unrecovered {r['unrecovered']} is not what the criterion gives ({want})")
            if r["event"] == "train" and r["role"] == "candidate":
                flag_losses = {"flagged": r["flagged"], "losses": r["losses"]}
                last_train, candidate, rolled_back = r, r, False
            if r["event"] == "train" and r["role"] == "recovery":
                last_train = r
        if r["event"] == "branch" and r.get("possible"):
            verdict = check_branch(r, ref, sigma, k, flag_losses["flagged"], start.get("branch_mode"), where)
        if r["event"] == "train" and r["role"] == "candidate":
            verdict = None
        if r["event"] == "reject" and (r["outcome"] == "returned") != (verdict == "phase"):
            raise DataError(f"{where}: outcome {r['outcome']} after a branch verdict {verdict}")
        rolled_back = rolled_back or r["event"] == "rollback"
        if r["event"] == "return_front" and r.get("to") == "reserve" and not rolled_back:
            # no rollback before it: the recovery shard of the candidate that reaches the budget is undone, and the
            # candidate's own state is the one its acceptance keeps
            check_undone_at_budget(st, shards, start, candidate, where)
            last_train = candidate
        if r["event"] == "accept":
            ref = last_train["losses"]
        st = apply(st, r)
        q = dict(r["queue"])
        if q != st:
            diff = sorted(x for x in set(q) | set(st) if q.get(x) != st.get(x))
            raise DataError(f"{where}: the logged queue state differs from the replay in {', '.join(diff)}")
    return st


def check_undone_at_budget(st, shards, start, candidate, where):
    """A recovery shard is undone without a rollback only for the flagged candidate whose acceptance reaches the
    budget (runner.accept_recovered)."""
    budget = start.get("budget_targets")
    acc = sum(shards[s]["tokens"] for s in st["accepted"])
    if candidate.get("phase") == "decay" or budget is None or acc + shards[st["flagged"]]["tokens"] < budget:
        raise DataError(f"{where}: a recovery shard undone, but accepting {st['flagged']} does not reach the budget "
                        f"({acc:,} accepted targets before it, budget {budget})")


def check_branch(r, ref, sigma, k, flagged, mode, where):
    """A branch record's deltas, rises and verdict against the rule; returns the verdict."""
    if r["mode"] != mode:
        raise DataError(f"{where}: a {r['mode']} branch check in a run started with {mode}")
    rose = {}
    for b in r["branches"]:
        for d, v in b["deltas"].items():
            if not _close(v, b["losses"][d] - ref[d]):
                raise DataError(f"{where}: {b['kind']} branch delta of {d} is not losses minus reference")
        if b["rose"] != (rises(ref, b["losses"], sigma, k, flagged) == flagged):
            raise DataError(f"{where}: {b['kind']} branch on {b['shard']}: rose {b['rose']} is not what the rule gives")
        rose[b["kind"]] = b["rose"]
    want = branch_verdict(mode, rose.get("clean"), rose.get("source"))
    if r["verdict"] != want:
        raise DataError(f"{where}: verdict {r['verdict']} is not what the branches give ({want})")
    return want


def rehashed_pool(cal_dir, start):
    """pool.json with every shard's SHA256 recomputed from the prepared token files (never copied
    from pool.json itself), on the corpus the run's start record names, from a calibration folder
    whose config.json and calibration.json are the start record's key by key."""
    cfg, world, _, calib = open_calibration(cal_dir)
    if start.get("corpus") != corpus_identity(cfg):
        raise DataError(f"{cal_dir}: its corpus is not the one the run's start record names")
    pool = load_rotation(cal_dir / "pool.json", world.stream)
    diff = settings_differences(start, cfg, calib)
    if diff:
        raise DataError(f"{cal_dir}: differs from the run's start record in {'; '.join(diff)}")
    return pool


def check_final_state(folder, recs):
    """The final state the log's `decay` record names (final.pt), checked as the checkpoints are (load_checkpoint:
    the sidecar's SHA256 and size, a plain-tensor load) and tied to that record: its run id, its parameters'
    SHA256 and its scores. A truncated final.pt passed reconstruct and failed only when loaded (a new user's probe).
    Returns the file's name, or None for a run that has not reached its final decay."""
    decay = next((r for r in recs if r["event"] == "decay" and r.get("checkpoint")), None)
    if decay is None:
        return None
    path = Path(folder) / decay["checkpoint"]
    p = load_checkpoint(path)
    where = f"record {decay['seq']} (decay)"
    try:
        # params_sha256 reads a model's state_dict() only: the saved one hashes as the model that was saved
        got = params_sha256(SimpleNamespace(state_dict=lambda: p["trainer"]["model"]))
    except (KeyError, TypeError, AttributeError) as e:
        raise DataError(f"{path}: malformed ({type(e).__name__}: {e}); not a final state") from None
    if p.get("run_id") != decay["run_id"]:
        raise DataError(f"{path}: belongs to run {p.get('run_id')}, but the log is run {decay['run_id']}")
    if got != decay.get("params_sha256"):
        raise DataError(f"{path}: its parameters are not those {where} logs (params_sha256 differs)")
    if p.get("scores") != decay.get("scores"):
        raise DataError(f"{path}: its scores are not those {where} logs")
    return path.name


def reconstruct_folder(folder, out=print):
    """CLI body: 0 when every check passes; 1 with one line otherwise; 2 (the command lines' usage error, as
    `return` gives for the same folder) when there is nothing to check: no such folder or no decision log."""

    folder = Path(folder)
    missing = (f"{folder}: no such queue folder" if not folder.is_dir() else
               f"{folder / 'decisions.jsonl'}: no decision log" if not (folder / "decisions.jsonl").exists() else None)
    if missing:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    try:
        recs = read_log(folder / "decisions.jsonl", log=lambda s: print(s, file=sys.stderr))
        cal_dir = folder / str(recs[0].get("calibration_dir", "."))
        if not (cal_dir / "calibration.json").exists():
            raise DataError(f"{cal_dir / 'calibration.json'}: not found")
        try:
            calib = json.loads((cal_dir / "calibration.json").read_text())
        except (ValueError, UnicodeDecodeError):
            raise DataError(f"{cal_dir / 'calibration.json'}: not valid JSON") from None
        pool = rehashed_pool(cal_dir, recs[0])

        pool = with_records(pool, read(folder))  # sources added to this run (run --add-source)
        st = check_records(recs, pool, calib, folder)
        summary = folder / SUMMARY
        if summary.exists():  # a finished run's: no record chains it, nor the log's last record
            checked_summary(summary, recs, calib, pool)
        final = check_final_state(folder, recs)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    out(f"accepted {st['accepted']}\nnext rotation {st['next_rotation']}\nquarantined {st['quarantined']}\n"
        f"rejections {st['rejections']}\nreturns {st['returns']}")
    out(f"{len(recs)} records checked: every field agrees with the replay, the pool (re-hashed from the token "
        f"files) and the rotation manifests; the records chain"
        + (f"; {SUMMARY} is the summary they give" if (folder / SUMMARY).exists() else "")
        + (f"; {final} verifies and holds the parameters and scores the decay record logs" if final else ""))
    return 0
