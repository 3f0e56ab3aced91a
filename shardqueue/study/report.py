"""The queue study's report: queue_study/summary.json (checked against records/study.py's SCHEMA, which lists
every key the report and the figures read, with its type) -> report.md. A broken summary is refused in one
line naming its first missing or mistyped key instead of producing a half-written report.
"""
from pathlib import Path

from corpus.atomic import atomic_write_text
from records.study import validate
from shardqueue.study.adoption import DEFINITION as ADOPTION_DEFINITION
from shardqueue.study.figures import compute_figure, control_figure, screen_figure, selection_figure
from shardqueue.study.presets import SUB_SHARD_NOTE


def _pts(x):
    return "not measurable" if x is None else f"{x:+.2f}"


def _f(x, nd=4):
    return "n/a" if x is None else f"{x:.{nd}f}"


def _rate(x):
    return "n/a" if x is None else f"{x:.3f}"


def _signed(x):
    return "n/a" if x is None else f"{x:+.3f}"


def _times(x):
    return "n/a" if x is None else f"{x:.2f}x"


def render(s):
    """The Markdown report of a validated summary."""
    validate(s)
    L = header_lines(s) + verdict_lines(s) + seed_lines(s) + efficiency_lines(s) + reference_curve_lines(s)
    L += questions_lines(s) + compute_arm_lines(s) + runs_lines(s) + arm_c_lines(s) + per_domain_lines(s)
    L += stage_a_lines(s)
    return "\n".join(L) + "\n"


def header_lines(s):
    """The title, the question, the provenance and the definitions."""
    prov = s["provenance"]
    L = [f"# The queue study ({s['preset']} setting)", "",
         "Does a queue that rejects shards (arm B) beat plain training (A) and random rejection (C: as many "
         "shards rolled back as B rolled back, its rejections and its branch-check returns alike, at drawn positions) "
         "at the same budget of accepted targets, on a selection axis the queue never sees? "
         "(The proposal \"Can a model help choose its next training data?\", sections 2 and 4.)", "",
         f"Run {prov['date']} at commit `{prov['commit'][:12]}`" + (" (uncommitted changes)" if prov.get("dirty") else "")
         + f" on {prov['machine']}; stage A and the runs took {s['timing']['total']:.0f} s added up (stage A "
         f"{s['timing']['stage_a']:.0f} s, the {len(s['runs'])} runs {s['timing']['runs']:.0f} s; runs side by side "
         "with --workers overlap, so the elapsed time is shorter)." + (f" {prov['note']}" if prov.get("note") else "")
         + (f" Report and figures built {rb['date']} at commit `{rb['commit'][:12]}`." if (rb := prov.get("report_built"))
            and rb.get("commit") != prov["commit"] else ""), "",
         "## Definitions (used below)", "",
         "**D and efficiency points.** " + s["efficiency_definition"], "",
         "**Per-axis equivalent.** " + s["axis_definition"], "",
         "**Adoption rule.** " + ADOPTION_DEFINITION, "",
         f"**Schedule.** {s['schedule']}", ""]
    return L


def efficiency_lines(s):
    """Each run's efficiency points against the reference curve."""
    ax = s["per_axis"]
    L = ["", "## Efficiency points per run", "",
          "| Run | D | Selection BPB (mean) | Efficiency points | D_eq | Gap to the curve (BPB) | Reason if refused |",
          "|---|---:|---:|---:|---:|---:|---|"]
    for r in s["runs"]:
        e = r["efficiency"]
        d_eq = "n/a" if e["d_eq"] is None else f"{e['d_eq']:,.0f}"
        L.append(f"| {r['name']} | {r['trained_targets']:,} | {r['final_selection']['mean']:.4f} | {_pts(e['points'])} | "
                 f"{d_eq} | {ax['gaps_bpb'].get(r['name'], 0):+.4f} | {e['reason'] or ''} |")
    return L


def reference_curve_lines(s):
    """Arm A's reference curve: its points per seed and the monotone fit."""
    rc = s["reference_curve"]
    L = ["", "## The reference curve (arm A)", "",
          f"Decay branches at {', '.join(f'{f:.3g}' for f in rc['fractions'])} x the budget, each after the first "
          "commit that reaches it (one branch serves every threshold a single shard crosses), then arm A's own decay "
          f"where it stopped (cap {rc['cap']:g} x the budget). The runs of each seed are measured on the curve of "
          "arm A's other seeds (leave one out): "
          + "; ".join(f"without seed {sd}, it spans {c['lowest']:.4f} to {c['highest']:.4f} BPB"
                      + (", and seed {}'s final losses lie inside".format(sd) if c["ok"] else
                         f", outside it: below {c['below']}, above {c['above']}")
                      for sd, c in rc["coverage_by_seed"].items()) + ".", "",
          "| Seed | Point | D | Selection BPB (raw) |", "|---:|---|---:|---:|"]
    for sd, c in rc["per_seed"].items():
        for D, Lv, t, acc, also in zip(c["D"], c["L"], c["threshold"], c["accepted"], c["also_thresholds"]):
            L.append(f"| {sd} | {_branch_point(t, acc, also)} | {D:,} | {Lv:.4f} |")
    L += ["", "Monotone fit (every seed pooled, for the figure): " + ", ".join(f"{d:,.0f}: {v:.4f}" for d, v in zip(rc["D"], rc["L"])),
          "", "![selection loss against D](selection.png)", "",
          "The figure shows each seed's raw branch points (hollow: later seeds), the monotone fit of every seed's "
          "points pooled (dashed) and every run's final point. The pooled fit is for orientation only: each run is "
          "measured on the curve of arm A's other seeds (leave one out, the table of efficiency points above), so a "
          "final point above or below the dashed line is not the verdict on that run.", ""]
    return L


def _branch_point(threshold, accepted, also):
    """Where a point of arm A's curve was taken: its own decay, or a branch at the accepted targets of the first
    commit at or past its threshold (and the later thresholds that commit crossed too, which this branch serves)."""
    if threshold == "own decay":
        return "own decay"
    out = f"branch at {accepted:,} accepted targets (threshold {threshold:,}"
    if also:
        out += f"; also threshold{'s' * (len(also) > 1)} {', '.join(f'{t:,}' for t in also)}: one shard crossed them"
    return out + ")"


def questions_lines(s):
    """The proposal's questions answered with numbers: damage caught, false rejections, the screen, compute."""
    cal, ans = s["calibration"], s["answers"]
    fr = cal["false_rejection"]
    fc = ans["false_rejections_clean"]
    sc = ans["screen"]
    L = ["## The proposal's questions, answered with numbers", "",
          "**B - A and B - C** are in the verdict table above.", "",
          "**Which damage the queue caught and which it let through** (arm B, every seed; each shard counted once "
          "per seed; dose = realised share of damaged tokens in the shard):", "",
          "| Shard kind | Dose bin | Judged | Rejected at least once | Quarantined | Finally accepted |",
          "|---|---|---:|---:|---:|---:|"]
    for key, t in ans["caught"].items():
        L.append(f"| {t['kind']} | {t['dose_bin'] or '-'} | {t['judged']} | {t['rejected_once']} | {t['quarantined']} | "
                 f"{t['finally_accepted']} |")
    L += ["", f"**False rejections of clean shards** in the queue runs: {fc['rejected']}/{fc['judged']} clean shards "
              f"rejected at least once (one-sided 95% upper bound {_rate(fc['upper95'])}); per seed: "
              + "; ".join(f"seed {k}: {v['rejected']}/{v['judged']}" + (f" ({', '.join(v['shards'])})" if v["shards"] else "")
                          for k, v in fc["per_seed"].items()) + ".",
          f"In stage A's calibration: {fr['rate']} {fr['rate kind']} false rejections on homogeneous transitions "
          f"(one-sided 95% upper bound {fr['one-sided 95% upper bound']}; target below 5%)"
          + (f"; k and frac were chosen on {fr['choice']['transitions']} other transitions "
             f"({fr['choice']['false_rejections']} false rejections there)" if fr["rate kind"] == "held-out" and fr.get("choice") else
             "; in-sample: the same transitions chose k and frac, so the rate is optimistic")
          + (", measured on a branch that was then discarded (not part of the shared training)" if fr.get("held_out_on_branch") else "")
          + "." + (f" {SUB_SHARD_NOTE}" if fr.get("checkpoints_per_shard", 1) > 1 else ""), "",
          f"**Does the forward-only screen predict the training-based decision?** Over n = {sc['n']} judged candidates of "
          f"arm B: Spearman rank correlation between the screen score and the measured rise "
          f"{_signed(sc['spearman_score_vs_rise'])}; AUC of the screen "
          f"score for the training-based flag {_rate(sc['auc_flagged'])} ({sc['flagged']} flagged) and for rejection "
          f"{_rate(sc['auc_rejected'])} ({sc['rejected']} rejected). AUC 0.5 is no better than chance.", "",
          "![screen score against measured rise](screen_vs_rise.png)", "",
          "Each dot is one judged candidate; a screen that predicted the decision would put the rejected (X) "
          "shards to the right.", "",
          "**Compute overhead** (wall seconds; arm A's reference branches are the study's measuring cost):", "",
          "| Run | Updates kept | Updates wasted | Screens | Training kept (s) | Training wasted (s) | "
          "Measure, screen, checkpoints, setup (s) | Reference branches (s) | Overhead / kept training |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n, c in sorted(ans["compute"].items()):
        L.append(f"| {n} | {c['kept_updates']} | {c['wasted_updates']} | {c['screens']} | {c['train_kept_s']:.1f} | "
                 f"{c['train_wasted_s']:.1f} | {c['measure_screen_other_s']:.1f} | {c['reference_branches_s']:.1f} | "
                 f"{_times(c['overhead_vs_kept_training'])} |")
    L += ["", "![compute per run](compute.png)", "",
          "Overhead / kept training = (wasted training + measurement, screening, checkpoints) / kept training time. "
          "The measurement column also holds each run's setup: opening the frozen pool and, for each further seed's "
          "first run (arm B), training that seed's start state on the shared stage-A shards. Arm A's rows are its "
          "whole run: its stable shards past the budget, to where its reference curve ends, and its own decay there "
          "(an arm C with no rejection trains arm A's shards to the budget, and fewer updates); the compute per arm "
          "below stops arm A at the budget.", ""]
    return L


def runs_lines(s):
    """Final losses, budgets and decisions per run."""
    L = ["## Runs: final losses, budgets, decisions", "",
          "| Run | D | Selection BPB (mean) | Control BPB (mean) | Accepted | Flagged | Rolled back | "
          "Deferred | Quarantined | Returned | Decay (updates, targets) |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in s["runs"]:
        d = r["decisions"]
        ctrl = r["final_control"]
        cm = sum(ctrl.values()) / len(ctrl) if ctrl else None
        L.append(f"| {r['name']} | {r['trained_targets']:,} | {_f(r['final_selection']['mean'])} | {_f(cm)} | "
                 f"{d.get('accept', 0)} | {d.get('flag', 0)} | {d.get('reject', 0)} | {d.get('deferred', 0)} | "
                 f"{d.get('quarantined', 0)} | {d.get('returned', 0)} | {r['decay']['updates']}, {r['decay']['targets']:,} |")
    bc = s["budget_check"]
    L += ["", "Arm A's D and losses are those of its decay branch at the budget; its decision counts cover its whole "
              "run (it continues to build the reference curve). Rolled back: the shards a decision undid, each deferred "
              "or quarantined (a rejection) or returned by the branch check, which blamed the training phase (no "
              "rejection: the shard comes back next rotation, as a deferred one does); arm C rolls back as many.", "",
          f"Budget check ({bc['rule']}): " + (budget_held(bc, len(s["runs"])) if bc["held"] else
                                              "NOT met: " + "; ".join(bc["problems"])), ""]
    return L


def budget_held(bc, n):
    """The check held: every run within one shard of the budget, which is not equal targets (a shard is whole)."""
    stable = bc.get("stable") or {}
    if not stable:
        return f"holds in all {n} runs."
    lo, hi = min(stable.values()), max(stable.values())
    return (f"holds in all {n} runs, within a shard of the budget of {bc['budget_targets']:,} targets; not equal: "
            f"their stable phases trained {lo:,} to {hi:,} targets ({(hi - lo) / lo:.0%} apart)." if hi > lo else
            f"holds in all {n} runs, each with {lo:,} stable-phase targets (the budget {bc['budget_targets']:,}).")


def per_domain_lines(s):
    """Final losses per selection and control domain, and the rejected shards."""
    L = []
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
            src = ", ".join(f"{k} {v}" for k, v in (x.get("sources") or {}).items())
            L.append(f"- {r['name']}: {x['shard']} at decision {x.get('position')} -> {x['outcome']} (documents: {src})")
    if not any(r["rejected"] for r in s["runs"]):
        L.append("- none")
    return L


def stage_a_lines(s):
    """Stage A's calibration, arm B's controls, the selection axis, the setting and earlier attempts."""
    pl, cal = s["plan"], s["calibration"]
    L = ["", "## Stage A: calibration (shared by all arms)", "",
          f"Homogeneous source: {cal['source']}; k = {cal['k']}; recovery criterion: {cal['recovery']}; LR warm-up "
          f"over {cal.get('warmup_updates', 0)} updates.", "",
          "| Control domain | sigma (BPB) | Curve fit |", "|---|---:|---|"]
    for d, sg in sorted(cal["sigma"].items()):
        cv = cal["curves"].get(d, {})
        fit = (f"a={cv['a']:.4f} b={cv['b']:.4f} c={cv['c']:.3f}" if cv.get("ok") else
               f"refused: {cv.get('reason', 'not fitted')}")
        L.append(f"| {d} | {sg:.5f} | {fit} |")
    L += ["", f"Curve-guided variant: {'requested' if cal['curve_variant']['requested'] else 'not requested'}; "
              f"{'used' if cal['curve_variant']['used'] else 'not used'}"
          + (f" ({cal['curve_variant']['reason']})" if cal["curve_variant"]["reason"] else "") + ".", "",
          "## Arm B's control losses and decisions", "", "![arm B control losses](control_b.png)", "",
          "Both panels start at D = 0 (the shared start) on the same axes; flags and rejections are drawn on every "
          "domain in its own colour, acceptances as ticks along the bottom.", "",
          f"The decision datasets of the B runs, concatenated: {s['decisions_table']['rows']} rows in "
          f"`{s['decisions_table']['parquet']}` and `{s['decisions_table']['csv']}`.", "",
          "## The selection axis", "", f"Domains: {', '.join(s['selection']['domains'])}. Scored only after the "
          "final decay (and on arm A's decay branches for the reference curve); no rejection reads it.", "",
          f"Non-English axis: {s['selection']['non_english_axis']['text']}", "",
          "## What a seed changes", "", s["seed_effects"], "",
          "## Setting and limits", "", s["limits"], "",
          f"Plan: {pl['parameters']:,} parameters; shard {pl['shard_targets']:,} targets; budget "
          f"{pl['budget_shards']} shards ({pl['budget_targets']:,} targets at the nominal shard size"
          + (f"; {s['budget_check']['budget_targets']:,} at the pool's mean shard size, the budget the runs trained to"
             if s.get("budget_check") else "") + f") and a decay of {pl['decay_updates']} "
          f"updates; stage A {pl['stage_a']['shards']} shards, {pl['stage_a']['shared_shards']} of them shared "
          f"training; pool {pl['pool_shards']} shards.", "",
          "Timing (wall seconds): " + ", ".join(f"{k} {v:.1f}" for k, v in s["timing"].items()) + ".", "",
          "## Earlier attempts kept aside", "",
          "Files of runs that were interrupted and restarted, moved aside (not deleted) when the run began again; "
          "nothing in them enters the results above.", ""]
    L += [f"- `{e['folder']}/` ({e['files']} files)" for e in s["earlier_attempts"]] or ["- none"]
    return L


def resolution_lines(ad):
    """What the paired intervals resolve and what they leave open, against 0 and against T."""
    if not ad["intervals"]:
        return []
    T, done, left = ad["threshold"], [], []
    for name, iv in ad["intervals"].items():
        x = name.split("-")[1]
        if iv["low"] > 0:
            done.append(f"B beats {x} (the interval of {name} lies above 0)")
        elif iv["high"] < 0:
            done.append(f"B is worse than {x} (the interval of {name} lies below 0)")
        else:
            left.append(f"whether B beats {x} at all (the interval of {name} holds 0)")
        if iv["reading"] == "above":
            done.append(f"B's gain over {x} exceeds T = {T:.2f}")
        elif iv["reading"] == "below":
            done.append(f"B's gain over {x} is at most T = {T:.2f} (the interval lies at or below it)")
        else:
            left.append(f"whether B's gain over {x} exceeds T = {T:.2f} (the interval holds it)")
    return ["", "**What this study resolves** (95% intervals): " + ("; ".join(done) or "nothing") + ". "
            "**What it leaves open:** " + ("; ".join(left) or "nothing") + "."]


def verdict_lines(s):
    """The verdict: the rule as written per seed, the paired intervals beside it, every arm's seed spread."""
    ad, ax = s["adoption"], s["per_axis"]
    L = [f"## Verdict: {ad['verdict']}", ""] + [f"- {r}" for r in ad["reasons"]]
    L += ["", f"The rule as written: {ad['rule']}. " + (
        "Threshold T = max(0.6, 2 x seed spread) cannot be computed (points refused)." if ad["threshold"] is None else
        f"Threshold T = max(0.6, 2 x seed spread) = {ad['threshold']:.2f} points; "
        + ("met at every seed." if ad["rule_met"] else "not met.")), "",
          "| Seed | B - A (points) | B - C (points) | B - A (BPB gap) | B - C (BPB gap) |", "|---:|---:|---:|---:|---:|"]
    for sd in ad["seeds"]:
        k = str(sd)
        L.append(f"| {sd} | {_pts(ad['b_minus_a'].get(k))} | {_pts(ad['b_minus_c'].get(k))} | "
                 + (f"{ax['b_minus_a_bpb'][k]:+.4f} | {ax['b_minus_c_bpb'][k]:+.4f} |" if ax["defined"] else "n/a | n/a |"))
    if not ax["defined"]:
        L += ["", f"The BPB gaps are n/a: the per-axis reading is not defined here ({ax['reason']})."]
    for other, why in (("C", "neither rejected, or C's drawn rejections fell on the shards B rejected"),
                       ("A", "B rejected nothing, so it trained A's shards")):
        same = [r["seed"] for r in s["runs"] if r["arm"] == "B" and any(
            c["arm"] == other and c["seed"] == r["seed"] and c["final_selection"] == r["final_selection"]
            for c in s["runs"])]
        if same:  # identical final losses: the difference is zero by construction, not a measured tie
            L += ["", f"At seed{'s' if len(same) > 1 else ''} {', '.join(map(str, same))} arm {other} ended with "
                      f"exactly B's selection losses ({why}): B - {other} there is zero by construction, not a measured "
                      f"tie, and says nothing about choosing shards; where the verdict reads B - {other}, it reads "
                      "these zeros as they fell (more seeds could differ)."]
    if ad["intervals"]:
        L += ["", "Paired mean differences over the seeds, beside the rule (95% t interval, n - 1 degrees of freedom):",
              "", "| Comparison | Seeds | Mean (points) | SD | t | 95% interval | Against T | Against the floor 0.6 |",
              "|---|---:|---:|---:|---:|---|---|---|"]
        for name, iv in ad["intervals"].items():
            L.append(f"| {name} | {iv['n']} | {iv['mean']:+.2f} | {iv['sd']:.2f} | {iv['t']:.3f} | "
                     f"[{iv['low']:+.2f}, {iv['high']:+.2f}] | {iv['reading']} | {iv['floor_reading']} |")
    L += resolution_lines(ad)
    L += ["", "Seed spread per arm (efficiency points; the runs of each seed measured on the leave-one-out curve):", "",
          "| Arm | Mean pairwise difference (used) | Largest pairwise difference (shown, not used) |", "|---|---:|---:|"]
    for arm, v in ad["per_arm_spread"].items():
        L.append(f"| {arm} | {_f(v['mean_pairwise'], 2)} | {_f(v['largest_pairwise'], 2)} |")
    if ad["threshold"] is not None:
        L += ["", f"Seed spread {ad['seed_spread']:.2f} (arm {ad['seed_spread_arm']}); with the largest pairwise "
                  f"difference instead, T would be {ad['threshold_if_largest_pairwise']:.2f}."]
    if ax["defined"]:
        L += ["", f"Per-axis equivalent: beta = {ax['beta']:+.4f} BPB per unit ln D from {ax['slope_points']} of arm "
                  f"A's points; one efficiency point = {ax['bpb_per_point']:.5f} BPB; seed spread of gaps "
                  f"{ax['seed_spread_bpb']:.4f} BPB, threshold {ax['threshold_bpb']:.4f} BPB. Read this way, B "
                  + ("clears" if ax["passes"] else "does not clear") + " the threshold at every seed against A and C "
                  "(a reading, not the verdict: the verdict uses efficiency points). Mean gaps over the seeds: "
                  + "; ".join(f"{n} {iv['mean']:+.4f} BPB, 95% interval [{iv['low']:+.4f}, {iv['high']:+.4f}] "
                              f"({iv['df']} df)" for n, iv in ax["intervals_bpb"].items()) + "."]
    return L


def seed_lines(s):
    """How many seeds the study planned from stage A, how many it used, and what that count can resolve."""
    sd, pw = s["seeds"], s["power"]
    plan = ("stage A gave no slope to convert its noise into efficiency points (" + pw["reason"] + ")"
            if pw["beta"] is None else
            f"stage A's noise, sigma_run = {pw['sigma_run_bpb']:.4f} BPB (the mean sigma_d) and B - A at one seed "
            f"{pw['sigma_diff_bpb']:.4f} BPB = {pw['sigma_diff_points']:.2f} points at stage A's slope "
            f"{pw['beta']:+.4f} BPB per unit ln D, asks for "
            + (f"{sd['planned']:,} seeds per arm" if sd["planned"] else f"more seeds than can be counted ({pw['reason']})")
            + f" for a {pw['level']:.0%} interval of B - A narrower than the floor {pw['floor']} points (printed "
              "before the arms trained; stage A lies before the budget, where the loss falls faster, so this is a "
              "lower bound)")
    used = (f"the preset's own {sd['used']} seeds {sd['list']} (it plans none; the proposal's setting)"
            if not sd["preset_max"] else
            f"{sd['used']} seeds per arm ({sd['list'][0]}-{sd['list'][-1]}): the preset's most, since stage A gave no "
            "count" if sd["planned"] is None else
            f"{sd['used']} seeds per arm ({sd['list'][0]}-{sd['list'][-1]}): the planned count"
            + (f", capped at the preset's {sd['preset_max']} (CPU time)" if sd["planned"] > sd["preset_max"] else ""))
    meas = ("" if sd["from_measured_spread"] is None else
            f" The measured spread of B - A across the seeds asks for {sd['from_measured_spread']:,} seeds per arm for "
            "the same interval.")
    if sd.get("expected_width_points") is not None:
        meas = (f" At {sd['used']} seeds the plan expects the 95% interval of B - A to be about "
                f"{sd['expected_width_points']:,.1f} points wide." + meas)
    enough = sd["planned"] is not None and sd["used"] >= sd["planned"]
    return ["", "## Seeds: planned and used", "", f"Planned: {plan}. Used: {used}.{meas} "
            + ("The study ran the planned count." if enough else
               ("With no count planned, nothing says these seeds suffice" if sd["planned"] is None else
                "The study ran fewer seeds than planned") + ": its intervals may be wider than the floor, so it can "
               "resolve a gain only well away from 0 and the threshold; a gain near them stays unresolved.")]


def arm_c_lines(s):
    """Arm C's rejections against arm B's, per seed: the count rule and what each run removed."""
    L = ["Arm C's rejections match arm B's count at the same seed (B's rejections, not its flags, and not a rate times "
         "C's own number of decisions); the positions are drawn among the first decisions C is sure to make:", "",
         "| Seed | B rejections | C rejections | Equal | C's positions (window) | B shards rejected | C shards "
         "rejected | B targets rolled back | C targets rolled back | B shards absent at end | C shards absent at end |",
         "|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|"]
    notes = []
    for sd, c in s["arm_c"].items():
        b, x = c["B"], c["C"]
        L.append(f"| {sd} | {b['rejections']} | {x['rejections']} | {'yes' if c['equal'] else 'NO'} | "
                 f"{c['positions']} (first {c['window']}) | {b['shards_rejected']} | {x['shards_rejected']} | "
                 f"{b['targets_rolled_back']:,} | {x['targets_rolled_back']:,} | {b['absent_at_end']} | "
                 f"{x['absent_at_end']} |")
        if not c["equal"]:
            notes.append(f"- seed {sd}: {c['why_not']}")
    return L + [""] + notes + (["", "Shards absent at the end: quarantined, deferred and still pending, or undecided. "
                                "A rejection removes the shard from that point of training (rolled back); B removes "
                                "some for good by rejecting them twice, C rarely hits the same shard twice.", ""])


def compute_arm_lines(s):
    """Trained targets and wall time per arm, and the overhead of B over A as ratios."""
    c = s["compute"]
    L = ["**Compute per arm** (mean over seeds; arm A to its budget: its stable shards and the decay branch there, "
         "not the reference curve it goes on to build):", "",
         "| Arm | Seeds | Trained targets (kept and wasted) | Training (s) | Wall time of the queue (s) |",
         "|---|---:|---:|---:|---:|"]
    for arm, v in c["per_arm"].items():
        L.append(f"| {arm} | {v['seeds']} | {v['trained_targets']:,.0f} | {v['training_s']:.1f} | {v['wall_s']:.1f} |")
    o = c["b_over_a"]
    if o:
        L += ["", f"Overhead of B over A: trained targets {_times(o['trained_targets'])}; wall time "
                  f"{_times(o['wall_s'])} (both measured and screened after every shard, as the study runs them); "
                  f"B's wall time over A's training time alone {_times(o['wall_vs_a_training_s'])} (plain training "
                  "measures nothing).", ""]
    return L


def write_report(summary, out_dir):
    """report.md and the figures from a summary (validated first)."""
    out = Path(out_dir)
    text = render(summary)
    selection_figure(summary, out / "selection.png")
    control_figure(summary, out / "control_b.png")
    screen_figure(summary, out / "screen_vs_rise.png")
    compute_figure(summary, out / "compute.png")
    atomic_write_text(out / "report.md", text)
    return out / "report.md"
