"""Sections 5.4-5.6 of the findings page (the confirmation score, source windows, prefix rankings), computed
from the evaluation's typed records (records/evaluation.py)."""
import statistics

from findings import PAPER
from findings.section import Section, link, loaded, missing, n, rel, signs_agree
from records.evaluation import Confirmation, Rankings, WindowSummary


def eval_sections(d, out):
    """Sections 5.4, 5.5 and 5.6 from the evaluation's result files."""
    return [confirmation_section(d, out), windows_section(d, out), rankings_section(d, out)]


def confirmation_section(d, out):
    conf = loaded(Confirmation.load, d)
    s54 = Section("s5_4", "5.4 Confirmation score")
    if conf:
        sc = conf.bpb
        P = PAPER["s5_4_delta_vs_baseline"]
        parts, pairs = [], []
        for (cond, seed), b in sorted(sc.items()):
            base = sc.get(("baseline", seed))
            if cond == "baseline" or base is None:
                continue
            pk = f"{cond}_s{seed}"
            s54.row(f"{cond} seed {seed}: Δ BPB vs same-seed baseline", f"{b - base:+.5f}",
                    f"{P[pk]:+.5f}" if pk in P else "—")
            parts.append(b - base)
            pairs.append((f"{cond} s{seed}", b - base, P[pk]) if pk in P else None)
        pairs = [x for x in pairs if x]
        s54.score = ("Δ confirmation BPB vs same-seed baseline", ", ".join(f"{k} {a:+.4f}" for k, a, _ in pairs),
                     ", ".join(f"{k} {b:+.4f}" for k, _, b in pairs),
                     signs_agree([a for _, a, _ in pairs], [b for _, _, b in pairs]) if pairs else "n/a")
        worse = sum(x > 0 for x in parts)
        s54.headline = (f"On the confirmation stream ({conf.targets:,} targets, {conf.duplicates:,} "
                        f"exact duplicates excluded) the interventions are worse than the baseline in {worse} of "
                        f"{len(parts)} contrasts (paper: 4 of 4, {PAPER['s5_4_duplicates_excluded']} duplicates excluded).")
        if conf.status and conf.status != "confirmed":
            s54.notes.append(f"status: {conf.status}")
    else:
        s54 = missing("s5_4", s54.title, d, conf)
    s54.links = [link(out, rel(d / "report.md", out), "eval/report.md")]
    return s54


def windows_section(d, out):
    s55 = Section("s5_5", "5.5 Source windows: beginnings against tails")
    conf, dev = loaded(WindowSummary.load, d, "conf"), loaded(WindowSummary.load, d, "dev")
    if conf:
        confirmation_rows(s55, conf)
    else:
        s55 = missing("s5_5", s55.title, d, conf)
    if dev:
        first, last = position_shares(dev.cells)
        if last:
            P = PAPER["s5_5_position_bins"]
            rng = lambda xs: f"median {statistics.median(xs):.0f}% (range {min(xs):.0f} to {max(xs):.0f}%)"  # noqa: E731
            s55.row(f"development tails, {len(last)} declared cells that improved: share of the improvement "
                    "after position 512 (scaled to the context; a cell with a tiny total gives an extreme share)", rng(last),
                    f"{P['after_512_share_pct_min']}–{P['after_512_share_pct_max']}%")
            s55.row("... in the first 128 positions (scaled)", rng(first),
                    f"{P['first_128_share_pct_min']}–{P['first_128_share_pct_max']}%")
    s55.links = [link(out, rel(d / "report.md", out), "eval/report.md")] + [
        link(out, rel(d / p.name, out), p.stem.replace("_", " ")) for p in sorted(d.glob("*.png"))]
    return s55


def confirmation_rows(s55, w):
    """The confirmation population's declared contrasts: counts beside the paper's, then cell by cell."""
    declared = [c for c in w.cells if c.declared]
    neg = sum(c.interaction < 0 for c in declared)
    excl = sum(c.interval_adjusted[1] < 0 or c.interval_adjusted[0] > 0 for c in declared)
    tails_better = sum(c.tail_delta < 0 for c in declared)
    P5 = PAPER["s5_5_windows"]
    s55.headline = (f"Confirmation: {neg} of {len(declared)} declared tail-minus-beginning interactions are negative "
                    f"and {excl} intervals exclude zero; tails improve in {tails_better} of {len(declared)} "
                    f"(paper: {P5['interactions_negative']} of {P5['contrasts']} negative, "
                    f"{P5['intervals_excluding_zero']} exclude zero).")
    s55.row("declared contrasts: negative interactions", f"{neg} of {len(declared)}",
            f"{P5['interactions_negative']} of {P5['contrasts']}")
    s55.row("intervals excluding zero (interval adjusted)", f"{excl} of {len(declared)}",
            f"{P5['intervals_excluding_zero']} of {P5['contrasts']} ({P5['level_pct']}%)")
    s55.row("confirmation sources, all strata", n(sum(w.stratum_sources)), n(P5["conf_sources"]))
    top = w.stratum_sources[-1] if w.stratum_sources else None
    s55.row(f"confirmation sources in the top stratum ({w.top_stratum if top is not None else 'n/a'}; paper: > 16,384 "
            "tokens)", n(top) if top is not None else "n/a", n(P5["conf_sources_over_16384"]))
    # the windows' targets, the paper's 3,214,901: not the confirmation stream's (section 5.4), a population apart
    s55.row("confirmation window text targets per checkpoint", n(w.text_targets) if w.text_targets else
            "not recorded (an evaluation before 2026-12-07)", n(P5["conf_targets_per_checkpoint"]))
    by_key = {(c.condition, c.seed, c.stratum): c for c in declared}
    for (cond, seed, k), c in sorted(by_key.items(), key=lambda x: (x[0][1], x[0][2], x[0][0])):
        pc = paper_cell(cond, seed, k, w.cells)
        lo, hi = c.interval_adjusted
        s55.row(f"{cond} seed {seed}, stratum {w.labels[k] if k < len(w.labels) else k}: beginning Δ / tail Δ / "
                "interaction [adjusted interval]",
                f"{c.begin_delta if c.begin_delta is not None else 0:+.4f} / {c.tail_delta:+.4f} / "
                f"{c.interaction:+.4f} [{lo:+.4f}, {hi:+.4f}]",
                (f"{pc['prefix_delta']:+.4f} / {pc['tail_delta']:+.4f} / {pc['interaction']:+.4f} "
                 f"[{pc['interval'][0]:+.4f}, {pc['interval'][1]:+.4f}] ({pc['stratum']})") if pc else "—")
    # the paper: every interaction and tail delta negative, every beginning delta positive (a tradeoff, not only a sum)
    worse_begin = sum((c.begin_delta or 0) > 0 for c in declared)
    s55.score = ("declared tail-minus-beginning interactions", f"{neg} of {len(declared)} negative, {excl} intervals "
                 f"exclude zero", f"{P5['interactions_negative']} of {P5['contrasts']} negative, "
                 f"{P5['intervals_excluding_zero']} exclude zero; every beginning delta positive",
                 f"interaction's direction agrees in {neg} of {len(declared)}, interval excludes zero in {excl} of "
                 f"{len(declared)}; beginnings worse (delta > 0) in {worse_begin} of {len(declared)}, tails better in "
                 f"{tails_better} of {len(declared)} (paper: all of each)")


def rankings_section(d, out):
    s56 = Section("s5_6", "5.6 Prefix rankings")
    rk = loaded(Rankings.load, d)
    if rk:
        P6 = PAPER["s5_6_rankings"]
        s56.headline = (f"{rk.reversals} ranking reversal(s) between the full score and {rk.prefixes} prefixes; "
                        f"{rk.outside} of {rk.contrasts} method/prefix contrasts outside their 95% subset interval "
                        f"(paper: {P6['reversals']} reversals, {P6['contrasts_outside_95']} of {P6['contrasts']}).")
        s56.row("ranking reversals", str(rk.reversals), str(P6["reversals"]))
        s56.row("contrasts outside the 95% subset interval", f"{rk.outside} of {rk.contrasts}",
                f"{P6['contrasts_outside_95']} of {P6['contrasts']}")
        s56.row("ranked checkpoints", str(len(rk.methods)), str(P6["checkpoints"]))
        s56.notes.append(f"The ranked sets differ: ours is {', '.join(rk.methods) or 'n/a'}; the paper ranks "
                         "original, random spans and five earlier training screens that this repository does not have "
                         "(so ours includes segmented_s43, which the paper does not rank).")
        s56.score = ("ranking reversals under prefixes", str(rk.reversals), str(P6["reversals"]),
                     ("agrees" if (rk.reversals == 0) == (P6["reversals"] == 0) else "DISAGREES")
                     + " (on a different ranked set)")
    else:
        s56 = missing("s5_6", s56.title, d, rk)
    s56.links = [link(out, rel(d / "report.md", out), "eval/report.md")]
    return s56


def paper_cell(cond, seed, k, cells):
    """The paper's declared cell for ours: the same condition and seed, and the same rank among the
    declared strata (the paper declares its two strata below 16,384 tokens; a smaller context
    scales the strata, so they are matched by order, not by token count)."""
    ours = sorted({c.stratum for c in cells if c.declared})
    theirs = [c for c in PAPER["s5_5_confirmation_contrasts"] if c["condition"] == cond and c["seed"] == seed]
    if k not in ours or len(ours) != len(theirs):
        return None
    return theirs[ours.index(k)]


def position_shares(cells):
    """Declared development tail cells that improved: % of the window delta in the first two bins and in the last.

    The bins are [0,32), [32,128), [128,512), [512,2048) scaled to the context, as the paper's
    "first 128" (first two bins) and "after 512" (last bin) contributions."""
    first, last = [], []
    for c in cells:
        bins, total = c.tail_bins, c.tail_delta
        if c.declared and bins and total is not None and total < 0:
            first.append(100 * (bins[0] + bins[1]) / total)
            last.append(100 * bins[-1] / total)
    return first, last
