"""Section 5.3 of the findings page, the six matched training runs, computed from their typed records
(records/training.py: each run's summary.json, the train stage's source filter)."""
from findings import PAPER
from findings.section import Section, f, link, loaded, missing, pct, rel, signs_agree
from presets.six import SEEDS, condition_of
from records.training import SourceFilter, TrainedRun


def train_section(d, out):
    runs = {}
    for path in sorted(d.glob("*/summary.json")):
        r = loaded(TrainedRun.load, path)
        if r:
            runs[(condition_of(r.loader), r.seed)] = r
    sec = Section("s5_3", "5.3 Matched training runs (official BPB)")
    if not runs:
        return missing("s5_3", sec.title, d)
    deltas = run_rows(sec, runs)
    parts = []
    for cond in ("random_crop", "segmented"):
        ds = [deltas[(cond, s)] for s in SEEDS if (cond, s) in deltas]
        if ds:
            worse = sum(x > 0 for x in ds)
            parts.append(f"{cond} is {'worse than' if worse == len(ds) else 'better than' if worse == 0 else 'mixed against'} "
                         f"the baseline at {len(ds)} seed(s) (Δ {', '.join(f'{x:+.4f}' for x in ds)} BPB)")
    pdl = PAPER["s5_3_delta_vs_baseline"]
    same = sum((deltas[k] > 0) == (pdl[f"{k[0]}_s{k[1]}"] > 0) for k in deltas if f"{k[0]}_s{k[1]}" in pdl)
    parts.append(f"the sign of the effect agrees with the paper in {same} of {len(deltas)} contrasts")
    sec.headline = ("; ".join(parts) + f". Paper: random_crop {pdl['random_crop_s43']:+.4f}/{pdl['random_crop_s44']:+.4f}, "
                    f"segmented {pdl['segmented_s43']:+.4f}/{pdl['segmented_s44']:+.4f}.") if parts else None
    if deltas:
        sec.score = ("Δ official BPB vs same-seed baseline", ", ".join(f"{k[0]} s{k[1]} {v:+.4f}" for k, v in sorted(deltas.items())),
                     ", ".join(f"{k[0]} s{k[1]} {pdl[f'{k[0]}_s{k[1]}']:+.4f}" for k in sorted(deltas)),
                     signs_agree([deltas[k] for k in sorted(deltas)], [pdl[f"{k[0]}_s{k[1]}"] for k in sorted(deltas)]))
    sec.text = [model_text(next(iter(runs.values())), d)]
    base = [runs[("baseline", x)].bpb for x in SEEDS if ("baseline", x) in runs]
    if len(base) == 2:
        sec.text.append(f"Seed noise for scale: the two baseline seeds differ by {abs(base[0] - base[1]):.4f} BPB; "
                        "a delta smaller than that is not evidence of an effect (the paper makes the same caution "
                        "for random spans).")
    sec.row("forward positions of checkpoint checks and evaluations", "not counted",
            f"{PAPER['s5_3_timing']['forward_positions_checks_and_evaluations']:,}")
    sec.links = [link(out, rel(d / "table.md", out), "train/table.md")] + [
        link(out, rel(d / name, out), name.replace("_", " ").removesuffix(".png"))
        for name in ("learning_curves.png", "bpb_by_condition.png")]
    return sec


def run_rows(sec, runs):
    """Two rows per run (its BPB and its delta against the same-seed baseline; CE, perplexity, times) beside the
    paper's; returns {(condition, seed): delta} of the contrasts."""
    P, deltas = PAPER["s5_3_official_bpb"], {}
    for (cond, seed), r in sorted(runs.items()):
        base = runs.get(("baseline", seed))
        dl = r.bpb - base.bpb if base and cond != "baseline" else None
        if dl is not None:
            deltas[(cond, seed)] = dl
        pk = f"{cond}_s{seed}"
        pd = PAPER["s5_3_delta_vs_baseline"].get(pk)
        sec.row(f"{cond} seed {seed}: BPB (Δ vs same-seed baseline)",
                f"{r.bpb:.5f}" + (f" ({dl:+.5f})" if dl is not None else ""),
                (f"{P[pk]:.5f}" + (f" ({pd:+.6f})" if pd is not None else "")) if pk in P else "—")
        pr = PAPER["s5_3_runs"].get(pk)
        sec.row(f"{cond} seed {seed}: CE, perplexity, timed / total seconds",
                f"{f(r.ce)}, {f(r.perplexity, 3)}, {f(r.training_seconds, 0)} / {f(r.total_seconds, 0)}",
                f"{pr['ce']:.5f}, {pr['perplexity']:.3f}, {pr['timed_s']:,.0f} / {pr['total_s']:,.0f}" if pr else "—")
    return deltas


def model_text(r, d):
    """The trained model's shape and the demo's training filter, beside the paper's model."""
    return (f"Model: depth {r.depth}, width {r.width}, context {r.context}, {r.updates} updates"
            + (f" ({r.parameters:,} parameters)" if r.parameters else "")
            + (f", training buffer B = {r.buffer}" if r.buffer is not None else "")
            + (f"; training sources longer than {r.max_source_len} tokens are filtered out (dropped whole, "
               f"demo only{filter_counts(d)}); evaluation sees every source. A filter rather than a crop to that "
               f"length because it keeps the paper's ratios closer (presets/six.py)" if r.max_source_len else "")
            + f"; paper: depth 8, width 512, context 2048, {PAPER['setup']['updates']} updates "
              f"({PAPER['setup']['parameters']:,} parameters), B = 1,000.")


def filter_counts(d):
    """', N of M sources (P% of tokens) dropped' for the training filter, as the train stage recorded it
    (regime.json; a run folder without one states the rule alone)."""
    c = loaded(SourceFilter.load, d)
    if not c:
        return ""
    return f": {c.dropped:,} of {c.sources:,} sources, {pct(c.dropped_token_share, 1)} of training tokens"
