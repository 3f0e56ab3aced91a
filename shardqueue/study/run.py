"""The queue study end to end: stage A once, six runs, the selection axis, the rule, the report.

Order: stage A (run_queue.calibrate, shared by every arm); then per seed arm B (its
measured rejection rate fixes arm C's rejected positions), arm C, arm A (with its decay
branches, the reference curve). A run whose study_run.json exists is not redone; an
unfinished one is moved aside and redone from its start state.
"""
import json
import math
import sys
import time
from pathlib import Path

from corpus.atomic import atomic_write_json
from corpus.errors import DataError
from shardqueue.log import read_log
from shardqueue.study.accounting import accounting, control_trace
from shardqueue.study.adoption import adoption
from shardqueue.study.arms import (
    CurveRunner,
    FixedRandomRunner,
    ReferenceBranchRunner,
    runner_class,
)
from shardqueue.study.curve_fit import THRESHOLDS, check_identifiable
from shardqueue.study.efficiency import DEFINITION, average_curves, efficiency_points
from shardqueue.study.presets import PRESETS, plan, queue_settings
from shardqueue.study.random_rejection import rejected_positions

SEED_EFFECTS = (
    "A seed sets (1) the model initialisation: the calibration seed starts from the stage-A state itself, any other "
    "seed from its own initialisation trained on the same stage-A shards in the same order (sigma_d, k and the "
    "recovery criterion stay the calibration's); (2) the order of every rotation (seeded by seed and rotation "
    "number), hence which shards are judged first, which shard serves as a recovery shard, which shard a branch "
    "check uses, and where deferred shards land; (3) arm C's rejected positions. It does not change the pool, its "
    "shards and hashes, the decay shards, the control and selection sets, or the official evaluation rows.")


def mean(d):
    return sum(d.values()) / len(d)


def stage_a(a, p, out, rq, log):
    """The calibration folder, calibrated if needed; (cfg, world, pool, calib, folder)."""
    cal = Path(a.calibration) if getattr(a, "calibration", None) else out / "stage_a"
    if getattr(a, "calibration", None) and not (cal / "calibration.json").exists():
        raise DataError(f"{cal / 'calibration.json'}: not found (--calibration names an existing stage-A folder)")
    if not (cal / "calibration.json").exists():
        ov = [f"{k}={v}" for k, v in p["model"].items()] + [f"source={p['source']}", f"seed={p['seeds'][0]}",
                                                            f"updates={updates_horizon(p)}", "name=queue_study"]
        if a.data_dir:
            ov.append(f"data_dir={a.data_dir}")
        log(f"stage A: calibrating into {cal}")
        rec = rq.calibrate(cal, None, ov, queue_settings(p), a.device, log=log)
        if not rec["ok"]:
            raise DataError(f"{cal / 'calibration.json'}: the calibration failed ({rec['reason']})")
    else:
        log(f"stage A: using the calibration in {cal}")
    cfg, world, pool, calib = rq.open_calibration(cal, a.device)
    if calib["seed"] != p["seeds"][0]:
        raise DataError(f"{cal / 'calibration.json'}: calibrated at seed {calib['seed']}, the preset's first seed is "
                        f"{p['seeds'][0]}")
    return cfg, world, pool, calib, cal


def updates_horizon(p):
    """cfg.updates: the weight-decay schedule's horizon, the same for every arm and beyond any run's length."""
    n_cal = p["warmup_shards"] + p["sigma_shards"] + p["held_out_shards"] + 1
    per_shard = max(1, p["shard_targets"] // (p["model"]["micro_rows"] * p["model"]["context"] * p["model"]["accum"]))
    return 4 * per_shard * (n_cal + math.ceil(p["pool_factor"] * p["budget_shards"]) * 3 + p["decay_shards"])


def stage_a_curves(rq, world, pool, calib, cfg):
    """Per control domain: the reference curve fitted on stage A's losses against trained targets."""
    from shardqueue.packing import shard_rows, shard_tokens
    from shardqueue.rotation import shard_docs

    shards = {s["id"]: s for s in pool["shards"]}
    warm = calib["plan"]["settings"]["warmup_shards"]
    D, t = [], 0
    for j, sid in enumerate(pool["calibration"]):
        _, y = shard_rows(shard_tokens(world.stream, shard_docs(shards[sid])), cfg.context, world.bos)
        if j == warm:
            D.append(t)
        t += int((y >= 0).sum())
        if j >= warm:
            D.append(t)
    states = calib["states"]
    if len(D) != len(states):
        raise DataError(f"calibration: {len(states)} measured states but {len(D)} stage-A shards after warm-up")
    return {d: check_identifiable(D, [s[d] for s in states]) for d in sorted(states[0])}, D


def run_arm(rq, arm, seed, out, cal, budget, rotation, log, device, cls=None, attrs=None, policy="queue", rate=0.0):
    """One arm at one seed; returns its study record (cached in RUN/study_run.json)."""
    d = out / f"{arm}_s{seed}"
    done = d / "study_run.json"
    if done.exists():
        log(f"{d.name}: already done")
        return json.loads(done.read_text())
    fresh = (d / "decisions.jsonl").exists() or bool(list(d.glob("ckpt_*.pt")))
    log(f"\n-- arm {arm}, seed {seed}: policy {policy}" + (f", rate {rate:.3f}" if policy == "random" else ""))
    t0 = time.time()
    sub, made = runner_class(cls or rq.QueueRunner, **(attrs or {}))
    summary = rq.run(d, cal, policy, seed, rate, budget, rotation, True, False, fresh, device, log=log, runner_cls=sub)
    wall = time.time() - t0
    recs = read_log(d / "decisions.jsonl", log=lambda s: None)
    acc = accounting(recs)
    runner = made[-1] if made else None
    rec = {"arm": arm, "seed": seed, "name": f"{arm}_s{seed}", "policy": policy, "reject_rate": rate,
           "summary": {k: summary.get(k) for k in ("accepted", "quarantined", "deferred_pending", "undecided",
                                                     "rejections", "returns", "rotations", "accepted_tokens",
                                                     "harmful_accepted", "screen")},
           "final": summary["final"], "start_targets": recs[0].get("start_targets", 0), "accounting": acc,
           "control_trace": control_trace(recs), "wall_s": round(wall, 2),
           "branches": getattr(runner, "branches", []), "branch_seconds": getattr(runner, "branch_seconds", 0.0),
           "branch_updates": getattr(runner, "branch_updates", 0)}
    atomic_write_json(done, rec)
    return rec


def arm_result(r, budget):
    """(trained targets D, selection {domain: BPB}, control, decay targets) of a run after its final decay;
    arm A's is its decay branch at the budget (the state a budget-limited run decays from)."""
    if r["arm"] == "A":
        at = [b for b in r["branches"] if b["threshold"] == budget]
        if not at:
            raise DataError(f"{r['name']}: no decay branch at the budget ({budget:,} accepted targets); the pool ran out")
        b = at[0]
        return b["D"], b["selection"], b["control"], b["decay_targets"]
    acc = r["accounting"]
    return acc["trained_targets"], r["final"]["selection"], r["final"]["control"], acc["decay_targets"]


def budget_check(runs, budget, shard_max):
    """From each run's log: stable-phase targets reach the budget with less than one shard of overshoot
    (shards are whole), and the decay trains the same targets in every run."""
    targets, stable, decay = {}, {}, {}
    for r in runs:
        D, _, _, dec = arm_result(r, budget)
        targets[r["name"]], decay[r["name"]] = D, dec
        stable[r["name"]] = D - dec - r["start_targets"]
    problems = []
    for n, s in stable.items():
        if s < budget * 0.98 or s >= budget + shard_max:  # 0.98: a shard's token count includes BOS tokens that are no target
            problems.append(f"{n}: {s:,} stable-phase targets for a budget of {budget:,}")
    if len(set(decay.values())) != 1:
        problems.append("decay targets differ: " + ", ".join(f"{n} {v:,}" for n, v in decay.items()))
    rule = ("from each run's decision log: stable-phase trained targets reach the budget with less than one shard "
            f"of overshoot (shards are whole), and the decay trains the same {next(iter(decay.values())):,} targets "
            "in every run")
    return {"targets": targets, "stable": stable, "decay": decay, "equal": not problems, "problems": problems,
            "rule": rule, "budget_targets": budget}


def run_study(a, log=print):
    from corpus.runlock import FolderLocked, folder_lock
    from shardqueue import api as rq

    p = PRESETS[a.preset]
    out = Path(a.out)
    try:
        with folder_lock(out, "the queue study"):
            return _run(a, p, out, rq, log)
    except (DataError, FolderLocked) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _run(a, p, out, rq, log):
    import torch

    a.device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    rot = p["rotation_shards"]
    t_all = time.time()
    cfg, world, pool, calib, cal = stage_a(a, p, out, rq, log)
    t_a = time.time() - t_all
    curves, D_cal = stage_a_curves(rq, world, pool, calib, cfg)
    use_curve = bool(a.curve) and all(c["ok"] for c in curves.values())
    curve_reason = ""
    if a.curve and not use_curve:
        bad = next(d for d, c in curves.items() if not c["ok"])
        curve_reason = f"refused, basic rule used: {bad}: {curves[bad]['reason']}"
    shard_of = {s["id"]: s for s in pool["shards"]}
    # shards are document-aligned and a little over their nominal size: the budget is budget_shards
    # shards of the pool's mean size, so the stable phase trains about budget_shards shards
    cand_tokens = [s["tokens"] for s in pool["shards"] if s["id"] in pool["order"]]
    budget = int(round(p["budget_shards"] * sum(cand_tokens) / len(cand_tokens)))
    seeds = p["seeds"]
    runs, rates = [], {}
    t_b = time.time()
    for s in seeds:
        attrs = {"curves": {d: {k: c[k] for k in ("a", "b", "c", "D0")} for d, c in curves.items()}} if use_curve else {}
        rb = run_arm(rq, "B", s, out, cal, budget, rot, log, a.device, CurveRunner, attrs, "queue")
        share_start_state(out, s, calib["seed"])
        n_cand = rb["accounting"]["candidates"]
        n_rej = rb["accounting"]["decisions"]["reject"]
        rate = n_rej / n_cand if n_cand else 0.0
        pos = rejected_positions(rate, n_cand, s)
        rates[s] = {"rate": rate, "rejections": n_rej, "candidates": n_cand, "positions": pos}
        rc = run_arm(rq, "C", s, out, cal, budget, rot, log, a.device, FixedRandomRunner, {"positions": frozenset(pos)},
                     "random", min(max(rate, 1e-9), 1 - 1e-9))
        fr = sorted(set(p["reference_fractions"]))
        thresholds = [int(f * budget) for f in fr if f < max(fr)]
        ra = run_arm(rq, "A", s, out, cal, int(max(fr) * budget), rot, log, a.device, ReferenceBranchRunner,
                     {"thresholds": tuple(thresholds)}, "plain")
        runs += [ra, rb, rc]
    t_b = time.time() - t_b
    runs.sort(key=lambda r: ("ABC".index(r["arm"]), r["seed"]))
    # ---- the selection axis ----------------------------------------------------------------
    per_seed = {}
    for r in runs:
        if r["arm"] != "A":
            continue
        pts = [(b["D"], mean(b["selection"])) for b in r["branches"]]
        pts.append((r["accounting"]["trained_targets"], mean(r["final"]["selection"])))  # the last point: A's own decay
        pts.sort()
        per_seed[str(r["seed"])] = {"D": [x for x, _ in pts], "L": [y for _, y in pts]}
    refD, refL = average_curves([(c["D"], c["L"]) for c in per_seed.values()])
    shard_max = max(s["tokens"] for s in pool["shards"] if s["id"] in pool["order"])
    bc = budget_check(runs, budget, shard_max)
    if not bc["equal"]:
        raise DataError("the arms did not train equal budgets: " + "; ".join(bc["problems"]))
    records, points = [], {"A": {}, "B": {}, "C": {}}
    for r in runs:
        D, sel, ctrl, _ = arm_result(r, budget)
        eff = efficiency_points(refD, refL, D, mean(sel))
        points[r["arm"]][r["seed"]] = eff["points"]
        acc = r["accounting"]
        wasted_s = sum(v for k, v in acc["train_seconds"].items() if k.startswith("wasted"))
        records.append({
            "arm": r["arm"], "seed": r["seed"], "name": r["name"], "trained_targets": int(D),
            "final_selection": {"mean": mean(sel), **sel}, "final_control": ctrl, "efficiency": eff,
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
        })
    ad = adoption(points)
    ad = {**ad, "b_minus_a": {str(k): v for k, v in ad["b_minus_a"].items()},
          "b_minus_c": {str(k): v for k, v in ad["b_minus_c"].items()},
          "per_arm_seed_difference": ad["per_arm_seed_difference"]}
    table = concat_decisions(out, [r for r in runs if r["arm"] == "B"])
    from shardqueue.study.non_english import polish_axis

    axis = polish_axis(validation_texts(world))
    pl = plan(a.preset)
    summary = {
        "schema": "queue-study/1", "preset": a.preset, "plan": pl, "setting": p,
        "calibration": {"source": pool["calibration_source"], "sigma": calib["sigma"], "k": calib["k"],
                        "recovery": recovery_text(calib), "false_rejection": {
                            "held-out rate": f"{calib['false_rejections']}/{calib['transitions']}",
                            "one-sided 95% upper bound": round(calib["upper95"], 4), "target": "below 5%"},
                        "curves": curves, "curve_targets": D_cal, "curve_thresholds": THRESHOLDS,
                        "curve_variant": {"requested": bool(a.curve), "used": use_curve, "reason": curve_reason},
                        "folder": str(cal)},
        "selection": {"domains": sorted(world.sets["selection"]), "loss": "mean BPB over the selection domains",
                      "non_english_axis": {"present": axis["present"], "text": axis["text"]}},
        "efficiency_definition": DEFINITION + (" Trained targets count everything the model was trained on, the "
                                               "stage-A shards included (every arm starts from them)."),
        "reference_curve": {"D": refD, "L": refL, "per_seed": per_seed},
        "runs": records, "budget_check": bc, "adoption": ad,
        "rejection_rate": {"value": sum(v["rejections"] for v in rates.values()) / max(1, sum(v["candidates"] for v in rates.values())),
                           "source": "arm B's rejections per judged candidate; C at seed s rejects exactly "
                                     "round(rate_s x candidates_s) positions of B at seed s: " + "; ".join(
                               f"seed {s}: {v['rejections']}/{v['candidates']} -> positions {v['positions']}"
                               for s, v in rates.items()), "per_seed": {str(s): v for s, v in rates.items()}},
        "seed_effects": SEED_EFFECTS,
        "decisions_table": table,
        "timing": {"stage_a": round(t_a, 1), "stage_b": round(t_b, 1), "total": round(time.time() - t_all, 1)},
        "limits": limits_text(a.preset, p),
    }
    atomic_write_json(out / "summary.json", summary)
    from shardqueue.study.report import write_report

    path = write_report(summary, out)
    log(f"\nverdict: {ad['verdict']}; B-A {ad['b_minus_a']}, B-C {ad['b_minus_c']}, seed spread "
        f"{ad['seed_spread']}, threshold {ad['threshold']}")
    log(f"wrote {path}, {out / 'summary.json'}, {out / 'selection.png'}, {out / 'control_b.png'}")
    return 0


def share_start_state(out, seed, calib_seed):
    """Another seed's start state is the same for all arms: train it once (arm B) and give the others a copy."""
    if seed == calib_seed:
        return
    from shardqueue.api import START_KEY, copy_start_state

    src = out / f"B_s{seed}"
    if (src / "start_state.pt").exists() and (src / START_KEY).exists():
        for arm in ("A", "C"):
            dst = out / f"{arm}_s{seed}"
            if not (dst / START_KEY).exists():  # a stale or half-copied state is keyed and hashed on use
                dst.mkdir(parents=True, exist_ok=True)
                copy_start_state(src, dst)


def concat_decisions(out, runs):
    """The decision datasets of the B runs in one table (arm and seed columns first).

    Each run's own decisions.parquet is used when the queue wrote one; otherwise the rows
    are built from its decision log by accounting.decision_rows.
    """
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    from shardqueue.study.accounting import decision_rows

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
    import pyarrow.parquet as pq

    return pq.read_table(world.lay.raw / world.rec["val_shard"], columns=["text"]).column("text").to_pylist()


def recovery_text(calib):
    return (f"a flagged shard is followed by one recovery shard; it recovers when each flagged domain's rise over the "
            f"reference falls below frac x k x sigma_d with frac = {calib.get('frac')} (chosen on held-out "
            f"transitions from the pre-written grid)")


def limits_text(preset, p):
    if preset == "tiny":
        return ("Tiny setting: a 1.7M-parameter model, shards of "
                f"{p['shard_targets']:,}+ targets, a stable budget of {p['budget_shards']} shards of the pool's mean size, "
                f"{p['harmful_shards']} harmful shards (the queue's corrupted source) in the pool, control and selection windows of 128 tokens. It shows that every "
                "path of the study runs and is accounted for (calibration, three arms, two seeds, rollback, random "
                "rejection, decay branches, efficiency points, the rule). It cannot show whether the queue helps: "
                "shard-to-shard noise is large against the differences a handful of shards can make, the seed spread "
                "dominates, and the harmful shards are an easy, planted case. The verdict above is the rule applied to "
                "these numbers, not evidence about the 64M proxy.")
    return ("The 64M proxy setting of the proposal on ClimbMix, on one GPU. The verdict holds for this setting only "
            "(model size, training stage, pool, control and selection domains).")
