"""report.md and decisions.parquet/.csv of a queue run; its figure is drawn by control_figure.py."""
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from corpus.atomic import atomic_write_bytes, atomic_write_text
from shardqueue.policy.rule import rate_kind
from shardqueue.world.pool import pool_roles


def _flag_text(r, x):
    """One flagged domain of a candidate record; the random policy's flag is a draw, not a measured domain."""
    if x not in r["deltas"]:
        return f"{x} (drawn by the random policy, not measured)"
    return f"{x} (+{r['deltas'][x]:.4f} > {r['thresholds'][x]:.4f})"


def _recovery_text(r, x):
    if x not in r["deltas"]:
        return f"{x} (the random policy's draw)"
    return f"{x} {r['deltas'][x]:+.4f} (limit {r['limits'].get(x, 0):.4f})"

REGISTER = {"library": "code", "test": "tests", "prose": "prose"}
_BRANCH = {"clean": "clean reserve shard", "source": "same-source shard"}


def decision_rows(recs):
    """One row per shard decision (accept / reject / undecided), joined with its measurements."""
    rows, last_train, history = [], {}, {}
    rotation = 0
    for r in recs:
        if r["event"] == "rotation":
            rotation = r["rotation"]
        if r["event"] == "train":
            last_train[r["shard"]] = r
            if r["role"] == "recovery":
                last_train[("rec", r["tested"])] = r
        if r["event"] in ("accept", "reject", "undecided"):
            sid = r["shard"]
            t = last_train.get(sid, {})
            rec = last_train.get(("rec", sid), {}) if r["event"] != "accept" or r.get("note") == "recovered" else {}
            decision = r["event"] if r["event"] != "reject" else f"reject:{r['outcome']}"
            mix = r["sources"]
            rows.append({"seq": r["seq"], "rotation": rotation, "shard": sid, "sha256": r["sha256"],
                         "sources": json.dumps(mix, sort_keys=True),
                         "register_mix": json.dumps({REGISTER.get(k, "other"): v for k, v in mix.items()}, sort_keys=True),
                         "screen_score": (t.get("screen") or {}).get("score"), "screen_bpb": (t.get("screen") or {}).get("shard_bpb"),
                         "deltas": json.dumps(t.get("deltas"), sort_keys=True),
                         "thresholds": json.dumps(t.get("thresholds"), sort_keys=True),
                         "flagged": json.dumps(t.get("flagged") or []),
                         "recovery_shard": rec.get("shard"), "recovery_deltas": json.dumps(rec.get("deltas"), sort_keys=True),
                         "unrecovered": json.dumps(rec.get("unrecovered") or []),
                         "residual": None, "decision": decision + (f" ({r['note']})" if r.get("note") else ""),
                         "history": json.dumps(history.get(sid, [])), "trained_targets": t.get("targets"),
                         "seconds": t.get("seconds"), "role": t.get("role")})
            history.setdefault(sid, []).append(decision)
        if r["event"] == "return":
            history.setdefault(r["shard"], []).append("return")
    return rows


def _rate_kind(calib):
    """Says which transitions the reported false-rejection rate was measured on (shardqueue/policy/rule.py's rate_kind)."""
    if rate_kind(calib) == "held-out":
        return "held-out (a second set of transitions, not the one that chose k and frac)"
    return "in-sample (the same transitions chose k and frac, so the rate is optimistic)"


def _fmt(v, nd=4):
    return "" if v is None else (f"{v:+.{nd}f}" if isinstance(v, float) else str(v))


def write_report(out, recs, calib, pool, summary):
    """report.md, decisions.parquet/.csv and control_curves.png of a finished run (summary: its RunSummary),
    in `out`."""
    out = Path(out)
    rows = decision_rows(recs)
    write_tables(out, rows)
    # late: matplotlib (0.4 s of CPU) only where a report is drawn, so `reconstruct`, which imports this module
    # through the runs, loads no figure library
    from shardqueue.checks.control_figure import figure

    figure(recs, out / "control_curves.png")
    start = recs[0]
    L = ["# Queue report", "",
         f"Policy **{start['policy']}**, seed {start['seed']}, run `{start['run_id']}`; budget {start['budget_targets']} "
         f"accepted targets; a rotation boundary every {start['rotation_shards']} shards. Losses are control-set BPB.", ""]
    short = budget_shortfall(start.get("budget_targets"), summary)
    if short:
        L += [f"**The {short}.**", ""]
    L += harmful_lines(summary, pool)
    if pool.get("reserve"):
        L += [f"A flag's recovery is tested on the reserve of calibration-source shards ({', '.join(pool['reserve'])}), "
              "never on a candidate. "
              + (f"First-rotation rejections get a branch check, mode **{start.get('branch_mode', 'clean')}** "
                 "(clean: only a clean reserve branch that rises as much blames the training phase; literal: the "
                 "proposal's branch on another shard of the same source)." if start.get("branch_check") else
                 "First-rotation rejections get no branch check in this run."), ""]
    if start["policy"] == "queue" or calib.get("k"):
        L += calibration_lines(calib, pool)
    L += sets_lines(pool) + decision_lines(rows) + rejection_lines(recs) + inspection_lines(out)
    sa = summary.screen
    L += ["", "## Screen against decision", "",
          f"Forward-only screen (shard BPB minus pool-sample BPB at the last accepted state) on {sa.n} candidate shards: "
          f"Spearman rank correlation with the measured rise {_fmt(sa.spearman_screen_vs_rise, 3)}; AUC for flagged "
          f"vs not {_fmt(sa.auc_screen_flagged, 3)} ({sa.flagged} flagged). {sa.caveat}."]
    L += compute_lines(recs)
    if summary.final:
        f = summary.final
        L += ["", "## After the final decay", "", f"Official BPB {f.official:.4f}.", "", "| set | domain | BPB |", "|---|---|---|"]
        L += [f"| control | {d} | {v:.4f} |" for d, v in sorted(f.control.items())]
        L += [f"| selection | {d} | {v:.4f} |" for d, v in sorted(f.selection.items())]
    L += ["", "![control BPB against trained targets](control_curves.png)", "",
          "Figure: control BPB per domain after every trained shard, against all trained targets. Black ticks on "
          "the bottom strip mark acceptances; a triangle (flagged) or a cross (rejected) sits on the domain that "
          "exceeded its threshold most, in that domain's colour; dotted red lines are rollbacks (the next point is "
          "the restored state's next shard).", ""]
    atomic_write_text(out / "report.md", "\n".join(L))


def budget_shortfall(budget, summary):
    """What a run that ended short of its budget of accepted targets reached, or None: the queue stops when its
    candidates run out (quarantined, undecided), and a header naming the budget alone reads as if it was trained."""
    got = summary.accepted_tokens
    if budget is None or got >= budget:
        return None
    return (f"budget was not reached: {got:,} of {budget:,} accepted targets ({got / budget:.0%}); the candidates "
            f"ran out ({len(summary.quarantined)} quarantined, {len(summary.undecided)} undecided, "
            f"{len(summary.deferred_pending)} deferred and pending)")


def harmful_lines(summary, pool):
    """What became of the pool's planted harmful shards, first in the report: the queue's own test. One that the
    queue accepted is the run's headline; the plain and random policies accept harm by design."""
    planted = sorted(s for s, role in pool_roles(pool).items() if role == "harmful")
    if not planted:
        return []
    acc, quar = summary.harmful_accepted, summary.harmful_quarantined
    rest = [s for s in planted if s not in acc and s not in quar]
    fates = (f"accepted without a return: {', '.join(acc) or 'none'}; quarantined: {', '.join(quar) or 'none'}"
             + (f"; neither: {', '.join(rest)}" if rest else ""))
    if acc and summary.policy == "queue":
        return ["## Outcome: a harmful shard got through", "",
                f"**The queue ended with {len(acc)} of the {len(planted)} planted harmful shard(s) accepted: "
                f"{', '.join(acc)}.** Their rise on the control domains was under the calibrated threshold, or "
                f"recovered after one recovery shard (their records below say which). Planted harmful shards: "
                f"{fates}.", ""]
    why = f" (policy {summary.policy} does not judge shards by their losses: it accepts harm by design)" if acc else ""
    return ["## Outcome", "", f"Planted harmful shards {', '.join(planted)}: {fates}{why}.", ""]


def write_tables(out, rows):
    """decisions.parquet and decisions.csv: one row per decision (decision_rows)."""
    table = pa.Table.from_pylist(rows) if rows else pa.table({})
    buf = pa.BufferOutputStream()
    pq.write_table(table, buf)
    atomic_write_bytes(out / "decisions.parquet", buf.getvalue().to_pybytes())
    sink = pa.BufferOutputStream()
    pcsv.write_csv(table, sink)
    atomic_write_bytes(out / "decisions.csv", sink.getvalue().to_pybytes())


def calibration_lines(calib, pool):
    """The report's stage-A section: sigma_d, the chosen k and frac, the false-rejection rate, the grid."""
    L = ["## Calibration (stage A)", "",
         f"Source `{pool['calibration_source']}`: {len(calib['sigma_shards'])} shards set sigma_d; "
         f"{calib['transitions']} further transitions (other shards of that source, not those that set sigma_d) "
         f"measure the false-rejection rate: {_rate_kind(calib)}.",
         f"Chosen from the grid written before calibration: **k = {calib['k']}**, recovery fraction **{calib['frac']}** "
         f"(a flagged domain must come back below frac x k x sigma_d over the reference).",
         f"False rejections ({rate_kind(calib)}): **{calib['false_rejections']}/{calib['transitions']} = "
         f"{calib['false_rejection_rate']:.3f}**, one-sided 95% Clopper-Pearson upper bound **{calib['upper95']:.3f}**.", "",
         "| domain | sigma_d (BPB) | k x sigma_d |", "|---|---|---|"]
    L += [f"| {d} | {s:.4f} | {calib['k'] * s:.4f} |" for d, s in sorted(calib["sigma"].items())]
    L += ["", "| k | frac | false rejections on the choosing transitions | rate | 95% upper |", "|---|---|---|---|---|"]
    L += [f"| {g['k']} | {g['frac']} | {g['false_rejections']}/{g['transitions']} | {g['rate']:.3f} | {g['upper95']:.3f} |"
          for g in calib["grid"]]
    return L


def sets_lines(pool):
    """The control and selection sets: documents excluded from the pool, each set's 13-gram overlap with it."""
    L = ["", "## Control and selection sets", "",
         f"{pool['excluded_by_text_hash']} training documents identical (text SHA256) to a control or selection "
         "document were excluded from the pool. 13-token-gram overlap of each set with the pool:", "",
         "| set | domain | 13-gram overlap with pool |", "|---|---|---|"]
    for part in ("control", "selection"):
        for d in sorted(pool["sets_sha256"][part]):
            L.append(f"| {part} | {d} | {pool['overlap_13gram'].get(d, 0):.4f} |")
    return L


def decision_lines(rows):
    """One table row per decision."""
    L = ["", "## Decisions", "", "| seq | rot | shard | sources | screen | max rise / threshold | flagged | recovery shard "
         "| unrecovered | decision | earlier |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        d, th = json.loads(r["deltas"] or "null"), json.loads(r["thresholds"] or "null")
        mr = max((d[x] / th[x] for x in (th or {}) if th[x] > 0), default=None) if d else None
        L.append(f"| {r['seq']} | {r['rotation']} | {r['shard']} | {r['sources']} | {_fmt(r['screen_score'])} | "
                 f"{_fmt(mr, 2)} | {', '.join(json.loads(r['flagged']))} | {r['recovery_shard'] or ''} | "
                 f"{', '.join(json.loads(r['unrecovered']))} | {r['decision']} | {', '.join(json.loads(r['history']))} |")
    return L


def rejection_lines(recs):
    """Every rejected (or undecided) shard, step by step through the records that name it."""
    L = ["", "## Every rejection, step by step", ""]
    for sid in sorted({r["shard"] for r in recs if r["event"] in ("reject", "undecided")}):
        L.append(f"- **{sid}**:")
        for r in recs:
            if r.get("shard") == sid or r.get("tested") == sid or r.get("branch_shard") == sid:
                line = _step_text(r)
                if line:
                    L.append(f"  - [{r['seq']}] {line}")
    return L


def _step_text(r):
    """One record of a rejected shard's story (None: a record the story leaves out)."""
    if r["event"] == "train" and r["role"] == "candidate" and r["flagged"]:
        return f"rotation {r['queue']['rotation']}: trained, flagged in " + ", ".join(_flag_text(r, x) for x in r["flagged"])
    if r["event"] == "train" and r["role"] == "recovery":
        return (f"recovery shard {r['shard']}: " + ", ".join(_recovery_text(r, x) for x in r.get("limits", {}))
                + (f" -> unrecovered in {', '.join(r['unrecovered'])}" if r["unrecovered"] else " -> recovered"))
    if r["event"] == "rollback":
        return (f"rolled back to update {r['to_step']} (parameters SHA256 {r['params_sha256'][:16]}…, equal to the "
                "pre-shard state's)")
    if r["event"] == "branch":
        return f"branch check ({r['mode']}): " + (
            "; ".join(f"{_BRANCH[b['kind']]} {b['shard']} from the same checkpoint "
                      f"{'rose as much' if b['rose'] else 'did not rise as much'}" for b in r["branches"])
            + f" -> blames the {r['verdict']}" if r["possible"] else r["note"])
    if r["event"] == "reject":
        return f"rejected -> **{r['outcome']}**"
    if r["event"] == "inspect":
        return f"inspected: [{r['report']}]({r['report']}), {'cause found' if r['cause_found'] else 'no cause found'}"
    if r["event"] == "return":
        return "returned from quarantine"
    if r["event"] == "accept":
        return f"accepted ({r.get('note') or 'not flagged'})"
    return None


def inspection_lines(out):
    """Each inspection report of the run folder in one line: the measure furthest from clean, the causes."""
    insp = sorted((out / "inspection").glob("*.json")) if (out / "inspection").exists() else []
    if not insp:
        return []
    L = ["", "## Inspections", ""]
    for p in insp:
        j = json.loads(p.read_text())
        far = max(j["measures"], key=lambda m: j["measures"][m]["z"])
        L.append(f"- {j['shard']}: sources {j['source_mix']}; furthest from its {len(j['clean_reference'])} clean "
                 f"shards: {far.replace('_', ' ')} (z {j['measures'][far]['z']:.1f}); cause: "
                 f"{'; '.join(j['causes']) or 'none found'}")
    return L


def compute_lines(recs):
    """All training in updates and seconds, and the part of it that rollbacks and branch checks wasted."""
    trains = [r for r in recs if r["event"] in ("train", "branch") and "updates" in r]
    kept = [r for r in recs if r["event"] == "train"]
    # a trained shard's work is kept when no rollback followed it before its acceptance
    wasted = {"rejected shards": 0, "recovery shards rolled back": 0, "branch checks": 0}
    wsec = dict.fromkeys(wasted, 0.0)
    rolled_back = False
    for r in recs:
        if r["event"] == "train" and r["role"] == "candidate":
            rolled_back = False
        if r["event"] == "return_front" and r.get("to") == "reserve" and not rolled_back:
            # the recovery shard of the candidate that reached the budget, undone without a rollback
            rc = next(t for t in reversed(kept) if t["shard"] == r["shard"] and t["seq"] < r["seq"])
            wasted["recovery shards rolled back"] += rc["updates"]
            wsec["recovery shards rolled back"] += rc["seconds"]
        if r["event"] == "rollback":
            rolled_back = True
            c = next(t for t in reversed(kept) if t["shard"] == r["shard"] and t["seq"] < r["seq"])
            rc = next((t for t in reversed(kept) if t["role"] == "recovery" and t.get("tested") == r["shard"]
                       and t["seq"] < r["seq"]), None)
            wasted["rejected shards"] += c["updates"]
            wsec["rejected shards"] += c["seconds"]
            if rc:
                wasted["recovery shards rolled back"] += rc["updates"]
                wsec["recovery shards rolled back"] += rc["seconds"]
        if r["event"] == "branch" and r.get("possible"):
            wasted["branch checks"] += r["updates"]
            wsec["branch checks"] += r["seconds"]
    total_up = sum(r["updates"] for r in trains)
    L = ["", "## Compute", "", "| work | updates | seconds |", "|---|---|---|",
         f"| all training (queue) | {total_up} | {sum(r['seconds'] for r in trains):.1f} |"]
    L += [f"| wasted: {k} | {v} | {wsec[k]:.1f} |" for k, v in wasted.items()]
    return L + [f"| accepted shards kept | {total_up - sum(wasted.values())} | |"]
