"""The audit's mechanism: one packer over one stream at one budget -> its summary.

`replay_packer` runs the compiled selection core that trains on lengths alone (the paper's four
packers); `trace_packer` runs any packer on tracer documents (audit/trace.py). Both write
their events through an EventSink in chunks and fill the same Tally, so their summaries
have the same keys; the Markdown report is audit/report.py's business, not this module's.
"""
from typing import NamedTuple

import numpy as np

from audit.events import ROW_GROUP_EVENTS
from audit.fates import spill_decoded, tally_ranges, write_in_emission_order
from audit.proposition import PropositionWatch
from audit.spill import Folder
from audit.tally import Labels, Tally
from audit.trace import RowDecoder
from loaders import kernel as K
from loaders.core import PackerCore, StreamEnded

CHUNK_EVENTS = ROW_GROUP_EVENTS  # events per chunk (one row group of the events file): memory holds a chunk's event
# columns, their copy for the file and the records of the sources that retired in it
# without an events file (permutations, the frontier's points, the bench's arrays): smaller chunks, whose output
# arrays (19 columns of int64) each replay touches for the first time in fewer pages; the paper-scale replay 8-10%
# faster at 2^16 than at 2^18 (per-round ratios of eleven alternating rounds, twice, 2026-12-07)
ARRAY_CHUNK_EVENTS = 1 << 16
PLOT_POINTS = 300  # samples of the buffer's mass over the replay
# the paper's Proposition: a packer outside its family, and why it cannot apply
NOT_IN_FAMILY = {
    "segment_first": "pre-segmentation to lengths at most R removes the hypothesis (section 3, Limits)",
}
NOT_THE_FAMILY = "its rule is not the paper's family"  # any other packer the Proposition does not cover


def lead_flags(packer, lead):
    """(added, stands_in) of the replay's events: segment-first adds BOS markers; random spans move the source's own."""
    lead = np.asarray(lead, np.int64)
    zero = np.zeros_like(lead)
    if packer == "segment_first":
        return lead, zero
    if packer == "random_span":
        return zero, lead
    return zero, zero


class Protected(NamedTuple):
    """The Proposition's protected set at the horizon, and what the watch saw of it."""
    lengths: list  # of its members, sorted
    tokens: int
    violation: object  # the first selection of a protected source ({event, source_id, source_len}) or None
    unstarted: bool  # every member still buffered, none of them started


def protected_of(watch, unstarted):
    """Protected from a PropositionWatch (the trace and the in-memory replay keep one)."""
    return Protected(sorted(k[0] for k in watch.ps.heap), watch.ps.mass, watch.violation, unstarted)


def _windows(refills, labels):
    """The refill source's windows, their labels as the tally's label ids (each labels array mapped once; no labels:
    None while "(no label)" is id 0, which the core gives a window without label ids)."""
    seen = (None, None)
    for lengths, bounds, values in refills.windows():
        if values is None:
            none = labels.ids(None, 1)[0]
            yield lengths, bounds, None if none == 0 else np.full(len(lengths), none, np.int64)
            continue
        if seen[0] is not values:
            seen = (values, labels.ids(values, len(values)))
        yield lengths, bounds, seen[1]


def replay_packer(refills, packer, rows, R, B, sink=None, label_names=False, progress=None, ref_length=None,
                  fates=None):
    """The replay of one of the paper's packers by the compiled core that trains (loaders/core.py) over a refill
    source (audit/feed.py), a chunk of events at a time: the core keeps each buffered source's numbers and the
    protected set; the tally adds up each chunk's events and the sources that retired in it. ref_length: count
    the sources longer than it apart (Tally). fates: a FateTable (audit/fate_table.py) that keeps each retired
    source's numbers, or None. A refill source of a bounded number of passes may end before the budget: the
    replay then stops at the last row the packer filled (bounded_rows), and says how many it made."""
    budget_rows = rows
    if getattr(refills, "max_passes", None) is not None:
        rows = bounded_rows(refills, packer, rows, R, B)
    tally = Tally(R, rows * (R - 1), ref_length)
    tally.on_fold = None if fates is None else fates.add
    core = PackerCore.pulling(_windows(refills, tally.labels), packer, R, B, watch=True)
    step = max(1, rows // PLOT_POINTS)
    curve = []
    for ch in core.chunks(rows, CHUNK_EVENTS if sink is not None else min(CHUNK_EVENTS, ARRAY_CHUNK_EVENTS), step):
        ev = ch.events
        lead = ev[K.E_LEAD]
        tally.add_columns(ev, lead if packer == "segment_first" else None, lead if packer == "random_span" else None)
        tally.fold(ch.retired)
        curve += [[int(r) * (R - 1), int(tok), int(m)] for r, tok, m in ch.points.T.tolist()]
        if sink is not None:
            sink.write(_columns(ev, R), np.asarray(tally.labels.names, dtype=object)[ev[K.E_LABEL]]
                       if label_names else None)
        if progress is not None:
            progress(core.rows_done)
    tally.fold(core.live_sources())  # the horizon: what is still buffered retires
    lengths, tokens, violation, unstarted = core.protected()
    if rows % step:
        curve.append([rows * (R - 1), core.buffered_tokens(), tokens])
    return finish(tally, Protected(lengths, tokens, violation, unstarted), packer, rows, R, B, refills.passes_started,
                  core.added_bos, core.buffered_tokens(), curve, budget_rows=budget_rows)


def bounded_rows(refills, packer, rows, R, B):
    """The rows the packer fills before a bounded refill source ends (`rows` if it lasts): the core alone, on a
    fresh copy of the source. The replay then packs exactly these rows, so its horizon is a row boundary, as a
    budget's is: the paper's packer never packs from fewer than B spans, and a row it cannot finish is not
    trained (the documents it would have taken stay buffered, those it would have pulled never arrive)."""
    core = PackerCore.pulling(_windows(refills.fresh(), Labels()), packer, R, B)
    try:
        for _ in core.chunks(rows, min(CHUNK_EVENTS, ARRAY_CHUNK_EVENTS)):  # nothing kept: no file's row groups
            pass
    except StreamEnded:
        return core.rows_done
    return rows


_COLUMNS = {"source_id": K.E_SRC, "source_len": K.E_LEN, "span_start": K.E_START, "emitted": K.E_EMIT,
            "discarded": K.E_DISC, "row": K.E_ROW, "row_offset": K.E_OFF}


def _columns(ev, R):
    """The event columns of the events file (audit/events.py) from the core's, copied (the core reuses its own)."""
    out = {f: ev[k].copy() for f, k in _COLUMNS.items()}
    out["kind"], out["lead_bos"] = ev[K.E_KIND].astype(np.int8), ev[K.E_LEAD].astype(np.int8)
    # targets are row positions 1..R-1: an emission at offset o has max(o-1, 0) targets before it in its row
    out["target_offset"] = ev[K.E_ROW] * (R - 1) + np.maximum(ev[K.E_OFF] - 1, 0)
    return out


def finish(tally, prot, packer, rows, R, B, passes, added_bos, buffered, curve, applies=None, budget_rows=None,
           discarded=None, why_not=None):
    """Retire what is still buffered at the horizon and assemble the summary, whose mass partition is judged here
    once (partition_holds); prot: the Protected set. rows: the rows made; budget_rows: the rows asked for (rows,
    unless the packer's input ended first). discarded: the discarded tokens where the tally's events do not hold
    them all (a trace: a source never emitted is discarded without an event); why_not: why the Proposition cannot
    apply (default: NOT_IN_FAMILY's line for the packer, else NOT_THE_FAMILY)."""
    tally.retire(None)
    t = tally.tables()
    applies = (packer not in NOT_IN_FAMILY) if applies is None else applies
    budget_rows = rows if budget_rows is None else budget_rows
    out = {"packer": packer, "row_capacity": R, "buffer": B, "rows": rows, "targets": rows * (R - 1),
           "budget_rows": budget_rows, "budget_reached": rows >= budget_rows, "passes_started": passes, **t,
           "bos_added": int(added_bos), "buffered": int(buffered)}
    if discarded is not None:
        out["discarded"] = discarded
    out["sources_overdrawn"] = tally.overdrawn
    out["partition_holds"] = partition_holds(out)
    out["protected"] = {
        "size": len(prot.lengths), "tokens": int(prot.tokens),
        "share_of_arrived": prot.tokens / out["tokens_arrived"] if out["tokens_arrived"] else 0.0,
        "share_of_buffered": prot.tokens / buffered if buffered else 0.0,
        "proposition_held": (prot.violation is None) if applies else None,
        "first_violation": prot.violation if applies else None, "applies": bool(applies),
        "why_not": None if applies else (why_not or NOT_IN_FAMILY.get(packer, NOT_THE_FAMILY)),
    }
    if applies:
        out["protected"]["all_buffered_unstarted"] = prot.unstarted
    out["plot"] = {**tally.plot_data(), "buffer_curve": curve, "protected_lengths": list(prot.lengths)}
    return out


def partition_holds(s) -> bool:
    """Arrived tokens (and added markers) = emitted + discarded + buffered, with nothing buffered below zero and no
    source giving more tokens than it has (a traced packer's buffered term is what the others leave: the sum alone
    could not fail)."""
    return (s["tokens_arrived"] + s["bos_added"] == s["emitted"] + s["discarded"] + s["buffered"]
            and s["buffered"] >= 0 and s["sources_overdrawn"] == 0)


def protected_unstarted(live, members):
    """Every protected source still live (some span buffered) and none of them started."""
    members = np.asarray(sorted(members), dtype=np.int64)
    pos = np.searchsorted(live["id"], members)
    in_live = (pos < len(live["id"])) & (live["id"][np.minimum(pos, max(len(live["id"]) - 1, 0))] == members) \
        if len(live["id"]) else np.zeros(len(members), bool)
    return bool(in_live.all() and not live["nev"][pos[in_live]].any())


def trace_packer(packer_fn, refills, name, rows, R, B, first_id, bos_id=None, pad_id=None, drain_rows=None,
                 sink=None, label_names=False, applies=False, why_not=None, progress=None, fates=None):
    """Trace any packer (audit/trace.py) and summarize it as the replay summarizes its packers; decoded
    emissions and documents wait on disk (beside the events, else in a temporary folder) until resolved."""
    folder = Folder(sink.parquet_path.parent if sink is not None else None, f"{name}-spill")
    dec = RowDecoder(packer_fn, refills, R, rows, first_id, bos_id, pad_id, drain_rows, progress=progress,
                     folder=folder)
    try:
        watch = PropositionWatch(B, R)
        spill = spill_decoded(dec, watch, folder)
        tally = Tally(R, rows * (R - 1))
        tally.on_fold = None if fates is None else fates.add
        tally.labels = dec.docs.labels  # the ids the documents were given as they were pulled
        tot, events = tally_ranges(spill, dec, tally, rows, R, watch.ps.members, folder, sink is not None)
        if sink is not None:
            write_in_emission_order(events, sink, tally.labels.names if label_names else None)
    finally:
        dec.docs.table.close()
        folder.close()
    buffered = tot.tokens + tot.added - tot.emitted - tot.discarded
    made = min(dec.n, rows)  # a packer whose input ended may make fewer rows than the budget's
    out = finish(tally, protected_of(watch, not tot.member_started), name, made, R, B, None, tot.added, buffered, [],
                 applies=applies, budget_rows=rows, discarded=tot.discarded, why_not=why_not or NOT_THE_FAMILY)
    out["trace"] = {"rows_yielded": dec.n, "stream_ended": bool(dec.ended), "rows_reached": made,
                    "padding": dec.counts["pad"], "other_inserted": dec.counts["other_inserted"],
                    "row_tokens": dec.counts["row_tokens"], "unresolved_sources": 0 if dec.ended else tot.never,
                    "input_ended": dec.docs.exhausted}
    out["padding_share"] = dec.counts["pad"] / (made * R) if made else 0.0
    out["rows_out_of_order"], out["out_of_order_first"] = dec.out_of_order["rows"], dec.out_of_order["first"]
    return out
