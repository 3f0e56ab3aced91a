"""How a run begins: fresh (its start record: the plan, the calibration, the start state's losses and
parameters, the machine), resumed after a kill (from its log and its newest good checkpoint, the records the
log lacks appended first; or, where a newer checkpoint is damaged and the log has gone on past the newest good
one, the log's records after it re-executed and each checked against the log first: LogReplay), or continued at
one checkpoint of a logged run (re-execution, checks/reexecute.py, into a scratch folder)."""
import json

from errors import DataError
from shardqueue.engine.log import DecisionLog, compare_records, line_of, read_log, record_sha256, verify_chain
from records.provenance import machine
from shardqueue.engine.start_record import start_settings
from shardqueue.engine.training import params_sha256
from training.checkpoint import damaged_after, newest_good_checkpoint
from training.resume import restore_trainer_state

# records a resume or an operator wrote, not training: a re-execution takes them from the log at their place
OUTSIDE_TRAINING = ("resumed", "return")
# fields record() derives itself (an outside record's other fields are its arguments)
DERIVED = ("seq", "event", "time", "run_id", "sha256", "sources", "queue", "prev_sha256")


def prepare(runner):
    """What any start needs: a reserve to test recovery with (a policy that can flag), the run folder."""
    if runner.policy.can_flag and not runner.pool.get("reserve"):
        raise DataError("pool.json has no reserve of calibration-source shards to test recovery with "
                        "(a calibration made before the reserve existed); calibrate again")
    runner.out.mkdir(parents=True, exist_ok=True)
    runner._owed, runner.flag_info = [], None


def start(runner):
    """A fresh run's start: the log opened, the start state measured and recorded."""
    log_path = runner.out / "decisions.jsonl"
    if log_path.exists():
        raise DataError(f"{log_path}: a decision log exists; resume it or start with --fresh")
    runner.dlog = DecisionLog(log_path)
    runner.ref = runner.measure()
    plan, calib = runner.plan, runner.calib
    # the plan (whether first-rotation rejections are branch-checked included; how is the calibration's
    # branch_mode): what a re-execution rebuilds the run from
    runner.record("start", losses=runner.ref, **plan.recorded(),
                  calibration={k: calib.get(k) for k in ("k", "frac", "sigma")},
                  pool_sha256=runner.pool["_sha256"], start_step=runner.step, start_targets=runner.targets,
                  calibration_dir=runner.calibration_dir, corpus=runner.corpus, branch_mode=runner.branch_mode,
                  params_sha256=params_sha256(runner.trainer.model),
                  **start_settings(runner.cfg, calib, runner.world.device))
    runner.commit()


def resume(runner):
    """Resume a killed run in its folder and work to its end; a `resumed` record names the checkpoint."""
    prepare(runner)
    log_path = runner.out / "decisions.jsonl"
    recs = read_log(log_path, repair=True, log=runner.log)
    run_id = recs[0].get("run_id")

    def skip(path, p):
        if "log_seq" not in p:  # the final decay's checkpoint of a run killed before it became final.pt
            return f"note: {path.name} is an unfinished final decay; resuming from the step before it"
        if p.get("run_id") != run_id:
            raise DataError(f"{path}: belongs to run {p.get('run_id')}, but {log_path.name} is run {run_id}")
        return None

    path, p = newest_good_checkpoint(runner.out, log=runner.log, skip=skip)
    if p is None:
        raise DataError(f"{runner.out}: no checkpoint to resume from")
    runner.run_id = run_id
    damaged = damaged_after(path) if len(recs) > p["log_seq"] else []
    if damaged:  # the log has gone on past every checkpoint that verifies: it proves itself by re-execution
        return _replayed(runner, recs, path, p, damaged, log_path)
    full = _owed_appended(recs, p, path, log_path)
    runner.dlog = DecisionLog(log_path, seq=len(recs))
    for r in full[len(recs):]:
        runner.dlog.write(r)
    runner.prev_sha256 = record_sha256(full[-1])
    take_checkpoint(runner, p)
    runner.record("resumed", checkpoint=path.name, log_seq=p["log_seq"], machine=machine(runner.world.device))
    runner.commit()
    runner.decay_start = decay_start_of(full)
    return runner.work()


def _replayed(runner, recs, path, p, damaged, log_path):
    """Resume from checkpoint p (path), which the log has gone on past because every newer checkpoint is damaged:
    the log's records after it are re-executed, each checked against its logged record and never appended again
    (LogReplay), and the run goes on from the last of them as from an intact checkpoint. Going back to p and
    writing the later records again could not be appended to the log, nor proven; refusing would leave a run that
    training can finish. The damaged files stay until the re-execution writes their checkpoints again."""
    C, N = p["log_seq"], len(recs)
    verify_chain(recs, log_path)
    for r in p["records"]:
        if recs[r["seq"] - 1] != r:
            raise DataError(f"{log_path}: record {r['seq']} differs from the one {path.name} holds")
    runner.log(f"note: {', '.join(q.name for q in damaged)} did not verify; resuming from {path.name} (record {C}) "
               f"by re-executing records {C + 1}-{N} of {log_path.name}, each checked against the log")
    runner.dlog = DecisionLog(log_path, seq=C, held=N)
    runner.prev_sha256 = record_sha256(recs[C - 1])
    take_checkpoint(runner, p)
    runner.decay_start = decay_start_of(recs[:C])
    replay = LogReplay(runner, recs, path, damaged, log_path)
    runner.work()
    if runner.commit is replay:  # the work ended before the log does (a log that ends in the final decay's records)
        raise DataError(f"{log_path}: re-executed from {path.name}, the queue ended at record {runner.seq} of the "
                        f"{N} the log holds; restore {damaged[-1].name}, or start the run again with --fresh")
    return runner


class LogReplay:
    """The runner's commit while a resume re-executes records the log holds: each record made is compared with
    the logged one (bitwise, parameter SHA256s included: the run goes on from the state they leave, so the log's
    later records must be this state's) and the logged one, its time and chain, is what the checkpoint holds, so
    the log and its checkpoints stay one chain; a record past the log's end is new and chained to it. Records
    training cannot make are taken from the log at their place (take_from_log). Once the log's last record is
    re-executed the runner commits as before, and a `resumed` record names the checkpoint and the stretch."""

    def __init__(self, runner, logged, path, damaged, log_path):
        self.runner, self.logged, self.path, self.damaged, self.log_path = runner, logged, path, damaged, log_path
        self.first, self.commit, self.prev = runner.seq + 1, runner.commit, runner.prev_sha256
        self.same = made_on_this_machine(logged, runner.world.device)
        runner.commit = self  # an instance attribute: the class's commit again once deleted

    def __call__(self):
        r = self.runner
        r._owed = [self._checked(rec) for rec in r._owed]
        r.prev_sha256 = self.prev
        self.commit()
        if r.seq < len(self.logged):
            line = take_from_log(r, self.logged, r.seq)
            if line:
                r.log(f"note: {line}")
        elif r.commit is self:  # the log's last record re-executed: the run goes on as any resumed run
            del r.commit
            r.record("resumed", checkpoint=self.path.name, log_seq=self.first - 1,
                     reexecuted=[self.first, len(self.logged)], damaged=[q.name for q in self.damaged],
                     machine=machine(r.world.device))
            r.commit()

    def _checked(self, rec):
        """The logged record in place of a re-executed one equal to it; a new record chained to the one before."""
        seq = rec["seq"]
        if seq > len(self.logged):
            rec = dict(rec, prev_sha256=self.prev)
        else:
            d = compare_records([self.logged[seq - 1]], [json.loads(line_of(rec))], 0.0, True).difference
            if d:
                where = "" if self.same else " (the log was made on another machine, whose floats round differently)"
                raise DataError(f"{self.damaged[-1]}: damaged, and re-executing {self.log_path.name}'s records "
                                f"{self.first}-{len(self.logged)} from {self.path.name} (the newest checkpoint that "
                                f"verifies) does not give the logged ones{where}: {d.line}; restore the damaged "
                                f"checkpoint, or start the run again with --fresh (this run is moved aside)")
            rec = self.logged[seq - 1]
        self.prev = record_sha256(rec)
        return rec


def made_on_this_machine(logged, device) -> bool:
    """Whether every process that wrote the log (the start, each resume) ran where this one runs."""
    here = machine(device)
    return all(r.get("machine") == here for r in logged if r["event"] in ("start", "resumed"))


def take_from_log(runner, logged, seq):
    """After a re-executed commit ending at record seq, the log's next record where training cannot make it: a
    resume's or an operator's (OUTSIDE_TRAINING), recorded and committed as logged; a stable phase's end that an
    observer of the run decided (arm A's reference branches, whose measurements the log does not hold), set on the
    runner. Returns a line saying the latter was taken from the log, else None."""
    nxt = logged[seq] if seq < len(logged) else None
    if nxt and nxt["event"] in OUTSIDE_TRAINING:
        runner.record(nxt["event"], **{k: v for k, v in nxt.items() if k not in DERIVED})
        runner.commit()
    elif nxt and nxt["event"] == "decay_start" and nxt.get("stable_ended_by"):
        runner.stable_ended = nxt["stable_ended_by"]
        return (f"record {nxt['seq']} (decay_start): where the stable phase ended is taken from the log, not "
                f"re-executed: an observer of the run ended it ({nxt['stable_ended_by']}), and the log does not hold "
                f"what it measured")
    return None


def decay_start_of(records):
    """The step at which the in-queue decay began in these records, or None (not begun)."""
    return next((r["step"] for r in records if r["event"] == "decay_start"), None)


def _owed_appended(recs, p, path, log_path):
    """The log's records plus those checkpoint p holds that the log lacks (a kill between the two writes),
    checked: the checkpoint's records equal the log's where both have them, and the whole chains."""
    last, C = len(recs), p["log_seq"]
    owed = p["records"]
    first_owed = owed[0]["seq"] if owed else C + 1
    if last > C or last < first_owed - 1:
        raise DataError(f"{log_path}: holds {last} records but {path.name} was written at record {C}; "
                        f"the log and the checkpoint do not belong together")
    for r in owed:
        if r["seq"] <= last and {k: v for k, v in recs[r["seq"] - 1].items()} != r:
            raise DataError(f"{log_path}: record {r['seq']} differs from the one {path.name} holds")
    full = recs + [r for r in owed if r["seq"] > last]
    verify_chain(full, log_path)
    return full


def continue_from(runner, checkpoint, logged):
    """Continue a logged run at one of its checkpoints, in the runner's (scratch) folder: the log's records up
    to it written there, its state taken, no `resumed` record; then work to the end."""
    prepare(runner)
    C = checkpoint["log_seq"]
    log_path = runner.out / "decisions.jsonl"
    with open(log_path, "w") as f:
        f.writelines(line_of(r) + "\n" for r in logged[:C])
    runner.dlog = DecisionLog(log_path, seq=C)
    runner.prev_sha256 = record_sha256(logged[C - 1])
    take_checkpoint(runner, checkpoint)
    runner.decay_start = decay_start_of(logged[:C])
    return runner.work()


def take_checkpoint(runner, p):
    """The runner as a queue checkpoint left it, at its record p["log_seq"]."""
    restore_trainer_state(runner.trainer, p)
    runner.step, runner.targets, runner.ref, runner.state = p["step"], p["targets"], p["ref"], p["state"]
    runner.seq, runner.spent, runner.rollback, runner.flag_info = p["log_seq"], p["spent"], p["rollback"], p["flag_info"]
