"""The frontier: `python -m audit ... --sweep KEY=V1,V2,...` replays every combination of the listed settings
on the audit's stream and budget, and shows what each trades.

  python -m audit --synthetic --sweep buffer=1,10,100,1000,10000 --sweep packer=original,lossless,segment_first,random_span
  python -m audit --lengths F --sweep row_capacity=1025,2049,4097 --sweep ranks=1,8 --out runs/frontier

Keys: buffer (B, at least 1), packer (the paper's four, replayed by the compiled core), row_capacity
(R, at least 2), ranks (N data-parallel ranks: N x --loader-workers worker streams, each with its own
packer and buffer over its share of the documents, --split-by, as `--ranks` audits them). A key left
out keeps the command line's value: that is the current configuration. The paper's configuration
(R = 2049, B = 1000, original, one stream) and the current one are always among the points, and marked.

Each configuration is replayed to the same budget of targets (the audit's: --targets, --updates or its
default), in whole rows of its own R (rounded down). Its measures, at that horizon:

  crop waste           tokens discarded / tokens arrived
  never started        documents longer than REF that arrived by the horizon and of which no arrival was
                       started, of those that arrived; REF is the command line's --row-capacity whatever R the
                       configuration packs to, so that every configuration is judged by one length. Which of
                       those documents arrive by the horizon depends on the configuration (a larger buffer
                       pulls in more, over more passes), so each point has its own count, beside the stream's
                       documents longer than REF. Their arrivals (a document arrives again in each pass the
                       stream wraps into) and those never started are kept apart (long_arrivals...)
  last-tenth exposure  tokens of the last tenth of those documents' arrivals emitted / arrived

The Pareto set: the configurations that no other one beats on all three at once (as little waste, as
few documents never started, as much exposure, and better on one). The cheapest change (cheapest_change): among
the listed configurations that start every document longer than REF that arrived by the horizon, the one with
the fewest settings changed from the current one, then the least crop waste, then the most last-tenth exposure,
then the smaller buffer; a researcher changes one setting before two, and a buffer larger than a pass of the
stream is said as such in the line (it holds documents of several passes at once); or a line that says none
does. Bad input (an unknown key or value, an empty list, a buffer under 1) is one line,
before anything is read or written.

Writes frontier.md (the definitions, the table, the Pareto set, the cheapest change), frontier.json (the same)
and frontier.png (not with --no-figures) into a fresh folder swapped in for --out, which the audit's checks hold
to (audit/out_folder.py): new, empty or an earlier frontier's, never an audit's output, the working folder or one
holding an input.
"""
import dataclasses
import itertools
import shutil
import time
from pathlib import Path

import numpy as np

from audit.compute import replay_packer
from audit.feed import PassRefills
from audit.fmt import table as md_table
from audit.out_folder import FRONTIER_FILES as FILES, check_out, new_folder, replace_whole
from audit.plan import SWEEP_KEYS as KEYS
from audit.run import budget, check_buffer, load_stream
from audit.topology import (check_topology, file_count, file_of, rows_per_stream, share_sizes, shares,
                            worker_streams)
from corpus.atomic import atomic_write_text
from errors import DataError
from loaders.core import PACKERS
from records.frontier import Frontier

# a configuration: the four KEYS and the DataLoader workers of each rank (the command line's, not swept)
PAPER = {"row_capacity": 2049, "buffer": 1000, "packer": "original", "ranks": 1, "loader_workers": 1}
CHEAPEST = "fewest settings changed, then least crop waste, then most last-tenth exposure"  # cheapest_change's order


def configurations(grid, current):
    """Every combination of the grid (unlisted keys at their current value), then the current and the paper's
    configurations when the grid does not hold them."""
    out = [{**dict(zip(KEYS, combo)), "loader_workers": current["loader_workers"]}
           for combo in itertools.product(*(grid.get(k, [current[k]]) for k in KEYS))]
    for extra in (current, PAPER):
        if extra not in out:
            out.append(dict(extra))
    return out


def usable(cfgs, grid, current, targets, stream, group):
    """The configurations, each refused in one line when the budget gives one of its worker streams no row or
    the stream too few documents for them; the paper's, added beside the grid, is left out (with a note) instead."""
    out = []
    for cfg in cfgs:
        W, rows = worker_streams(cfg["ranks"], cfg["loader_workers"]), targets // (cfg["row_capacity"] - 1)
        try:
            if rows < W:
                raise DataError(f"--sweep: {describe(cfg)}: the budget of {targets:,} targets makes {rows:,} rows of "
                                f"{cfg['row_capacity'] - 1:,} targets, fewer than its {W} worker stream(s)")
            check_topology(stream.n, W, group.for_ranks(cfg["ranks"]), file_of(stream), file_count(stream))
        except DataError:
            in_grid = cfg["loader_workers"] == current["loader_workers"] and all(
                cfg[k] in grid.get(k, [current[k]]) for k in KEYS)
            if cfg == PAPER and cfg != current and not in_grid:
                print(f"note: the paper's configuration ({describe(cfg)}) left out: this budget gives it no row")
                continue
            raise
        out.append(cfg)
    return out


class LongDocuments:
    """Which documents of one worker stream longer than ref arrived by the horizon, and which of them had an arrival
    started, from the tally's retired sources (replay_packer calls add as it would a fate table's): an arrival's
    id modulo the stream's documents is its document, as in audit/fate_table.py."""

    def __init__(self, n, ref):
        self.n, self.ref = n, ref
        self.arrived, self.started = np.zeros(n, bool), np.zeros(n, bool)

    def add(self, s):
        long = s["len"] > self.ref
        doc = s["id"][long] % self.n
        self.arrived[doc] = True
        self.started[doc[s["nev"][long] > 0]] = True

    def counts(self):
        return int(self.arrived.sum()), int((self.arrived & ~self.started).sum())


def measure(stream, cfg, targets, ref, group, refill_docs):
    """One configuration's point: its measures at the horizon, summed over its worker streams (whose documents are
    disjoint, so their long documents add up too)."""
    R, W = cfg["row_capacity"], worker_streams(cfg["ranks"], cfg["loader_workers"])
    rows = targets // (R - 1)
    parts = shares(stream, W, group.for_ranks(cfg["ranks"]), refill_docs) if W > 1 else [stream]
    t0, tot = time.perf_counter(), dict.fromkeys(("tokens_arrived", "discarded", "bos_added"), 0)
    ref_tot = dict.fromkeys(("arrived", "started", "last_tenth_arrived", "last_tenth_emitted"), 0)
    docs = [0, 0]
    for part, r in zip(parts, rows_per_stream(rows, W)):
        long_docs = LongDocuments(len(part.lengths), ref)
        s = replay_packer(PassRefills(part.lengths, part.refills), cfg["packer"], r, R, cfg["buffer"], ref_length=ref,
                          fates=long_docs)
        for k in tot:
            tot[k] += s[k]
        for k in ref_tot:
            ref_tot[k] += s["longer_than_ref"][k]
        docs = [a + b for a, b in zip(docs, long_docs.counts())]
    return {**cfg, "worker_streams": W, "rows": rows, "targets": rows * (R - 1), **tot,
            "crop_waste": tot["discarded"] / tot["tokens_arrived"] if tot["tokens_arrived"] else 0.0,
            "long_documents": docs[0], "long_documents_never_started": docs[1],
            "long_arrivals": ref_tot["arrived"], "long_arrivals_never_started": ref_tot["arrived"] - ref_tot["started"],
            "last_tenth_exposure": (ref_tot["last_tenth_emitted"] / ref_tot["last_tenth_arrived"]
                                    if ref_tot["last_tenth_arrived"] else None),
            "documents_per_pass": min(len(part.lengths) for part in parts),
            "seconds": round(time.perf_counter() - t0, 3)}


def pareto(points):
    """Indices of the points that no other point beats: at most its waste and never-started count, at least its
    exposure, and better on one of the three."""
    def key(p):
        return p["crop_waste"], p["long_documents_never_started"], -(p["last_tenth_exposure"] or 0.0)

    keys = [key(p) for p in points]
    return [i for i, a in enumerate(keys)
            if not any(all(x <= y for x, y in zip(b, a)) and b != a for b in keys)]


def changed(cfg, current):
    return [k for k in KEYS if cfg[k] != current[k]]


def cheapest_change(points, current, ref, in_stream=None):
    """The one line: the cheapest listed change that starts every document longer than ref that arrived by the
    horizon; each count is given of the documents that arrived, and where fewer than the stream's in_stream
    arrived, how many were never reached (a configuration that reaches fewer is not judged on the same documents).
    Cheapest: the fewest settings changed from the current configuration, then the least crop waste, then
    the most last-tenth exposure, then the smaller buffer (CHEAPEST, said in the line). Changes come first because
    each is one more thing a researcher must justify and check; a lower waste that only a second change buys is a
    trade the table and the Pareto set show. A chosen buffer larger than a pass of its (smallest) worker stream is
    said so: it holds documents of several passes at once."""
    now = next(p for p in points if _cfg(p) == current)
    if now["long_documents_never_started"] == 0:
        return (f"The current configuration ({describe(current)}) already starts every document longer than {ref:,} "
                f"tokens that arrived by the horizon ({_of(now, in_stream)}; crop waste {now['crop_waste']:.2%}).")
    ok = [p for p in points if p["long_documents_never_started"] == 0]
    if not ok:
        best = min(points, key=lambda p: (p["long_documents_never_started"], p["crop_waste"]))
        return (f"None of the {len(points)} listed configurations starts every document longer than {ref:,} tokens "
                f"that arrived by the horizon: the fewest never started is {_of(best, in_stream)} "
                f"({describe(_cfg(best))}); the current configuration leaves {_of(now, in_stream)}.")
    best = min(ok, key=lambda p: (len(changed(_cfg(p), current)), p["crop_waste"],
                                  -(p["last_tenth_exposure"] or 0.0), p["buffer"]))
    change = ", ".join(f"{k} {current[k]} -> {best[k]}" for k in changed(_cfg(best), current))
    return (f"Cheapest listed change that starts every document longer than {ref:,} tokens that arrived by the "
            f"horizon (cheapest: {CHEAPEST}): {change} (crop waste {now['crop_waste']:.2%} -> {best['crop_waste']:.2%}; "
            f"never started {_of(now, in_stream)} -> {_of(best, in_stream)}; last-tenth exposure "
            f"{_pct(now['last_tenth_exposure'])} -> {_pct(best['last_tenth_exposure'])}{_big(best)}{_most_cut(best)})."
            f"{_less_waste(ok, best, current, in_stream)}")


def _most_cut(p):
    """A chosen configuration that crops away most of what arrives: said, as it starts every document by training
    little of each (a new user's probe: row_capacity 2049 -> 2 at 99.64% crop waste, named without a word)."""
    return "" if p["crop_waste"] <= 0.5 else "; it crops away most of the arrived tokens"


def _big(p):
    """A chosen buffer larger than a pass of its (smallest) worker stream: said, as it holds several passes at once."""
    if p["buffer"] <= p["documents_per_pass"]:
        return ""
    return (f"; B {p['buffer']:,} holds more documents than a pass of the "
            f"{'stream' if p['worker_streams'] == 1 else 'smallest worker stream'} ({p['documents_per_pass']:,})")


def _less_waste(ok, best, current, in_stream=None):
    """Where more settings changed buy less crop waste than the cheapest change: the least of it, with the same
    caveats (the documents it reached, a buffer past a pass), so that the line never shows the cheapest change's waste
    as the price of starting every document (a new user's probe: buffer 1000 -> 1 at 26.59% waste, beside
    segment_first at buffer 10 and 2.30%)."""
    least = min(ok, key=lambda p: (p["crop_waste"], len(changed(_cfg(p), current)), -(p["last_tenth_exposure"] or 0.0),
                                   p["buffer"]))
    if least["crop_waste"] >= best["crop_waste"]:
        return ""
    keys = changed(_cfg(least), current)
    return (f" The least crop waste that starts every document takes {len(keys)} settings changed: "
            f"{', '.join(f'{k} {current[k]} -> {least[k]}' for k in keys)} (crop waste {least['crop_waste']:.2%}; "
            f"never started {_of(least, in_stream)}; last-tenth exposure {_pct(least['last_tenth_exposure'])}"
            f"{_big(least)}{_most_cut(least)}).")


def _of(p, in_stream=None):
    """'N of M arrived', and the documents of the stream's in_stream that this configuration never reached."""
    short = in_stream - p["long_documents"] if in_stream is not None else 0
    return (f"{p['long_documents_never_started']:,} of {p['long_documents']:,} arrived"
            + (f", {short:,} of the stream's {in_stream:,} never reached" if short > 0 else ""))


def _cfg(p):
    return {k: p[k] for k in (*KEYS, "loader_workers")}


def describe(cfg):
    workers = f" x {cfg['loader_workers']} workers" if cfg["loader_workers"] > 1 else ""
    return f"R {cfg['row_capacity']:,}, B {cfg['buffer']:,}, {cfg['packer']}, {cfg['ranks']} rank(s){workers}"


def current_of(plan):
    """The command line's configuration: its R, B, the ranks and loader workers that run a packer of their own (a
    --pipeline whose one packer serves the run: one stream, whatever --ranks says), and its packer when it names one
    of the paper's."""
    named = [p for p in plan.packers_arg.split(",") if p in PACKERS]
    return {"row_capacity": plan.row_capacity, "buffer": plan.buffer, "packer": named[0] if len(named) == 1 else
            "original", "ranks": plan.topology.streams_ranks, "loader_workers": plan.topology.streams_workers}


def largest_buffer(cfgs, grid, current):
    """(B, how a line names it, what to give instead): the largest buffer of the sweep's configurations, named where
    it comes from: the grid, the command line's --buffer, or the paper's configuration (a point of every sweep)."""
    B = max(c["buffer"] for c in cfgs)
    if B in grid.get("buffer", ()):
        return B, "--sweep's largest buffer", "smaller buffers in --sweep"
    if B == current["buffer"]:
        return B, "--buffer", "a smaller --buffer"
    return B, "the paper's buffer (its configuration is a point of every sweep)", "a machine with more memory"


def beyond_their_share(cfgs, stream, group, noted):
    """The configurations, other than `noted` (B, ranks, loader workers: the one check_buffer spoke for), whose
    buffer holds more documents than a pass of their smallest worker stream, each named: a smaller buffer at more
    streams than the largest buffer's point can be one."""
    out = []
    for B, ranks, workers in sorted({(c["buffer"], c["ranks"], c["loader_workers"]) for c in cfgs} - {noted}):
        W = worker_streams(ranks, workers)
        share = min(share_sizes(stream.n, W, group.for_ranks(ranks), file_of(stream), file_count(stream)))
        if B > share:
            out.append(f"B={B:,} at {W} worker stream(s) ({share:,} documents in the smallest)")
    return out


def run_sweep(plan) -> int:
    """--sweep, with the plan's grid (audit/plan.py: every bad value refused before the stream is read): the
    points and the three files."""
    grid, group = plan.sweep, plan.topology.split
    current, out = current_of(plan), Path(plan.out)
    check_out(out, plan.stream, frontier=True)  # the audit's checks, before the stream is read
    stream = load_stream(plan)
    targets, reason = budget(plan, stream, plan.row_capacity)
    ref, cfgs = plan.row_capacity, usable(configurations(grid, current), grid, current, targets, stream, group)
    # its largest buffer, before anything is written, with the worker streams of the point that has it (the most, on
    # a tie: the smallest share); the points are replayed one at a time, in this process
    B, flag, smaller = largest_buffer(cfgs, grid, current)
    worst = max((c for c in cfgs if c["buffer"] == B), key=lambda c: worker_streams(c["ranks"], c["loader_workers"]))
    topology = dataclasses.replace(plan.topology, streams_ranks=worst["ranks"], streams_workers=worst["loader_workers"],
                                   split=group.for_ranks(worst["ranks"]))
    check_buffer(dataclasses.replace(plan, buffer=B, permutations=0, topology=topology,
                                     packers=tuple(dict.fromkeys(c["packer"] for c in cfgs)),
                                     engine=dataclasses.replace(plan.engine, workers=1)), stream,
                 flag=flag, smaller=smaller)
    overfull = beyond_their_share(cfgs, stream, group, (B, worst["ranks"], worst["loader_workers"]))
    if overfull:
        print(f"note: {len(overfull)} more configuration(s) hold more documents in a buffer than a pass of their "
              f"smallest worker stream gives: {'; '.join(overfull)}. Their packers take in documents of more than "
              "one pass before their first row")
    print(f"frontier of {stream.name}: {len(cfgs)} configurations, {targets:,} targets each ({reason}) -> {out}")
    points = []
    for cfg in cfgs:
        try:
            points.append(measure(stream, cfg, targets, ref, group, plan.topology.refill_docs))
        except MemoryError:  # numpy's, for one: a buffer's bookkeeping is allocated for B documents up front
            raise DataError(f"out of memory at {describe(cfg)} (the packer's buffer and its bookkeeping grow with B): "
                            f"smaller buffers in --sweep; nothing written, {out} is as it was") from None
        p = points[-1]
        print(f"  {describe(cfg)}: crop waste {p['crop_waste']:.2%}, never started {_never(p)}, last tenth "
              f"{_pct(p['last_tenth_exposure'])} ({p['seconds']:.2f}s)")
    for p in points:
        p["paper"], p["current"] = _cfg(p) == PAPER, _cfg(p) == current
    in_stream = int((stream.lengths > ref).sum())
    front, line = pareto(points), cheapest_change(points, current, ref, in_stream)
    summary = {"stream": stream.name, "targets": targets, "budget_reason": reason, "reference_length": ref,
               "long_documents_in_stream": in_stream, "grid": grid, "current": current,
               "paper": PAPER, "points": points, "pareto": front, "cheapest_change": line}
    write_frontier(summary, out, figure=plan.figures)
    print(line)
    print(f"wrote {out}: {', '.join(f for f in FILES if plan.figures or not f.endswith('.png'))}")
    return 0


def _pct(x):
    return "n/a" if x is None else f"{x:.2%}"


def _never(p):
    return f"{p['long_documents_never_started']:,} of {p['long_documents']:,} documents"


def _arrivals(p):
    return f"{p['long_arrivals_never_started']:,} of {p['long_arrivals']:,}"


def write_frontier(summary, out, figure=True):
    """The three files (frontier.png only with figure), written into a fresh folder beside out and swapped in whole,
    as the audit writes its own."""
    out.parent.mkdir(parents=True, exist_ok=True)
    work = new_folder(out)
    try:
        Frontier.of(summary).write(work)
        if figure:
            # late: the figure's module imports matplotlib (0.4 s), which a --no-figures frontier never loads
            from audit import frontier_figure

            frontier_figure.frontier(summary["points"], summary["pareto"], summary["reference_length"],
                                     work / "frontier.png")
        atomic_write_text(work / "frontier.md", frontier_md(summary, figure))
        replace_whole(out, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _fewer_targets(s) -> str:
    """Where R - 1 does not divide the budget, the targets its configurations reached (their last whole row below it):
    the header once named the budget alone for every point (a new user's probe)."""
    short = sorted({(p["row_capacity"], p["targets"]) for p in s["points"] if p["targets"] != s["targets"]})
    if not short:
        return ""
    return (": where R - 1 does not divide the budget, to the last whole row below it ("
            + "; ".join(f"R = {R:,}: {t:,}" for R, t in short) + ")")


def frontier_md(s, figure=True) -> str:
    ref, front = s["reference_length"], set(s["pareto"])
    rows = [[str(i + 1), ("**" if i in front else "") + describe(_cfg(p)) + ("**" if i in front else ""),
             "yes" if p["paper"] else "", "yes" if p["current"] else "", f"{p['crop_waste']:.2%}",
             _never(p), _arrivals(p), _pct(p["last_tenth_exposure"]),
             f"{p['rows']:,}", f"{p['seconds']:.2f}"] for i, p in enumerate(s["points"])]
    header = ["#", "configuration", "the paper's", "current", "crop waste",
              f"never started (longer than {ref:,}, of those arrived)", "their arrivals never started",
              "last-tenth exposure", "rows", "seconds"]
    lines = md_table(header, rows)
    lines[1] = "|---:|---|" + "---:|" * (len(header) - 2)  # the number right-aligned, the configuration left
    table = "\n".join(lines)
    return "\n".join([
        f"# The frontier of {s['stream']}", "",
        f"Every configuration replayed to {s['targets']:,} targets ({s['budget_reason']}), in whole rows of its own R"
        f"{_fewer_targets(s)}. Crop waste: tokens discarded over tokens arrived. Never started: documents longer than {ref:,} tokens (the "
        f"command line's R, for every configuration) that arrived by the horizon and of which no arrival was started, "
        f"of those that arrived; the stream holds {s['long_documents_in_stream']:,}, and which of them arrive by the "
        f"horizon depends on the configuration (a larger buffer pulls in more, over more passes). Their arrivals: a "
        f"document arrives again in each pass the stream wraps into. Last-tenth exposure: the tokens of the last tenth "
        f"of those documents' arrivals emitted, over those arrived.", "",
        table, "",
        f"Pareto set (bold): {len(front)} of {len(s['points'])} configurations, those no other one beats on all three "
        f"measures at once." + (" The figure numbers its points as the rows here (#) and names the Pareto set, the "
                                "paper's and the current configuration." if figure else
                                " No figure: the frontier ran with --no-figures."), "",
        s["cheapest_change"], "", *(["![frontier](frontier.png)", ""] if figure else [])])

