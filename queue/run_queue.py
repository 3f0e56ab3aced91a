#!/usr/bin/env python3
"""The rollback shard queue of the proposal "Can a model help choose its next training data?".

  python queue/run_queue.py calibrate --config CFG.json [--set key=value ...] --out runs/queue
  python queue/run_queue.py run --out runs/queue [--policy queue|plain|random] [--resume | --fresh]
  python queue/run_queue.py dose --out runs/queue_dose --calibration runs/queue
  python queue/run_queue.py return SHARD --out runs/queue    # one return from quarantine (needs an inspection)
  python queue/run_queue.py reconstruct --out runs/queue     # replay the log and check every record

`calibrate` (stage A) freezes the pool (pool.json + .sha256: calibration, candidate,
decay and harmful shards with their SHA256s and source mix, the control/selection set
hashes and their 13-gram overlap with the pool), trains warm-up shards of one homogeneous
source, estimates sigma_d on ten more, and chooses k and the recovery fraction from a
grid written down first (calibration_plan.json) on held-out transitions; it fails when
no grid point keeps the held-out false-rejection rate below 5%.
`run` works through rotations of the pool from the calibrated state at a constant
learning rate: every shard is screened (forward only), trained once whole, measured on
the control domains and decided; a flagged shard is judged after one recovery shard;
an unrecovered one is rolled back bitwise, deferred to the next rotation (its own
manifest), quarantined on a second rejection and inspected. At the end a linear decay to
LR 0 runs on reserved fresh pool shards and the final model is scored (official metric,
control and selection domains). Then report.md, decisions.parquet/.csv and a figure.
Config overrides are given as `--set key=value` (never as bare words).
"""
import argparse
import io
import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(1, str(HERE))

import torch  # noqa: E402

from control_domains import measure  # noqa: E402
from decision_log import read_log  # noqa: E402
from queue_runner import POLICIES, QueueRunner, train_rows  # noqa: E402
from queue_world import World, build_pool  # noqa: E402
from rejection_rule import FRAC_GRID, K_GRID, TARGET, calibrate as calibrate_rule  # noqa: E402
from shard_packing import shard_rows, shard_tokens  # noqa: E402
from shard_rotation import load_rotation, save_rotation, shard_docs  # noqa: E402

from corpus.atomic import atomic_write_bytes, atomic_write_json, sha256_file  # noqa: E402
from corpus.errors import DataError  # noqa: E402

RUN_FILES = ("decisions.jsonl", "decisions.jsonl.torn", "ckpt_*", "rotation_v*", "final.*", "report.md",
             "decisions.parquet", "decisions.csv", "queue_summary.json", "control_curves.png", "inspection",
             "start_state.pt")

DEFAULTS = {"shard_tokens": 1500, "warmup_shards": 6, "sigma_shards": 10, "held_out_shards": 12, "candidates": 14,
            "decay_shards": 2, "harmful_shards": 1, "prose_shards": 1, "late_shards": 0, "per_domain": 12, "pool_seed": 1003}


# ---- programmatic use ----------------------------------------------------------------------
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
    from training.config import resolve_config

    for ov in overrides:
        if "=" not in ov:
            raise DataError(f"override {ov!r} is not of the form key=value")
    return resolve_config(config, list(overrides))


def score(model, world, cfg=None):
    """{"official": BPB, "control": {domain: BPB}, "selection": {domain: BPB}} of a model."""
    from eval.official import row_statistics, scores

    cfg = cfg or world.cfg
    stats = row_statistics(model, world.val, world.token_bytes, cfg.eval_batches, cfg.eval_rows, cfg.context + 1,
                              world.device)
    return {"official": scores(stats)["bpb"],
            "control": measure(model, world.sets["control"], world.token_bytes, world.device),
            "selection": measure(model, world.sets["selection"], world.token_bytes, world.device)}


def score_checkpoint(path, calibration_dir, device="cpu"):
    """score() of a queue checkpoint file (ckpt_*.pt, final.pt or calibrated_state.pt)."""
    from training.checkpoint import load_checkpoint
    from training.trainer import build_model

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
    buf = io.BytesIO()
    torch.save(payload, buf)
    atomic_write_bytes(path, buf.getvalue())
    return sha256_file(path)


def _read_state(path, want_sha):
    if not Path(path).exists():
        raise DataError(f"{path}: not found")
    if sha256_file(path) != want_sha:
        raise DataError(f"{path}: SHA256 does not match calibration.json (changed or truncated)")
    return torch.load(path, weights_only=False)


def _calibrate(out, config=None, overrides=(), settings=None, device="cpu", log=print, fresh=False):
    """Stage A; writes config.json, pool.json, calibration_plan.json, calibration.json and
    calibrated_state.pt into `out`. Returns the calibration record (rec["ok"] False: failed)."""
    from tqdm import tqdm

    from training.checkpoint import rng_states
    from training.trainer import Trainer

    s = {**DEFAULTS, **(settings or {})}
    out = Path(out)
    if (out / "calibration.json").exists() or (out / "decisions.jsonl").exists():
        if not fresh:
            raise DataError(f"{out}: holds an earlier calibration or run; use another folder or --fresh "
                            f"(moves the old contents aside)")
        move_aside(out, None)
    cfg = load_config(config, overrides)
    world = World(cfg, device, s["per_domain"])
    n_cal = s["warmup_shards"] + s["sigma_shards"] + s["held_out_shards"] + 1
    pool = build_pool(world, s["shard_tokens"], s["pool_seed"], n_cal, s["candidates"], s["decay_shards"],
                      s["harmful_shards"], s["prose_shards"], n_late=s["late_shards"])
    atomic_write_json(out / "config.json", cfg.to_dict())
    save_rotation(out / "pool.json", pool)
    plan = {"k_grid": list(K_GRID), "frac_grid": list(FRAC_GRID), "target": TARGET, "settings": s,
            "rule": "first grid point (k ascending, then frac as listed) with held-out rate < target",
            "recalibration": "none during a run (no schedule is set); a new calibration is a new folder",
            "calibration_source": pool["calibration_source"], "shards": pool["calibration"]}
    atomic_write_json(out / "calibration_plan.json", plan)
    shards = {x["id"]: x for x in pool["shards"]}
    trainer = Trainer(cfg, device)
    step, targets, states = 0, 0, []
    bar = tqdm(pool["calibration"], desc="calibration shards", unit="shard", file=sys.stderr)
    for j, sid in enumerate(bar):
        if j == s["warmup_shards"]:
            states.append(measure(trainer.model, world.sets["control"], world.token_bytes, device))
        x, y = shard_rows(shard_tokens(world.stream, shard_docs(shards[sid])), cfg.context, world.bos)
        loss, n, t = train_rows(trainer, x, y, step, cfg.updates, cfg.micro_rows, cfg.accum, 1.0)
        step, targets = step + n, targets + t
        if j >= s["warmup_shards"]:
            states.append(measure(trainer.model, world.sets["control"], world.token_bytes, device))
            bar.set_postfix(loss=f"{loss:.3f}")
    ns = s["sigma_shards"]
    rec = calibrate_rule(states[: ns + 1], states[ns:])
    sha = _write_state(out / "calibrated_state.pt", {"trainer": trainer.state_dict(), "rng": rng_states(),
                                                    "step": step, "targets": targets, "ref": states[-1]})
    rec.update({"plan": plan, "states": states, "seed": cfg.seed, "step": step, "targets": targets,
                "state_sha256": sha, "pool_sha256": load_rotation(out / "pool.json")["_sha256"],
                "sigma_shards": pool["calibration"][s["warmup_shards"]: s["warmup_shards"] + ns],
                "held_out_shards": pool["calibration"][s["warmup_shards"] + ns:]})
    atomic_write_json(out / "calibration.json", rec)
    return rec


def open_calibration(calibration_dir, device="cpu"):
    """(cfg, world, pool, calibration record) of a calibration folder, verified."""
    from training.config import resolve_config

    d = Path(calibration_dir)
    if not (d / "calibration.json").exists():
        raise DataError(f"{d / 'calibration.json'}: not found; run `calibrate` first (the rule is fixed before the queue runs)")
    calib = json.loads((d / "calibration.json").read_text())
    if not calib.get("ok"):
        raise DataError(f"{d / 'calibration.json'}: the calibration failed ({calib.get('reason')})")
    cfg_d = json.loads((d / "config.json").read_text())
    cfg = resolve_config(None, [f"{k}={v}" for k, v in cfg_d.items()])
    pool = load_rotation(d / "pool.json")
    if pool["_sha256"] != calib["pool_sha256"]:
        raise DataError(f"{d / 'pool.json'}: not the pool this calibration was made on")
    world = World(cfg, device, calib["plan"]["settings"]["per_domain"])
    from harmful import with_harmful_copies

    world.stream, world.labels_all, copies = with_harmful_copies(world.train, world.labels,
                                                                  pool["harmful"]["source_documents"], pool["seed"] + 7,
                                                                  cfg.vocab)
    if copies != pool["harmful"]["copies"]:
        raise DataError(f"{d / 'pool.json'}: the harmful source does not rebuild identically")
    return cfg, world, pool, calib


def start_state(cfg, world, pool, calib, calibration_dir, seed, out):
    """The state the queue starts from: the calibrated one for the calibration seed; for another
    seed, a model initialised with that seed and trained on the same calibration shards."""
    if seed == calib["seed"]:
        return _read_state(Path(calibration_dir) / "calibrated_state.pt", calib["state_sha256"])
    from training.checkpoint import rng_states
    from training.trainer import Trainer

    cache = Path(out) / "start_state.pt"
    if cache.exists():
        return torch.load(cache, weights_only=False)
    cfg2 = type(cfg)(**{**cfg.to_dict(), "seed": seed})
    trainer = Trainer(cfg2, world.device)
    shards = {x["id"]: x for x in pool["shards"]}
    step, targets = 0, 0
    for sid in pool["calibration"]:
        x, y = shard_rows(shard_tokens(world.stream, shard_docs(shards[sid])), cfg.context, world.bos)
        _, n, t = train_rows(trainer, x, y, step, cfg.updates, cfg.micro_rows, cfg.accum, 1.0)
        step, targets = step + n, targets + t
    st = {"trainer": trainer.state_dict(), "rng": rng_states(), "step": step, "targets": targets}
    _write_state(cache, st)
    return st


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
        runner_cls=None):
    """One queue run (any policy) to the end, decay and scores included; returns the summary dict
    (also written to out/queue_summary.json). The same calibration folder gives every arm the same
    pool, control/selection sets, decay shards and (for the same seed) start state. runner_cls: a
    QueueRunner subclass (the study's arm variants); default QueueRunner."""
    from training.checkpoint import set_rng_states

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
    seed = calib["seed"] if seed is None else seed
    cfg = type(cfg)(**{**cfg.to_dict(), "seed": seed})
    if budget_targets is None:
        budget_targets = int(0.6 * sum(s["tokens"] for s in pool["shards"] if s["id"] in pool["order"]))
    runner = (runner_cls or QueueRunner)(cfg, world, pool, calib, out, policy, seed, reject_rate, rotation_shards,
                                         budget_targets, branch_check, log=log)
    runner.calibration_dir = str(calibration_dir.resolve())
    if resume:
        done = [r for r in read_log(log_path, log=lambda s: None) if r["event"] == "done"]
        if done and (out / "queue_summary.json").exists():
            log(f"{out}: this run has finished; nothing to resume")
            return json.loads((out / "queue_summary.json").read_text())
        runner.run(resume=True)
    else:
        st = start_state(cfg, world, pool, calib, calibration_dir, seed, out)
        runner.trainer.load_state_dict(st["trainer"])
        set_rng_states(st["rng"])
        runner.step, runner.targets = st["step"], st["targets"]
        runner.run()
    recs = read_log(log_path, log=lambda s: None)
    if not any(r["event"] == "done" for r in recs):
        runner.decay(lambda m: score(m, world, cfg))
        recs = read_log(log_path, log=lambda s: None)
    summary = summarize(recs, calib, pool, out)
    atomic_write_json(out / "queue_summary.json", summary)
    if report:
        from queue_report import write_report

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
    from queue_report import screen_agreement

    st = recs[-1]["queue"]
    decay = [r for r in recs if r["event"] == "decay"]
    trains = [r for r in recs if r["event"] == "train"]
    shards = {s["id"]: s for s in pool["shards"]}
    acc_targets = sum(r["targets"] for r in trains if r["shard"] in st["accepted"] and r["role"] != "branch")
    start = recs[0]
    return {"policy": start["policy"], "seed": start["seed"], "reject_rate": start["reject_rate"],
            "run_id": start["run_id"], "accepted": st["accepted"], "quarantined": st["quarantined"],
            "deferred_pending": st["next_rotation"], "undecided": st["undecided"], "rejections": st["rejections"],
            "returns": st["returns"], "rotations": st["rotation"],
            "accepted_tokens": sum(shards[s]["tokens"] for s in st["accepted"]),
            "spent": recs[-1].get("spent") or {}, "final": decay[-1]["scores"] if decay else None,
            "start_losses": start["losses"], "calibration": {k: calib.get(k) for k in ("k", "frac", "sigma")},
            "curve": [{"shard": r["shard"], "role": r["role"], "history_targets": r["history_targets"],
                       "spent_targets": r["spent_targets"], "losses": r["losses"]} for r in trains],
            "screen": screen_agreement(recs), "accepted_records_targets": acc_targets,
            "harmful_accepted": [s for s in st["accepted"] if shards[s]["sources"].get(pool["harmful"]["label"])
                                 and not st["returns"].get(s)]}


def return_from_quarantine(out, shard, log=print):
    """One return of a quarantined shard to the next rotation; needs its inspection with no cause found."""
    from queue_state import apply

    from training.checkpoint import load_checkpoint, save_checkpoint

    out = Path(out)
    if not shard:
        raise DataError("give the shard id to return")
    recs = read_log(out / "decisions.jsonl", repair=True, log=log)
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
    payload.update(state=rec["queue"], log_seq=rec["seq"], records=[rec])
    save_checkpoint(out, rec["seq"], payload, keep=0)
    from decision_log import DecisionLog

    DecisionLog(out / "decisions.jsonl", seq=len(recs)).write(rec)
    log(f"{shard} returns to the next rotation (record {rec['seq']})")
    return 0


# ---- command line ----------------------------------------------------------------------------------
def main(argv=None):
    from corpus.runlock import FolderLocked, folder_lock

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["calibrate", "run", "dose", "return", "reconstruct"])
    ap.add_argument("shard", nargs="?", help="with `return`: the quarantined shard (nothing else takes a word)")
    ap.add_argument("--config", default=None, help="training config JSON (calibrate)")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides (calibrate)")
    ap.add_argument("--out", default="runs/queue", help="queue folder (default runs/queue)")
    ap.add_argument("--calibration", default=None, help="calibration folder for run/dose (default: --out)")
    for k, v in DEFAULTS.items():
        ap.add_argument(f"--{k.replace('_', '-')}", type=int, default=v, help=f"calibrate: {k.replace('_', ' ')} (default {v})")
    ap.add_argument("--policy", choices=POLICIES, default="queue", help="run: queue (the rule), plain, random")
    ap.add_argument("--reject-rate", type=float, default=0.0, help="run --policy random: rejection probability")
    ap.add_argument("--seed", type=int, default=None, help="run: model init and in-rotation order (default: calibration's)")
    ap.add_argument("--budget-targets", type=int, default=None, help="run: stop after this many accepted targets")
    ap.add_argument("--rotation-shards", type=int, default=6, help="run: a rotation boundary every N shards")
    ap.add_argument("--no-branch-check", action="store_true", help="run: skip the branch check of first-rotation rejections")
    ap.add_argument("--resume", action="store_true", help="run: continue an interrupted run")
    ap.add_argument("--fresh", action="store_true", help="calibrate/run: move an earlier run in --out aside first")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args(argv)
    out = Path(a.out)
    try:
        if a.shard is not None and a.command != "return":
            raise DataError(f"unexpected argument {a.shard!r}: `{a.command}` takes no shard"
                            + ("; give config overrides as --set key=value" if "=" in a.shard else ""))
        if a.command == "return" and a.shard and "=" in a.shard:
            raise DataError(f"{a.shard!r} is not a shard id")
        if a.command == "reconstruct":
            from log_replay import reconstruct_folder

            return reconstruct_folder(out)
        with folder_lock(out, f"queue {a.command}"):
            if a.command == "return":
                return return_from_quarantine(out, a.shard)
            if a.command == "calibrate":
                s = {k: getattr(a, k) for k in DEFAULTS}
                rec = calibrate(out, a.config, a.set, s, a.device, fresh=a.fresh)
                if not rec["ok"]:
                    print(f"error: calibration failed: {rec['reason']}", file=sys.stderr)
                    return 1
                print(f"calibrated: k={rec['k']} frac={rec['frac']} held-out false rejections "
                      f"{rec['false_rejections']}/{rec['transitions']} (95% upper bound {rec['upper95']:.3f}); "
                      f"sigma {', '.join(f'{d}={v:.4f}' for d, v in rec['sigma'].items())}")
                return 0
            if a.command == "dose":
                from dose import dose_response

                dose_response(out, a.calibration or "runs/queue", device=a.device)
                return 0
            summary = run(out, a.calibration, a.policy, a.seed, a.reject_rate, a.budget_targets, a.rotation_shards,
                          not a.no_branch_check, a.resume, a.fresh, a.device)
            print(f"accepted {len(summary['accepted'])} shards ({summary['accepted_tokens']} targets), quarantined "
                  f"{summary['quarantined']}, rejections {summary['rejections']}; report: {out / 'report.md'}")
            if summary["harmful_accepted"] and a.policy == "queue":  # the other arms accept harm by design
                print(f"error: harmful shard(s) {summary['harmful_accepted']} ended accepted without a return", file=sys.stderr)
                return 1
            return 0
    except (DataError, FolderLocked) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
