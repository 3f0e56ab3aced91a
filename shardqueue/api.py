"""The shard queue's programmatic API (the proposal "Can a model help choose its next training data?").

calibrate()              stage A: freeze the pool, train warm-up and sigma shards of one homogeneous
                         source, choose k and the recovery fraction on transitions held out of sigma
run()                    one queue run (policy queue, plain or random) to the end: rotations, decay, scores
return_from_quarantine() one return of an inspected, cause-free shard to the next rotation
score(), score_checkpoint()  official, control and selection BPB of a model or a queue checkpoint
describe_calibration(), describe_run()  the one-line results the command line and the main job print

Every function returns plain JSON-able dicts and writes its JSON files; nothing reads argv.
The command line over this API is queue/run_queue.py.
"""
import json
import os
import shutil
import sys
import time
from pathlib import Path

import torch

from console.progress import bar as progress_bar
from corpus.atomic import atomic_write_bytes, atomic_write_json, sha256_file
from corpus.errors import DataError
from corpus.layout import Layout, default_data_dir
from eval.official import row_statistics, scores
from shardqueue.checks.report import screen_agreement, write_report
from shardqueue.engine.log import DecisionLog, read_log, record_sha256, verify_chain
from shardqueue.engine.packing import shard_rows, shard_tokens, update_batches
from shardqueue.engine.runner import QueueRunner, train_rows
from shardqueue.engine.schedule import warmup
from shardqueue.engine.start_record import settings_differences
from shardqueue.engine.state import apply
from shardqueue.policy.rule import FRAC_GRID, K_GRID, TARGET, rate_kind
from shardqueue.policy.rule import calibrate as calibrate_rule
from shardqueue.settings import QueueSettings
from shardqueue.world import sources
from shardqueue.world.damaged_pool import reopen
from shardqueue.world.domains import measure
from shardqueue.world.harmful import with_harmful_copies
from shardqueue.world.pool import World, build_pool
from shardqueue.world.rotation import load_rotation, save_rotation, shard_docs
from training.checkpoint import checkpoint_bytes, data_identity, load_checkpoint, newest_good_checkpoint, save_checkpoint
from training.config import config_sha256, resolve_config
from training.resume import remove_torn_writes, restore_trainer_state, trainer_state
from training.trainer import Trainer, build_model

RUN_FILES = ("decisions.jsonl", "decisions.jsonl.torn", "ckpt_*", "rotation_v*", "final.*", "report.md",
             "decisions.parquet", "decisions.csv", "queue_summary.json", "control_curves.png", "inspection",
             "start_state.pt", "start_state.json", "added_sources.json*", "reexecution.json")

def candidates_for_budget(budget_targets, shard_tokens, spare=3):
    """Candidate pool shards for a run whose budget is `budget_targets` accepted targets.

    A shard holds at least shard_tokens tokens, so ceil(budget / shard_tokens) accepted shards
    reach the budget; `spare` more cover the ordinary shards a run may lose to quarantine (two
    false rejections each, at a calibrated rate under 5%) or leave deferred at its end. Recovery
    shards come from the calibration source's reserve, not from the candidates. Planted
    (harmful, prose) and late shards come on top of the candidates.
    """
    return -(-int(budget_targets) // int(shard_tokens)) + spare


class one_thread:
    """The queue's matrices are tiny: with two intra-op threads, Muon's small bf16 matmuls spend
    ~100x longer synchronising than computing (measured: 119 ms vs 0.9 ms CPU per call). Run
    queue work single-threaded and restore the caller's setting afterwards."""

    def __enter__(self):
        self.n = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc):
        torch.set_num_threads(self.n)


def load_config(config=None, overrides=()):
    for ov in overrides:
        if "=" not in ov:
            raise DataError(f"override {ov!r} is not of the form key=value")
    return resolve_config(config, list(overrides))


def score(model, world, cfg=None, fixed_rows=None):
    """{"official": BPB, "control": {domain: BPB}, "selection": {domain: BPB}} of a model (a forward:
    a compiled one with fixed_rows, measure's one shape)."""
    cfg = cfg or world.cfg
    stats = row_statistics(model, world.val, world.token_bytes, cfg.eval_batches, cfg.eval_rows, cfg.row_capacity,
                              world.device)
    return {"official": scores(stats)["bpb"],
            "control": measure(model, world.sets["control"], world.token_bytes, world.device, fixed_rows=fixed_rows),
            "selection": measure(model, world.sets["selection"], world.token_bytes, world.device,
                                 fixed_rows=fixed_rows)}


def final_score(runner, world, cfg):
    """The score a run's final decay records: through the forward that trained (compiled where it is),
    at its one shape (run(), and reconstruct --execute, which must score as the run did)."""
    tr = runner.trainer
    return lambda model: score(tr.scoring_forward(model), world, cfg, tr.fixed_rows)


def score_checkpoint(path, calibration_dir, device="cpu"):
    """score() of a queue checkpoint file (ckpt_*.pt, final.pt or calibrated_state.pt)."""
    cfg, world, _, calib = open_calibration(calibration_dir, device)
    path = Path(path)
    if path.name == "calibrated_state.pt":
        p = _read_state(path, calib["state_sha256"])
    else:
        p = load_checkpoint(path)
    model = build_model(cfg, device)
    model.load_state_dict(p["trainer"]["model"])
    return score(model, world, cfg)


def _write_state(path, payload):
    atomic_write_bytes(path, checkpoint_bytes(payload))
    return sha256_file(path)


def _read_state(path, want_sha):
    if not Path(path).exists():
        raise DataError(f"{path}: not found")
    if sha256_file(path) != want_sha:
        raise DataError(f"{path}: SHA256 does not match its record (changed or truncated)")
    try:  # plain tensors and values only: loading runs no code
        return torch.load(path, weights_only=True)
    except Exception as e:
        raise DataError(f"{path}: cannot be read as plain tensors and values ({type(e).__name__}); "
                        f"refused without running it") from None


START_KEY = "start_state.json"


def start_state_key(cfg, calib, seed) -> dict:
    """What a cached start state depends on: the seed, the config, the calibration's pool and the corpus."""
    lay = Layout(cfg.data_dir or default_data_dir(), cfg.source)
    return {"seed": int(seed), "config_sha256": config_sha256({**cfg.to_dict(), "seed": int(seed)}),
            "pool_sha256": calib["pool_sha256"], "calibrated_state_sha256": calib.get("state_sha256"),
            "corpus": data_identity(lay)}


def cached_start_state(folder, key):
    """The start state cached in folder, if its record names this key and its SHA256 matches; else None."""
    folder = Path(folder)
    try:
        rec = json.loads((folder / START_KEY).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("key") != key or not (folder / "start_state.pt").exists():
        return None
    try:
        return _read_state(folder / "start_state.pt", rec.get("sha256"))
    except DataError:
        return None


def copy_start_state(src_state, src_key, dst_dir):
    """Copy a cached start state and its key record into dst_dir, each atomically, the record last."""
    dst_dir = Path(dst_dir)
    (dst_dir / START_KEY).unlink(missing_ok=True)  # no record describes a half-copied state
    atomic_write_bytes(dst_dir / "start_state.pt", Path(src_state).read_bytes())
    atomic_write_bytes(dst_dir / START_KEY, Path(src_key).read_bytes())


def _calibrate(out, config=None, overrides=(), settings=None, device="cpu", log=print, fresh=False):
    """Stage A; writes config.json, pool.json, calibration_plan.json, calibration.json and
    calibrated_state.pt into `out`. Returns the calibration record (rec["ok"] False: failed)."""
    s = QueueSettings.of(settings)
    out = Path(out)
    if (out / "calibration.json").exists() or (out / "decisions.jsonl").exists():
        if not fresh:
            raise DataError(f"{out}: holds an earlier calibration or run; use another folder or --fresh "
                            f"(moves the old contents aside)")
        move_aside(out, None)
    cfg = load_config(config, overrides)
    world = World(cfg, device, s.per_domain, domains=s.domains)
    n_cal = s.warmup_shards + s.sigma_shards + s.held_out_shards + 1
    pool = build_pool(world, s.shard_tokens, s.pool_seed, n_cal, s.candidates, s.decay_shards, s.harmful_shards,
                      s.prose_shards, n_late=s.late_shards, n_damaged=s.damaged_shards, n_reserve=s.reserve_shards)
    atomic_write_json(out / "config.json", cfg.to_dict())
    save_rotation(out / "pool.json", pool)
    plan = {"k_grid": list(K_GRID), "frac_grid": list(FRAC_GRID), "target": TARGET, "settings": s.to_dict(),
            "rule": "first grid point (k ascending, then frac as listed) with a false-rejection rate < target "
                    "on the choosing transitions (held out of the sigma estimate)",
            "recalibration": "none during a run (no schedule is set); a new calibration is a new folder",
            "calibration_source": pool["calibration_source"], "shards": pool["calibration"],
            "reserve": pool["reserve"]}
    atomic_write_json(out / "calibration_plan.json", plan)
    shards = {x["id"]: x for x in pool["shards"]}
    trainer = Trainer(cfg, device)
    warm, ns = s.warmup_shards, s.sigma_shards

    def rows(sid):
        return shard_rows(shard_tokens(world.stream, shard_docs(shards[sid])), cfg.context, world.bos)

    def ctrl():  # as the queue runner measures: the trainer's forward, one shape
        return measure(trainer.eval_fwd, world.sets["control"], world.token_bytes, device, trainer.autocast,
                       trainer.fixed_rows)

    # warmup-stable-decay: the LR rises over the warm-up shards' updates (schedule.py)
    warm_updates = sum(len(update_batches(*rows(sid), cfg.micro_rows, cfg.accum)) for sid in pool["calibration"][:warm])
    step, targets, states = 0, 0, []
    bar = progress_bar(pool["calibration"], desc="calibration shards", unit="shard", file=sys.stderr)
    shared = warm + ns  # warm-up and sigma shards: the training every arm starts from
    branch = None
    m = s.checkpoints_per_shard
    for j, sid in enumerate(bar):
        if j == warm:
            states.append(ctrl())
        if j == shared and s.held_out_branch:
            # held-out transitions on a branch that is then discarded: they calibrate the rule without
            # adding to the shared training (restored bitwise below)
            branch = {**trainer_state(trainer, copied=True), "step": step, "targets": targets}
        x, y = rows(sid)
        # sub-shard checkpoints (held-out shards only): m states per shard, each a measured transition
        per = cfg.micro_rows * cfg.accum
        n_up = -(-len(x) // per)
        cuts = [0] + [per * round(n_up * (c + 1) / m) for c in range(m)] if j >= shared else [0, len(x)]
        for a, b in zip(cuts, cuts[1:]):
            if b <= a:
                continue
            loss, n, t = train_rows(trainer, x[a:b], y[a:b], step, cfg.updates, cfg.micro_rows, cfg.accum,
                                    warmup(step, warm_updates))
            step, targets = step + n, targets + t
            if j >= warm:
                states.append(ctrl())
        if j >= warm:
            bar.set_postfix(loss=f"{loss:.3f}")
    held = states[ns:]
    c = s.choose_transitions
    if c:
        if len(held) < c + 4:
            raise DataError(f"{len(held) - 2} held-out transitions cannot give {c} to choose k and frac and some to report")
        rec = calibrate_rule(states[: ns + 1], held[: c + 2], held[c + 1:])
    else:
        rec = calibrate_rule(states[: ns + 1], held)
    if branch is not None:
        restore_trainer_state(trainer, branch)
        step, targets = branch["step"], branch["targets"]
    ref = states[ns] if branch is not None else states[-1]
    sha = _write_state(out / "calibrated_state.pt", {**trainer_state(trainer), "step": step, "targets": targets,
                                                    "ref": ref})
    rec.update({"plan": plan, "states": states, "seed": cfg.seed, "step": step, "targets": targets,
                "state_sha256": sha, "pool_sha256": load_rotation(out / "pool.json")["_sha256"],
                "warmup_updates": warm_updates, "shared_shards": pool["calibration"][:shared] if branch is not None
                else pool["calibration"], "held_out_on_branch": branch is not None, "checkpoints_per_shard": m,
                "sigma_shards": pool["calibration"][warm: shared],
                "held_out_shards": pool["calibration"][shared:]})
    atomic_write_json(out / "calibration.json", rec)
    return rec


def check_calibrated(calibration_dir) -> dict:
    """The record of a calibration folder's successful calibration (cheap: a command checks it before it makes
    or locks its own folder)."""
    p = Path(calibration_dir) / "calibration.json"
    if not p.exists():
        raise DataError(f"{p}: not found; run `calibrate` first (the rule is fixed before the queue runs)")
    try:
        calib = json.loads(p.read_text())
    except (ValueError, UnicodeDecodeError):
        raise DataError(f"{p}: not valid JSON") from None
    if not isinstance(calib, dict) or not calib.get("ok"):
        reason = calib.get("reason") if isinstance(calib, dict) else f"a {type(calib).__name__}, not a record"
        raise DataError(f"{p}: the calibration failed ({reason})")
    return calib


def open_calibration(calibration_dir, device="cpu"):
    """(cfg, world, pool, calibration record) of a calibration folder, verified."""
    d = Path(calibration_dir)
    calib = check_calibrated(d)
    cfg_d = json.loads((d / "config.json").read_text())
    cfg = resolve_config(None, [f"{k}={v}" for k, v in cfg_d.items()])
    pool = load_rotation(d / "pool.json")
    if pool["_sha256"] != calib["pool_sha256"]:
        raise DataError(f"{d / 'pool.json'}: not the pool this calibration was made on")
    settings = QueueSettings.of(calib["plan"]["settings"])
    world = World(cfg, device, settings.per_domain, domains=settings.domains)
    world.stream, world.labels_all, copies = with_harmful_copies(world.train, world.labels,
                                                                  pool["harmful"]["source_documents"], pool["seed"] + 7,
                                                                  cfg.vocab)
    if copies != pool["harmful"]["copies"]:
        raise DataError(f"{d / 'pool.json'}: the harmful source does not rebuild identically")
    reopen(world, pool)
    return cfg, world, pool, calib


def start_state(cfg, world, pool, calib, calibration_dir, seed, out):
    """The state the queue starts from: the calibrated one for the calibration seed; for another
    seed, a model initialised with that seed and trained on the same calibration shards."""
    if seed == calib["seed"]:
        return _read_state(Path(calibration_dir) / "calibrated_state.pt", calib["state_sha256"])
    key = start_state_key(cfg, calib, seed)
    cached = cached_start_state(out, key)
    if cached is not None:
        return cached
    cfg2 = type(cfg)(**{**cfg.to_dict(), "seed": seed})
    trainer = Trainer(cfg2, world.device)
    shards = {x["id"]: x for x in pool["shards"]}
    step, targets = 0, 0
    for sid in calib.get("shared_shards", pool["calibration"]):
        x, y = shard_rows(shard_tokens(world.stream, shard_docs(shards[sid])), cfg.context, world.bos)
        _, n, t = train_rows(trainer, x, y, step, cfg.updates, cfg.micro_rows, cfg.accum,
                             warmup(step, calib.get("warmup_updates", 0)))
        step, targets = step + n, targets + t
    st = {**trainer_state(trainer), "step": step, "targets": targets}
    (Path(out) / START_KEY).unlink(missing_ok=True)
    sha = _write_state(Path(out) / "start_state.pt", st)
    atomic_write_json(Path(out) / START_KEY, {"key": key, "sha256": sha})
    return st


def relative_dir(folder, out):
    """A folder as the run records it: relative to the run folder, so a copied run checks itself."""
    return os.path.relpath(Path(folder).resolve(), Path(out).resolve())


def corpus_identity(cfg):
    return data_identity(Layout(cfg.data_dir or default_data_dir(), cfg.source))


# what --resume must find unchanged in the start record (record keys; the runner's attribute where it differs)
START_FIELDS = ("seed", "policy", "reject_rate", "budget_targets", "rotation_shards", "branch_check")
RUNNER_ATTRIBUTE = {"budget_targets": "budget", "branch_check": "branch"}


def check_start_record(start, runner, log_path):
    """Resume refuses any difference from the run's start record: seed, policy, rate, budget,
    rotation length, branch check, calibration, pool, corpus, and each key of the calibration
    folder's config.json and calibration.json (named)."""
    now = {k: getattr(runner, RUNNER_ATTRIBUTE.get(k, k)) for k in START_FIELDS}
    now["calibration"] = {k: runner.calib.get(k) for k in ("k", "frac", "sigma")}
    now["pool_sha256"] = runner.pool["_sha256"]
    now["corpus"] = runner.corpus
    diff = [k for k in now if start.get(k) != now[k]] + settings_differences(start, runner.cfg, runner.calib)
    if diff:
        raise DataError(f"{log_path}: the run started with another {', '.join(diff)}; refusing to resume "
                        f"(resume with the start record's settings, or start a new run)")


def check_finished_log(out, recs):
    """A log ending in "done" is complete only if the newest checkpoint holds that very record."""
    path, p = newest_good_checkpoint(out, log=lambda s: None)
    if p is not None and p.get("run_id") != recs[0].get("run_id"):
        raise DataError(f"{path}: belongs to run {p.get('run_id')}, but decisions.jsonl is run {recs[0].get('run_id')}")
    if p is None or p.get("log_seq") != len(recs) or (p.get("records") or [{}])[-1] != recs[-1]:
        raise DataError(f"{out / 'decisions.jsonl'}: ends in 'done' but the newest checkpoint does not hold it; "
                        f"the log and the checkpoint do not belong together")


def move_aside(out, keep):
    """Move a previous run's files into out/previous/<time>/ (never delete them)."""
    out = Path(out)
    dest = out / "previous" / time.strftime("%Y%m%dT%H%M%S")
    names = RUN_FILES if keep == "calibration" else ("*",)
    moved = []
    for pat in names:
        for p in sorted(out.glob(pat)):
            if p.name in ("previous", ".lock"):
                continue
            dest.mkdir(parents=True, exist_ok=True)
            shutil.move(str(p), str(dest / p.name))
            moved.append(p.name)
    return dest, moved


def _run(out, calibration_dir=None, policy="queue", seed=None, reject_rate=0.0, budget_targets=None,
        rotation_shards=6, branch_check=True, resume=False, fresh=False, device="cpu", log=print, report=True,
        runner_cls=None, add_sources=()):
    """One queue run (any policy) to the end, decay and scores included; returns the summary dict
    (also written to out/queue_summary.json). The same calibration folder gives every arm the same
    pool, control/selection sets, decay shards and (for the same seed) start state. runner_cls: a
    QueueRunner subclass (the study's arm variants); default QueueRunner."""
    out = Path(out)
    calibration_dir = Path(calibration_dir or out)
    log_path = out / "decisions.jsonl"
    if resume and not log_path.exists():
        raise DataError(f"{log_path}: nothing to resume")
    if not resume and (log_path.exists() or list(out.glob("ckpt_*.pt"))):
        if not fresh:
            raise DataError(f"{out}: holds an earlier run (decisions.jsonl); use --resume, another folder, or --fresh "
                            f"(moves the old run aside)")
        dest, moved = move_aside(out, "calibration")
        log(f"moved the earlier run ({len(moved)} files) to {dest}")
    cfg, world, pool, calib = open_calibration(calibration_dir, device)
    # new sources (add_sources: NAME=PATH) enter at the next rotation boundary; earlier ones are rebuilt
    nxt = 1
    if resume and add_sources:
        recs = read_log(log_path, log=lambda s: None)
        if any(r["event"] == "done" for r in recs):
            raise DataError(f"{out}: this run has finished; a new source can only enter a queue that is still running")
        nxt = recs[-1]["queue"]["rotation"] + 1
    pool = sources.prepare(out, world, pool, add_sources, nxt, log)
    seed = calib["seed"] if seed is None else seed
    cfg = type(cfg)(**{**cfg.to_dict(), "seed": seed})
    if budget_targets is None:
        budget_targets = int(0.6 * sum(s["tokens"] for s in pool["shards"] if s["id"] in pool["order"]))
    runner = (runner_cls or QueueRunner)(cfg, world, pool, calib, out, policy, seed, reject_rate, rotation_shards,
                                         budget_targets, branch_check, log=log,
                                         calibration_dir=relative_dir(calibration_dir, out), corpus=corpus_identity(cfg))
    remove_torn_writes(out, log)
    if resume:
        recs = read_log(log_path, log=lambda s: None)
        check_start_record(recs[0], runner, log_path)
        if recs[-1]["event"] == "done":
            check_finished_log(out, recs)
            verify_chain(recs, log_path)
            if (out / "queue_summary.json").exists():
                log(f"{out}: this run has finished; nothing to resume")
                return json.loads((out / "queue_summary.json").read_text())
            # killed after "done" but before its summary: the summary is written from the log, nothing reruns
        else:
            runner.run(resume=True)
    else:
        runner.start_from(start_state(cfg, world, pool, calib, calibration_dir, seed, out))
        runner.run()
    recs = read_log(log_path, log=lambda s: None)
    if not any(r["event"] == "done" for r in recs):
        runner.decay(final_score(runner, world, cfg))
        recs = read_log(log_path, log=lambda s: None)
    summary = summarize(recs, calib, pool, out)
    atomic_write_json(out / "queue_summary.json", summary)
    if report:
        write_report(out, recs, calib, pool, summary)
    return summary


def calibrate(*args, **kw):
    """Stage A; writes config.json, pool.json, calibration_plan.json, calibration.json and
    calibrated_state.pt into `out`. Returns the calibration record (rec["ok"] False: failed).
    Arguments: (out, config=None, overrides=(), settings=None, device="cpu", log=print, fresh=False)."""
    with one_thread():
        return _calibrate(*args, **kw)


def run(*args, **kw):
    """One queue run to the end (see _run for the arguments); returns the summary dict."""
    with one_thread():
        return _run(*args, **kw)


def summarize(recs, calib, pool, out):
    st = recs[-1]["queue"]
    decay = [r for r in recs if r["event"] == "decay"]
    trains = [r for r in recs if r["event"] == "train"]
    shards = {s["id"]: s for s in pool["shards"]}
    acc_targets = sum(r["targets"] for r in trains if r["shard"] in st["accepted"] and r["role"] != "branch")
    start = recs[0]
    return {"policy": start["policy"], "seed": start["seed"], "reject_rate": start["reject_rate"],
            "run_id": start["run_id"], "accepted": st["accepted"], "quarantined": st["quarantined"],
            "deferred_pending": deferred_pending(recs), "undecided": st["undecided"], "rejections": st["rejections"],
            "returns": st["returns"], "rotations": st["rotation"],
            "accepted_tokens": sum(shards[s]["tokens"] for s in st["accepted"]),
            "spent": recs[-1].get("spent") or {}, "final": decay[-1]["scores"] if decay else None,
            "start_losses": start["losses"], "calibration": {k: calib.get(k) for k in ("k", "frac", "sigma")},
            "curve": [{"shard": r["shard"], "role": r["role"], "history_targets": r["history_targets"],
                       "spent_targets": r["spent_targets"], "losses": r["losses"]} for r in trains],
            "screen": screen_agreement(recs), "accepted_records_targets": acc_targets,
            "harmful_accepted": [s for s in st["accepted"] if shards[s]["sources"].get(pool["harmful"]["label"])
                                 and not st["returns"].get(s)]}


def deferred_pending(recs):
    """Every shard sent to a later rotation (deferred, returned by the branch check or from quarantine)
    and not decided since, in queue order: those of the rotation the run stopped in, then those
    waiting for the next one."""
    st = recs[-1]["queue"]
    sent = {r["shard"] for r in recs if r["event"] == "return"
            or (r["event"] == "reject" and r["outcome"] in ("deferred", "returned"))}
    return [s for s in st["pending"] + st["next_rotation"] if s in sent]


def return_from_quarantine(out, shard, log=print):
    """One return of a quarantined shard to the next rotation; needs its inspection with no cause found."""
    out = Path(out)
    if not shard:
        raise DataError("give the shard id to return")
    recs = read_log(out / "decisions.jsonl", repair=True, log=log)
    verify_chain(recs, out / "decisions.jsonl")
    run_id = recs[0]["run_id"]
    insp = [r for r in recs if r["event"] == "inspect" and r.get("shard") == shard]
    st = recs[-1]["queue"]
    if shard not in st["quarantined"]:
        raise DataError(f"{shard} is not in quarantine (quarantined: {', '.join(st['quarantined']) or 'none'})")
    if st["returns"].get(shard, 0) >= 1:
        raise DataError(f"{shard} has already returned from quarantine once")
    if not insp or not (out / "inspection" / f"{shard}.json").exists():
        raise DataError(f"{shard}: no inspection report (inspection/{shard}.json); a return needs one")
    found = json.loads((out / "inspection" / f"{shard}.json").read_text())
    if found.get("cause_found"):
        raise DataError(f"{shard}: its inspection found a cause ({'; '.join(found['causes'])}); it stays in quarantine")
    ckpts = sorted(out.glob("ckpt_*.pt"))
    if not ckpts:
        raise DataError(f"{out}: no queue checkpoint")
    payload = load_checkpoint(ckpts[-1])
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


def describe_calibration(rec):
    """The one line `calibrate` prints on success."""
    return (f"calibrated: k={rec['k']} frac={rec['frac']} {rate_kind(rec)} false rejections "
            f"{rec['false_rejections']}/{rec['transitions']} (95% upper bound {rec['upper95']:.3f}); "
            f"sigma {', '.join(f'{d}={v:.4f}' for d, v in rec['sigma'].items())}")


def describe_run(summary, out):
    """The line `run` prints, and the error line (or None) when the queue policy ended with a
    harmful shard accepted (the plain and random arms accept harm by design)."""
    line = (f"accepted {len(summary['accepted'])} shards ({summary['accepted_tokens']} targets), quarantined "
            f"{summary['quarantined']}, rejections {summary['rejections']}; report: {Path(out) / 'report.md'}")
    err = None
    if summary["harmful_accepted"] and summary["policy"] == "queue":
        err = f"harmful shard(s) {summary['harmful_accepted']} ended accepted without a return"
    return line, err
