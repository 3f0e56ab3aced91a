"""The audit's report.md, written from its summary (nothing is computed here).

The first screen is for a researcher who has not read the paper: the horizon, then in plain
words how many of their documents each packer trained whole, in part or not at all, by label
and by length, and whether it reached the budget. Then the paper's terms, one line each, and
the paper's tables (5.1 coverage, retention by stratum, startup delay, 5.2 pass bounds),
per-label coverage, position exposure, the comparison across packers, the regime, the
figures, the folder's size, and last the one-sentence verdict.
"""
from audit.compare import comparison_table_md, input_ended, shortfall
from audit.fate_table import NEVER_STARTED
from audit.fmt import fmt, left_out_line, pct, shown_labels, table
from audit.regime import regime_table_md

# The note under each figure in report.md: what to read in it (here, not beside the figures: a report written
# without figures, as --no-figures writes it, imports no matplotlib)
FIGURE_NOTES = {
    "retention_by_stratum.png": "How much of each length stratum's loaded tokens each packer emitted; compare the "
                                "packers within a stratum (retention is not monotone in length).",
    "sources_started.png": "Sources started against targets: the right panel shows how late, and how few, sources "
                           "longer than R start under each packer (or says in words that the count never moves).",
    "buffer_mass.png": "The buffer's token mass over the replay: the blue band is the protected set (the largest "
                       "B - 1 long sources arrived so far), which no selection touches; orange is everything else.",
    "length_histogram.png": "Arrived lengths by group; every protected source (red) is among the longest, right of the "
                            "R line.",
    "label_coverage.png": "Each label's share of the emitted tokens over its share of the arrived ones, per packer: "
                          "below the dashed line a packer under-represents that label.",
    "position_exposure.png": "For each length stratum (rows) and tenth of the source's positions (columns), the share "
                             "of those tokens the rows contain: a dark right side is prefix bias.",
    "comparison.png": "Every packer at the audit's budget: where the arrived tokens went, the padding, and how many "
                      "documents longer than R never started, of those that arrived (arrivals, where a packer has no "
                      "per-document table: the title says which); a packer whose input ended before the budget is "
                      "named in the title and its rows made are written in red above its bar.",
    "startup_delay.png": "Where the first long source is emitted under each arrival-order permutation: the spread is "
                         "the order's effect, the red line the corpus order (when none is emitted within the budget, "
                         "the figure says so in words).",
    "pass_bounds.png": "The earliest pass in which a source of at least that length can start in a repeated corpus; "
                       "the bound grows as the longest sources become rarer.",
}

PAPER_SOURCES = 846_848


COVERAGE_ROWS = (
    ("replayed on lengths, or traced by running it", "how", str), ("passes started (> 1: the stream wrapped)", "passes_started", fmt),
    ("sources arrived", "sources_arrived", fmt), ("tokens arrived", "tokens_arrived", fmt),
    ("BOS markers added", "bos_added", fmt), ("emitted", "emitted", fmt), ("discarded", "discarded", fmt),
    ("buffered", "buffered", fmt), ("partition adds up", "partition_holds", fmt),
    ("selection events", "selection_events", fmt), ("crop events", "crop_events", fmt),
    ("median crop emission", "crop_median_emitted", fmt), ("crops emitting only BOS", "crops_emitting_only_bos", fmt),
    ("sources started", "sources_started", fmt), ("sources fully emitted", "sources_fully_emitted", fmt),
    ("sources never started", "sources_never_started", fmt),
    ("sources > R arrived", "sources_longer_than_R_arrived", fmt),
    ("sources > R started", "sources_longer_than_R_started", fmt),
    ("startup delay (targets)", "startup_delay_targets", fmt),
    ("share of emitted from sources > R", "share_emitted_from_long_sources", pct),
    ("rows starting mid-document without a BOS", "continuation_rows", fmt),
    ("padding share of the rows", "padding_share", pct),
)
PROTECTED_ROWS = (("protected sources", "size", fmt), ("protected tokens", "tokens", fmt),
                  ("protected share of arrived", "share_of_arrived", pct),
                  ("protected share of buffered", "share_of_buffered", pct),
                  ("Proposition held at every selection", "proposition_held", fmt))


TERMS = [
    "## What the terms below mean", "",
    "The sections below follow the paper *Source Exclusion in Streaming Pretraining: An Exact Audit of Minimum-Crop "
    "Packing*. Its terms, one line each:", "",
    "- **source**: one arrival of a document in the stream; a stream that wraps brings a document back as a new source.",
    "- **R** (row capacity): tokens per training row, context + 1; a document longer than R cannot fit a row whole.",
    "- **B** (buffer): the fewest documents the packer keeps buffered to choose from.",
    "- **targets**: the tokens a row trains to predict, R - 1 per row; the budget is counted in them.",
    "- **horizon**: the end of the budget; whatever is still buffered then was never trained on.",
    "- **protected set**: the B - 1 longest arrived documents longer than R; the paper's **Proposition** says the "
    "original packer never touches any of them, and the audit checks it at every selection.",
    "- **regime**: whether this stream's ratios (documents per pass, long documents against B) are of the paper's "
    "order, so that its shares transfer.", "",
]


def _read_from(inputs):
    """'3 files', '1 Megatron prefix (its .bin and .idx)': a Megatron input is one dataset of two files."""
    files = sum(len(i["files"]) for i in inputs if i["format"] != "megatron")
    prefixes = sum(1 for i in inputs if i["format"] == "megatron")
    said = ([f"{files:,} file{'s' * (files != 1)}"] if files or not prefixes else []) + (
        [f"{prefixes:,} Megatron prefix{'es' * (prefixes != 1)} (each a .bin and its .idx)"] if prefixes else [])
    return " and ".join(said)


def corpus_lines(c):
    """Where a corpus read in place came from and how its lengths were counted (the BOS choice stated)."""
    tok = c.get("tokenizer")
    bos = c["bos"]
    how = {"auto": "a BOS counted for text, and for token data only where the first token is not the BOS id",
           "add": "a BOS counted for every document", "none": "no BOS counted"}[bos["policy"]]
    n_lone = c.get("empty_documents", 0) if bos["policy"] != "none" else 0
    lone = f" ({n_lone:,} of them a lone BOS: an empty text or token list)" if n_lone else ""
    return [f"Corpus: {c['documents']:,} documents{lone}, {c['tokens']:,} tokens, read from {_read_from(c['inputs'])} "
            f"({', '.join(sorted({i['format'] for i in c['inputs']}))}); "
            + (f"tokenizer {tok['kind']} {tok['ref']} "
               f"(SHA256 {str(tok.get('sha256', ''))[:12]}); " if tok else "")
            + f"BOS policy {bos['policy']} ({how}" + (f"; id {bos['id']}" if bos["id"] is not None else "") + ")."
            + (f" No document of the token data starts with id {bos['id']}, so one was counted for each: if its BOS "
               "is another id, rerun with --bos-id." if c.get("bos_first") == 0 else "")
            + (" Lengths from the cache: the inputs were unchanged." if c.get("cached") else ""), ""]


def asked_counts(summary, per):
    """Each packer's counts for the loader the audit was asked about: under a loader topology, merged over its worker
    streams (what that run trains on); else the one stream's. A packer that refused under the topology keeps its
    one-stream counts, said where they are shown."""
    topo = summary.get("topology")
    if not topo:
        return per
    out = {}
    for n, s in per.items():
        t = topo["packers"].get(n) or {}
        m = t.get("merged")
        if not m or "refused" in m:
            out[n] = {**s, "one_stream_only": True}
            continue
        out[n] = {**m, "row_capacity": s["row_capacity"], "budget_rows": s.get("budget_rows", summary["rows"]),
                  "budget_reached": all(c.get("budget_reached", True) for c in t["workers"])}
    return out


def loader_words(pl) -> tuple:
    """What the loader calls the N of --ranks and the M of --loader-workers: a --pipeline's own words (MaxText's Grain:
    hosts and worker processes), else ranks and loader workers."""
    return (pl["rank_word"], pl["worker_word"]) if pl else ("rank", "loader worker")


def topology_words(topo, pl=None) -> str:
    rank, worker = loader_words(pl)
    return (f"{_count(topo['ranks'], rank)} x {_count(topo['loader_workers'], worker)} ({topo['worker_streams']} "
            f"worker streams, split by {topo['split_by']})")


def documents_section(summary, per):
    """The first screen: what each packer did with the researcher's documents, in plain words (per: asked_counts)."""
    out = ["## What happened to your documents", ""]
    if summary.get("topology"):
        words = topology_words(summary["topology"], summary.get("pipeline"))
        out += [f"Under the loader topology asked for, {words}: each packer's counts "
                "merged over its worker streams, each of which packs its own share with a buffer of its own. One "
                "stream of the same budget is in \"Loader topology\" and the sections after it.", ""]
    counted = {n: s for n, s in per.items() if s.get("documents")}
    for n, s in per.items():
        out += [documents_sentence(n, s, summary), ""]
    if not counted:
        return out
    header = ["packer", "rows made", "trained whole", "in part", "never started", "not reached", "> R never started"]
    rows = []
    for n, s in counted.items():
        d = s["documents"]
        f, lf = d["by_fate"], d["longer_than_R"]
        never = sum(f[k] for k in NEVER_STARTED)
        made = f"{s['rows']:,}" + ("" if s.get("budget_reached", True) else f" of {s['budget_rows']:,}")
        rows.append([n, made, f"{f['whole']:,}", f"{f['partial']:,}", f"{never:,}", f"{f['not_arrived']:,}",
                     f"{sum(lf[k] for k in NEVER_STARTED):,} of {sum(lf.values()) - lf['not_arrived']:,} arrived"])
    files = ("fates_<packer>_streams.parquet (with its worker stream; one stream's: fates_<packer>.parquet)"
             if summary.get("topology") else "fates_<packer>.parquet")
    out += table(header, rows) + ["", "Documents, each counted once however often the stream brought it back. "
                                  f"One row per document, with its file, row and label: {files}.", ""]
    main = "original" if "original" in counted else next(iter(counted))
    d = counted[main]["documents"]
    if len(d["by_label"]) > 1:
        labels, more = shown_labels(d["by_label"], lambda g: sum(g[k] for k in FATE_KEYS))
        out += [f"### {main}: by label", ""] + fate_table(labels, "label") + [""]
        out += [left_out_line(more, f"summary.json and each document's in fates_{main}.parquet"), ""] if more else []
    out += [f"### {main}: by length (tokens)", ""] + fate_table(d["by_stratum"], "stratum") + [""]
    return out


def why_short(s) -> str:
    """Why a packer made fewer rows than the budget, as the comparison says it (compare.input_ended): the input ended
    (--passes bounds it, or a traced packer read to the end of the passes the audit gives it), or the packer stopped
    yielding rows itself (one that returns early)."""
    if (s.get("trace") or {}).get("input_ended") and not s["rows"]:  # it read its input twice, nothing the second time
        return "its input ended first, read to the end before any row (the documents come once, as a loader's " \
               "iterator gives them)"
    return "its input ended first" if input_ended(s) else "it stopped yielding rows, its input not ended"


def overdrawn(s) -> str:
    """Why a packer's partition does not add up, in words (a packer of one's own that emits a token twice)."""
    return (f"the partition does not add up: {s['sources_overdrawn']:,} source(s) emitted more tokens than they hold, "
            f"{s['buffered']:,} tokens buffered at the end (a token emitted twice, or given to another document)")


def out_of_order(s) -> str:
    """A traced packer whose rows hold a document's tokens out of its order, in words ('' for none)."""
    n, f = s.get("rows_out_of_order", 0), s.get("out_of_order_first")
    if not n:
        return ""
    who = (f"the {ordinal(f['source'] + 1)} document worker stream {f['worker_stream']} pulled" if "worker_stream" in f
           else f"the {ordinal(f['source'] + 1)} document it pulled")
    return (f" **{n:,} of its {s['rows']:,} rows hold a document's tokens out of their order** (first: in row "
            f"{f['row']:,}, counting from 0, {who} continues at its position {f['position']:,} without a BOS, with "
            f"its position {f['other_position']:,} {'before' if f['other_before'] else 'after'} it). Each in-order "
            "piece is counted as an emission of its own (in the selection and crop counts too), so those documents "
            "count as trained in that many pieces, each token once: a reversed or shuffled row is a bug in the "
            "packer; a fill-in-the-middle transform reorders on purpose.")


def ordinal(n) -> str:
    return f"{n:,}" + ("th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th"))


def documents_sentence(name, s, summary):
    """One packer's horizon in words: rows made against the budget, documents whole / in part / not at all."""
    made = (f"made all {s['rows']:,} rows of the budget" if s.get("budget_reached", True) else
            f"stopped after {s['rows']:,} of the {s['budget_rows']:,} rows the budget asks for: {why_short(s)}")
    if s.get("one_stream_only"):
        made += " (one stream: it refused a worker stream's share)"
    d = s.get("documents")
    if not d:
        return (f"**{name}** {made}; it started {s['sources_started']:,} of {s['sources_arrived']:,} arrived sources "
                "(no per-document table: --no-fates, or a stream without document positions)." + out_of_order(s))
    f, lf = d["by_fate"], d["longer_than_R"]
    never = sum(f[k] for k in NEVER_STARTED)
    out = (f"**{name}** {made}. Of your {d['documents']:,} documents it trained {f['whole']:,} whole, "
           f"{f['partial']:,} in part and {never + f['not_arrived']:,} not at all ({f['waiting']:,} still waiting in "
           f"its buffer at the end, {f['dropped']:,} dropped without a token trained, {f['not_arrived']:,} never reached).")
    long_total = sum(lf.values())
    if long_total:
        long_never = sum(lf[k] for k in NEVER_STARTED)
        out += (f" Of the {long_total:,} documents longer than a row (R = {s['row_capacity']:,} tokens), "
                f"{long_never + lf['not_arrived']:,} were not trained at all ({long_never:,} arrived and never "
                f"started, {lf['not_arrived']:,} never reached).")
    if d["arrivals"] != d["documents"] - f["not_arrived"]:
        out += f" The stream wrapped: {d['arrivals']:,} arrivals of {d['documents'] - f['not_arrived']:,} documents."
    return out + out_of_order(s)


FATE_KEYS = ("whole", "partial", "waiting", "dropped", "not_arrived")


def fate_table(groups, key):
    rows = [[g[key], f"{sum(g[k] for k in FATE_KEYS):,}",
             f"{g['whole']:,}", f"{g['partial']:,}", f"{g['waiting'] + g['dropped']:,}", f"{g['not_arrived']:,}"]
            for g in groups]
    return table([key, "documents", "trained whole", "in part", "never started", "not reached"], rows)


def coverage_section(summary, per):
    names = list(per)
    out = ["## 5.1 Coverage at the budget", ""]
    out += table(["quantity", *names], [[label] + [f(per[n].get(key)) if key in per[n] or f is fmt else "n/a"
                                                   for n in names] for label, key, f in COVERAGE_ROWS])
    for label, key, f in PROTECTED_ROWS:
        out.append(f"| {label} | " + " | ".join(f(per[n]["protected"][key]) if per[n]["protected"]["applies"] else "n/a"
                                                 for n in names) + " |")
    out += ["", "n/a in the Proposition rows: the packer is outside the paper's family (section 3); why, for each: "
            + "; ".join(f"{n}: {per[n]['protected']['why_not']}" for n in names if not per[n]["protected"]["applies"])
            + "." if any(not per[n]["protected"]["applies"] for n in names) else "",
            "Paper (original packer): 999 protected sources, 4.37% of arrived source mass, 99.83% of buffered mass; 1 pass.",
            ""]
    for n in names:
        v = per[n]["protected"].get("first_violation")
        if v:
            out.append(f"**{n}: Proposition violated** at event {v['event']} (source {v['source_id']}, length {v['source_len']}).")
    for n in names:
        if per[n].get("settings"):
            lib = per[n].get("library") or {}
            out.append(f"- **{n}** ({' '.join(x for x in (lib.get('name', 'ours'), lib.get('version')) if x)}): "
                       + "; ".join(f"{k}: {v}" for k, v in per[n]["settings"].items()) + ".")
        if per[n].get("loader"):
            out.append(loader_line(n, per[n]["loader"], per[n].get("how", "")))
    return out + [""]


def loader_line(name, facts, how="") -> str:
    """What a loader decided (summary.json's 'loader': Megatron's epochs, its 80% rule, the held-out split; a rule's
    settings and what it counted), its lists and tables left to summary.json. how: the summary's, a rule's 'rule ...'."""
    def value(k, v):
        if isinstance(v, bool):
            return "yes" if v else "no"
        return f"{v:,}" if isinstance(v, int) and k != "seed" else str(v)

    said = "; ".join(f"{k.replace('_', ' ')}: {value(k, v)}" for k, v in facts.items()
                     if k != "library" and v is not None and not isinstance(v, (list, dict)))
    whose = ("the rule written from its code decided (the library itself did not run)" if how.startswith("rule") else
             "as the library itself ran")
    out = f"- **{name}**: {whose}: {said}"
    if any(isinstance(v, (list, dict)) for v in facts.values()):
        out += " (its tables: summary.json's loader)"
    if facts.get("held_out_documents"):
        out += (f". Its {facts['held_out_documents']:,} held-out documents (the split's validation and test shares) "
                "are never trained: the fate table counts them as dropped, and as arriving with every pass the "
                "stream wraps into, as every document does")
    return out + "."


def retention_section(per):
    names = list(per)
    first = per[names[0]]["retention_by_stratum"]
    rows = [[r["stratum"], f"{r['sources']:,}"] + [pct(per[n]["retention_by_stratum"][k]["retained"]) for n in names]
            for k, r in enumerate(first)]
    never = [[r["stratum"]] + [f"{per[n]['retention_by_stratum'][k]['sources'] - per[n]['retention_by_stratum'][k]['started']:,}"
                               for n in names] for k, r in enumerate(first) if r["sources"]]
    return (["### Retention of loaded token mass by original length", ""] + table(["stratum", "sources", *names], rows)
            + ["", "n/a: no source of that length arrived (0.00% means sources arrived and none of their tokens was "
               "emitted).", "", "### Sources never started, by original length", ""]
            + table(["stratum", *names], never) + [""])


def label_section(per):
    names = list(per)
    out = ["## Per-label coverage", "",
           "Each label's arrivals and their tokens at the horizon, and its share of emitted tokens against its share of "
           "arrived tokens (representation 1.00: as it arrived; below 1: under-represented). A document arrives again "
           "in each pass its stream wraps into: arrivals, started and never started count arrivals; documents and "
           "documents never started count each document that arrived once (from the fate table; n/a without one). A "
           "document without a label counts under \"(no label)\".", ""]
    for n in names:
        out += [f"### {n}", ""] + label_table(per[n]["by_label"], (per[n].get("documents") or {}).get("by_label"))
        out += [""]
    return out


def label_table(by_label, documents=None):
    """Per-label coverage, at most LABELS_SHOWN labels (audit/fmt.py), the labels with the most arrivals, then a line
    saying how many are left out. documents: the fate table's counts by label (each document once), or None."""
    docs = {d["label"]: d for d in documents or ()}
    shown, more = shown_labels(by_label, lambda d: d["docs"])

    def documents_of(label):
        f = docs.get(label)
        if f is None:
            return ["n/a", "n/a"]
        return [f"{sum(f[k] for k in FATE_KEYS) - f['not_arrived']:,}", f"{sum(f[k] for k in NEVER_STARTED):,}"]

    rows = [[d["label"], *documents_of(d["label"]), f"{d['docs']:,}", f"{d['tokens']:,}", f"{d['emitted']:,}",
             f"{d['discarded']:,}", f"{d['buffered']:,}", f"{d['started']:,}", f"{d['never_started']:,}",
             pct(d["share_of_arrived"]), pct(d["share_of_emitted"]), fmt(d["representation"]),
             fmt(d["longest_never_started"])] for d in shown]
    return table(["label", "documents", "documents never started", "arrivals", "tokens", "emitted", "discarded",
                  "buffered", "arrivals started", "arrivals never started", "share of arrived", "share of emitted",
                  "representation", "longest never started"], rows) + (
        ["", left_out_line(more, "summary.json (by_label)", "arrivals")] if more else [])


def exposure_table(position_exposure):
    rows = [[e["stratum"]] + [pct(x) for x in e["emitted_share"]] for e in position_exposure]
    return table(["stratum", *[f"{10 * d}-{10 * d + 10}%" for d in range(10)]], rows)


def exposure_section(per):
    out = ["## Position exposure", "",
           "The share of each tenth of the sources' positions (0-10% ... 90-100% of a source's length) that the rows "
           "contain, by length stratum: prefix bias as a number.", ""]
    for n, s in per.items():
        out += [f"### {n}", ""] + exposure_table(s["position_exposure"])
        out += ["", f"{s['continuation_rows']:,} rows start mid-document without a BOS "
                    f"({s['continuation_events']:,} emissions continue a document without one).", ""]
    return out


def bounds_section(summary):
    out = []
    if summary.get("permutations"):
        p = summary["permutations"]
        seeds = f"{p['count']} seeded permutations (seeds {p['seeds'][0]}..{p['seeds'][-1]})"
        unpermuted = "n/a" if p["unpermuted"] is None else f"at {fmt(p['unpermuted'])} targets"
        none = p["delays"].count(None)  # permutations in which no long source was emitted within the budget
        if none == len(p["delays"]):
            when = f"no source longer than R was emitted within the budget in any of them (unpermuted: {unpermuted})"
        else:
            when = (f"first emission of a source longer than R at {fmt(p['min'])} – {fmt(p['max'])} targets "
                    f"(unpermuted: {unpermuted})" + (f"; in {none} of them none was emitted within the budget"
                                                     if none else ""))
        out += ["### Startup delay under arrival-order permutations (original packer)", "",
                f"{seeds}: {when}. Paper: 12.99–14.84 M targets.", ""]
    out += [f"## 5.2 Repeated-corpus bounds at B = {summary['buffer']:,}", ""]
    out += table(["length at least", "sources per pass", "earliest possible pass"],
                 [[f"{r['length_at_least']:,}", f"{r['sources_per_pass']:,}", fmt(r["earliest_possible_pass"])]
                  for r in summary["pass_bounds"]])
    return out + ["", "Necessary lower bounds (section 3), not service times.", ""]


def regime_section(reg):
    cols = reg["columns"]
    out = ["## Regime: where this stream sits against the paper's scale", "",
           "The paper's effects depend on ratios, so a setting is in the paper's regime only where these indicators "
           "have the paper's order of magnitude.", "", regime_table_md(cols), ""]
    a = cols.get("this audit")
    if a and a["buffer"] - 1 > a["sources_longer_than_R_per_pass"]:
        out += [f"**This audit is not in the paper's regime at B = {a['buffer']:,}:** the "
                f"stream has {a['sources_per_pass']:,} sources per pass (paper {PAPER_SOURCES:,}) and only "
                f"{a['sources_longer_than_R_per_pass']:,} longer than R per pass, fewer than B - 1, so the protected set "
                f"holds every long source of a pass ({a['passes_started']} pass(es) started within this budget; "
                f"{pct(a['protected_share_of_arrived'])} of arrived tokens against the paper's 4.37%). The mechanism "
                f"checks above (partition, Proposition, bounds) hold at any scale; the shares do not transfer."
                + (" The tiny training setting is the scaled one that is in the regime." if "tiny training" in cols else ""),
                ""]
    return out


def comparison_section(comp, one_stream=False):
    """The table across packers; one_stream: under a topology, whose counts the table is not (it is one stream's)."""
    left = [f"- {n}: not run here ({why}); audit it alone with --packers {n}" for n, why in comp.get("left_out", {}).items()]
    head = ["## One table across packers", ""] + (
        ["One stream of the same budget; the topology's merged counts are under \"What happened to your documents\" "
         "and \"Loader topology\".", ""] if one_stream else [])
    return head + [comparison_table_md(comp), "", comp["sentence"], ""] + (left + [""] if left else [])


def pipeline_lines(pl):
    """Which named loader this is, what it follows, and how many buffers its ranks and workers make."""
    N, M, W = pl["ranks"], pl["loader_workers"], pl["worker_streams"]
    who = ("one packer serves the whole run, so the one-stream audit below is the run's answer" if W == 1 and
           pl["owner"] == "stream" else f"{W:,} worker stream{'s' * (W > 1)}, each its own packer and buffer")
    how = f"split by {pl['split_by']}, " if W > 1 else ""
    return [f"Pipeline **{pl['name']}** at {_count(N, pl['rank_word'])} x {_count(M, pl['worker_word'])}: {who} "
            f"({pl['packers']}, {how}{pl['refill_docs']} documents per refill). It follows {pl['follows']}."
            + (f" {pl['order']}." if pl.get("order") else ""), ""]


def _count(n, word):
    """'1 host', '4 hosts', '2 Grain worker processes'."""
    return f"{n} {word}" if n == 1 else f"{n} {word}{'es' if word.endswith('s') else 's'}"


def topology_sentence(topo, one, name, R, pl=None):
    """The merged answer beside the one-stream answer for the same budget (pl: the --pipeline, whose words it uses)."""
    m = topo["packers"][name]["merged"]
    never = m["sources_longer_than_R_arrived"] - m["sources_longer_than_R_started"]
    one_never = one["sources_longer_than_R_arrived"] - one["sources_longer_than_R_started"]
    R = one.get("row_capacity", R)  # the packer's own: a library's row may hold one token more or less
    return (f"With {topology_words(topo, pl)}, {name} never starts {never:,} of its "
            f"{m['sources_longer_than_R_arrived']:,} arrived sources longer than R = {R:,} "
            f"({m['sources_never_started']:,} of {m['sources_arrived']:,} arrivals in all{_docs_never(m)}); one stream "
            f"would leave {one_never:,} of {one['sources_longer_than_R_arrived']:,} ({one['sources_never_started']:,} of "
            f"{one['sources_arrived']:,} arrivals in all{_docs_never(one)}).")


def worker_stream_failures(topo, names, pl=None):
    """A line naming each worker stream whose partition does not add up or whose Proposition was violated: the
    per-worker table's NO, said where a reader of the lead (or the console) sees it (pl: the --pipeline's words)."""
    out, N = [], topo["ranks"]
    rank, worker = loader_words(pl)
    for n in names:
        for w, c in enumerate(topo["packers"][n]["workers"]):
            where = f"{n}, worker stream {w} ({rank} {w % N}, {worker} {w // N})"
            if not c["partition_holds"]:
                out += [f"**{where}: the partition does not add up:** {c['tokens_arrived'] + c['bos_added']:,} tokens "
                        f"arrived (BOS markers included) against {c['emitted'] + c['discarded'] + c['buffered']:,} "
                        f"emitted, discarded and buffered.", ""]
            if c["proposition_held"] is False:
                out += [f"**{where}: Proposition violated:** a protected source was selected from this stream's "
                        f"buffer.", ""]
    return out


def hf_later_passes(topo, names):
    """Under --split-by hf-iterable, a line naming, per packer, the worker streams that read past their first pass
    where HF datasets would deal the files anew (topology.hf_moved_streams): the audit repeats each stream's
    first-pass share, in order."""
    moved = topo.get("hf_later_passes", {})
    said = [f"{n}: worker stream{'s' if len(moved[n]) > 1 else ''} {', '.join(map(str, moved[n]))}"
            for n in names if moved.get(n)]
    if not said:
        return []
    M = topo["loader_workers"]
    shared = (f" (the {M} workers of a rank share one epoch counter, which each worker's re-loop advances)"
              if M > 1 else "")
    return [f"**Read past their first pass, where HF would deal the files anew:** {'; '.join(said)}. The audit repeats "
            "each stream's first pass, in order; a loader that re-loops a streaming HF dataset with set_epoch, as "
            "torchtitan 0.3.0 does, has HF shuffle the files by the epoch before dealing them again (datasets 4.7.0 "
            f"iterable_dataset.py:2503-2505), and at the epochs these streams reach the shuffle moves them{shared}, so "
            "their counts past the first pass may not be that loader's.", ""]


def _docs_never(m):
    d = m.get("documents")
    if not d:
        return ""
    return f"; {sum(d['by_fate'][f] for f in NEVER_STARTED):,} of {d['documents']:,} documents never started"


def topology_section(summary, per):
    """The topology's lead: the merged sentence per packer and any worker stream that failed a check, then the
    per-worker table."""
    topo = summary["topology"]
    out = ["## Loader topology", ""]
    names = [n for n in per if "refused" not in topo["packers"][n]["merged"]]
    for n in names:
        out += [topology_sentence(topo, per[n], n, summary["row_capacity"], summary.get("pipeline")), ""]
    out += worker_stream_failures(topo, names, summary.get("pipeline")) + hf_later_passes(topo, names)
    rank, worker = loader_words(summary.get("pipeline"))
    header = ["packer", f"stream ({rank}, {worker})", "documents", "rows", "sources arrived", "never started",
              "> R arrived", "> R never started", "partition adds up", "Proposition held"]
    rows, N = [], topo["ranks"]
    for n in names:
        for w, c in enumerate(topo["packers"][n]["workers"]):
            rows.append([n, f"{w} ({w % N}, {w // N})", fmt(topo["documents_per_stream"][w]), fmt(c["rows"]),
                         fmt(c["sources_arrived"]), fmt(c["sources_never_started"]),
                         fmt(c["sources_longer_than_R_arrived"]),
                         fmt(c["sources_longer_than_R_arrived"] - c["sources_longer_than_R_started"]),
                         fmt(c["partition_holds"]), fmt(c["proposition_held"])])
    out += table(header, rows) + ["", "Each worker stream runs its own packer and buffer over its own share "
                                  f"({topo['refill_docs']} documents per refill) for its share of the rows; the "
                                  "Proposition is checked in each.", ""]
    for n in names:
        m = topo["packers"][n]["merged"]
        out += [f"### {n}, merged over the {topo['worker_streams']} worker streams: per-label coverage", ""]
        out += label_table(m["by_label"], (m.get("documents") or {}).get("by_label"))
        out += ["", f"### {n}, merged: position exposure", ""]
        out += exposure_table(m["position_exposure"]) + [""]
    return out + ["The sections below are the one-stream audit of the same budget.", ""]


def verdict(summary) -> str:
    """The one sentence every report ends with."""
    per = {n: s for n, s in summary["packers"].items() if "refused" not in s}
    if not per:
        return "Verdict: every packer refused this stream."
    name = "original" if "original" in per else next(iter(per))
    one = per[name]
    s = asked_counts(summary, {name: one})[name]
    long_never = s["sources_longer_than_R_arrived"] - s["sources_longer_than_R_started"]
    passes = summary["horizon"]["passes"]
    when = (f"over {passes:,.1f} passes" if passes > 1 else f"at {summary['targets']:,} targets "
            f"({passes:.0%} of one pass)")
    merged = summary.get("topology") and not s.get("one_stream_only")
    if merged:
        when += f", with {topology_words(summary['topology'], summary.get('pipeline'))}"
    prot = one["protected"]
    held = (f", the {prot['size']:,} longest of them buffered and unstarted as the Proposition says"
            if not merged and prot["applies"] and prot["proposition_held"] and prot["size"] else
            f", the Proposition holding in each worker stream" if merged and s.get("proposition_held") else "")
    labs = [d for d in s["by_label"] if d["representation"] is not None]
    lab = ""
    if len(labs) > 1:
        low = min(labs, key=lambda d: d["representation"])
        lab = (f"; the most under-represented label is {low['label']!r} ({pct(low['share_of_emitted'])} of emitted "
               f"tokens against {pct(low['share_of_arrived'])} of arrived)")
    short = shortfall(summary["comparison"]["packers"]) if summary.get("comparison") else ""
    if not s["rows"]:
        return no_row_verdict(summary, name, s) + short
    if not s.get("budget_reached", True):
        when = (f"after {s['rows']:,} of the budget's {s['budget_rows']:,} rows ({why_short(s)}; "
                f"{passes:.0%} of one pass asked for)")
    alone = ""
    if merged:
        alone = (f" (one stream of the same budget would leave "
                 f"{one['sources_longer_than_R_arrived'] - one['sources_longer_than_R_started']:,} of "
                 f"{one['sources_longer_than_R_arrived']:,})")
    return (f"Verdict: {when}, {name} emits {pct(s['emitted'] / max(s['tokens_arrived'] + s['bos_added'], 1))} of "
            f"the arrived tokens and never starts {long_never:,} of the {s['sources_longer_than_R_arrived']:,} arrived "
            f"sources longer than R = {s.get('row_capacity', summary['row_capacity']):,}{_long_documents(s)}{alone}"
            f"{held}{lab}.{short}")


def no_row_verdict(summary, name, s) -> str:
    """The verdict of a packer that made no row: it trained nothing, so none of the documents started (its zero
    unstarted of zero arrived is no good news). The paper's packers never pack from fewer than B spans."""
    docs = (s.get("documents") or {}).get("documents")
    floor = (f"; {name} never packs from fewer than B = {summary['buffer']:,} spans"
             if s.get("how") == "replayed" else "")
    return (f"Verdict: {name} made no row of the budget's {s['budget_rows']:,} ({why_short(s)}{floor}), so it "
            f"trained nothing and started none of the {f'{docs:,} ' if docs else ''}documents.")


def _long_documents(s):
    """' (N of its M documents longer than R that arrived)': where the stream wrapped, the verdict's arrivals as
    documents, each counted once (a wrapped stream brings a document back as a new source); '' where each arrival
    is a document, or without a fate table."""
    d = s.get("documents") or {}
    lf = d.get("longer_than_R")
    if not lf or d["arrivals"] == d["documents"] - d["by_fate"]["not_arrived"]:
        return ""
    return (f" ({sum(lf[k] for k in NEVER_STARTED):,} of its {sum(lf.values()) - lf['not_arrived']:,} documents longer "
            "than R that arrived)")


def report_md(summary) -> str:
    per = {n: s for n, s in summary["packers"].items() if "refused" not in s}
    out = [f"**{summary['horizon']['sentence']}**", "", f"# Source audit: {summary['stream']}", "",
           f"Budget: {summary['targets']:,} targets = {summary['rows']:,} rows of R={summary['row_capacity']} "
           f"({summary['budget_reason']}); buffer B={summary['buffer']}"
           + ("" if all(s.get("how") == "replayed" for s in per.values()) else
              " (the paper's packers'; a library packer buffers as its own code does)")
           + ". The trainer's final unused prefetch is "
           f"excluded. A traced packer's rows are its own (a library may pack to another capacity).", ""]
    if summary.get("corpus"):
        out += corpus_lines(summary["corpus"])
    if per:
        out += documents_section(summary, asked_counts(summary, per)) + TERMS
    if summary.get("pipeline"):
        out += pipeline_lines(summary["pipeline"])
    if summary.get("topology") and per:
        out += topology_section(summary, per)
    for n, s in summary["packers"].items():
        if "refused" in s:
            out += [f"**{n} refused this stream:** {s['refused']}", ""]
    if per:
        out += coverage_section(summary, per) + retention_section(per)
    out += bounds_section(summary)
    if per:
        out += label_section(per) + exposure_section(per)
    if summary.get("comparison"):
        out += comparison_section(summary["comparison"], bool(summary.get("topology")))
    if summary.get("regime"):
        out += regime_section(summary["regime"])
    out += ["## Figures", ""]
    for f in summary["figures"]:
        out += [f"![{f}]({f})", "", FIGURE_NOTES.get(f, ""), ""]
    if summary.get("folder_bytes") is not None:
        out += [f"This folder holds {summary['folder_bytes'] / 1e6:,.1f} MB (events as parquet"
                + (", and CSV as asked" if summary.get("csv") else "") + ").", ""]
    return "\n".join(out + [verdict(summary)]) + "\n"


def console_summary(summary) -> str:
    """What the command line prints: the coverage table, the comparison, the verdict (the horizon's
    sentence, the report's first line, was printed before the packers ran)."""
    md = report_md(summary).split("\n\n", 1)[1]
    head = md.split("### Retention")[0]
    comp = ("## One table across packers" + md.split("## One table across packers")[1].split("## ")[0]
            if "## One table across packers" in md else "")
    return head + comp + verdict(summary)
