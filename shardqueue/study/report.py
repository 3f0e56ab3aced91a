"""The queue study's report: queue_study/summary.json (checked against SCHEMA) -> report.md.

SCHEMA lists every key the report and the figures read, with its type; `validate`
names the first missing or mistyped key, so a broken summary is refused in one line
instead of producing a half-written report.
"""
from corpus.atomic import atomic_write_text

NUM = (int, float)
OPT_NUM = (int, float, type(None))
RUN_SCHEMA = {
    "arm": str, "seed": int, "name": str,
    "trained_targets": int,  # read from the run's own decision log
    "final_selection": dict,  # {"mean": BPB, domain: BPB}, after the decay
    "final_control": dict,  # {domain: BPB}, after the decay
    "efficiency": {"points": OPT_NUM, "d_eq": OPT_NUM, "reason": str},
    "decisions": dict,  # {"accept": n, "flag": n, "reject": n, "deferred": n, "quarantined": n, ...}
    "rejected": list,  # [{"shard", "sources", "outcome", "position"}]
    "compute": {"accepted_updates": int, "wasted_updates": dict, "screen_passes": int, "wall_s": dict},
    "control_trace": list,  # [{"D", "losses", "mark"}], arm B only (empty elsewhere)
}
SCHEMA = {
    "schema": str, "preset": str, "plan": dict,
    "calibration": {"source": str, "sigma": dict, "k": NUM, "recovery": str, "false_rejection": dict,
                    "curves": dict, "curve_variant": {"requested": bool, "used": bool, "reason": str}},
    "selection": {"domains": list, "non_english_axis": {"present": bool, "text": str}},
    "efficiency_definition": str,
    "reference_curve": {"D": list, "L": list, "per_seed": dict},
    "runs": [RUN_SCHEMA],
    "budget_check": {"targets": dict, "equal": bool, "rule": str},
    "adoption": {"seeds": list, "b_minus_a": dict, "b_minus_c": dict, "seed_spread": OPT_NUM, "threshold": OPT_NUM,
                 "verdict": str, "reasons": list},
    "rejection_rate": {"value": NUM, "source": str},
    "seed_effects": str,
    "decisions_table": {"rows": int, "parquet": str, "csv": str},
    "timing": dict,
    "limits": str,
}


class SchemaError(ValueError):
    pass


def validate(obj, schema=SCHEMA, where="summary"):
    """Raise SchemaError naming the first key that is missing or of the wrong type."""
    if isinstance(schema, dict):
        if not isinstance(obj, dict):
            raise SchemaError(f"{where}: expected an object, got {type(obj).__name__}")
        for k, sub in schema.items():
            if k not in obj:
                raise SchemaError(f"{where}: key {k!r} is missing")
            validate(obj[k], sub, f"{where}.{k}")
    elif isinstance(schema, list):
        if not isinstance(obj, list):
            raise SchemaError(f"{where}: expected a list, got {type(obj).__name__}")
        for i, item in enumerate(obj):
            validate(item, schema[0], f"{where}[{i}]")
    else:
        types = schema if isinstance(schema, tuple) else (schema,)
        if isinstance(obj, bool) and bool not in types:
            raise SchemaError(f"{where}: expected {'/'.join(t.__name__ for t in types)}, got bool")
        if not isinstance(obj, types):
            raise SchemaError(f"{where}: expected {'/'.join(t.__name__ for t in types)}, got {type(obj).__name__}")


def _pts(x):
    return "refused" if x is None else f"{x:+.2f}"


def _f(x, nd=4):
    return "n/a" if x is None else f"{x:.{nd}f}"


def render(s):
    """The Markdown report of a validated summary."""
    validate(s)
    ad, pl, cal = s["adoption"], s["plan"], s["calibration"]
    seeds = ad["seeds"]
    L = [f"# The queue study ({s['preset']} setting)", "",
         "Does a queue that rejects shards (arm B) beat plain training (A) and random rejection at the same "
         "rate (C) at the same trained-target budget, on a selection axis the queue never sees? "
         "(The proposal \"Can a model help choose its next training data?\", sections 2 and 4.)", "",
         f"## Verdict: {ad['verdict']}", ""]
    L += [f"- {r}" for r in ad["reasons"]] or ["- B beats A and C at both seeds by more than the threshold."]
    L += ["", "## Adoption table (efficiency points on the selection axis)", "",
          "| Seed | A | B | C | B - A | B - C | B - A (BPB) | B - C (BPB) |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    eff = {(r["arm"], r["seed"]): r["efficiency"]["points"] for r in s["runs"]}
    sel = {(r["arm"], r["seed"]): r["final_selection"]["mean"] for r in s["runs"]}
    for sd in seeds:
        L.append(f"| {sd} | {_pts(eff.get(('A', sd)))} | {_pts(eff.get(('B', sd)))} | {_pts(eff.get(('C', sd)))} | "
                 f"{_pts(ad['b_minus_a'].get(str(sd)))} | {_pts(ad['b_minus_c'].get(str(sd)))} | "
                 f"{sel[('B', sd)] - sel[('A', sd)]:+.4f} | {sel[('B', sd)] - sel[('C', sd)]:+.4f} |")
    L += ["", "The last two columns are the raw differences of the final selection loss (negative: B lower, "
              "better); they show the direction when efficiency points are refused, and the rule does not read them."]
    L += ["", f"Seed spread (the largest within-arm absolute difference between the two seeds' efficiency points, "
              f"over arms A, B, C): **{_pts(ad['seed_spread'])}** (arm {ad.get('seed_spread_arm') or 'n/a'}). "
              f"Threshold max(0.6, 2 x seed spread) = **{_pts(ad['threshold'])}** points. Adopt only if B - A and "
              f"B - C both exceed the threshold at both seeds.", "",
          "**Efficiency points.** " + s["efficiency_definition"], ""]
    for r in s["runs"]:
        if r["efficiency"]["reason"]:
            L.append(f"- {r['arm']} seed {r['seed']}: {r['efficiency']['reason']}")
    L += ["", "![selection loss against trained targets](selection.png)", "",
          "## Runs: final losses, budgets, decisions", "",
          "| Run | Trained targets | Selection BPB (mean) | Control BPB (mean) | Accepted | Flagged | Rejected | "
          "Deferred | Quarantined |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in s["runs"]:
        d = r["decisions"]
        ctrl = r["final_control"]
        cm = sum(ctrl.values()) / len(ctrl) if ctrl else None
        L.append(f"| {r['name']} | {r['trained_targets']:,} | {_f(r['final_selection']['mean'])} | {_f(cm)} | "
                 f"{d.get('accept', 0)} | {d.get('flag', 0)} | {d.get('reject', 0)} | {d.get('deferred', 0)} | "
                 f"{d.get('quarantined', 0)} |")
    bc = s["budget_check"]
    L += ["", "Arm A's trained targets and losses are those of its decay branch at the budget; its decision counts "
              "cover its whole run (it continues to the end of its reference curve)."]
    L += ["", f"Budget check ({bc['rule']}): " + ("equal across all six runs." if bc["equal"] else
                                                  "NOT equal: " + ", ".join(f"{k} {v:,}" for k, v in bc["targets"].items())),
          "", f"Arm C's rate: {s['rejection_rate']['value']:.3f} ({s['rejection_rate']['source']}).", ""]
    doms = sorted({k for r in s["runs"] for k in r["final_selection"] if k != "mean"})
    if doms:
        L += ["Final selection loss per domain (BPB):", "", "| Run | " + " | ".join(doms) + " |",
              "|---|" + "---:|" * len(doms)]
        L += [f"| {r['name']} | " + " | ".join(_f(r["final_selection"].get(d)) for d in doms) + " |" for r in s["runs"]]
        L.append("")
    cdoms = sorted({k for r in s["runs"] for k in r["final_control"]})
    if cdoms:
        L += ["Final control loss per domain (BPB):", "", "| Run | " + " | ".join(cdoms) + " |",
              "|---|" + "---:|" * len(cdoms)]
        L += [f"| {r['name']} | " + " | ".join(_f(r["final_control"].get(d)) for d in cdoms) + " |" for r in s["runs"]]
        L.append("")
    L += ["Rejected shards:", ""]
    for r in s["runs"]:
        for x in r["rejected"]:
            src = ", ".join(f"{k} {v:.0%}" if isinstance(v, float) else f"{k} {v}" for k, v in (x.get("sources") or {}).items())
            L.append(f"- {r['name']}: {x['shard']} at decision {x.get('position')} -> {x['outcome']} ({src})")
    if not any(r["rejected"] for r in s["runs"]):
        L.append("- none")
    L += ["", "## Compute overhead", "",
          "Updates are optimizer updates; wasted updates were trained and then rolled back (rejected shards, "
          "recovery shards of rejections, branch checks). Screening passes are forward-only passes over a shard. "
          "Arm A's reference branches (decays from its stable states that build the reference curve) are the "
          "study's measuring cost, listed apart.", "",
          "| Run | Accepted updates | Wasted: rejected | Wasted: recovery | Wasted: branch | Screening passes | "
          "Wall s total | Wall s wasted training | Wall s other (measure, screen, checkpoints) | Wall s reference branches |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in s["runs"]:
        c, w = r["compute"], r["compute"]["wasted_updates"]
        ws = c["wall_s"]
        L.append(f"| {r['name']} | {c['accepted_updates']} | {w.get('rejected', 0)} | {w.get('recovery', 0)} | "
                 f"{w.get('branch', 0)} | {c['screen_passes']} | {ws.get('total', 0):.1f} | {ws.get('wasted', 0):.1f} | "
                 f"{ws.get('other', 0):.1f} | {ws.get('reference_branches', 0):.1f} |")
    L += ["", "## Stage A: calibration (shared by all arms)", "",
          f"Homogeneous source: {cal['source']}; k = {cal['k']}; recovery criterion: {cal['recovery']}.", "",
          "| Control domain | sigma (BPB) | Curve fit |", "|---|---:|---|"]
    for d, sg in sorted(cal["sigma"].items()):
        cv = cal["curves"].get(d, {})
        fit = (f"a={cv['a']:.4f} b={cv['b']:.4f} c={cv['c']:.3f}" if cv.get("ok") else
               f"refused: {cv.get('reason', 'not fitted')}")
        L.append(f"| {d} | {sg:.5f} | {fit} |")
    fr = cal["false_rejection"]
    L += ["", "False rejections on held-out homogeneous transitions: " +
          ", ".join(f"{k} {v}" for k, v in fr.items()) + ".", "",
          f"Curve-guided variant: {'requested' if cal['curve_variant']['requested'] else 'not requested'}; "
          f"{'used' if cal['curve_variant']['used'] else 'not used'}"
          + (f" ({cal['curve_variant']['reason']})" if cal["curve_variant"]["reason"] else "") + ".", "",
          "## Arm B's control losses and decisions", "", "![arm B control losses](control_b.png)", "",
          f"The decision datasets of the B runs, concatenated: {s['decisions_table']['rows']} rows in "
          f"`{s['decisions_table']['parquet']}` and `{s['decisions_table']['csv']}`.", "",
          "## The selection axis", "", f"Domains: {', '.join(s['selection']['domains'])}. Scored only after the "
          "final decay (and on arm A's decay branches for the reference curve); no rejection reads it.", "",
          f"Non-English axis: {s['selection']['non_english_axis']['text']}", "",
          "## What a seed changes", "", s["seed_effects"], "",
          "## Setting and limits", "", s["limits"], "",
          f"Plan: {pl['parameters']:,} parameters; shard {pl['shard_targets']:,} targets; budget "
          f"{pl['budget_shards']} shards ({pl['budget_targets']:,} targets); pool {pl['pool_shards']} shards.", "",
          "Timing (wall seconds): " + ", ".join(f"{k} {v:.1f}" for k, v in s["timing"].items()) + "."]
    return "\n".join(L) + "\n"


def write_report(summary, out_dir):
    """report.md and the two figures from a summary (validated first)."""
    from pathlib import Path

    from shardqueue.study.figures import control_figure, selection_figure

    out = Path(out_dir)
    text = render(summary)
    selection_figure(summary, out / "selection.png")
    control_figure(summary, out / "control_b.png")
    atomic_write_text(out / "report.md", text)
    return out / "report.md"
