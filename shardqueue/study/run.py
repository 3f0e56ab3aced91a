"""The queue study end to end: stage A once, the seed plan, three runs per seed, the selection axis, the
rule, the report.

Order: stage A (run_queue.calibrate, shared by every arm) and the seeds planned from its noise;
then at each seed arm B (its number of rejections fixes arm C's) and arm C; then arm A at each
seed (its decay branches build the reference curve, and it must know every B and C final
loss to know how far the curve has to reach). A run whose study_run.json exists is not
redone; an unfinished one is moved aside and redone from its start state. A finished run's
rollback checkpoints are deleted: no decision can need them any more.
"""
import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from corpus.atomic import atomic_write_json
from corpus.layout import Layout, default_data_dir
from corpus.runlock import FolderLocked, folder_lock
from errors import DataError, os_error_line
from fanout import Engine, Task, check_engine, gpus_for, open_engine
from records import provenance
from records.study import VERSION, StudySummary
from shardqueue import api as rq
from shardqueue.engine.log import read_log, verify_chain
from shardqueue.engine.packing import shard_rows, shard_tokens
from shardqueue.engine.run_folder import copy_start_state, plan_differences
from shardqueue.policy.rule import rate_kind
from shardqueue.study.accounting import accounting, control_trace, decision_rows, run_cost
from shardqueue.study.adoption import adoption
from shardqueue.study.arms import ReferenceBranches, arm_a_plan, arm_b_plan, arm_c_plan
from shardqueue.study.curve_fit import THRESHOLDS, check_identifiable
from shardqueue.study.efficiency import AXIS_DEFINITION, DEFINITION, efficiency_points, per_axis
from shardqueue.study.findings import answers, compute_per_arm
from shardqueue.study.non_english import polish_axis
from shardqueue.study.power import (
    FLOOR_POINTS,
    interval_width,
    plan_seeds,
    seeds_needed,
    seeds_to_use,
    stage_a_slope,
)
from shardqueue.study.presets import PRESETS, StudyPreset, decay_updates, plan, queue_settings, reference_fractions
from shardqueue.study.random_rejection import plan_c
from shardqueue.study.reference_curve import coverage, curve_from_seeds, leave_one_out
from shardqueue.study.report import write_report
from shardqueue.world.domains import load_domains
from shardqueue.world.rotation import shard_docs
from training.config import TrainConfig
from training.device import configure, resolve_device

SEED_EFFECTS = (
    "A seed sets (1) the model initialisation: the calibration seed starts from the stage-A state itself, any other "
    "seed from its own initialisation trained on the same stage-A shards in the same order (sigma_d, k and the "
    "recovery criterion stay the calibration's); (2) the order of every rotation (seeded by seed and rotation "
    "number), hence which shards are judged first, which shard serves as a recovery shard, which shard a branch "
    "check uses, and where deferred shards land; (3) arm C's rejected positions. It does not change the pool, its "
    "shards and hashes, the decay shards, the control and selection sets, or the official evaluation rows.")


def mean(d):
    return sum(d.values()) / len(d)


def calibration_dir(a, out) -> Path:
    cal = Path(a.calibration) if getattr(a, "calibration", None) else out / "stage_a"
    if getattr(a, "calibration", None) and not (cal / "calibration.json").exists():
        raise DataError(f"{cal / 'calibration.json'}: not found (--calibration names an existing stage-A folder)")
    return cal


def data_root(a, cal) -> str:
    """The data root, absolute, as the driver resolves it: a calibration's own (its config.json), else --data-dir,
    else the default ($PACKAUDIT_DATA here). Every run gets it: a Ray node's own environment is never read."""
    recorded = None
    if (cal / "config.json").exists():
        recorded = json.loads((cal / "config.json").read_text()).get("data_dir")
    return os.path.abspath(recorded or (None if (cal / "config.json").exists() else a.data_dir) or default_data_dir())


def probed_data_root(a, p, out, engine) -> str:
    """The data root (data_root), after the engine's probe of every node, before any compute (on Ray: the checkout,
    the data root and a given stage A readable, the prepared corpus's build id, --out written and seen here)."""
    cal = calibration_dir(a, out)
    data = data_root(a, cal)
    engine.probe(reads=[data] + ([str(cal)] if cal.exists() else []), prepared=[os.path.join(data, p.source)],
                 writes=[str(out)])
    return data


def with_corpus_vocab(p, data, log):
    """The preset with the prepared corpus's vocabulary: the model embeds that corpus's tokens and the harmful
    source permutes them (a preset's model is sized for the offline corpus at prepare.py's default vocabulary)."""
    have = Layout(data, p.source).prepared()["vocab_size"]
    want = p.model().get("vocab", TrainConfig.vocab)
    if have != want:
        log(f"model vocabulary {have:,}: the prepared corpus's tokenizer's (the preset's model has {want:,})")
    return p.with_vocab(have)


def stage_a(a, p, out, rq, log, data=None):
    """The calibration folder, calibrated if needed (on the data root `data`, by default data_root's); (cfg, world,
    pool, calib, folder)."""
    cal = calibration_dir(a, out)
    data = data or data_root(a, cal)
    if not (cal / "calibration.json").exists():
        ov = [f"{k}={v}" for k, v in p.model().items()] + [f"source={p.source}", f"seed={p.seeds[0]}",
                                                            "name=queue_study", f"data_dir={data}"]
        log(f"stage A: calibrating into {cal}")
        settings = queue_settings(p)
        if getattr(a, "domains", None):  # control and selection domains from a file
            settings = replace(settings, domains=load_domains(a.domains))
        rec = rq.calibrate(cal, None, ov, settings, a.device)
        if not rec["ok"]:
            raise DataError(f"{cal / 'calibration.json'}: the calibration failed ({rec['reason']})")
    else:
        log(f"stage A: using the calibration in {cal}")
        # before the corpus is opened with it: a stage A of another model (vocabulary included) is named as such
        check_setting(cal, p, json.loads((cal / "config.json").read_text()), rq.check_calibrated(cal),
                      given=bool(getattr(a, "calibration", None)),
                      domains=load_domains(a.domains) if getattr(a, "domains", None) else None)
    cfg, world, pool, calib = rq.open_calibration(cal, a.device, data)
    if calib["seed"] != p.seeds[0]:
        raise DataError(f"{cal / 'calibration.json'}: calibrated at seed {calib['seed']}, the preset's first seed is "
                        f"{p.seeds[0]}")
    return cfg, world, pool, calib, cal


def check_setting(cal, p, have, calib, given=True, domains=None):
    """A stage A (--calibration, or the study folder's own) of this preset's setting: its model, batch, source,
    shards and control and selection domains, else one line naming what differs (the arms would train the other
    setting under this preset's name). have: its config.json; given: named by --calibration (else the study
    folder's own, made by an earlier run); domains: this command's --domains file, loaded (None: the built-in)."""
    settings = calib.get("plan", {}).get("settings", {})
    want = {**{k: (have.get(k), v) for k, v in {**p.model(), "source": p.source}.items()},
            **{k: (settings.get(k), v) for k, v in asdict(queue_settings(p)).items() if k in settings and k != "domains"}}
    differ = [f"{k} {got} (the preset's {v})" for k, (got, v) in want.items() if str(got) != str(v)]
    same_domains = settings.get("domains") == domains  # another --domains, or none, used stage A's silently
    if not same_domains:
        differ.insert(0, f"domains {_domains_named(settings.get('domains'))} (this command's "
                         f"{_domains_named(domains)})")
    if differ:
        todo = (f"give one made by this preset{' and --source' if p.source != 'stdlib' else ''}, or leave "
                "--calibration out") if given else "move it aside (or give another --out) to calibrate again"
        todo = todo if same_domains else f"give the --domains it was made with, or {todo}"
        raise DataError(f"{cal}: a stage A of another setting ({', '.join(differ[:4])}{', ...' if len(differ) > 4 else ''}); "
                        + todo)


def _domains_named(spec):
    return "built-in" if not spec else "from a file: " + " ".join(sorted(n for part in spec.values() for n in part))


def stage_a_curves(rq, world, pool, calib, cfg):
    """Per control domain: the reference curve fitted on stage A's losses against trained targets."""
    shards = {s["id"]: s for s in pool["shards"]}
    warm = calib["plan"]["settings"]["warmup_shards"]
    ns = calib["plan"]["settings"]["sigma_shards"]
    D, t = [], 0
    for j, sid in enumerate(pool["calibration"][: warm + ns]):  # shard-level states: warm-up and sigma shards
        _, y = shard_rows(shard_tokens(world.stream, shard_docs(shards[sid])), cfg.context, world.bos)
        if j == warm:
            D.append(t)
        t += int((y >= 0).sum())
        if j >= warm:
            D.append(t)
    states = calib["states"][: ns + 1]
    if len(D) != len(states):
        raise DataError(f"calibration: {len(states)} measured states but {len(D)} stage-A shards after warm-up")
    return {d: check_identifiable(D, [s[d] for s in states]) for d in sorted(states[0])}, D


def run_arm(rq, arm, out, cal, plan, log, device, observer=None, describe=None, data_dir=None):
    """One arm at one seed under its run plan; returns its study record (cached in RUN/study_run.json).
    observer: arm A's reference branches; `describe` replaces the policy's name in the line printed at the
    arm's start; data_dir: the driver's data root (default: the calibration's)."""
    d = out / f"{arm}_s{plan.seed}"
    done = d / "study_run.json"
    if done.exists():
        check_finished_plan(d, plan)
        log(f"{d.name}: already done")
        return json.loads(done.read_text())
    fresh = (d / "decisions.jsonl").exists() or bool(list(d.glob("ckpt_*.pt")))
    log(f"\n-- arm {arm}, seed {plan.seed}: {describe or 'policy ' + plan.policy}")
    t0 = time.time()
    # report=False: the study writes one report for all runs (a per-run report and figure cost more than a tiny run)
    summary = rq.run(d, cal, plan, fresh=fresh, device=device, log=log, report=False,
                     observers=[observer] if observer else (), data_dir=data_dir)
    wall = time.time() - t0
    recs = read_log(d / "decisions.jsonl", log=lambda s: None)
    acc = accounting(recs)
    rec = {"arm": arm, "seed": plan.seed, "name": f"{arm}_s{plan.seed}", "policy": plan.policy,
           "reject_rate": plan.reject_rate,
           "summary": {k: summary.to_json()[k] for k in ("accepted", "quarantined", "deferred_pending", "undecided",
                                                           "rejections", "returns", "rotations", "accepted_tokens",
                                                           "harmful_accepted", "screen")},
           "final": summary.to_json()["final"], "start_targets": recs[0].get("start_targets", 0), "accounting": acc,
           "control_trace": control_trace(recs), "wall_s": round(wall, 2),
           "branches": observer.branches if observer else [],
           "branch_seconds": observer.branch_seconds if observer else 0.0,
           "branch_updates": observer.branch_updates if observer else 0,
           "stopped_covered": observer.stopped if observer else None}
    atomic_write_json(done, rec)
    keep = out / "start_states" / f"s{plan.seed}.pt"
    if (d / "start_state.pt").exists() and (d / "start_state.json").exists() and not keep.exists():
        keep.parent.mkdir(parents=True, exist_ok=True)  # the seed's start state and its key, for the other arms
        shutil.move(str(d / "start_state.json"), str(keep.with_suffix(".json")))
        shutil.move(str(d / "start_state.pt"), str(keep))
    drop_rollback_points(d)
    return rec


def check_finished_plan(d, plan):
    """A finished run is taken as it is only if its log chains (the check `reconstruct` makes first) and it ran under
    this plan. A hand-edited log was read as it stood (a new user's probe: one target count changed, arm B's compute
    changed, exit 0); it is refused, not run again: the log is the study's record of that run, and an edit to it is
    for its owner to undo, not for a rerun to bury in previous/. A study rerun on the same --out with --curve added
    or dropped passes stage A's check (the preset's settings, not the rule the arms use) and would otherwise report
    arm B's runs made under one rule as made under the other."""
    recs = read_log(d / "decisions.jsonl", log=lambda s: None)
    try:
        verify_chain(recs, d / "decisions.jsonl")
    except DataError as e:
        raise DataError(f"{e}; this study reuses a finished run only as it ran: restore the log, or remove {d} to run "
                        f"the arm again") from None
    start = recs[0]
    if diff := plan_differences(start, plan):
        raise DataError(f"{d}: this run finished under another run plan: {', '.join(diff)}; this --out holds a "
                        f"study made with other settings: rerun it with those, or give another --out")


@dataclass(frozen=True)
class SeedJob:
    """What one seed's arms need (picklable: a worker process or a Ray worker runs it), every path absolute,
    resolved by the driver. `reads`: the folders its runs read (stage A, the data root), checked on a Ray
    worker's node first; `prepared`: the prepared corpus, whose build id every node must read as the driver."""
    seed: int
    out: Path
    cal: Path
    budget: int
    rotation: int
    device: str
    decay_updates: int
    calib_seed: int
    curves: dict | None  # arm B's frozen reference curves (the curve variant), or None: the basic rule
    largest_shard: int
    context: int
    rows_per_update: int
    a_thresholds: tuple = ()  # arm A's reference thresholds of accepted targets
    a_cover_below: float | None = None  # the lowest final loss arm A's curve must reach
    a_budget: int = 0
    data_dir: str | None = None  # the driver's data root; None: the calibration's (a local run)
    reads: tuple = ()
    prepared: tuple = ()


def arms_b_c(job, log):
    """Arm B at one seed, then arm C with as many rejections as B made: (B's record, C's record, C's plan)."""
    s, U = job.seed, job.decay_updates
    rb = run_arm(rq, "B", job.out, job.cal, arm_b_plan(s, job.budget, job.rotation, U, job.curves), log, job.device,
                 data_dir=job.data_dir)
    share_start_state(job.out, s, job.calib_seed)
    # C rejects as many times as B did, at positions every one of which C reaches
    cp = plan_c(rb["accounting"]["decisions"], s, job.budget, job.largest_shard, job.context, job.rows_per_update, U)
    rate = cp["count"] / cp["window"] if cp["window"] else 0.0  # recorded in C's start record, not used
    rc = run_arm(rq, "C", job.out, job.cal, arm_c_plan(s, job.budget, job.rotation, U, cp["positions"], rate), log,
                 job.device, describe=f"random rejection, as many as B made ({cp['count']})"
                 + (f", at positions drawn among C's first {cp['window']} decisions" if cp["count"] else ""),
                 data_dir=job.data_dir)
    return rb, rc, cp


def arm_a(job, log):
    """Arm A at one seed: plain order past the budget, its decay branches building the reference curve."""
    share_start_state(job.out, job.seed, job.calib_seed)
    return run_arm(rq, "A", job.out, job.cal, arm_a_plan(job.seed, job.a_budget, job.rotation, job.decay_updates),
                   log, job.device, ReferenceBranches(job.a_thresholds, job.budget, job.a_cover_below),
                   data_dir=job.data_dir)


def map_seeds(fn, jobs, engine: Engine, log):
    """fn(job, log) for every seed's job, in order, through the fan-out engine: in this process, in a local
    pool of --workers processes, or on Ray (a run on CUDA holds one GPU).

    Every run is single-threaded (api.run), reads the shared stage A and writes only its own folder, so the
    runs of different seeds are independent and their results are the same either way. A run finished by
    an earlier attempt (a killed driver, a retried Ray task) is read back, not redone (run_arm)."""
    if engine.in_process(len(jobs)):
        return [fn(j, log) for j in jobs]
    tasks = [Task(seed_worker, (fn, j, log is print), name=f"{fn.__name__} seed {j.seed}", cpus=1,
                  gpus=gpus_for(j.device), reads=j.reads, prepared=j.prepared, writes=(str(j.out),),
                  kept="their runs' study_run.json in --out") for j in jobs]
    got = []
    for j, r in zip(jobs, engine.run(tasks)):
        recs = r[:2] if isinstance(r, tuple) else (r,)
        for rec in recs:
            check_visible(j.out, rec)
        # the driver's own line as each seed's runs come back (a Ray worker's output is not forwarded by default)
        log(f"seed {j.seed}: {', '.join(rec['name'] for rec in recs)} finished")
        got.append(r)
    return got


def check_visible(out, rec):
    """The driver sees the run folder a worker wrote (on a cluster, --out must be storage every node shares)."""
    done = out / rec["name"] / "study_run.json"
    if not done.exists():
        raise DataError(f"{done}: written by a worker but not visible to the driver: --out must be on storage "
                        "that every node shares")


def seed_worker(fn, job, talk):
    """One seed's arms in a worker process: the device set up as the parent did; its log lines prefixed."""
    configure(job.device)
    return fn(job, (lambda s: print(f"[seed {job.seed}] {s}", flush=True)) if talk else (lambda s: None))


def drop_rollback_points(d):
    """A finished run's decisions are all made: no rollback can need its checkpoints any more. Keep the
    decision log, manifests and final.pt/final.json; drop ckpt_*.pt with their sidecars (ckpt_*.json: a sidecar
    without its checkpoint describes nothing; a new user's probe found them left) and a copied start state, whose
    start_state.json stays: the key that names the start state the run began from."""
    for f in list(d.glob("ckpt_*.pt")) + list(d.glob("ckpt_*.json")) + [d / "start_state.pt"]:
        f.unlink(missing_ok=True)


def arm_result(r, budget):
    """(D, selection {domain: BPB}, control, decay targets, decay updates) of a run after its final decay;
    D counts targets trained after the shared start. Arm A's is its decay branch at the budget (the state
    a budget-limited run decays from)."""
    s0 = r["start_targets"]
    if r["arm"] == "A":
        at = [b for b in r["branches"] if b["threshold"] == budget]
        if not at:
            raise DataError(f"{r['name']}: no decay branch at the budget ({budget:,} accepted targets); the pool ran out")
        b = at[0]
        return b["D"] - s0, b["selection"], b["control"], b["decay_targets"], b["decay_updates"]
    acc = r["accounting"]
    return (acc["trained_targets"] - s0, r["final"]["selection"], r["final"]["control"], acc["decay_targets"],
            acc["decay_updates"])


def budget_check(runs, budget, shard_max):
    """From each run's log: stable-phase targets reach the budget with less than one shard of overshoot
    (shards are whole), and the decay trains the same targets in every run."""
    targets, stable, decay, dec_u = {}, {}, {}, {}
    for r in runs:
        D, _, _, dec, du = arm_result(r, budget)
        targets[r["name"]], decay[r["name"]], dec_u[r["name"]] = D, dec, du
        stable[r["name"]] = D - dec
    problems = []
    for n, s in stable.items():
        if s < budget * 0.98:  # 0.98: a shard's token count includes BOS tokens that are no target
            problems.append(f"{n}: {s:,} stable-phase targets for a budget of {budget:,} (short of it: its queue ran "
                            "out of shards)")
        elif s >= budget + shard_max:
            problems.append(f"{n}: {s:,} stable-phase targets for a budget of {budget:,} ({s - budget:,} past it, the "
                            f"largest candidate shard {shard_max:,})")
    if len(set(dec_u.values())) != 1:
        problems.append("decay lengths differ: " + ", ".join(f"{n} {v:,} updates" for n, v in dec_u.items()))
    rule = ("from each run's decision log: stable-phase trained targets reach the budget with less than one shard "
            f"of overshoot (shards are whole), and the decay has the same length, {next(iter(dec_u.values())):,} "
            "updates (LR 1 -> 0), in every run, on shards that run's own policy accepted (targets differ only by "
            "the masked padding of each shard's last row)")
    return {"targets": targets, "stable": stable, "decay": decay, "decay_updates": dec_u, "held": not problems,
            "problems": problems, "rule": rule, "budget_targets": budget}


def checked_budgets(runs, budget, shard_max, cal):
    """budget_check's record when the arms trained equal budgets, else one line naming each run that did not and
    what to do (the same folder would read the same runs back)."""
    bc = budget_check(runs, budget, shard_max)
    if not bc["held"]:
        raise DataError("the arms did not train equal budgets: " + "; ".join(bc["problems"]) + "; no report written: "
                        f"train the runs again in another --out (--calibration {cal} keeps stage A)")
    return bc


def run_study(a, log=print):
    p = PRESETS[a.preset]
    if getattr(a, "source", None):  # your own prepared corpus (prepare.py --source parquet) in the preset's setting
        p = p.with_source(a.source)
    # every path absolute here, on the driver: a run on a Ray node gets these, never its own folder's
    out = Path(os.path.abspath(a.out))
    if getattr(a, "calibration", None):
        a.calibration = os.path.abspath(a.calibration)
    try:
        # the engine's options first, before anything is made (queue/study.py checks them before a --dry-run too)
        check_engine(getattr(a, "engine", "local"), getattr(a, "workers", 1), getattr(a, "ray_address", None))
        # the device first: a bad --device is refused whatever the data, before the corpus is looked for
        a.device = resolve_device(a.device or "auto", "--device")
        if getattr(a, "domains", None):  # a missing or malformed domains file: one line, no --out behind
            load_domains(a.domains)
        # the prepared corpus first, where this machine reads it: a missing data root leaves no --out behind
        if getattr(a, "engine", "local") == "local":
            Layout(data_root(a, calibration_dir(a, out)), p.source).prepared()
        # then the engine: a bad --engine setup is one line before anything is made
        with open_engine(getattr(a, "engine", "local"), getattr(a, "workers", 1), getattr(a, "ray_address", None),
                         getattr(a, "verbose", False)) as engine, folder_lock(out, "the queue study"):
            return _run(a, p, out, rq, log, engine)
    except (DataError, FolderLocked) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a full disk or an unwritable --out: one line naming the path, as the queue's own command
        print(f"error: {os_error_line(e, out)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # each run's log and checkpoints are atomic: rerunning the command goes on from them
        print(f"interrupted: the study stopped; {out} keeps what it had written; rerun the same command to go on",
              file=sys.stderr)
        return 130


def earlier_attempts(out):
    """The folders a restarted run moved its interrupted files into (shardqueue.api.move_aside), with their
    file counts. They are kept, not deleted: they are the only record of what the killed attempt did, and
    the report names them so that none lies forgotten in the results folder."""
    return [{"folder": str(p.relative_to(out)), "files": sum(1 for f in p.rglob("*") if f.is_file())}
            for p in sorted(out.glob("*/previous/*")) if p.is_dir()]


def _run(a, p, out, rq, log, engine):
    configure(a.device)  # resolved by run_study
    rot = p.rotation_shards
    t_all = time.time()
    data = probed_data_root(a, p, out, engine)
    p = with_corpus_vocab(p, data, log)
    made_a = not calibration_dir(a, out).joinpath("calibration.json").exists()
    cfg, world, pool, calib, cal = stage_a(a, p, out, rq, log, data)
    # the commit and machine the runs were made with (a rebuilt report keeps them); after stage A, whose refusal
    # (a stage A of another setting) leaves no file of this study behind
    prov = out / "provenance.json"
    if not prov.exists():
        atomic_write_json(prov, provenance.study())
    # stage A's time, kept as soon as it is done: a study interrupted later and finished by another invocation
    # must not take that invocation's few seconds of opening stage A for it
    ta_file = out / "stage_a_seconds.json"
    if not ta_file.exists() or made_a:
        atomic_write_json(ta_file, {"seconds": round(time.time() - t_all, 1)})
    curves, D_cal = stage_a_curves(rq, world, pool, calib, cfg)
    use_curve = bool(a.curve) and all(c["ok"] for c in curves.values())
    curve_reason = ""
    if a.curve and not use_curve:
        bad = next(d for d, c in curves.items() if not c["ok"])
        curve_reason = f"refused, basic rule used: {bad}: {curves[bad]['reason']}"
    # the seeds, planned from stage A's noise before any arm trains
    power = plan_seeds(calib["sigma"], *stage_a_slope(D_cal, calib["states"][: len(D_cal)]))
    seeds = seeds_to_use(power["seeds_needed"], p.seeds, p.max_seeds)
    log(power_lines(power, seeds, p))
    # shards are document-aligned and a little over their nominal size: the budget is budget_shards
    # shards of the pool's mean size, so the stable phase trains about budget_shards shards
    cand_tokens = [s["tokens"] for s in pool["shards"] if s["id"] in pool["order"]]
    budget = int(round(p.budget_shards * sum(cand_tokens) / len(cand_tokens)))
    U = decay_updates(p, cfg.targets_per_update)
    b_curves = {d: {k: c[k] for k in ("a", "b", "c", "D0")} for d, c in curves.items()} if use_curve else None
    jobs = [SeedJob(seed=s, out=out, cal=cal, budget=budget, rotation=rot, device=a.device, decay_updates=U,
                    calib_seed=calib["seed"], curves=b_curves, largest_shard=max(cand_tokens), context=cfg.context,
                    rows_per_update=cfg.micro_rows * cfg.accum, data_dir=data, reads=(str(cal), data),
                    prepared=(os.path.join(data, cfg.source),)) for s in seeds]
    # B then C at every seed first: arm A's reference must cover their final losses
    done_bc = map_seeds(arms_b_c, jobs, engine, log)
    runs = [r for rb, rc, _ in done_bc for r in (rb, rc)]
    c_plans = {job.seed: cp for job, (_, _, cp) in zip(jobs, done_bc)}
    fr = reference_fractions(p)
    thresholds = tuple(int(round(f * budget)) if f != 1.0 else budget for f in fr)
    # the lowest loss A's curves must reach: every B and C final (the same for every seed, so the A runs
    # are independent of each other and of their order)
    low = min(mean(r["final"]["selection"]) for r in runs)
    a_jobs = [replace(j, a_thresholds=thresholds, a_cover_below=low, a_budget=int(p.reference_cap * budget))
              for j in jobs]
    runs += map_seeds(arm_a, a_jobs, engine, log)
    runs.sort(key=lambda r: ("ABC".index(r["arm"]), r["seed"]))
    summary = assemble(StudyRuns(preset=a.preset, setting=p, out=out, runs=runs, c_plans=c_plans, power=power,
                                 seeds=list(seeds), budget=budget,
                                 decay_updates=U, pool=pool, calib=calib, calibration_dir=cal, curves=curves,
                                 curve_targets=D_cal, curve_requested=bool(a.curve), use_curve=use_curve,
                                 curve_reason=curve_reason, world=world))
    # wall times add up the parts (each run's own time is in its study_run.json), so a report rebuilt
    # from finished runs keeps the times they took
    t_a = json.loads(ta_file.read_text())["seconds"]
    t_runs = sum(r["wall_s"] for r in runs)
    summary["timing"] = {"stage_a": t_a, "runs": round(t_runs, 1), "total": round(t_a + t_runs, 1),
                         "this_invocation": round(time.time() - t_all, 1)}
    shutil.rmtree(out / "start_states", ignore_errors=True)  # every run is done: no arm needs a start state
    record = StudySummary.from_json(summary)
    record.write(out / "summary.json")

    path = write_report(record.to_json(), out)
    ad = record.adoption
    log(f"\nverdict: {ad.verdict}" + "".join(f"\n  {r}" for r in ad.reasons))
    thr = "not measurable" if ad.threshold is None else f"{ad.threshold:.2f}"
    log(f"  efficiency points: B-A {fmt_by_seed(ad.b_minus_a)}; B-C {fmt_by_seed(ad.b_minus_c)}; threshold {thr}")
    log(f"  seeds per arm: {record.seeds_used} used; {count_text(record.seeds_planned)} planned from stage A; "
        f"{count_text(summary['seeds']['from_measured_spread'])} from the measured spread of B-A")
    log(f"wrote {path}, {out / 'summary.json'} and the figures")
    return 0


def fmt_num(v, f="{:+.2f}"):
    return "not measurable" if v is None else f.format(v)


def count_text(n):
    return "no count" if n is None else f"{n:,}"


def power_lines(power, seeds, p):
    """What the plan prints before the arms train: the noise, the seeds it asks for, the seeds used."""
    pw = power
    head = (f"seed plan from stage A: sigma_run {pw['sigma_run_bpb']:.4f} BPB (mean sigma_d), B-A at one seed "
            f"{pw['sigma_diff_bpb']:.4f} BPB")
    if pw["beta"] is None:
        head += f"; no slope to convert it to efficiency points ({pw['reason']})"
    else:
        head += (f" = {pw['sigma_diff_points']:.2f} efficiency points at stage A's slope {pw['beta']:+.4f} BPB per "
                 f"unit ln D; a {pw['level']:.0%} interval of B-A narrower than the floor {pw['floor']} points needs "
                 f"{count_text(pw['seeds_needed'])} seeds per arm" + (f" ({pw['reason']})" if pw["reason"] else ""))
    used = (f"the preset's {len(seeds)} seeds {list(seeds)} (it plans none)" if not p.max_seeds else
            f"{len(seeds)} seeds per arm ({seeds[0]}-{seeds[-1]}), the preset's most: stage A gave no count"
            if pw["seeds_needed"] is None else
            f"{len(seeds)} seeds per arm ({seeds[0]}-{seeds[-1]}), the planned count"
            + (f" capped at the preset's {p.max_seeds}" if pw["seeds_needed"] > p.max_seeds else ""))
    return head + "\n  used: " + used


def fmt_by_seed(d):
    return ", ".join(f"seed {k}: {fmt_num(v)}" for k, v in d.items())


@dataclass
class StudyRuns:
    """What the study's runs left for its summary: the setting, stage A, the run records (study_run.json),
    arm C's plans from arm B's rejections, the seed plan, the budget and decay length, and the reference
    curves of stage A."""
    preset: str
    setting: StudyPreset
    out: Path
    runs: list
    c_plans: dict  # {seed: random_rejection.plan_c(...)}
    power: dict  # power.plan_seeds(...)
    seeds: list
    budget: int
    decay_updates: int
    pool: dict
    calib: dict
    calibration_dir: Path
    curves: dict
    curve_targets: list
    curve_requested: bool
    use_curve: bool
    curve_reason: str
    world: object  # shardqueue.world.corpus_view.World: its selection set and validation texts


def a_curves(runs):
    """{seed: {"D", "L", "threshold", "accepted", "also_thresholds", "stopped_covered"}}: arm A's points at each seed
    (D after the shared start); each branch's threshold, the accepted targets where it was taken (the first commit at
    or past the threshold), and the later thresholds the same shard crossed, which it serves too (one branch, not
    trained twice)."""
    per_seed = {}
    for r in runs:
        if r["arm"] != "A":
            continue
        s0 = r["start_targets"]
        also = {}
        for b in r["branches"]:
            if "repeat_of" in b:
                also.setdefault(b["repeat_of"], []).append(b["threshold"])
        pts = [(b["D"] - s0, mean(b["selection"]), b["threshold"], b["accepted_targets"], also.get(b["threshold"], []))
               for b in r["branches"] if "repeat_of" not in b]
        pts.append((r["accounting"]["trained_targets"] - s0, mean(r["final"]["selection"]), "own decay", None, []))
        pts.sort(key=lambda t: t[0])
        per_seed[str(r["seed"])] = {**{k: [p[i] for p in pts] for i, k in enumerate(
            ("D", "L", "threshold", "accepted", "also_thresholds"))}, "stopped_covered": r.get("stopped_covered")}
    return per_seed


def run_costs(out, runs, budget):
    """{run name: {"arm", "seed", "trained_targets", "training_s", "wall_s"}} from each run's log; arm A to its
    budget: its stable shards up to the budget and the decay branch taken there (its earlier branches left out)."""
    costs = {}
    for r in runs:
        recs = read_log(out / r["name"] / "decisions.jsonl", log=lambda s: None)
        if r["arm"] == "A":
            # plain training to the budget and its decay there: the reference branches taken on the way
            # (below the budget) are the study's measuring work, not the arm's
            b = next(b for b in r["branches"] if b["threshold"] == budget)
            c = run_cost(recs, until_targets=b["stable_history_targets"])
            earlier = sum(x["seconds"] for x in r["branches"] if x["threshold"] < budget)
            c = {"trained_targets": c["trained_targets"] + b["decay_targets"],
                 "training_s": c["training_s"] + b.get("train_seconds", b["seconds"]),
                 "wall_s": c["wall_s"] - earlier + b["seconds"]}
        else:
            c = run_cost(recs)
        costs[r["name"]] = {"arm": r["arm"], "seed": r["seed"], "trained_targets": c["trained_targets"],
                            "training_s": round(c["training_s"], 2), "wall_s": round(c["wall_s"], 2)}
    return costs


def arm_c_match(runs, c_plans):
    """Per seed: arm B's rejections and arm C's, the rejected shards and targets rolled back, the shards
    absent from each run's final model, and why C's count differs from B's when it does."""
    by = {(r["arm"], r["seed"]): r for r in runs}
    out = {}
    for s, cp in sorted(c_plans.items()):
        row = {"positions": cp["positions"], "window": cp["window"], "min_accepted": cp["min_accepted"]}
        for arm in ("B", "C"):
            r = by[(arm, s)]
            acc = r["accounting"]
            sm = r["summary"]
            row[arm] = {"rejections": acc["decisions"]["reject"],
                        "shards_rejected": len({x["shard"] for x in acc["rejected"]}),
                        "targets_rolled_back": acc["wasted_targets"]["rejected"],
                        "absent_at_end": len(sm.get("quarantined") or []) + len(sm.get("deferred_pending") or [])
                        + len(sm.get("undecided") or []), "decisions": acc["candidates"]}
        row["equal"] = row["B"]["rejections"] == row["C"]["rejections"]
        row["why_not"] = "" if row["equal"] else (
            f"C made {row['C']['decisions']} decisions and {row['C']['rejections']} rejections: its pool ran out "
            f"before the drawn position{'s' if cp['count'] > 1 else ''} {cp['positions']} were all reached")
        out[str(s)] = row
    return out


def assemble(res: StudyRuns) -> dict:
    """summary.json's content from the finished runs (no training here)."""
    p, out, runs, budget, U = res.setting, res.out, res.runs, res.budget, res.decay_updates
    pool, calib, world = res.pool, res.calib, res.world
    shard_of = {s["id"]: s for s in pool["shards"]}
    per_seed = a_curves(runs)
    refD, refL = curve_from_seeds(per_seed)
    loo = leave_one_out(per_seed)  # the curve each seed's runs are measured on
    bc = checked_budgets(runs, budget, max(s["tokens"] for s in pool["shards"] if s["id"] in pool["order"]),
                         res.calibration_dir)
    records, points, refusals, finals = [], {"A": {}, "B": {}, "C": {}}, {}, {}
    for r in runs:
        D, sel, ctrl, dec_t, dec_u = arm_result(r, budget)
        finals[r["name"]] = mean(sel)
        cD, cL = loo[str(r["seed"])]
        eff = efficiency_points(cD, cL, D, mean(sel))
        if eff["points"] is None:
            if mean(sel) < min(cL):  # below the curve: say how far arm A went (the cap), which more runs could not pass
                eff["reason"] += (f" (arm A's curve without seed {r['seed']} runs to D = {max(cD):,.0f}, where its "
                                  f"stable phase stopped at {p.reference_cap:g} x the budget of {budget:,} targets; "
                                  "no later point is lower)")
            refusals[r["name"]] = eff["reason"]
        points[r["arm"]][r["seed"]] = eff["points"]
        records.append(run_record(r, D, sel, ctrl, dec_t, dec_u, eff, shard_of, budget))
    ad = adoption(points, refusals)
    ad = {**ad, "b_minus_a": {str(k): v for k, v in ad["b_minus_a"].items()},
          "b_minus_c": {str(k): v for k, v in ad["b_minus_c"].items()}}
    raw_D = [x for c in per_seed.values() for x in c["D"]]
    raw_L = [y for c in per_seed.values() for y in c["L"]]
    d_budget = next(rec["trained_targets"] for rec in records if rec["arm"] == "A")
    axis = per_axis({int(s): c for s, c in loo.items()}, raw_D, raw_L, d_budget,
                    {(rec["arm"], rec["seed"]): (rec["trained_targets"], rec["final_selection"]["mean"])
                     for rec in records})
    table = concat_decisions(out, [r for r in runs if r["arm"] == "B"])
    axis_pl = polish_axis(validation_texts(world))
    measured = ad["intervals"].get("B-A", {}).get("sd")
    fr = calib
    pl = plan(res.preset, p)  # the model as trained: the corpus's vocabulary sizes its embedding, head and FLOPs
    return {
        "schema": VERSION, "preset": res.preset, "plan": pl, "setting": p.to_dict(),
        "calibration": {"source": pool["calibration_source"], "sigma": calib["sigma"], "k": calib["k"],
                        "recovery": recovery_text(calib), "false_rejection": {
                            "rate kind": rate_kind(fr),
                            "rate": f"{calib['false_rejections']}/{calib['transitions']}",
                            "one-sided 95% upper bound": round(calib["upper95"], 4), "target": "below 5%",
                            "choice": fr.get("choice"), "held_out_on_branch": fr.get("held_out_on_branch", False),
                            "checkpoints_per_shard": fr.get("checkpoints_per_shard", 1)},
                        "warmup_updates": calib.get("warmup_updates", 0),
                        "curves": res.curves, "curve_targets": res.curve_targets, "curve_thresholds": THRESHOLDS,
                        "curve_variant": {"requested": res.curve_requested, "used": res.use_curve,
                                          "reason": res.curve_reason},
                        "folder": str(res.calibration_dir)},
        "selection": {"domains": sorted(world.sets["selection"]), "loss": "mean BPB over the selection domains",
                      "non_english_axis": {"present": axis_pl["present"], "text": axis_pl["text"]}},
        "efficiency_definition": DEFINITION,
        "axis_definition": AXIS_DEFINITION,
        "reference_curve": {"D": refD, "L": refL, "per_seed": per_seed, "cap": p.reference_cap,
                            "fractions": reference_fractions(p),
                            "leave_one_out": {s: {"D": d, "L": v} for s, (d, v) in loo.items()},
                            "coverage": coverage(refL, finals), "coverage_by_seed": {
                                s: coverage(v, {r["name"]: finals[r["name"]] for r in runs if str(r["seed"]) == s})
                                for s, (_, v) in loo.items()}},
        "runs": records, "budget_check": bc, "adoption": ad, "per_axis": axis,
        "seeds": {"used": len(res.seeds), "list": res.seeds, "planned": res.power["seeds_needed"],
                  "preset_max": p.max_seeds, "preset_seeds": list(p.seeds),
                  "expected_width_points": None if res.power["sigma_diff_points"] is None else
                  interval_width(res.power["sigma_diff_points"], len(res.seeds)),
                  "from_measured_spread": None if measured is None else seeds_needed(measured, FLOOR_POINTS)},
        "power": res.power,
        "arm_c": arm_c_match(runs, res.c_plans),
        "compute": compute_per_arm(run_costs(out, runs, budget)),
        "answers": answers(out, runs, pool, calib),
        "seed_effects": SEED_EFFECTS,
        "schedule": SCHEDULE_TEXT.format(U=U, W=calib.get("warmup_updates", 0)),
        "decisions_table": table,
        "limits": limits_text(res.preset, p, pl["parameters"]),
        "earlier_attempts": earlier_attempts(out),
        "provenance": {**json.loads((out / "provenance.json").read_text()), "report_built": provenance.study()},
    }


def run_record(r, D, sel, ctrl, dec_t, dec_u, eff, shard_of, budget):
    """One run's entry in summary.json's `runs`."""
    acc = r["accounting"]
    wasted_s = sum(v for k, v in acc["train_seconds"].items() if k.startswith("wasted"))
    return {
        "arm": r["arm"], "seed": r["seed"], "name": r["name"], "trained_targets": int(D),
        "final_selection": {"mean": mean(sel), **sel}, "final_control": ctrl, "efficiency": eff,
        "decay": {"updates": dec_u, "targets": dec_t, "shards": decay_shards_of(r, budget)},
        "decisions": acc["decisions"], "rejected": [
            {**x, "sources": shard_of.get(x["shard"], {}).get("sources", x["sources"])} for x in acc["rejected"]],
        "compute": {"accepted_updates": acc["accepted_updates"], "wasted_updates": acc["wasted_updates"],
                    "screen_passes": acc["screen_passes"],
                    "reference_branch_updates": r["branch_updates"],
                    "wall_s": {"total": r["wall_s"], "training_accepted": acc["train_seconds"]["accepted"],
                               "wasted": wasted_s, "reference_branches": r["branch_seconds"],
                               "other": max(0.0, r["wall_s"] - acc["train_seconds"]["accepted"] - wasted_s
                                            - r["branch_seconds"])}},
        "control_trace": r["control_trace"] if r["arm"] == "B" else [],
    }


SCHEDULE_TEXT = (
    "Warmup-stable-decay as the proposal asks: the LR rises linearly over stage A's warm-up shards ({W} updates), is "
    "constant through the rest of stage A and the whole queue, and falls linearly to 0 over the final decay of {U} "
    "updates, the same length in every arm, on shards the arm's own policy accepted inside its queue (arm A: the "
    "next shards of its plain order). Weight decay is constant throughout (Muon multiplies it by the LR, so it still "
    "vanishes with the LR in the decay).")


def decay_shards_of(r, budget):
    if r["arm"] == "A":
        return next(b.get("decay_shards", []) for b in r["branches"] if b["threshold"] == budget)
    return r["accounting"].get("decay_shards", [])


def share_start_state(out, seed, calib_seed):
    """Another seed's start state is the same for all arms: train it once (arm B) and give the others a copy."""
    if seed == calib_seed:
        return

    src, key = out / "start_states" / f"s{seed}.pt", out / "start_states" / f"s{seed}.json"
    if src.exists() and key.exists():
        for arm in ("A", "C"):
            dst = out / f"{arm}_s{seed}"
            if not (dst / "start_state.pt").exists():  # a stale or half-copied state is keyed and hashed on use
                dst.mkdir(parents=True, exist_ok=True)
                copy_start_state(src, key, dst)


def concat_decisions(out, runs):
    """The decision datasets of the B runs in one table (arm and seed columns first).

    Each run's own decisions.parquet is used when the queue wrote one; otherwise the rows
    are built from its decision log by accounting.decision_rows.
    """
    tables = []
    for r in runs:
        f = out / r["name"] / "decisions.parquet"
        if f.exists():
            t = pq.read_table(f)
        else:
            t = pa.Table.from_pylist(decision_rows(read_log(out / r["name"] / "decisions.jsonl", log=lambda s: None)))
        t = t.add_column(0, "seed", pa.array([r["seed"]] * t.num_rows, pa.int64()))
        t = t.add_column(0, "arm", pa.array([r["arm"]] * t.num_rows, pa.string()))
        tables.append(t)
    t = pa.concat_tables(tables, promote_options="permissive")
    pq.write_table(t, out / "decisions_B.parquet")
    flat = t.select([c for c in t.column_names if not pa.types.is_nested(t.schema.field(c).type)])
    pcsv.write_csv(flat, out / "decisions_B.csv")
    return {"rows": t.num_rows, "parquet": "decisions_B.parquet", "csv": "decisions_B.csv"}


def validation_texts(world):
    return pq.read_table(world.lay.raw / world.rec["val_shard"], columns=["text"]).column("text").to_pylist()


def recovery_text(calib):
    return (f"a flagged shard is followed by one recovery shard; it recovers when each flagged domain's rise over the "
            f"reference falls below frac x k x sigma_d with frac = {calib.get('frac')} (chosen from the pre-written "
            f"grid on transitions that did not set sigma_d)")


def limits_text(preset, p, n_params):
    model = f"a {n_params / 1e6:.1f}M-parameter model"
    if preset == "tiny":
        return (f"Tiny setting: {model}, shards of "
                f"{p.shard_targets:,}+ targets, a stable budget of {p.budget_shards} shards of the pool's mean size, "
                f"{p.harmful_shards} harmful shards (the queue's corrupted source) in the pool, control and selection "
                "windows of 128 tokens, the proposal's two seeds. What it measures: that every path of the study runs "
                "and is accounted for (calibration, the seed plan, three arms, rollback, random rejection matched to "
                "B's count, decay branches, leave-one-out efficiency points, the rule, the paired intervals, compute "
                "per arm). What it cannot measure: whether the queue helps. Shard-to-shard noise is large against the "
                "differences a handful of shards can make; at two seeds the t interval has one degree of freedom "
                "(12.7 standard errors either side), so unless the rule itself is met the verdict is almost always "
                "\"unresolved\", or \"not measurable\" when one seed's losses lie outside the other seed's curve "
                "(each seed is measured on the other's alone, and a seed's initialisation can shift its whole curve "
                "by more than arm A gains up to its cap); the per-axis gaps and their interval are given wherever arm A's "
                "selection loss falls clearly with D (else the verdict says why not), "
                "and the seed plan above says how many seeds the question would need; the harmful "
                "shards are an easy, planted case. The verdict is the rule applied to these numbers, not evidence "
                "about the 64M proxy.")
    if preset in ("small", "planned"):
        seeds = ("two seeds (the proposal's setting)" if not p.max_seeds else
                 f"the seeds planned from stage A's noise, at most {p.max_seeds}")
        return (f"Small CPU setting: {model} (the tiny setting's shape), shards of "
                f"{p.shard_targets:,}+ targets, a stable budget of {p.budget_shards} shards, a pool with "
                f"{p.damaged_shards} shards of realistic damage at natural doses and {p.harmful_shards} cipher "
                f"shards, control and selection windows of 128 tokens, {seeds}. The verdict holds for this setting "
                "only: a model this small learns little beyond token statistics in a few hundred updates, so damage "
                "that keeps the statistics (line order, truncation) may not show in its losses at all; whether the "
                "queue helps a 64M model is the proxy's question.")
    return ("The 64M proxy setting of the proposal on ClimbMix. The verdict holds for this setting only "
            "(model size, training stage, pool, control and selection domains).")
