"""The answers the proposal asks of the study, read from arm B's decision logs and the pool.

  caught and let through   per damage kind (damage.py), the cipher source and clean shards:
                           each shard arm B judged, by dose bin, with its final fate
                           (accepted, deferred then accepted, quarantined, never settled)
  false rejections         clean shards (no damage, no cipher) rejected at least once, over
                           the clean shards judged, per seed and pooled
  screen against decision  does the forward-only screen score (shard BPB minus pool BPB
                           before training) predict the training-based measurement?
                           Spearman rank correlation with the measured rise (the largest
                           per-domain rise in units of the flag threshold k x sigma_d), and
                           the AUC of the score for the training-based decision (flagged;
                           rejected), with the number of judged candidates n
  compute overhead         per arm and seed: training updates kept, updates wasted on
                           rejected, recovery and branch shards, screens, and wall seconds
                           split into training kept, wasted training and the rest
                           (measurement, screening, checkpoints)
  compute per arm          per arm (mean over seeds): trained targets, training seconds and
                           wall seconds of the queue; arm A counted to its budget (its decay
                           branch there), not through the reference curve it goes on to
                           build; the overhead of B over A as ratios
"""
import math

from shardqueue.checks.run_summary import auc, spearman
from shardqueue.engine.log import read_log
from shardqueue.policy.rule import clopper_pearson_upper
from shardqueue.study.accounting import decision_rows

DOSE_BINS = ((0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.01))


def shard_kind(pool):
    """{shard id: (kind, dose)}: damage kind and realised share, "cipher", "prose", or ("clean", 0)."""
    out = {}
    harm = pool["harmful"]["label"]
    for s in pool["shards"]:
        if s["sources"].get(harm):
            out[s["id"]] = ("cipher", 1.0)
        elif s["id"].startswith("r"):
            out[s["id"]] = ("prose", 0.0)
        else:
            out[s["id"]] = ("clean", 0.0)
    for d in (pool.get("damage") or {}).get("shards", []):
        out[d["id"]] = (d["kind"], d["share"])
    return out


def fates(recs):
    """{shard: fate} over a run's log: accepted | accepted after deferral | quarantined | deferred (pending) | undecided."""
    st = recs[-1]["queue"]
    out, rejected = {}, {}
    for r in recs:
        if r["event"] == "reject":
            rejected[r["shard"]] = rejected.get(r["shard"], 0) + 1
    for s in st["accepted"]:
        out[s] = "accepted after deferral" if rejected.get(s) else "accepted"
    for s in st["quarantined"]:
        out[s] = "quarantined"
    for s in st["next_rotation"] + st["pending"]:
        if rejected.get(s):
            out[s] = "deferred, not judged again"
    for s in st["undecided"]:
        out[s] = "undecided"
    return out, rejected


def max_rise(row):
    vals = [row[k] / row["threshold_" + k[len("delta_"):]] for k in row
            if k.startswith("delta_") and row.get("threshold_" + k[len("delta_"):])]
    return max(vals) if vals else None


def answers(out, runs, pool, calib):
    kinds = shard_kind(pool)
    table, clean, screen = {}, {}, {"score": [], "rise": [], "flagged": [], "rejected": [], "kind": []}
    for r in runs:
        if r["arm"] != "B":
            continue
        recs = read_log(out / r["name"] / "decisions.jsonl", log=lambda s: None)
        fate, rejected = fates(recs)
        rows = decision_rows(recs)
        seen = []
        for row in rows:
            if row["shard"] in seen:
                continue
            seen.append(row["shard"])
        for sid in seen:
            kind, dose = kinds.get(sid, ("clean", 0.0))
            key = kind if kind in ("clean", "cipher", "prose") else f"{kind} {dose_bin(dose)}"
            t = table.setdefault(key, {"kind": kind, "dose_bin": None if kind in ("clean", "cipher", "prose")
                                       else dose_bin(dose), "judged": 0, "rejected_once": 0, "quarantined": 0,
                                       "finally_accepted": 0, "doses": []})
            t["judged"] += 1
            t["rejected_once"] += int(rejected.get(sid, 0) > 0)
            t["quarantined"] += int(fate.get(sid) == "quarantined")
            t["finally_accepted"] += int(fate.get(sid, "").startswith("accepted"))
            t["doses"].append(round(dose, 3))
            if kind == "clean":
                c = clean.setdefault(str(r["seed"]), {"judged": 0, "rejected": 0, "shards": []})
                c["judged"] += 1
                if rejected.get(sid):
                    c["rejected"] += 1
                    c["shards"].append(sid)
        for row in rows:
            rise = max_rise(row)
            if row["screen_score"] is None or rise is None:
                continue
            screen["score"].append(row["screen_score"])
            screen["rise"].append(rise)
            screen["flagged"].append(bool(row["flagged"]))
            screen["rejected"].append(row["decision"] == "reject")
            screen["kind"].append(kinds.get(row["shard"], ("clean", 0.0))[0])

    cj = sum(c["judged"] for c in clean.values())
    cr = sum(c["rejected"] for c in clean.values())
    n = len(screen["score"])
    return {
        "caught": dict(sorted(table.items())),
        "false_rejections_clean": {"per_seed": clean, "rejected": cr, "judged": cj,
                                   "upper95": clopper_pearson_upper(cr, cj) if cj else None,
                                   "note": "clean shards: no damaged document and no cipher document; each shard "
                                           "counted once per seed, rejected if any of its judgements was a rejection"},
        "screen": {"n": n, "spearman_score_vs_rise": spearman(screen["score"], screen["rise"]),
                   "auc_flagged": auc(screen["score"], screen["flagged"]), "flagged": int(sum(screen["flagged"])),
                   "auc_rejected": auc(screen["score"], screen["rejected"]), "rejected": int(sum(screen["rejected"])),
                   "points": [{"score": s, "rise": x, "flagged": f, "rejected": j, "kind": k} for s, x, f, j, k in
                              zip(screen["score"], screen["rise"], screen["flagged"], screen["rejected"],
                                  screen["kind"])]},
        "compute": compute_overhead(runs),
    }


def dose_bin(d):
    for lo, hi in DOSE_BINS:
        if lo <= d < hi:
            return f"{lo:.0%}-{min(hi, 1.0):.0%}"
    return "100%"


def compute_overhead(runs):
    out = {}
    for r in runs:
        acc = r["accounting"]
        kept = acc["accepted_updates"]
        wasted = sum(acc["wasted_updates"].values())
        sec = acc["train_seconds"]
        wasted_s = sum(v for k, v in sec.items() if k.startswith("wasted"))
        rest = max(0.0, r["wall_s"] - sec["accepted"] - wasted_s - r.get("branch_seconds", 0.0))
        out[r["name"]] = {"kept_updates": kept, "wasted_updates": wasted, "screens": acc["screen_passes"],
                          "wall_s": r["wall_s"], "train_kept_s": round(sec["accepted"], 1),
                          "train_wasted_s": round(wasted_s, 1), "reference_branches_s": round(r.get("branch_seconds", 0.0), 1),
                          "measure_screen_other_s": round(rest, 1),
                          "wasted_update_share": wasted / kept if kept else None,
                          "overhead_vs_kept_training": (wasted_s + rest) / sec["accepted"] if sec["accepted"] else None}
    return out


def finite(x):
    return x is not None and math.isfinite(x)


def compute_per_arm(costs):
    """costs: {run name: {"arm", "seed", "trained_targets", "training_s", "wall_s"}} ->
    {"per_arm": {arm: means over its seeds}, "b_over_a": ratios of B's means to A's}."""
    per = {}
    for c in costs.values():
        per.setdefault(c["arm"], []).append(c)
    keys = ("trained_targets", "training_s", "wall_s")
    arms = {a: {"seeds": len(v), **{k: sum(x[k] for x in v) / len(v) for k in keys}} for a, v in sorted(per.items())}
    a, b = arms.get("A"), arms.get("B")

    def ratio(x, y):
        return x / y if y else None

    over = {} if not (a and b) else {
        "trained_targets": ratio(b["trained_targets"], a["trained_targets"]),
        "wall_s": ratio(b["wall_s"], a["wall_s"]),
        "wall_vs_a_training_s": ratio(b["wall_s"], a["training_s"])}
    return {"per_arm": arms, "b_over_a": over}
