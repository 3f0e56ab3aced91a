"""How a run begins: fresh (its start record: the plan, the calibration, the start state's losses and
parameters, the machine), resumed after a kill (from its log and its newest good checkpoint, the records the
log lacks appended first), or continued at one checkpoint of a logged run (re-execution, checks/reexecute.py,
into a scratch folder)."""
from errors import DataError
from shardqueue.engine.log import DecisionLog, line_of, read_log, record_sha256, verify_chain
from records.provenance import machine
from shardqueue.engine.start_record import start_settings
from shardqueue.engine.training import params_sha256
from training.checkpoint import behind_damaged, newest_good_checkpoint
from training.resume import restore_trainer_state


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
    behind_damaged(path, p.get("log_seq"), len(recs), log_path.name)
    full = _owed_appended(recs, p, path, log_path)
    runner.dlog = DecisionLog(log_path, seq=len(recs))
    for r in full[len(recs):]:
        runner.dlog.write(r)
    runner.prev_sha256 = record_sha256(full[-1])
    runner.run_id = run_id
    take_checkpoint(runner, p)
    runner.record("resumed", checkpoint=path.name, log_seq=p["log_seq"], machine=machine(runner.world.device))
    runner.commit()
    runner.decay_start = decay_start_of(full)
    return runner.work()


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
