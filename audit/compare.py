"""One table across packers at one budget.

A packer whose input ends before the budget (a library that packs each document once, or
--passes) makes fewer rows: its row says how many, the sentence names it, and no text here
claims an equal budget where the rows differ. Counts of documents (each read once however often
a wrapped stream brings it back) stand beside counts of arrivals (sources).

`comparison(summary)` reduces each packer's summary to the numbers a researcher compares:
shares of the arrived tokens (plus the markers a packer added) emitted, discarded and still
buffered, the padding share of the rows, sources never started (all, and longer than R),
the least and most represented label, the exposure of the first and last tenth of long
sources' positions, rows that start mid-document without a BOS, and the Proposition
(held, violated, or why it cannot apply). It is read back through its record (records/audit_comparison.py),
as the findings page does.
"""
from audit.fate_table import NEVER_STARTED
from audit.fmt import pct


def long_tenths_exposed(s):
    """Emitted share of the first and the last tenth of the positions of the sources longer than R (the tally's, by
    the position exposure table's tenths; the table's strata are the paper's and need not start at R)."""
    t = s["longer_than_R_tenths"]
    return [(t[f"{d}_emitted"] / t[f"{d}_arrived"]) if t[f"{d}_arrived"] else None for d in ("first", "last")]


def empty_share(s):
    """The share of the rows' capacity that holds no token (rows a packer left short; padding is apart): 0 for the
    paper's packers, whose every row is full; a traced packer's (a library's, a rule's, your own) from the rows it
    yielded; None where its trace made no row."""
    if s["how"] == "replayed":
        return 0.0
    t = s.get("trace")
    if not t or not t.get("rows_reached"):
        return None
    cap = t["rows_reached"] * s["row_capacity"]
    return max(cap - t["row_tokens"], 0) / cap


def packer_row(s, R):
    whole = s["tokens_arrived"] + s["bos_added"]
    labs = [d for d in s["by_label"] if d["representation"] is not None]
    lo = min(labs, key=lambda d: d["representation"]) if labs else None
    hi = max(labs, key=lambda d: d["representation"]) if labs else None
    first, last = long_tenths_exposed(s)
    p = s["protected"]
    prop = ("held" if p["proposition_held"] else "VIOLATED") if p["applies"] else f"n/a: {p['why_not']}"
    docs = s.get("documents")
    return {
        # "replayed" / "traced" (a library's version is in "library"); a rule keeps its whole line: whose code it is from
        "how": s["how"] if s["how"].startswith("rule") else s["how"].split(" ")[0], "row_capacity": s["row_capacity"],
        "rows": s["rows"],
        "budget_rows": s.get("budget_rows", s["rows"]), "budget_reached": s.get("budget_reached", True),
        # why a packer made fewer rows: its input ended (a replay's: --passes), or it stopped yielding them (traced)
        **({} if s.get("budget_reached", True) else {"input_ended": input_ended(s)}),
        "emitted_tokens": s["emitted"],
        "documents": None if docs is None else docs["documents"],
        "documents_never_started": None if docs is None else sum(docs["by_fate"][f] for f in NEVER_STARTED),
        "documents_not_arrived": None if docs is None else docs["by_fate"]["not_arrived"],
        "long_documents_never_started": None if docs is None else sum(docs["longer_than_R"][f] for f in NEVER_STARTED),
        "long_documents_arrived": None if docs is None else sum(docs["longer_than_R"].values())
        - docs["longer_than_R"]["not_arrived"],
        "emitted_share": s["emitted"] / whole if whole else 0.0, "discarded_share": s["discarded"] / whole if whole else 0.0,
        "buffered_share": s["buffered"] / whole if whole else 0.0, "padding_share": s.get("padding_share", 0.0),
        "empty_share": empty_share(s),
        "sources_arrived": s["sources_arrived"], "sources_never_started": s["sources_never_started"],
        "long_arrived": s["sources_longer_than_R_arrived"],
        "long_never_started": s["sources_longer_than_R_arrived"] - s["sources_longer_than_R_started"],
        "never_started_by_stratum": {r["stratum"]: r["sources"] - r["started"] for r in s["retention_by_stratum"]
                                     if r["sources"]},
        "least_represented_label": None if lo is None else [lo["label"], lo["representation"]],
        "most_represented_label": None if hi is None else [hi["label"], hi["representation"]],
        "representation_by_label": {d["label"]: d["representation"] for d in s["by_label"]},
        "long_first_tenth_exposed": first, "long_last_tenth_exposed": last,
        "continuation_rows": s["continuation_rows"], "proposition": prop,
        "library": s.get("library"), "settings": s.get("settings"),
    }


def comparison(summary) -> dict:
    R = summary["row_capacity"]
    rows = {n: packer_row(s, R) for n, s in summary["packers"].items() if "refused" not in s}
    refused = {n: s["refused"] for n, s in summary["packers"].items() if "refused" in s}
    return {"targets": summary["targets"], "row_capacity": R, "buffer": summary["buffer"],
            "passes": summary["horizon"]["passes"], "packers": rows, "refused": refused,
            "left_out": summary.get("left_out", {}),
            "sentence": sentence(rows, summary)}


def long_unstarted(r):
    """(never started, arrived, what is counted) for sources longer than R: documents, each counted once, where the
    packer has a fate table; else arrivals (a wrapped stream brings a document back as a new arrival, so arrival
    counts of two packers that read different numbers of passes do not compare)."""
    if r.get("long_documents_never_started") is not None and r.get("long_documents_arrived") is not None:
        return r["long_documents_never_started"], r["long_documents_arrived"], "documents"
    return r["long_never_started"], r["long_arrived"], "arrived sources"


def names(ns):
    ns = list(ns)
    return ns[0] if len(ns) == 1 else ", ".join(ns[:-1]) + f" and {ns[-1]}"


def sentence(rows, summary) -> str:
    if not rows:
        return "No packer produced rows for this stream."
    # a packer that made no row trained nothing: its zero unstarted of zero arrived is no result to rank
    idle = [n for n, r in rows.items() if not r["rows"]]
    if idle:
        said = no_row(idle, rows)
        rest = {n: r for n, r in rows.items() if r["rows"]}
        return said if not rest else said + " " + sentence(rest, summary)
    refused = sum("refused" in s for s in summary.get("packers", {}).values())  # in the table, said why; not ranked
    if len(rows) == 1:  # nothing to compare: say what the one packer did
        (name, m), = rows.items()
        never, arrived, what = long_unstarted(m)
        when = f"{summary['targets']:,} targets" if m["budget_reached"] else _made(m)
        # "33 of 241 arrived documents", "67 of 1,274 arrived sources" (without a fate table): 'arrived' said once
        return (f"At {when}, {name} leaves {never:,} of {arrived:,} arrived {what.removeprefix('arrived ')} longer "
                f"than R unstarted and "
                f"discards {pct(m['discarded_share'])} of arrived tokens"
                + (f"; {m['continuation_rows']:,} rows start mid-document without a BOS" if m["continuation_rows"] else "")
                + "." + (f" {refused} other packer{'s' * (refused > 1)} refused the stream." if refused else ""))
    counted = {n: long_unstarted(r) for n, r in rows.items()}
    what = "documents" if all(c[2] == "documents" for c in counted.values()) else "arrived sources"
    if what != "documents":  # one packer without a fate table: every packer is ranked by its arrivals
        counted = {n: (r["long_never_started"], r["long_arrived"], what) for n, r in rows.items()}
    top = max(c[0] for c in counted.values())
    most = [n for n, c in counted.items() if c[0] == top]
    each = " each" if len(most) > 1 and len({counted[n][1] for n in most}) == 1 else ""
    of = f"{top:,} of {counted[most[0]][1]:,}{each}" if each or len(most) == 1 else \
        "; ".join(f"{n}: {top:,} of {counted[n][1]:,}" for n in most)
    dtop = max(r["discarded_share"] for r in rows.values())
    dmost = [n for n, r in rows.items() if r["discarded_share"] == dtop]
    cont = sorted((n for n in rows if rows[n]["continuation_rows"]), key=lambda n: -rows[n]["continuation_rows"])
    budget = next(iter(rows.values()))["budget_rows"]
    but = f" that made rows ({refused} more refused the stream)" if refused else ""
    leave = (f"{names(most)} {'leave' if len(most) > 1 else 'leaves'} the most {what} longer than R unstarted ({of})"
             if top else f"none leaves any arrived {'document' if what == 'documents' else 'source'} longer than R unstarted")
    out = f"Across {len(rows)} packers{but} asked for {budget:,} rows, {leave}, " + discards(dmost, dtop, len(rows))
    if cont:
        out += f", and {cont[0]} starts the most rows mid-document without a BOS ({rows[cont[0]]['continuation_rows']:,})"
    return out + "." + shortfall(rows) + unequal_tokens(rows)


def no_row(idle, rows) -> str:
    """The packers that made no row, in words: their input ended (or they stopped yielding rows) before they filled
    one, so they trained nothing and started no document, whatever arrived into their buffers."""
    one = len(idle) == 1
    ended = all(rows[n].get("input_ended", True) for n in idle)
    why = (f"{'its' if one else 'their'} input ended before {'it' if one else 'each'} filled one" if ended else
           f"{'it' if one else 'they'} stopped yielding rows before filling one")
    return (f"{names(idle)} made no row of the budget's {rows[idle[0]]['budget_rows']:,} ({why}), so "
            f"{'it' if one else 'they'} trained nothing and started no document.")


def unequal_tokens(rows) -> str:
    """A sentence where the rows, equal or not, hold different numbers of tokens (padding, another row capacity, a
    packer that makes short rows): equal rows are not an equal training budget."""
    lo = min(rows, key=lambda n: rows[n]["emitted_tokens"])
    hi = max(rows, key=lambda n: rows[n]["emitted_tokens"])
    if rows[hi]["emitted_tokens"] <= rows[lo]["emitted_tokens"] * 1.01:
        return ""
    return (f" The rows do not hold equal tokens: {lo} emitted {rows[lo]['emitted_tokens']:,} "
            f"(padding {pct(rows[lo]['padding_share'])}, empty {pct(rows[lo]['empty_share'])}, rows of R = "
            f"{rows[lo]['row_capacity']:,}), {hi} "
            f"{rows[hi]['emitted_tokens']:,}; compare shares, not counts, across them.")


def discards(most, share, packers) -> str:
    """Who discards the most arrived tokens, in words: a tie is named as one, and none at all said so."""
    if share == 0:
        return "no packer discards a token"
    if len(most) == packers > 1:
        return f"{'both' if packers == 2 else 'each'} discard {pct(share)} of arrived tokens"
    return f"{names(most)} {'discard' if len(most) > 1 else 'discards'} the most ({pct(share)} of arrived tokens)"


def input_ended(s) -> bool:
    """Whether a packer short of the budget ran out of input: a replay's passes (--passes), a traced packer that read
    its documents to the end, or a loader that built its index for no more than the passes given (Megatron's epochs
    under --passes, its iterator never read to the end)."""
    return bool((s.get("trace") or {}).get("input_ended", True) or (s.get("loader") or {}).get("capped_by_passes"))


def _made(r):
    why = "its input ended" if r.get("input_ended", True) else "it stopped yielding rows"
    return (f"{r['rows']:,} rows" if r["budget_reached"] else
            f"{r['rows']:,} rows ({why}: the budget asked for {r['budget_rows']:,})")


# why packers made fewer rows than the budget, by whether their input ended: (of them as "these", of "some of them")
WHY_SHORT = {frozenset({True}): ("its input ended first", "the input of some ended first"),
             frozenset({False}): ("it stopped yielding rows, its input not ended",
                                  "some stopped yielding rows, their input not ended"),
             frozenset({True, False}): ("its input ended first, or it stopped yielding rows (each one's line says "
                                        "which)", "the input of some ended first, and some stopped yielding rows")}


def why_short(short_rows):
    """WHY_SHORT's pair for the rows of the packers short of the budget."""
    return WHY_SHORT[frozenset(r.get("input_ended", True) for r in short_rows)]


def shortfall(rows) -> str:
    """A sentence naming the packers that stopped short of the budget, or nothing."""
    short = [n for n, r in rows.items() if not r["budget_reached"]]
    if not short:
        return ""
    what = ", ".join(f"{n} {rows[n]['rows']:,} ({rows[n]['rows'] / rows[n]['budget_rows']:.0%})" for n in short)
    why = why_short([rows[n] for n in short])[0]
    return (f" Not every packer reached the budget of {rows[short[0]]['budget_rows']:,} rows: {why}, so these made "
            f"fewer rows and are compared at what they emitted: {what}.")


def _count(v):
    return "n/a" if v is None else f"{v:,}"


COLUMNS = (("how", "how", str), ("R", "row_capacity", "{:,}".format), ("rows made", "rows", "{:,}".format),
           ("tokens emitted", "emitted_tokens", "{:,}".format), ("emitted", "emitted_share", pct),
           ("discarded", "discarded_share", pct), ("buffered", "buffered_share", pct), ("padding", "padding_share", pct),
           ("empty", "empty_share", pct),
           ("documents never started", "documents_never_started", _count),
           ("arrivals never started", "sources_never_started", "{:,}".format),
           ("> R never started", "long_never_started", "{:,}".format),
           ("> R: first tenth exposed", "long_first_tenth_exposed", pct),
           ("> R: last tenth exposed", "long_last_tenth_exposed", pct),
           ("rows mid-document, no BOS", "continuation_rows", "{:,}".format))


def rows_made_note(comp) -> str:
    """Whether every packer made the budget's rows: a refused packer made none, and one whose input ended made fewer."""
    refused, made = list(comp.get("refused", {})), comp["packers"].values()
    if not refused and all(r["budget_reached"] for r in made):
        return "Every packer made the budget's rows. "
    out = "**Not every packer made the budget's rows:** "
    if refused:
        out += f"{names(refused)} refused this stream and made none (its row says why)"
    short = [r for r in made if not r["budget_reached"]]
    if short:
        out += ("; " if refused else "") + why_short(short)[1] + " (see \"rows made\"): each is read at what it made"
    return out + ". "


def comparison_table_md(comp) -> str:
    out = ["| packer | " + " | ".join(c[0] for c in COLUMNS) + " | least represented label | Proposition |",
           "|---|" + "---:|" * len(COLUMNS) + "---|---|"]
    for n, r in comp["packers"].items():
        lab = r["least_represented_label"]
        cells = [f(r[k]) for _, k, f in COLUMNS]
        labtxt = f"{lab[0]} ({lab[1]:.2f})" if lab and lab[1] is not None else "n/a"
        out.append(f"| {n} | " + " | ".join(cells) + f" | {labtxt} | {r['proposition']} |")
    for n, why in comp.get("refused", {}).items():
        out.append(f"| {n} | refused: {why} |" + " |" * (len(COLUMNS) + 1))
    rows_note = rows_made_note(comp)
    return "\n".join(out) + "\n\n" + rows_note + "Shares of the arrived tokens (and the BOS markers a packer added); " \
        "padding and empty (positions that hold no token: rows a packer left short) as shares of the rows' " \
        "capacity; documents are counted once, arrivals (sources) each time a " \
        "wrapped stream brings a document back; \"> R\": sources longer than the row capacity."
