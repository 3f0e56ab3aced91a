"""The proposal's sections of the findings page, the shard queue and its study, computed from their typed
records: the queue run's summary and its re-execution (records/queue_run.py, records/reexecution.py), the
study's summary (records/study.py)."""
from findings.section import Section, f, link, loaded, missing, rel
from records.queue_run import RunSummary
from records.reexecution import Reexecution
from records.study import StudySummary


def queue_section(d, out):
    s = loaded(RunSummary.load, d / "queue_summary.json")
    sec = Section("queue", "The shard queue (proposal: rollback, deferral, quarantine)", ref="proposal")
    if not s:
        return missing("queue", sec.title, d, s)
    outcome = (f"{len(s.accepted)} shards accepted, {sum(s.rejections.values())} rejections of {len(s.rejections)} "
               f"shard(s), quarantined: {', '.join(s.quarantined) or 'none'}")
    sec.headline = f"{outcome}; harmful shards accepted: {len(s.harmful_accepted)}."
    sec.score = ("the proposal's mechanism", outcome, "no result measured in the proposal", "no paper value")
    calibration_rows(sec, s.calibration)
    sc = s.screen
    sec.row("forward-only screen vs training decision: Spearman, AUC",
            f"{f(sc.spearman_screen_vs_rise, 2, sign=True)}, {f(sc.auc_screen_flagged, 2)} ({sc.n} shards, "
            f"{sc.flagged} flagged)", "asked, not measured")
    fin, start = s.final.control if s.final else {}, s.start_losses
    if fin and start:
        better = sum(fin[k] < start[k] for k in fin if k in start)
        sec.row("control domains lower after the run than at its start", f"{better} of {len(fin)}", "—")
    sec.text = ["No queue result has been measured in the proposal; this is the mechanism on the offline corpus "
                "with a planted harmful source" + (f" (caught: {', '.join(s.harmful_quarantined)})."
                                                   if s.harmful_quarantined else ".")]
    rx = loaded(Reexecution.load, d)
    sec.row("the log executed again from its start state (`reconstruct --execute`)", reexecution_cell(rx),
            "the proposal: the verdict can be reconstructed")
    if rx and not rx.held:
        sec.notes.append(f"The re-execution did NOT reproduce the log: {rx.difference.line}.")
    for q, rec in s.confounded_recoveries:
        sec.notes.append(f"{q} is not from the harmful source, yet it was quarantined: its recovery shard {rec} was "
                         f"harmful, so the recovery check measured {rec}'s damage (a limit of a one-shard recovery check).")
    sec.links = [link(out, rel(d / "report.md", out), "queue/report.md")]
    return sec


def calibration_rows(sec, cal):
    """The rule's calibration as the run summary repeats it: k and frac, the false-rejection rate against 5%."""
    if cal.k is None:
        return
    sec.row("calibrated k and recovery fraction", f"k = {cal.k}, {cal.frac}", "illustrated as 3σ_d; not fixed")
    sec.row(f"{'in-sample' if cal.in_sample else 'held-out'} false-rejection rate (one-sided 95% upper bound)",
            f"{cal.false_rejections}/{cal.transitions} ({100 * cal.upper95:.1f}%)", rate_rule(cal))
    n = cal.transitions
    if n and 1 - 0.05 ** (1 / n) >= 0.05:  # the Clopper-Pearson bound with no false rejection at all
        sec.notes.append(f"With {n} transitions the 95% bound cannot fall below 5% even with no false rejection "
                         "(59 are needed): the rule's point estimate is met, not a guarantee.")


def reexecution_cell(rx):
    """What the re-execution of the queue's log found, in one cell."""
    if not rx:
        return "not run"
    if not rx.held:
        return f"FAILED at record {rx.difference.seq} ({rx.difference.field})"
    return (f"held: records {rx.first}-{rx.last} reproduced, {rx.mode} "
            f"({'this machine' if rx.same_machine else 'another machine'}), in {rx.seconds:.0f} s")


def rate_rule(cal):
    """The proposal's rule (false-rejection rate below 5%) for the point estimate and for its 95% bound. An
    in-sample estimate meets it by construction: calibration picked the first grid point that does."""
    point = cal.false_rejections / max(1, cal.transitions) < 0.05
    bound = cal.upper95 < 0.05
    how = " by construction (the same transitions chose k and frac)" if point and cal.in_sample else ""
    return (f"below 5% required: the point estimate {'meets' if point else 'does NOT meet'} it{how}; "
            f"the 95% bound ({100 * cal.upper95:.1f}%) {'meets' if bound else 'does not'}")


def study_section(d, out):
    s = loaded(StudySummary.load, d / "summary.json")
    sec = Section("queue_study", "The queue study (arms A/B/C, adoption rule)", ref="proposal")
    if not s:
        return missing("queue_study", sec.title, d, s)
    ad = s.adoption
    fin = {(r.arm, r.seed): r.selection_mean for r in s.runs}
    raw = {(other, seed): fin[("B", seed)] - fin[(other, seed)] for seed in ad.seeds for other in ("A", "C")
           if ("B", seed) in fin and (other, seed) in fin}
    # the intervals' lines say why (the rule's per-seed lines would grow with the seeds); refusals say why not
    why = [r for r in ad.reasons if r.startswith(("B-A:", "B-C:"))] or ad.reasons
    sec.headline = f"Verdict: {ad.verdict}" + (f" ({'; '.join(why)})" if why else "") + "."
    sec.score = ("the adoption rule", f"Verdict: {ad.verdict}", "no result measured in the proposal", "no paper value")
    for other in ("A", "C"):
        pts = getattr(ad, f"b_minus_{other.lower()}")
        sec.row(f"B − {other}, efficiency points (seeds {', '.join(map(str, ad.seeds))})",
                ", ".join("refused" if pts.get(str(x)) is None else f"{pts[str(x)]:+.2f}" for x in ad.seeds),
                "> max(0.6, 2 × seed spread) to adopt")
        iv = ad.interval(other)
        if iv:
            sec.row(f"B − {other}, mean over seeds with its 95% t interval ({iv.df} df)",
                    f"{iv.mean:+.2f} [{iv.low:+.2f}, {iv.high:+.2f}]",
                    "above the threshold to adopt; at or below it: not adopted; else unresolved")
        sec.row(f"B − {other}, final selection BPB", ", ".join(f"{raw[(other, x)]:+.4f}" for x in ad.seeds
                                                             if (other, x) in raw), "no result measured")
        gap = s.gap_interval(other)
        if gap:  # the per-axis reading exists even where efficiency points are refused
            sec.row(f"B − {other}, gap to the reference curve (BPB), mean and 95% t interval ({gap.df} df)",
                    f"{gap.mean:+.4f} [{gap.low:+.4f}, {gap.high:+.4f}]", "no result measured")
    sec.row("seed spread, threshold", f"{f(ad.seed_spread, 2)}, {f(ad.threshold, 2)}", "—")
    sec.row("seeds per arm: used, planned from stage A's noise",
            f"{s.seeds_used}, " + ("no count" if s.seeds_planned is None else f"{s.seeds_planned:,}"), "the proposal: two")
    if s.b_over_a:
        sec.row("compute of B over A: trained targets, wall time",
                "{:.2f}x, {:.2f}x".format(*s.b_over_a), "the proposal asks for the actual overhead")
    sec.links = [link(out, rel(d / "report.md", out), "queue_study/report.md")]
    return sec
