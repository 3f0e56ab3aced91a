"""SUMMARY.md: what a run of the study found, section by section, our numbers beside the paper's.

  python -m findings.summary --out runs/main
  python -m findings.summary --audit runs/audit_climbmix --train runs/six_paper --eval runs/eval_paper --out runs/paper

Every number on the page is read from a result file of the run (audit/summary.json,
audit/regime.json, train/*/summary.json, train/regime.json, eval/*.json, queue/queue_summary.json,
queue_study/summary.json) or computed here from such numbers; the paper's values come from
findings/paper_values.json, the one place the repository keeps them. A stage whose results
are missing is reported as not run, never filled in. The same facts go to findings.json,
and the headline of each section is printed.
"""
import argparse
import json
import statistics
import sys
from pathlib import Path

from console.usage import prog_name
from corpus.atomic import atomic_write_json, atomic_write_text
from findings import PAPER, PAPER_REGIME
from findings.provenance import collect, to_md
from presets.six import SEEDS, condition_of


def _load(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def _pct(x, nd=2):
    return "n/a" if x is None else f"{100 * x:.{nd}f}%"


def _n(x):
    return "n/a" if x is None else f"{x:,}"


def _f(x, nd=4, sign=False):
    return "n/a" if x is None else (f"{x:+.{nd}f}" if sign else f"{x:.{nd}f}")


def _link(base, target, label=None):
    return f"[{label or target}]({target})" if (base / target).exists() else None


NOT_COMPARABLE = "not comparable at this scale"


class Section:
    """One section of the page, computed: its headline, text, table (by default: quantity, ours, the
    reference's), notes, links and scorecard row. section_md renders it; findings.json holds to_json()."""

    def __init__(self, key, title, ref="paper", columns=None, prose=False):
        self.key, self.title, self.ref = key, title, ref
        self.columns = tuple(columns or ("quantity", "ours", ref))
        self.prose = prose  # cells of sentences, left-aligned; otherwise the value columns align right
        self.headline, self.text, self.rows, self.links, self.notes = None, [], [], [], []
        self.score = None  # the scorecard row: (what was measured, ours, the paper's, agreement)

    def row(self, *cells):
        if len(cells) != len(self.columns):
            raise ValueError(f"{self.key}: a row of {len(cells)} cells under {len(self.columns)} columns")
        self.rows.append(cells)

    def to_json(self):
        return {"key": self.key, "title": self.title, "headline": self.headline, "text": self.text,
                "columns": list(self.columns), "rows": [list(r) for r in self.rows], "notes": self.notes,
                "score": dict(zip(("measured", "ours", "paper", "agreement"), self.score)) if self.score else None}


def _signs_agree(ours, paper):
    """'direction agrees in k of n' over paired signed values (ours, paper's)."""
    n = len(ours)
    k = sum((a > 0) == (b > 0) for a, b in zip(ours, paper))
    return f"direction agrees in {k} of {n}" if n else "n/a"



# ---------------------------------------------------------------- audit (3, 5.1, 5.2)

def audit_sections(d, out):
    """Sections 3, 5.1 and 5.2 from the audit's summary.json."""
    s = _load(d / "summary.json")
    if not s:
        return (_missing("s3", "3 Exact source retention (the Proposition)", d),
                _missing("s5_1", "5.1 Coverage at the horizon", d), _missing("s5_2", "5.2 Repeated-corpus bounds", d))
    rel = lambda f: _rel(d / f, out)  # noqa: E731
    return proposition_section(s, rel, out), coverage_section(s, rel, out), pass_bounds_section(s, rel, out)


def proposition_section(s, rel, out):
    pk = s["packers"]
    o = pk["original"]
    P1 = PAPER["s5_1_coverage"]
    s3 = Section("s3", "3 Exact source retention (the Proposition)")
    checked = {k: v["protected"] for k, v in pk.items() if v["protected"].get("applies")}
    held = [k for k, v in checked.items() if v.get("proposition_held")]
    s3.headline = (f"The Proposition held at every selection for {len(held)} of {len(checked)} packers it covers "
                   f"({', '.join(held) or 'none'}): the {_n(o['protected']['size'])} longest long sources that had arrived "
                   f"stayed buffered and unstarted.") if checked else "No packer's replay covered the Proposition."
    s3.row("protected sources (original)", _n(o["protected"]["size"]), _n(P1["protected_sources"]))
    s3.row("protected sources all buffered and unstarted",
           "yes" if o["protected"].get("all_buffered_unstarted") else "no", "yes")
    s3.row("buffer B / row capacity R", f"{s['buffer']:,} / {s['row_capacity']:,}",
           f"{PAPER['setup']['B']:,} / {PAPER['setup']['R']:,}")
    s3.links = [_link(out, rel("report.md"), "audit/report.md")]
    if checked:
        s3.score = ("Proposition at every selection (packers it covers)", f"held for {len(held)} of {len(checked)}",
                    "held (999 protected sources)", "agrees" if len(held) == len(checked) else "DISAGREES")
    return s3


def coverage_section(s, rel, out):
    pk = s["packers"]
    o = pk["original"]
    P1 = PAPER["s5_1_coverage"]

    s51 = Section("s5_1", "5.1 Coverage at the horizon")
    share_arr = o["protected"]["share_of_arrived"]
    s51.headline = (f"At {s['targets']:,} targets the original packer conserves mass exactly (arrived = emitted + discarded + "
                    f"buffered: {'holds' if o['partition_holds'] else 'FAILS'}), yet {_n(o['protected']['size'])} protected "
                    f"sources hold {_pct(share_arr)} of arrived tokens (paper {P1['protected_pct_of_arrived']}%), and "
                    f"{o['sources_longer_than_R_arrived'] - o['sources_longer_than_R_started']:,} of "
                    f"{o['sources_longer_than_R_arrived']:,} arrivals of sources longer than R never started"
                    + (f" (the stream wrapped: {o['passes_started']} passes started, so a document can arrive twice)."
                       if o.get("passes_started", 1) > 1 else "."))
    s51.row("sources arrived", _n(o["sources_arrived"]), _n(P1["sources_arrived"]))
    s51.row("tokens arrived = emitted + discarded + buffered",
            f"{o['tokens_arrived']:,} = {o['emitted']:,} + {o['discarded']:,} + {o['buffered']:,}",
            f"{P1['tokens_arrived']:,} = {P1['emitted']:,} + {P1['discarded']:,} + {P1['buffered']:,}")
    s51.row("crop events, median retained prefix, BOS-only crops",
            f"{o['crop_events']:,}, {o['crop_median_emitted']:g}, {o['crops_emitting_only_bos']:,}",
            f"{P1['crop_events']:,}, {P1['crop_median_emitted']}, {P1['crops_emitting_only_bos']:,}")
    s51.row("protected tokens (share of arrived / of buffered)",
            f"{o['protected']['tokens']:,} ({_pct(share_arr)} / {_pct(o['protected']['share_of_buffered'])})",
            f"{P1['protected_tokens']:,} ({P1['protected_pct_of_arrived']}% / {P1['protected_pct_of_buffered']}%)")
    perm = s.get("permutations")
    if perm:
        s51.row(f"first long emission over {perm['count']} permutations (targets)",
                f"{perm['min']:,}–{perm['max']:,}",
                f"{P1['startup_delay_min_targets'] / 1e6:.2f}–{P1['startup_delay_max_targets'] / 1e6:.2f} M")
    if "lossless" in pk:
        ll = pk["lossless"]
        s51.row("lossless: discarded, buffered, in protected", f"{ll['discarded']:,}, {ll['buffered']:,}, {ll['protected']['tokens']:,}",
                f"{P1['lossless_discarded']}, {P1['lossless_buffered']:,}, {P1['lossless_protected_tokens']:,}")
    if "segment_first" in pk:
        sf = pk["segment_first"]
        s51.row("segment first: buffered, discarded, added BOS", f"{sf['buffered']:,}, {sf['discarded']:,}, {sf['bos_added']:,}",
                f"{P1['segment_first_buffered']:,}, {P1['segment_first_discarded']:,}, {P1['segment_first_added_bos']:,}")
        s51.row("share of emitted tokens from sources > R: original → segment first",
                f"{_pct(o['share_emitted_from_long_sources'])} → {_pct(sf['share_emitted_from_long_sources'])}",
                f"{P1['share_emitted_long_pct_original']}% → {P1['share_emitted_long_pct_segment_first']}%")
    wrapped = o.get("passes_started", 1) > 1
    s51.score = ("protected share of arrived tokens (original packer)", _pct(share_arr), f"{P1['protected_pct_of_arrived']}%",
                 "mass partition holds; share " + (NOT_COMPARABLE + " (the stream wrapped)" if wrapped else
                                                   "of the paper's order" if 0.01 <= share_arr <= 0.10 else NOT_COMPARABLE))
    s51.links = [_link(out, rel("report.md"), "audit/report.md"), _link(out, rel("sources_started.png"), "sources started"),
                 _link(out, rel("length_histogram.png"), "length histogram"),
                 _link(out, rel("retention_by_stratum.png"), "retention by stratum"), _link(out, rel("buffer_mass.png"), "buffer mass"),
                 _link(out, rel("startup_delay.png"), "startup delay over the permutations")]
    return s51


def pass_bounds_section(s, rel, out):
    s52 = Section("s5_2", "5.2 Repeated-corpus bounds")
    pb = s.get("pass_bounds") or []
    if pb:
        last = pb[-1]
        s52.headline = (f"In a corpus repeated without a buffer reset, the unique longest source ({last['length_at_least']:,} "
                        f"tokens) cannot start before pass {last['earliest_possible_pass']:,} at B = {s['buffer']:,} "
                        f"(paper: {PAPER['s5_2_pass_bounds'][-1][0]:,} tokens, pass {PAPER['s5_2_pass_bounds'][-1][2]:,}).")
        paper = {r[0]: r for r in PAPER["s5_2_pass_bounds"]}
        for r in pb:
            p = paper.get(r["length_at_least"])
            s52.row(f"length ≥ {r['length_at_least']:,}: sources per pass, earliest pass",
                    f"{r['sources_per_pass']:,}, {r['earliest_possible_pass']:,}", f"{p[1]:,}, {p[2]:,}" if p else "—")
        s52.score = ("earliest possible pass of the longest source", f"{last['earliest_possible_pass']:,}",
                     f"{PAPER['s5_2_pass_bounds'][-1][2]:,}", NOT_COMPARABLE + " (set by the corpus's length census)")
    s52.links = [_link(out, rel("report.md"), "audit/report.md"), _link(out, rel("pass_bounds.png"), "pass bounds")]
    return s52


def dev_stream_rows(sec, d, out):
    """The development (validation) stream's audit beside the paper's 20.86% and 13.9 M targets."""
    s = _load(d / "summary.json")
    P1 = PAPER["s5_1_coverage"]
    if not s or "original" not in s.get("packers", {}):
        sec.row("development stream: protected share of arrived, first long emission", "not run",
                f"{P1['val_protected_pct_of_arrived']}%, {P1['val_first_long_emission_targets']:,} targets")
        return
    o = s["packers"]["original"]
    sec.row("development stream (--split val): protected tokens (share of arrived), first emission of a source > R",
            f"{o['protected']['tokens']:,} ({_pct(o['protected']['share_of_arrived'])}), "
            + (f"{o['startup_delay_targets']:,} targets" if o.get("startup_delay_targets") is not None
               else "none within the budget"),
            f"{P1['val_protected_tokens']:,} ({P1['val_protected_pct_of_arrived']}%), "
            f"{P1['val_first_long_emission_targets']:,} targets")
    sec.links.append(_link(out, _rel(d / "report.md", out), "development-stream audit"))


def topology_rows(sec, d, out):
    """The paper's loader at several ranks (audit_ranks8): how the never-started set changes beside one stream."""
    s = _load(d / "summary.json")
    topo = (s or {}).get("topology")
    if not topo or "original" not in topo["packers"] or "merged" not in topo["packers"]["original"] \
            or "refused" in topo["packers"]["original"]["merged"]:
        return  # the main job writes it; a page built from older folders simply has no such row
    m, one = topo["packers"]["original"]["merged"], s["packers"]["original"]
    never = m["sources_longer_than_R_arrived"] - m["sources_longer_than_R_started"]
    one_never = one["sources_longer_than_R_arrived"] - one["sources_longer_than_R_started"]
    M = topo["loader_workers"]
    sec.row(f"{topo['ranks']} ranks x {M} worker{'s' * (M > 1)}, a packer per worker stream: sources > R never "
            "started, merged, beside one stream at the same budget",
            f"{never:,} of {m['sources_longer_than_R_arrived']:,} (one stream: {one_never:,} of "
            f"{one['sources_longer_than_R_arrived']:,})", "—")
    sec.links.append(_link(out, _rel(d / "report.md", out), f"{topo['ranks']}-rank audit"))


def regime_section(d, out):
    r = _load(d / "regime.json")
    sec = Section("regime", "Regime: where this run differs from the paper's scale")
    if not r:
        sec.text = ["No regime indicators were written (audit/regime.json is missing)."]
        return sec
    cols = r.get("columns", r)  # regime.json: {"columns": {name: indicators}, ...} or one set of indicators
    if isinstance(cols, dict) and "buffer" in cols:
        cols = {"this run": cols}
    cols = {n: c for n, c in cols.items() if isinstance(c, dict)}
    sec.columns = ("indicator", *cols, "paper")
    sec.text = ["The paper's effects depend on ratios, not sizes; this table says which ratios the run shares with "
                "the paper."]
    for key, label, fmt in (("longest_chunks_share_of_B", "longest source's segment-first chunks / B", _pct),
                            ("protected_share_of_arrived", "protected share of arrived tokens", _pct),
                            ("passes_started", "stream passes started", str),
                            ("arrived_over_B", "sources arrived / B", lambda x: f"{x:,.1f}"),
                            ("share_emitted_from_long_sources", "emitted share from sources > R", _pct)):
        sec.row(label, *(fmt(c[key]) if key in c else "n/a" for c in cols.values()),
                fmt(PAPER_REGIME[key]) if PAPER_REGIME.get(key) is not None else "—")
    return sec


# ---------------------------------------------------------------- training (5.3)

def train_section(d, out):
    runs = {}
    for f in sorted(d.glob("*/summary.json")):
        s = _load(f)
        if s and s.get("official"):
            c = s["config"]
            runs[(condition_of(c["loader"]), c["seed"])] = s
    sec = Section("s5_3", "5.3 Matched training runs (official BPB)")
    if not runs:
        return _missing("s5_3", sec.title, d)
    P = PAPER["s5_3_official_bpb"]
    deltas = {}
    for (cond, seed), s in sorted(runs.items()):
        bpb = s["official"]["bpb"]
        base = runs.get(("baseline", seed))
        dl = bpb - base["official"]["bpb"] if base and cond != "baseline" else None
        if dl is not None:
            deltas[(cond, seed)] = dl
        pk = f"{cond}_s{seed}"
        pd = PAPER["s5_3_delta_vs_baseline"].get(pk)
        sec.row(f"{cond} seed {seed}: BPB (Δ vs same-seed baseline)",
                f"{bpb:.5f}" + (f" ({dl:+.5f})" if dl is not None else ""),
                (f"{P[pk]:.5f}" + (f" ({pd:+.6f})" if pd is not None else "")) if pk in P else "—")
        o, pr = s["official"], PAPER["s5_3_runs"].get(pk)
        sec.row(f"{cond} seed {seed}: CE, perplexity, timed / total seconds",
                f"{_f(o.get('ce'))}, {_f(o.get('perplexity'), 3)}, {_f(s.get('training_seconds'), 0)} / "
                f"{_f(s.get('total_seconds'), 0)}",
                f"{pr['ce']:.5f}, {pr['perplexity']:.3f}, {pr['timed_s']:,.0f} / {pr['total_s']:,.0f}" if pr else "—")
    any_cfg = next(iter(runs.values()))["config"]
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
                     _signs_agree([deltas[k] for k in sorted(deltas)], [pdl[f"{k[0]}_s{k[1]}"] for k in sorted(deltas)]))
    params = next(iter(runs.values())).get("parameters")
    sec.text = [f"Model: depth {any_cfg['depth']}, width {any_cfg['width']}, context {any_cfg['context']}, "
                f"{any_cfg['updates']} updates" + (f" ({params:,} parameters)" if params else "") +
                (f", training buffer B = {any_cfg['buffer']}" if "buffer" in any_cfg else "") +
                (f"; training sources longer than {any_cfg['max_source_len']} tokens are filtered out (dropped whole, "
                 f"demo only{_filter_counts(d)}); evaluation sees every source. A filter rather than a crop to that "
                 f"length because it keeps the paper's ratios closer (presets/six.py)" if any_cfg.get("max_source_len") else "") +
                f"; paper: depth 8, width 512, context 2048, {PAPER['setup']['updates']} updates "
                f"({PAPER['setup']['parameters']:,} parameters), B = 1,000."]
    base = [runs[("baseline", x)]["official"]["bpb"] for x in SEEDS if ("baseline", x) in runs]
    if len(base) == 2:
        sec.text.append(f"Seed noise for scale: the two baseline seeds differ by {abs(base[0] - base[1]):.4f} BPB; "
                        "a delta smaller than that is not evidence of an effect (the paper makes the same caution "
                        "for random spans).")
    sec.row("forward positions of checkpoint checks and evaluations", "not counted",
            f"{PAPER['s5_3_timing']['forward_positions_checks_and_evaluations']:,}")
    sec.links = [_link(out, _rel(d / "table.md", out), "train/table.md")] + [
        _link(out, _rel(d / f, out), f.replace("_", " ").removesuffix(".png"))
        for f in ("learning_curves.png", "bpb_by_condition.png")]
    return sec


def _filter_counts(d):
    """', N of M sources (P% of tokens) dropped' for the training filter, as the train stage recorded it
    (regime.json; a run folder without one states the rule alone)."""
    c = (_load(d / "regime.json") or {}).get("filter")
    if not c:
        return ""
    return f": {c['dropped']:,} of {c['sources']:,} sources, {_pct(c['dropped_token_share'], 1)} of training tokens"


# ---------------------------------------------------------------- evaluation (5.4–5.6)

def eval_sections(d, out):
    """Sections 5.4, 5.5 and 5.6 from the evaluation's result files."""
    rel = lambda f: _rel(d / f, out)  # noqa: E731
    return [confirmation_section(d, rel, out), windows_section(d, rel, out), rankings_section(d, rel, out)]


def confirmation_section(d, rel, out):
    conf = _load(d / "confirmation.json")
    s54 = Section("s5_4", "5.4 Confirmation score")
    if conf and conf.get("scores"):
        sc = {(r["condition"], r["seed"]): r["bpb"] for r in conf["scores"]}
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
                     _signs_agree([a for _, a, _ in pairs], [b for _, _, b in pairs]) if pairs else "n/a")
        worse = sum(x > 0 for x in parts)
        s54.headline = (f"On the confirmation stream ({conf.get('targets', 0):,} targets, {len(conf.get('duplicates', [])):,} "
                        f"exact duplicates excluded) the interventions are worse than the baseline in {worse} of "
                        f"{len(parts)} contrasts (paper: 4 of 4, {PAPER['s5_4_duplicates_excluded']} duplicates excluded).")
        if conf.get("status") and conf["status"] != "confirmed":
            s54.notes.append(f"status: {conf['status']}")
    else:
        s54 = _missing("s5_4", s54.title, d)
    s54.links = [_link(out, rel("report.md"), "eval/report.md")]
    return s54


def windows_section(d, rel, out):
    s55 = Section("s5_5", "5.5 Source windows: beginnings against tails")
    ws = {p: _load(d / f"window_summary_{p}.json") for p in ("dev", "conf")}
    if ws["conf"]:
        cells = ws["conf"]["cells"]
        declared = [c for c in cells if c.get("declared")]
        key = "interval_adjusted"
        neg = sum(c["interaction"] < 0 for c in declared)
        excl = sum(c[key][1] < 0 or c[key][0] > 0 for c in declared)
        tails_better = sum(c["tail_delta"] < 0 for c in declared)
        P5 = PAPER["s5_5_windows"]
        s55.headline = (f"Confirmation: {neg} of {len(declared)} declared tail-minus-beginning interactions are negative "
                        f"and {excl} intervals exclude zero; tails improve in {tails_better} of {len(declared)} "
                        f"(paper: {P5['interactions_negative']} of {P5['contrasts']} negative, "
                        f"{P5['intervals_excluding_zero']} exclude zero).")
        s55.row("declared contrasts: negative interactions", f"{neg} of {len(declared)}",
                f"{P5['interactions_negative']} of {P5['contrasts']}")
        s55.row(f"intervals excluding zero ({key.replace('_', ' ')})", f"{excl} of {len(declared)}",
                f"{P5['intervals_excluding_zero']} of {P5['contrasts']} ({P5['level_pct']}%)")
        s55.row("confirmation sources, all strata", _n(sum(p["sources"] for p in ws["conf"]["per_stratum"])),
                _n(P5["conf_sources"]))
        top = ws["conf"]["per_stratum"][-1] if ws["conf"]["per_stratum"] else None
        s55.row(f"confirmation sources in the top stratum ({top.get('stratum', 'n/a') if top else 'n/a'}; paper: > 16,384 tokens)",
                _n(top["sources"]) if top else "n/a", _n(P5["conf_sources_over_16384"]))
        s55.row("confirmation text targets per checkpoint", _n(ws["conf"].get("text_targets")) if ws["conf"].get(
            "text_targets") else "not recorded",
                _n(P5["conf_targets_per_checkpoint"]))
        by_key = {(c["condition"], c["seed"], c["stratum"]): c for c in declared}
        for (cond, seed, k), c in sorted(by_key.items(), key=lambda x: (x[0][1], x[0][2], x[0][0])):
            pc = _paper_cell(cond, seed, k, cells)
            lo, hi = c[key]
            lab = (ws["conf"].get("spec") or {}).get("labels") or []
            s55.row(f"{cond} seed {seed}, stratum {lab[k] if k < len(lab) else k}: beginning Δ / tail Δ / interaction "
                    "[adjusted interval]",
                    f"{c.get('begin_delta', 0):+.4f} / {c['tail_delta']:+.4f} / {c['interaction']:+.4f} [{lo:+.4f}, {hi:+.4f}]",
                    (f"{pc['prefix_delta']:+.4f} / {pc['tail_delta']:+.4f} / {pc['interaction']:+.4f} "
                     f"[{pc['interval'][0]:+.4f}, {pc['interval'][1]:+.4f}] ({pc['stratum']})") if pc else "—")
        s55.score = ("declared tail-minus-beginning interactions", f"{neg} of {len(declared)} negative, {excl} intervals "
                     f"exclude zero", f"{P5['interactions_negative']} of {P5['contrasts']} negative, "
                     f"{P5['intervals_excluding_zero']} exclude zero",
                     f"direction agrees in {neg} of {len(declared)}; interval excludes zero in {excl} of {len(declared)}")
    else:
        s55 = _missing("s5_5", s55.title, d)
    if ws["dev"]:
        first, last = _position_shares(ws["dev"])
        if last:
            P = PAPER["s5_5_position_bins"]
            rng = lambda xs: f"median {statistics.median(xs):.0f}% (range {min(xs):.0f} to {max(xs):.0f}%)"
            s55.row(f"development tails, {len(last)} declared cells that improved: share of the improvement "
                    "after position 512 (scaled to the context; a cell with a tiny total gives an extreme share)", rng(last),
                    f"{P['after_512_share_pct_min']}–{P['after_512_share_pct_max']}%")
            s55.row("... in the first 128 positions (scaled)", rng(first),
                    f"{P['first_128_share_pct_min']}–{P['first_128_share_pct_max']}%")
    s55.links = [_link(out, rel("report.md"), "eval/report.md")] + [
        _link(out, rel(f.name), f.stem.replace("_", " ")) for f in sorted(d.glob("*.png"))]
    return s55


def rankings_section(d, rel, out):
    s56 = Section("s5_6", "5.6 Prefix rankings")
    rk = _load(d / "rankings.json")
    if rk and not rk.get("skipped") and rk.get("prefixes"):
        rev = sum(len(p.get("reversals", [])) for p in rk["prefixes"])
        contrasts = [c for p in rk["prefixes"] for c in p["contrasts"]]
        outside = sum(bool(c.get("outside")) for c in contrasts)
        P6 = PAPER["s5_6_rankings"]
        s56.headline = (f"{rev} ranking reversal(s) between the full score and {len(rk['prefixes'])} prefixes; "
                        f"{outside} of {len(contrasts)} method/prefix contrasts outside their 95% subset interval "
                        f"(paper: {P6['reversals']} reversals, {P6['contrasts_outside_95']} of {P6['contrasts']}).")
        s56.row("ranking reversals", str(rev), str(P6["reversals"]))
        s56.row("contrasts outside the 95% subset interval", f"{outside} of {len(contrasts)}",
                f"{P6['contrasts_outside_95']} of {P6['contrasts']}")
        s56.row("ranked checkpoints", str(len(rk.get("methods", []))), str(P6["checkpoints"]))
        s56.notes.append(f"The ranked sets differ: ours is {', '.join(rk.get('methods', [])) or 'n/a'}; the paper ranks "
                         "original, random spans and five earlier training screens that this repository does not have "
                         "(so ours includes segmented_s43, which the paper does not rank).")
        s56.score = ("ranking reversals under prefixes", str(rev), str(P6["reversals"]),
                     ("agrees" if (rev == 0) == (P6["reversals"] == 0) else "DISAGREES") + " (on a different ranked set)")
    else:
        s56 = _missing("s5_6", s56.title, d)
    s56.links = [_link(out, rel("report.md"), "eval/report.md")]
    return s56


def _paper_cell(cond, seed, k, cells):
    """The paper's declared cell for ours: the same condition and seed, and the same rank among the
    declared strata (the paper declares its two strata below 16,384 tokens; a smaller context
    scales the strata, so they are matched by order, not by token count)."""
    ours = sorted({c["stratum"] for c in cells if c.get("declared")})
    theirs = [c for c in PAPER["s5_5_confirmation_contrasts"] if c["condition"] == cond and c["seed"] == seed]
    if k not in ours or len(ours) != len(theirs):
        return None
    return theirs[ours.index(k)]


def _position_shares(summary):
    """Declared development tail cells that improved: % of the window delta in the first two bins and in the last.

    The bins are [0,32), [32,128), [128,512), [512,2048) scaled to the context, as the paper's
    "first 128" (first two bins) and "after 512" (last bin) contributions."""
    first, last = [], []
    for c in summary["cells"]:
        bins, total = c.get("tail_bins"), c.get("tail_delta")
        if c.get("declared") and bins and total is not None and total < 0:
            first.append(100 * (bins[0] + bins[1]) / total)
            last.append(100 * bins[-1] / total)
    return first, last


# ---------------------------------------------------------------- any packer (the audit's practical contribution)

def packers_section(d, out):
    """The cross-packer audit (audit_packers/comparison.json): the same budget through the paper's four, our
    concatenate-and-chunk and the installed libraries' packers, each run on tracer documents."""
    c = _load(d / "comparison.json")
    sec = Section("packers", "Any packer: which sources each packer starts, and which positions it trains on",
                  columns=("packer", "what it did with the arrived tokens and sources", "how"), prose=True)
    if not c:
        sec.headline = f"Not run: no results under {d}."
        return sec
    sec.headline = c["sentence"]
    passes = "" if c["passes"] <= 1 else f" ({c['passes']:,} passes over the corpus)"
    sec.text = [f"Every packer at {c['targets']:,} targets, R = {c['row_capacity']:,}{passes}: shares of the arrived "
                "tokens emitted / discarded / still buffered, padding of the rows, sources longer than R never started, "
                "the emitted share of the first and last tenth of those sources' positions, the least represented label "
                "(emitted share over arrived share), and the Proposition."]
    for name, r in c["packers"].items():
        lab = r.get("least_represented_label")
        sec.row(name, f"{_pct(r['emitted_share'])} / {_pct(r['discarded_share'])} / {_pct(r['buffered_share'])}; "
                      f"padding {_pct(r['padding_share'])}; > R never started {r['long_never_started']:,} of "
                      f"{r['long_arrived']:,}; first / last tenth {_pct(r['long_first_tenth_exposed'], 1)} / "
                      f"{_pct(r['long_last_tenth_exposed'], 1)}; least represented "
                      + (f"{lab[0]} ({lab[1]:.2f})" if lab and lab[1] is not None else "n/a")
                      + f"; Proposition {r['proposition']}",
                r["how"])
    for name, why in c.get("refused", {}).items():
        sec.row(name, f"refused: {why}", "—")
    for name, why in c.get("left_out", {}).items():
        sec.row(name, f"left out of the main job: {why}; audit it alone with --packers {name}", "—")
    traced = sum(1 for r in c["packers"].values() if r["how"] == "traced")
    orig = c["packers"].get("original")
    ours = f"{len(c['packers'])} packers ({traced} traced)" + (
        f"; original leaves {orig['long_never_started']:,} of {orig['long_arrived']:,} unstarted" if orig else "")
    sec.score = ("packers audited by running them: sources > R never started", ours, "the paper's loader family only",
                 "extends the paper's audit (no paper value for the libraries)")
    sec.links = [_link(out, _rel(d / "report.md", out), "audit_packers/report.md"),
                 _link(out, _rel(d / "comparison.png", out), "comparison figure")]
    return sec


# ---------------------------------------------------------------- the queue

def queue_section(d, out):
    s = _load(d / "queue_summary.json")
    sec = Section("queue", "The shard queue (proposal: rollback, deferral, quarantine)", ref="proposal")
    if not s:
        return _missing("queue", sec.title, d)
    cal = _load(d / "calibration.json") or {}
    rej, quar = s.get("rejections", {}), s.get("quarantined", [])
    harmful_caught = [x for x in quar if x.startswith("h")]
    outcome = (f"{len(s.get('accepted', []))} shards accepted, {sum(rej.values())} rejections of {len(rej)} shard(s), "
               f"quarantined: {', '.join(quar) or 'none'}")
    sec.headline = f"{outcome}; harmful shards accepted: {len(s.get('harmful_accepted', []))}."
    sec.score = ("the proposal's mechanism", outcome, "no result measured in the proposal", "no paper value")
    if cal:
        sec.row("calibrated k and recovery fraction", f"k = {cal['k']}, {cal['frac']}", "illustrated as 3σ_d; not fixed")
        sec.row(f"{'in-sample' if _in_sample(cal) else 'held-out'} false-rejection rate (one-sided 95% upper bound)",
                f"{cal['false_rejections']}/{cal['transitions']} ({100 * cal['upper95']:.1f}%)",
                _rate_rule(cal))
        n = cal["transitions"]
        if n and 1 - 0.05 ** (1 / n) >= 0.05:  # the Clopper-Pearson bound with no false rejection at all
            sec.notes.append(f"With {n} transitions the 95% bound cannot fall below 5% even with no false rejection "
                             "(59 are needed): the rule's point estimate is met, not a guarantee.")
    sc = s.get("screen") or {}
    if sc:
        sec.row("forward-only screen vs training decision: Spearman, AUC",
                f"{sc['spearman_screen_vs_rise']:+.2f}, {sc['auc_screen_flagged']:.2f} ({sc['n']} shards, {sc['flagged']} flagged)",
                "asked, not measured")
    fin, start = s.get("final", {}).get("control", {}), s.get("start_losses", {})
    if fin and start:
        better = sum(fin[k] < start[k] for k in fin if k in start)
        sec.row("control domains lower after the run than at its start", f"{better} of {len(fin)}", "—")
    sec.text = ["No queue result has been measured in the proposal; this is the mechanism on the offline corpus "
                "with a planted harmful source" + (f" (caught: {', '.join(harmful_caught)})." if harmful_caught else ".")]
    rx = _load(d / "reexecution.json")
    sec.row("the log executed again from its start state (`reconstruct --execute`)", _reexecution(rx),
            "the proposal: the verdict can be reconstructed")
    if rx and not rx.get("held"):
        sec.notes.append(f"The re-execution did NOT reproduce the log: {rx['difference']['line']}.")
    for q, rec in _confounded_recoveries(d / "decisions.jsonl", quar):
        sec.notes.append(f"{q} is not from the harmful source, yet it was quarantined: its recovery shard {rec} was "
                         f"harmful, so the recovery check measured {rec}'s damage (a limit of a one-shard recovery check).")
    sec.links = [_link(out, _rel(d / "report.md", out), "queue/report.md")]
    return sec


def _reexecution(rx):
    """What the re-execution of the queue's log found, in one cell."""
    if not rx:
        return "not run"
    if not rx.get("held"):
        return f"FAILED at record {rx['difference']['seq']} ({rx['difference']['field']})"
    return (f"held: records {rx['first']}-{rx['last']} reproduced, {rx['mode']} "
            f"({'this machine' if rx['same_machine'] else 'another machine'}), in {rx['seconds']:.0f} s")


def _rate_rule(cal):
    """The proposal's rule (false-rejection rate below 5%) for the point estimate and for its 95% bound. An
    in-sample estimate meets it by construction: calibration picked the first grid point that does."""
    point = cal["false_rejections"] / max(1, cal["transitions"]) < 0.05
    bound = cal["upper95"] < 0.05
    how = " by construction (the same transitions chose k and frac)" if point and _in_sample(cal) else ""
    return (f"below 5% required: the point estimate {'meets' if point else 'does NOT meet'} it{how}; "
            f"the 95% bound ({100 * cal['upper95']:.1f}%) {'meets' if bound else 'does not'}")


def _in_sample(cal):
    """Whether the calibration's rate was measured on the transitions that chose k and frac (rule.py's
    rate_kind; a record without one predates held-out reporting and is in-sample)."""
    return cal.get("rate_kind", "in-sample") == "in-sample"


def _confounded_recoveries(log_path, quarantined):
    """(quarantined non-harmful shard, harmful shard that served as its recovery shard) pairs, from the log."""
    out = []
    try:
        recs = [json.loads(x) for x in Path(log_path).read_text().splitlines() if x.strip()]
    except (OSError, ValueError):
        return out
    for r in recs:
        if (r.get("event") == "train" and r.get("role") == "recovery" and r.get("tested") in quarantined
                and not str(r["tested"]).startswith("h") and str(r.get("shard", "")).startswith("h")):
            out.append((r["tested"], r["shard"]))
    return sorted(set(out))


def study_section(d, out):
    s = _load(d / "summary.json")
    sec = Section("queue_study", "The queue study (arms A/B/C, adoption rule)", ref="proposal")
    if not s or "adoption" not in s:
        return _missing("queue_study", sec.title, d)
    ad = s["adoption"]
    fin = {(r["arm"], r["seed"]): r["final_selection"]["mean"] for r in s.get("runs", [])}
    raw = {}
    for seed in ad.get("seeds", []):
        for other in ("A", "C"):
            if ("B", seed) in fin and (other, seed) in fin:
                raw[(other, seed)] = fin[("B", seed)] - fin[(other, seed)]
    # the intervals' lines say why (the rule's per-seed lines would grow with the seeds); refusals say why not
    why = [r for r in ad.get("reasons", []) if r.startswith(("B-A:", "B-C:"))] or ad.get("reasons", [])
    sec.headline = f"Verdict: {ad['verdict']}" + (f" ({'; '.join(why)})" if why else "") + "."
    sec.score = ("the adoption rule", f"Verdict: {ad['verdict']}", "no result measured in the proposal", "no paper value")
    for other in ("A", "C"):
        pts = ad.get(f"b_minus_{other.lower()}", {})
        sec.row(f"B − {other}, efficiency points (seeds {', '.join(map(str, ad.get('seeds', [])))})",
                ", ".join("refused" if pts.get(str(x)) is None else f"{pts[str(x)]:+.2f}" for x in ad.get("seeds", [])),
                "> max(0.6, 2 × seed spread) to adopt")
        iv = (ad.get("intervals") or {}).get(f"B-{other}")
        if iv:
            sec.row(f"B − {other}, mean over seeds with its 95% t interval ({iv['df']} df)",
                    f"{iv['mean']:+.2f} [{iv['low']:+.2f}, {iv['high']:+.2f}]",
                    "above the threshold to adopt; at or below it: not adopted; else unresolved")
        sec.row(f"B − {other}, final selection BPB", ", ".join(f"{raw[(other, x)]:+.4f}" for x in ad.get("seeds", [])
                                                             if (other, x) in raw), "no result measured")
        gap = ((s.get("per_axis") or {}).get("intervals_bpb") or {}).get(f"B-{other}")
        if gap:  # the per-axis reading exists even where efficiency points are refused
            sec.row(f"B − {other}, gap to the reference curve (BPB), mean and 95% t interval ({gap['df']} df)",
                    f"{gap['mean']:+.4f} [{gap['low']:+.4f}, {gap['high']:+.4f}]", "no result measured")
    sec.row("seed spread, threshold", f"{_f(ad.get('seed_spread'), 2)}, {_f(ad.get('threshold'), 2)}", "—")
    sd = s.get("seeds")
    if sd:
        sec.row("seeds per arm: used, planned from stage A's noise",
                f"{sd['used']}, " + ("no count" if sd.get("planned") is None else f"{sd['planned']:,}"),
                "the proposal: two")
    over = (s.get("compute") or {}).get("b_over_a") or {}
    if over.get("trained_targets") is not None:
        sec.row("compute of B over A: trained targets, wall time",
                f"{over['trained_targets']:.2f}x, {over['wall_s']:.2f}x", "the proposal asks for the actual overhead")
    sec.links = [_link(out, _rel(d / "report.md", out), "queue_study/report.md")]
    return sec


def _rel(path, out):
    path = Path(path)
    return str(path.relative_to(out)) if path.is_relative_to(out) else str(path)


def _missing(key, title, d):
    sec = Section(key, title)
    sec.headline = f"Not run: no results under {d}."
    return sec


# ---------------------------------------------------------------- page

def build(out, audit=None, train=None, evald=None, queue=None, study=None, audit_val=None, packers=None,
          audit_ranks=None):
    """Every section of the page, in its order, computed from the result folders (nothing rendered here)."""
    out = Path(out)
    audit, train = Path(audit or out / "audit"), Path(train or out / "train")
    evald, queue, study = Path(evald or out / "eval"), Path(queue or out / "queue"), Path(study or out / "queue_study")
    s3, s51, s52 = audit_sections(audit, out)
    if s51.rows:
        dev_stream_rows(s51, Path(audit_val or out / "audit_val"), out)
        topology_rows(s51, Path(audit_ranks or out / "audit_ranks8"), out)
    return [s3, s51, s52, packers_section(Path(packers or out / "audit_packers"), out), regime_section(audit, out),
            train_section(train, out), *eval_sections(evald, out),
            queue_section(queue, out), study_section(study, out)]


# ---------------------------------------------------------------- rendering

def section_md(sec) -> list:
    out = [f"## {sec.title}", ""]
    if sec.headline:
        out += [f"**{sec.headline}**", ""]
    for t in sec.text:
        out += [t, ""]
    if sec.rows:
        out += ["| " + " | ".join(sec.columns) + " |", "|---|" + ("---|" if sec.prose else "---:|") * (len(sec.columns) - 1)]
        out += ["| " + " | ".join(map(str, r)) + " |" for r in sec.rows]
        out.append("")
    out += [f"- {n}" for n in sec.notes]
    links = [x for x in sec.links if x]
    if links:
        out += ["", "Details: " + ", ".join(links)]
    return out + [""]


def scorecard_md(sections):
    """One row per section: what was measured, ours, the paper's, and whether they agree."""
    out = ["## Scorecard", "", "| section | measured | ours | paper | agreement |", "|---|---|---|---|---|"]
    for s in sections:
        if s.key == "regime":
            continue
        m, o, p, a = s.score or ("—", "not run" if (s.headline or "").startswith("Not run") else "—", "—", "—")
        out.append(f"| {s.title.split(' (')[0]} | {m} | {o} | {p} | {a} |")
    return out + ["", "Agreement is about direction and intervals; magnitudes are compared only where the regime "
                  "section says the setting shares the paper's ratios.", ""]


def render(sections, out, provenance=None):
    lines = ["# Findings", "",
             "What this run found, section by section, with the paper's published value beside ours. The paper is "
             "*Source Exclusion in Streaming Pretraining: An Exact Audit of Minimum-Crop Packing*; the queue follows "
             "the proposal *Can a model help choose its next training data?*. Every number below is read from this "
             "run's result files; the paper's values come from `findings/paper_values.json`. Read the regime section "
             "before comparing magnitudes: a small demo shares the paper's mechanism, not its scale.", ""]
    lines += scorecard_md(sections)
    if provenance:
        lines += to_md(provenance)
    for s in sections:
        lines += section_md(s)
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog=prog_name("python -m findings.summary"), description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/main", help="run folder; SUMMARY.md and findings.json are written here (default runs/main)")
    for k in ("audit", "audit-val", "audit-packers", "audit-ranks", "train", "eval", "queue", "study"):
        default = {"study": "queue_study", "audit-val": "audit_val", "audit-packers": "audit_packers",
                   "audit-ranks": "audit_ranks8"}.get(k, k)
        ap.add_argument(f"--{k}", default=None, help=f"{k} results folder (default OUT/{default})")
    ap.add_argument("--data-dir", default=None, help="data root, for the corpus's build id (default: $PACKAUDIT_DATA "
                    "or ~/.cache/packing-audit)")
    ap.add_argument("--corpus-source", default="stdlib", help="the prepared corpus the run read (default stdlib)")
    a = ap.parse_args(argv)
    out = Path(a.out)
    if not out.is_dir():
        print(f"error: {out}: no such run folder", file=sys.stderr)
        return 2
    secs = build(out, a.audit, a.train, a.eval, a.queue, a.study, a.audit_val, a.audit_packers, a.audit_ranks)
    prov = collect(out, a.data_dir, a.corpus_source)
    atomic_write_text(out / "SUMMARY.md", render(secs, out, prov) + "\n")
    atomic_write_json(out / "findings.json", {"provenance": prov, "sections": [s.to_json() for s in secs],
                                              "scorecard": [{"section": s.key, **s.to_json()["score"]} for s in secs if s.score]})
    print("\nFindings:")
    for s in secs:
        if s.headline:
            print(f"  {s.title.split(' (')[0]}: {s.headline}")
    print(f"\nRead {out / 'SUMMARY.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
