"""`reconstruct --execute`: run the queue again and check every logged number against what
training produces now.

`reconstruct` (replay.py) proves that the log is consistent: with itself, with the pool, the
rotation manifests and the rule. It cannot tell whether the numbers are the ones training
produced: a log whose losses, target counts or train losses were edited, its hash chain
recomputed, passes it. The proposal asks that "the verdict can be reconstructed"; this module
re-executes the run instead. A runner is built from the run's start record (its run plan,
and the calibration folder's config.json and calibration.json, which must be unchanged key by
key), started from the start state (the calibrated state, whose SHA256 calibration.json holds,
or for another seed that state recomputed) or from one of the run's checkpoints, and run through
the same code (engine/runner.py, engine/final_decay.py) into a scratch folder, without
checkpoints. An observer of its commits (LogComparison) compares each record it makes with the
logged record of the same seq:

  - bitwise on the machine that made the run (the start and every `resumed` record name it):
    every float equal to the last bit, every parameter SHA256 (the start state, after each
    accepted shard, after each rollback and branch restore, after the final decay) equal;
  - elsewhere, floats within a stated absolute tolerance (DEFAULT_TOLERANCE unless given) and
    parameter SHA256s not compared (another CPU or device rounds differently);
  - everything else (events, shards, target counts, decisions, queue states, manifest SHA256s)
    exactly, in both modes.

The first differing record is named with its field and both values. Records that a resume or a
return from quarantine wrote are outside training: they are taken from the log at their place
(a return changes the queue state as it did in the run). So is the end of a stable phase that an
observer of the run ended before its budget (arm A's reference branches, once its curve covers:
the branches are the study's, not the log's): its decay_start record names the observer's reason,
and the verdict says, in one line, that this record's place was taken from the log. `--from-checkpoint`
re-executes the stretch after one of the run's checkpoints (ckpt_<seq>.pt), whose records must equal
the log's (the checkpoint is anchored in the hash chain); `--to-record` ends the stretch early.

The run plan is the start record's (RunPlan.from_record), the in-queue decay's length, arm C's fixed
positions and arm B's reference curves included; a log whose in-queue decay its start record does not
size (written before the start record held decay_updates) is refused in one line naming its decay_start.
"""
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from errors import DataError, os_error_line
from records.reexecution import FILE as RESULT
from records.reexecution import Reexecution
from shardqueue.calibration import open_calibration, start_state
from shardqueue.engine.final_decay import final_decay
from shardqueue.engine.log import Comparison, compare_records, line_of, read_log, verify_chain
from shardqueue.engine.plan import RECORDED, RunPlan
from shardqueue.engine.starts import continue_from, made_on_this_machine, take_from_log
from shardqueue.engine.run_folder import check_start_record, corpus_identity
from shardqueue.engine.runner import Runner
from shardqueue.engine.scoring import final_score
from shardqueue.engine.training import one_thread
from shardqueue.settings import DEFAULT_TOLERANCE
from shardqueue.world import sources
from training.checkpoint import load_checkpoint

class _Stop(Exception):
    """The stretch is re-executed (or, stopping early, a record differs)."""


class LogComparison:
    """An observer of a re-executing runner's commits: each record, as the log holds it (floats through JSON,
    lists), is kept in `made`; the stretch ends at stop_seq, or at the first record that differs when given
    `differs`. A record written outside training (engine/starts.py OUTSIDE_TRAINING) is taken from the log at its
    place, and so is a stable phase's end that an observer of the run decided (`taken`: one line each, for the
    verdict)."""

    def __init__(self, logged, stop_seq, differs=None):
        self.logged, self.stop_seq, self.differs, self.made, self.taken = logged, stop_seq, differs, [], []

    def committed(self, runner, records):
        for rec in records:
            self.made.append(json.loads(line_of(rec)))
            seq = rec["seq"]
            if seq >= self.stop_seq or (self.differs and self.differs(self.logged[seq - 1], self.made[-1])):
                raise _Stop
        line = take_from_log(runner, self.logged, records[-1]["seq"]) if records else None
        if line:
            self.taken.append(line)


def anchored_checkpoint(path, logged, log_path):
    """A run's checkpoint whose records (those it owed the log) equal the log's: the stretch's start.
    path: a file name in the run folder, or a path."""
    path = Path(path) if Path(path).parent != Path(".") else log_path.parent / path
    p = load_checkpoint(path)
    try:
        return _anchored(path, p, logged, log_path)
    except (KeyError, TypeError, AttributeError) as e:
        raise DataError(f"{path}: malformed ({type(e).__name__}: {e}); it cannot anchor the log") from None


def _anchored(path, p, logged, log_path):
    C = p.get("log_seq")
    if C is None or "records" not in p:
        raise DataError(f"{path}: not a checkpoint of the queue's rotations (final.pt ends the run: nothing follows it)")
    if p.get("run_id") != logged[0].get("run_id"):
        raise DataError(f"{path}: belongs to run {p.get('run_id')}, but {log_path.name} is run {logged[0].get('run_id')}")
    if not 1 <= C <= len(logged) or any(r["seq"] > len(logged) or logged[r["seq"] - 1] != r for r in p["records"]):
        raise DataError(f"{path}: its records (up to record {C}) are not the log's; it does not anchor this log")
    if logged[C - 1]["queue"] != p["state"]:
        raise DataError(f"{path}: its queue state is not the one record {C} logs")
    return p


# the start record's fields that build the runner (a log written before branch_check was recorded lacks it)
START_ARGUMENTS = RECORDED + ("run_id",)


def _runner(folder, logged, device, scratch, observer):
    """A re-executing runner built from the run's start record; its calibration folder must be unchanged."""
    start = logged[0]
    missing = [k for k in START_ARGUMENTS if k not in start]
    if missing:
        raise DataError(f"{folder / 'decisions.jsonl'}: the start record lacks {', '.join(missing)}")
    unsized = next((r for r in logged if r["event"] == "decay_start"), None) if "decay_updates" not in start else None
    if unsized:
        raise DataError(f"{folder / 'decisions.jsonl'}: record {unsized['seq']} (decay_start) begins a decay inside "
                        f"the queue, but the start record does not hold its length (decay_updates: an older version "
                        f"wrote it); the run cannot be re-executed")
    rel = str(start.get("calibration_dir", "."))
    cfg, world, pool, calib = open_calibration(folder / rel, device)
    pool = sources.prepare(folder, world, pool, (), 1, log=lambda s: None)  # sources the run added
    cfg = type(cfg)(**{**cfg.to_dict(), "seed": start["seed"]})
    plan = RunPlan.from_record(start, checkpoints=False)
    runner = Runner(cfg, world, pool, calib, scratch, plan, observers=[observer], log=lambda s: None,
                    run_id=start["run_id"], calibration_dir=rel, corpus=corpus_identity(cfg))
    check_start_record(start, runner, folder / "decisions.jsonl")
    return runner, lambda out: start_state(cfg, world, pool, calib, folder / rel, start["seed"], out), \
        final_score(runner, world, cfg)


@dataclass
class Reexecuted:
    logged: list  # the log's records of the stretch
    made: list  # the re-executed records (fewer when it stopped at a difference)
    same_machine: bool
    tolerance: float
    comparison: Comparison
    taken: list  # one line per decision taken from the log rather than re-executed (LogComparison)
    whole_log: bool = False  # the stretch is the log from its start record to its last

    @property
    def hashes(self):
        return self.same_machine and self.tolerance == 0.0


def reexecute(folder, device="cpu", from_checkpoint=None, to_record=None, tolerance=None, stop_early=True,
              scratch=None) -> Reexecuted:
    """Re-execute a queue run folder's log, or the stretch after one of its checkpoints (a file name in
    the folder, or a path) up to to_record, and compare. tolerance: None for bitwise on the machine that made the
    run and DEFAULT_TOLERANCE elsewhere; stop_early: stop at the first differing record."""
    folder = Path(folder)
    log_path = folder / "decisions.jsonl"
    logged = read_log(log_path, log=lambda s: None)
    verify_chain(logged, log_path)
    if logged[0]["event"] != "start":
        raise DataError(f"{log_path}: record 1 is not the start record")
    same = made_on_this_machine(logged, device)
    tol = (0.0 if same else DEFAULT_TOLERANCE) if tolerance is None else float(tolerance)
    checkpoint = anchored_checkpoint(from_checkpoint, logged, log_path) if from_checkpoint else None
    first = checkpoint["log_seq"] + 1 if checkpoint else 1
    stop = len(logged) if to_record is None else int(to_record)
    if not first <= stop <= len(logged):
        raise DataError(f"--to-record {stop}: the stretch runs from record {first} to at most {len(logged)}")

    def differs(a, b):
        return compare_records([a], [b], tol, same and tol == 0.0).difference is not None

    seen = LogComparison(logged, stop, differs if stop_early else None)
    with one_thread(), tempfile.TemporaryDirectory(prefix="reexecute-", dir=scratch) as tmp:
        runner, start_state_in, score = _runner(folder, logged, device, tmp, seen)
        try:
            if checkpoint:
                continue_from(runner, checkpoint, logged)
            else:
                runner.start_from(start_state_in(tmp))
                runner.run()
            final_decay(runner, score)
        except _Stop:
            pass
    stretch = logged[first - 1: stop]
    return Reexecuted(stretch, seen.made, same, tol, compare_records(stretch, seen.made, tol, same and tol == 0.0),
                      seen.taken, first == 1 and stop == len(logged))


def reexecute_folder(folder, device="cpu", from_checkpoint=None, to_record=None, tolerance=None, out=print):
    """CLI body: 0 when every re-executed record agrees with the log (one line; reexecution.json in the
    run folder for the whole log, reexecution_partial.json for a stretch of it, which leaves the whole log's verdict
    as it was), 1 naming the first difference, 2 on bad input (one line each)."""
    folder = Path(folder)
    t0 = time.time()
    try:
        if not folder.is_dir():
            raise DataError(f"{folder}: no such queue folder")
        rx = reexecute(folder, device, from_checkpoint, to_record, tolerance)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cmp, seconds = rx.comparison, round(time.time() - t0, 1)
    mode = "bitwise" if rx.hashes else f"floats within {rx.tolerance:g}, parameter SHA256s not compared"
    span = f"records {rx.logged[0]['seq']}-{rx.logged[-1]['seq']} of the log"
    taken = "".join(f"; {line}" for line in rx.taken)  # not re-executed: in the record, and as note lines below
    record = Reexecution(held=cmp.difference is None, mode=mode + taken, tolerance=rx.tolerance,
                         same_machine=rx.same_machine, parameter_hashes_compared=rx.hashes,
                         first=rx.logged[0]["seq"], last=rx.logged[-1]["seq"], records=len(rx.logged),
                         whole_log=rx.whole_log,
                         from_checkpoint=from_checkpoint, seconds=seconds,
                         largest_float_difference=dict(zip(("value", "record", "field"), cmp.largest)),
                         difference=None if cmp.difference is None else cmp.difference.__dict__)
    try:
        record.write(folder)
    except OSError as e:  # a read-only run folder: the verdict below is still the answer, only its file is missing
        print(f"note: {os_error_line(e, folder)}; {record.file_name} not written, the verdict follows",
              file=sys.stderr)
    for line in rx.taken:
        out(f"note: {line}")
    if cmp.difference is not None:
        print(f"error: re-execution of {span} differs at {cmp.difference.line}", file=sys.stderr)
        return 1
    out(f"re-executed {span} ({len(rx.logged)} records, {seconds} s, {mode}"
        f"{'' if rx.same_machine else '; not the machine that made the run'}): every logged number is what training "
        f"produces now" + ("; the parameter SHA256s these records log included" if rx.hashes else "")
        + ("" if rx.whole_log else f"; a stretch, not the whole log: {record.file_name}"))
    return 0
