"""The audit's sections of the findings page (the paper's 3, 5.1 and 5.2, the regime indicators, any packer, the
frontier): computed from the audit's records (records/audit_summary.py, audit_comparison.py, frontier.py), each
read through its own loader; a folder whose record is missing or unreadable is reported as not run."""
from findings import PAPER, PAPER_REGIME
from findings.section import NOT_COMPARABLE, Section, link, loaded, missing, n, pct, rel
from records.audit_comparison import Comparison
from records.audit_summary import AuditSummary
from records.frontier import Frontier


def audit_sections(d, out):
    """Sections 3, 5.1 and 5.2 from the audit's summary.json."""
    s = loaded(AuditSummary.load, d)
    if not s:
        return (missing("s3", "3 Exact source retention (the Proposition)", d, s),
                missing("s5_1", "5.1 Coverage at the horizon", d, s), missing("s5_2", "5.2 Repeated-corpus bounds", d, s))
    rel_to = lambda name: rel(d / name, out)  # noqa: E731
    return proposition_section(s, rel_to, out), coverage_section(s, rel_to, out), pass_bounds_section(s, rel_to, out)


def proposition_section(s, rel_to, out):
    pk = s.packers
    o = pk["original"]
    P1 = PAPER["s5_1_coverage"]
    s3 = Section("s3", "3 Exact source retention (the Proposition)")
    checked = {k: v.protected for k, v in pk.items() if v.protected.applies}
    held = [k for k, v in checked.items() if v.proposition_held]
    s3.headline = (f"The Proposition held at every selection for {len(held)} of {len(checked)} packers it covers "
                   f"({', '.join(held) or 'none'}): the {n(o.protected.size)} longest long sources that had arrived "
                   f"stayed buffered and unstarted.") if checked else "No packer's replay covered the Proposition."
    s3.row("protected sources (original)", n(o.protected.size), n(P1["protected_sources"]))
    s3.row("protected sources all buffered and unstarted",
           "yes" if o.protected.all_buffered_unstarted else "no", "yes")
    s3.row("buffer B / row capacity R", f"{s.buffer:,} / {s.row_capacity:,}",
           f"{PAPER['setup']['B']:,} / {PAPER['setup']['R']:,}")
    s3.links = [link(out, rel_to("report.md"), "audit/report.md")]
    if checked:
        s3.score = ("Proposition at every selection (packers it covers)", f"held for {len(held)} of {len(checked)}",
                    "held (999 protected sources)", "agrees" if len(held) == len(checked) else "DISAGREES")
    return s3


def coverage_section(s, rel_to, out):
    pk = s.packers
    o = pk["original"]
    P1 = PAPER["s5_1_coverage"]

    s51 = Section("s5_1", "5.1 Coverage at the horizon")
    share_arr = o.protected.share_of_arrived
    wrapped = (o.passes_started or 1) > 1
    docs = long_documents(s.values["packers"]["original"])
    docs = f"{docs}; " if docs else ""
    s51.headline = (f"At {s.targets:,} targets the original packer conserves mass exactly (arrived = emitted + discarded + "
                    f"buffered: {'holds' if o.partition_holds else 'FAILS'}), yet {n(o.protected.size)} protected "
                    f"sources hold {pct(share_arr)} of arrived tokens (paper {P1['protected_pct_of_arrived']}%), and "
                    f"{o.long_never_started:,} of "
                    f"{o.sources_longer_than_R_arrived:,} arrivals of sources longer than R never started"
                    + (f" ({docs}the stream wrapped: {o.passes_started} passes started, so a document can arrive "
                       "twice)." if wrapped else "."))
    s51.row("sources arrived", n(o.sources_arrived) + (f" ({o.passes_started} passes started)" if wrapped else ""),
            n(P1["sources_arrived"]))
    s51.row("tokens arrived = emitted + discarded + buffered",
            f"{o.tokens_arrived:,} = {o.emitted:,} + {o.discarded:,} + {o.buffered:,}",
            f"{P1['tokens_arrived']:,} = {P1['emitted']:,} + {P1['discarded']:,} + {P1['buffered']:,}")
    s51.row("crop events, median retained prefix, BOS-only crops",
            f"{o.crop_events:,}, {'n/a' if o.crop_median_emitted is None else f'{o.crop_median_emitted:g}'}, "
            f"{o.crops_emitting_only_bos:,}",
            f"{P1['crop_events']:,}, {P1['crop_median_emitted']}, {P1['crops_emitting_only_bos']:,}")
    s51.row("protected tokens (share of arrived / of buffered)",
            f"{o.protected.tokens:,} ({pct(share_arr)} / {pct(o.protected.share_of_buffered)})",
            f"{P1['protected_tokens']:,} ({P1['protected_pct_of_arrived']}% / {P1['protected_pct_of_buffered']}%)")
    perm = s.permutations
    if perm:
        s51.row(f"first long emission over {perm.count} permutations (targets)",
                "none within the budget" if perm.min is None else f"{perm.min:,}–{perm.max:,}",
                f"{P1['startup_delay_min_targets'] / 1e6:.2f}–{P1['startup_delay_max_targets'] / 1e6:.2f} M")
    if "lossless" in pk:
        ll = pk["lossless"]
        s51.row("lossless: discarded, buffered, in protected", f"{ll.discarded:,}, {ll.buffered:,}, {ll.protected.tokens:,}",
                f"{P1['lossless_discarded']}, {P1['lossless_buffered']:,}, {P1['lossless_protected_tokens']:,}")
    if "segment_first" in pk:
        sf = pk["segment_first"]
        s51.row("segment first: buffered, discarded, added BOS", f"{sf.buffered:,}, {sf.discarded:,}, {sf.bos_added:,}",
                f"{P1['segment_first_buffered']:,}, {P1['segment_first_discarded']:,}, {P1['segment_first_added_bos']:,}")
        s51.row("share of emitted tokens from sources > R: original → segment first",
                f"{pct(o.share_emitted_from_long_sources)} → {pct(sf.share_emitted_from_long_sources)}",
                f"{P1['share_emitted_long_pct_original']}% → {P1['share_emitted_long_pct_segment_first']}%")
    s51.score = ("protected share of arrived tokens (original packer)", pct(share_arr), f"{P1['protected_pct_of_arrived']}%",
                 "mass partition holds; share " + (NOT_COMPARABLE + " (the stream wrapped)" if wrapped else
                                                   "of the paper's order" if 0.01 <= share_arr <= 0.10 else NOT_COMPARABLE))
    s51.links = [link(out, rel_to("report.md"), "audit/report.md"), link(out, rel_to("sources_started.png"), "sources started"),
                 link(out, rel_to("length_histogram.png"), "length histogram"),
                 link(out, rel_to("retention_by_stratum.png"), "retention by stratum"), link(out, rel_to("buffer_mass.png"), "buffer mass"),
                 link(out, rel_to("startup_delay.png"), "startup delay over the permutations")]
    return s51


def pass_bounds_section(s, rel_to, out):
    s52 = Section("s5_2", "5.2 Repeated-corpus bounds")
    pb = s.pass_bounds
    if pb:
        last = pb[-1]
        s52.headline = (f"In a corpus repeated without a buffer reset, the unique longest source ({last.length_at_least:,} "
                        f"tokens) cannot start before pass {last.earliest_possible_pass:,} at B = {s.buffer:,} "
                        f"(paper: {PAPER['s5_2_pass_bounds'][-1][0]:,} tokens, pass {PAPER['s5_2_pass_bounds'][-1][2]:,}).")
        paper = {r[0]: r for r in PAPER["s5_2_pass_bounds"]}
        for r in pb:
            p = paper.get(r.length_at_least)
            s52.row(f"length ≥ {r.length_at_least:,}: sources per pass, earliest pass",
                    f"{r.sources_per_pass:,}, {r.earliest_possible_pass:,}", f"{p[1]:,}, {p[2]:,}" if p else "—")
        s52.score = ("earliest possible pass of the longest source", f"{last.earliest_possible_pass:,}",
                     f"{PAPER['s5_2_pass_bounds'][-1][2]:,}", NOT_COMPARABLE + " (set by the corpus's length census)")
    s52.links = [link(out, rel_to("report.md"), "audit/report.md"), link(out, rel_to("pass_bounds.png"), "pass bounds")]
    return s52


def long_documents(packer):
    """'N of M documents longer than R' never started, each document counted once, from a packer's (or a merge's)
    documents in summary.json; '' where none were counted."""
    lf = (packer.get("documents") or {}).get("longer_than_R")
    if not lf:
        return ""
    never = sum(lf.get(k, 0) for k in ("waiting", "dropped"))  # audit/fate_table.py's NEVER_STARTED (a level below)
    return f"{never:,} of the {sum(lf.values()) - lf.get('not_arrived', 0):,} documents longer than R that arrived"


def dev_stream_rows(sec, d, out):
    """The development (validation) stream's audit beside the paper's 20.86% and 13.9 M targets."""
    s = loaded(AuditSummary.load, d)
    P1 = PAPER["s5_1_coverage"]
    if not s or "original" not in s.packers:
        sec.row("development stream: protected share of arrived, first long emission", "not run",
                f"{P1['val_protected_pct_of_arrived']}%, {P1['val_first_long_emission_targets']:,} targets")
        return
    o = s.packers["original"]
    # its own budget and passes: not the paper's validation budget, which the paper does not state beside these
    passes = f", {o.passes_started} passes started" if (o.passes_started or 1) > 1 else ""
    sec.row("development stream (--split val): protected tokens (share of arrived), first emission of a source > R",
            f"{o.protected.tokens:,} ({pct(o.protected.share_of_arrived)}), "
            + (f"{o.startup_delay_targets:,} targets" if o.startup_delay_targets is not None
               else "none within the budget") + f"; its budget {s.targets:,} targets{passes}",
            f"{P1['val_protected_tokens']:,} ({P1['val_protected_pct_of_arrived']}%), "
            f"{P1['val_first_long_emission_targets']:,} targets")
    sec.links.append(link(out, rel(d / "report.md", out), "development-stream audit"))


def topology_rows(sec, d, out):
    """The paper's loader at several ranks (audit_ranks8): how the never-started set changes beside one stream."""
    s = loaded(AuditSummary.load, d)
    topo = s.topology if s else None
    if not topo or "original" not in topo.packers or topo.packers["original"].merged is None \
            or "original" not in s.packers:
        return  # the main job writes it; a page built from older folders simply has no such row
    m, one = topo.packers["original"].merged, s.packers["original"]
    M = topo.loader_workers
    docs = [long_documents(v) for v in (s.values["topology"]["packers"]["original"]["merged"],
                                        s.values["packers"]["original"])]
    docs = [f"; {x}" if x else "" for x in docs]
    sec.row(f"{topo.ranks} ranks x {M} worker{'s' * (M > 1)}, a packer per worker stream: arrivals of sources > R "
            "never started, merged, beside one stream at the same budget",
            f"{m.long_never_started:,} of {m.sources_longer_than_R_arrived:,}{docs[0]} (one stream: "
            f"{one.long_never_started:,} of {one.sources_longer_than_R_arrived:,}{docs[1]})", "—")
    sec.links.append(link(out, rel(d / "report.md", out), f"{topo.ranks}-rank audit"))


def regime_section(d, out):
    """The regime indicators the audit wrote (summary.json's regime, which regime.json repeats)."""
    s = loaded(AuditSummary.load, d)
    sec = Section("regime", "Regime: where this run differs from the paper's scale")
    if not s or not s.regime:
        sec.text = ["No regime indicators were written (the audit's summary.json has none, or was not read)."]
        return sec
    cols = s.regime
    sec.columns = ("indicator", *cols, "paper")
    sec.text = ["The paper's effects depend on ratios, not sizes; this table says which ratios the run shares with "
                "the paper."]
    for key, label, fmt in (("longest_chunks_share_of_B", "longest source's segment-first chunks / B", pct),
                            ("protected_share_of_arrived", "protected share of arrived tokens", pct),
                            ("passes_started", "stream passes started", str),
                            ("arrived_over_B", "sources arrived / B", lambda x: f"{x:,.1f}"),
                            ("share_emitted_from_long_sources", "emitted share from sources > R", pct)):
        sec.row(label, *(fmt(getattr(c, key)) if getattr(c, key) is not None else "n/a" for c in cols.values()),
                fmt(PAPER_REGIME[key]) if PAPER_REGIME.get(key) is not None else "—")
    return sec


def frontier_section(d, out):
    """The frontier of the offline corpus (frontier/frontier.json): what to change so every long document starts,
    and at what crop waste and last-tenth exposure."""
    f = loaded(Frontier.load, d)
    sec = Section("frontier", "What to change so every long document starts: the frontier of buffer and packer",
                  columns=("configuration", "crop waste / documents longer than R never started, of those arrived / "
                           "their last tenth exposed",
                           "on the Pareto set"), prose=True)
    if not f:
        return missing(sec.key, sec.title, d, f)
    sec.headline = f.cheapest_change
    figure = (f"![frontier]({rel(d / 'frontier.png', out)})" if (d / "frontier.png").exists()
              else "No figure: the frontier ran with --no-figures.")
    sec.text = [f"Every listed configuration replayed at one budget ({f.targets:,} targets): crop waste is the "
                f"share of arrived tokens discarded; long documents are those longer than {f.reference_length:,} "
                f"tokens ({f.long_documents_in_stream:,} in the corpus; which of them arrive by the horizon depends on "
                f"the configuration). {figure}"]
    for i, p in enumerate(f.points):
        name = f"R {p.row_capacity:,}, B {p.buffer:,}, {p.packer}, {p.ranks} rank(s)" + (
            " (current)" if p.current else "") + (" (the paper's)" if p.paper else "")
        sec.row(name, f"{pct(p.crop_waste)} / {p.long_documents_never_started:,} of {p.long_documents:,} / "
                      f"{pct(p.last_tenth_exposure, 1)}", "yes" if i in f.pareto else "")
    sec.links = [link(out, rel(d / "frontier.md", out), "frontier/frontier.md")]
    now = next((p for p in f.points if p.current), None)
    starts_all = sum(1 for p in f.points if p.long_documents_never_started == 0)
    sec.score = ("listed configurations that start every document longer than R that arrived by the horizon",
                 f"{starts_all} of {len(f.points)}" + (f"; the paper's leaves {now.long_documents_never_started:,}"
                                                       if now and now.paper else ""),
                 "B - 1 longest never start (section 3)", "extends the paper's audit (no paper value for the grid)")
    return sec


def packers_section(d, out):
    """The cross-packer audit (audit_packers/comparison.json): one budget through the paper's four, our
    concatenate-and-chunk and the installed libraries' packers and loaders, each run on tracer documents (or, where
    a library cannot be installed beside this project, a rule written from its code); who stopped short is said."""
    c = loaded(Comparison.load, d)
    sec = Section("packers", "Any packer: which sources each packer starts, and which positions it trains on",
                  columns=("packer", "what it did with the arrived tokens and sources", "how"), prose=True)
    if not c:
        return missing(sec.key, sec.title, d, c)
    sec.headline = c.sentence
    passes = "" if c.passes <= 1 else f" ({c.passes:,} passes over the corpus)"
    sec.text = [f"Every packer asked for the same budget, {c.targets:,} targets in rows of R = {c.row_capacity:,}{passes} "
                "(a library may pack to a capacity of its own, and padding or an input that ends first leaves fewer "
                "tokens: the rows below say where): shares of the arrived "
                "tokens emitted / discarded / still buffered, padding and empty positions of the rows, sources longer than R "
                "never started, "
                "the emitted share of the first and last tenth of those sources' positions, the least represented label "
                "(emitted share over arrived share), and the Proposition."]
    for name, r in c.packers.items():
        lab = r.least_represented_label
        short = "" if r.budget_reached else f"stopped short: {r.rows:,} of {r.budget_rows:,} rows; "
        if r.row_capacity not in (None, c.row_capacity):
            short += f"rows of R = {r.row_capacity:,}; "
        sec.row(name, short + f"{pct(r.emitted_share)} / {pct(r.discarded_share)} / {pct(r.buffered_share)}; "
                      f"padding {pct(r.padding_share)}; empty {pct(r.empty_share)}; > R never started {r.long_unstarted()}; first / last tenth {pct(r.long_first_tenth_exposed, 1)} / "
                      f"{pct(r.long_last_tenth_exposed, 1)}; least represented "
                      + (f"{lab[0]} ({lab[1]:.2f})" if lab and lab[1] is not None else "n/a")
                      + f"; Proposition {r.proposition}",
                r.how)
    for name, why in c.refused.items():
        sec.row(name, f"refused: {why}", "—")
    for name, why in c.left_out.items():
        sec.row(name, f"left out of the main job: {why}; audit it alone with --packers {name}", "—")
    traced = sum(1 for r in c.packers.values() if r.how == "traced")
    rules = sum(1 for r in c.packers.values() if r.how.startswith("rule"))
    replayed = len(c.packers) - traced - rules
    short = [n for n, r in c.packers.items() if not r.budget_reached]
    if short:
        sec.text.append(f"Not every packer reached the budget: {', '.join(short)} made fewer rows (their input ended "
                        "first) and are read at what they made.")
    orig = c.packers.get("original")
    ours = f"{len(c.packers)} packers ({replayed} replayed, {traced} traced, {rules} as rules from their code)" + (
        f"; original leaves {orig.long_unstarted()} longer than R unstarted" if orig else "")
    sec.score = ("packers audited by running them: sources > R never started", ours, "the paper's loader family only",
                 "extends the paper's audit (no paper value for the libraries)")
    sec.links = [link(out, rel(d / "report.md", out), "audit_packers/report.md"),
                 link(out, rel(d / "comparison.png", out), "comparison figure")]
    return sec
