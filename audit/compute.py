"""The audit's mechanism: one packer over one stream at one budget -> its summary.

`replay_packer` runs the selection core that trains on lengths alone (the paper's four
packers); `trace_packer` runs any packer on tracer documents (audit/trace.py). Both write
their events through an EventSink in chunks and fill the same Tally, so their summaries
have the same keys; the Markdown report is audit/report.py's business, not this module's.
"""
import marshal
from contextlib import closing
from itertools import chain
from operator import mul
from typing import NamedTuple

import numpy as np

from audit.events import records_from_columns
from audit.fates import spill_decoded, tally_ranges, write_in_emission_order
from audit.feed import PullingCore, StreamEnded
from audit.forked import forked
from audit.proposition import Firsts, PropositionWatch
from audit.spill import Folder
from audit.tally import Tally
from audit.trace import RowDecoder

CHUNK_ROWS = 4096  # rows per events chunk: memory holds one chunk's events
FORK_MIN_ROWS = 8 * CHUNK_ROWS  # a replay this long runs its core in a forked child (a fork costs milliseconds)
PLOT_POINTS = 300  # samples of the buffer's mass over the replay
# the paper's Proposition: a packer outside its family, and why it cannot apply
NOT_IN_FAMILY = {
    "segment_first": "pre-segmentation to lengths at most R removes the hypothesis (section 3, Limits)",
}


def lead_flags(packer, lead):
    """(added, stands_in) of the replay's events: segment-first adds BOS markers; random spans move the source's own."""
    lead = np.asarray(lead, np.int64)
    zero = np.zeros_like(lead)
    if packer == "segment_first":
        return lead, zero
    if packer == "random_span":
        return zero, lead
    return zero, zero


class CoreChunk(NamedTuple):
    """What the core did in one chunk of rows: everything the tables need."""
    events: list  # the core's event tuples, as it made them (the tables' process, the idler one, makes the array)
    first_row: int
    marks: list  # event index at each point of the buffer curve in this chunk
    points: list  # [targets, buffered tokens] at each of those points
    arrivals: list  # (events before, first source, lengths, labels) per refill
    buffered: np.ndarray  # ids of the sources with a span still buffered (sorted)
    done: int  # rows packed so far


class CoreEnd(NamedTuple):
    passes_started: int
    added_bos: int
    buffered_tokens: int
    rows: int  # rows made: the budget's, or fewer where a bounded stream ended first


def core_chunks(refills, packer, rows, R, B):
    """The selection core (PullingCore) over `refills` up to `rows` rows, a CoreChunk at a time, then a CoreEnd.
    Run in a forked child for a long replay (audit/forked.py): the core is pure Python, the tables numpy.
    A refill source that ends (a bounded number of passes) ends the replay at the last row the packer filled
    with B spans buffered; the selections of the row it could not finish are undone, their spans buffered."""
    core = PullingCore(refills, packer, R, B)
    step = max(1, rows // PLOT_POINTS)
    done, undone, ended = 0, [], False
    while done < rows and not ended:
        raw, marks, points, first_row = [], [], [], done
        while done < min(rows, first_row + CHUNK_ROWS):
            point = min(rows, (done // step + 1) * step)  # the next point of the buffer curve
            k = min(point - done, CHUNK_ROWS)  # a chunk never outgrows CHUNK_ROWS, however far apart the points
            try:
                core.pack_rows(k, raw)
            except StreamEnded:
                ended = True  # at a row's start or inside it: the row's selections so far are undone
                undone = raw[core.row_first_event:]
                del raw[core.row_first_event:]
            done = core.rows_done
            if ended:
                break
            if done == point:
                marks.append(len(raw))
                points.append([done * (R - 1), _buffered_tokens(core)])
                if step >= CHUNK_ROWS:
                    break  # a point ends its chunk, as when a chunk was one step: the curve's masses unchanged
        held = core.buffered_sources()
        if undone:
            held = np.union1d(held, np.fromiter((e[0] for e in undone), np.int64, len(undone)))
        yield CoreChunk(raw, first_row, marks, points, core.take_arrivals(), held, done)
    back = sum(e[2] + e[3] for e in undone)  # what the undone selections took out of the buffer
    yield CoreEnd(refills.passes_started, core.added_bos, _buffered_tokens(core) + back, done)


def _chunk_to_wire(ch):
    """In the forked child: a chunk's events as marshal bytes (a third cheaper than pickling its tuples; the
    child is this interpreter, so marshal's format is the same on both ends)."""
    return ch._replace(events=marshal.dumps(ch.events)) if isinstance(ch, CoreChunk) else ch


def _chunk_from_wire(ch):
    return ch._replace(events=marshal.loads(ch.events)) if isinstance(ch, CoreChunk) else ch


def _buffered_tokens(core):
    """core.buffered_tokens() without a generator frame per bucket (a curve point reads about a thousand)."""
    return sum(map(mul, core.buckets, map(len, core.buckets.values())))


def _records(a, tally, R, first_row):
    """The chunk's records from the core's events, and where each event's source is in tally.live."""
    live = tally.live
    idx = np.searchsorted(live["id"], a[:, 0])
    pos = first_row * R + np.cumsum(a[:, 2]) - a[:, 2]
    return records_from_columns(a[:, 0], live["len"][idx], a[:, 1], a[:, 2], a[:, 3], pos // R, pos % R, a[:, 4],
                                a[:, 5], R), idx


def replay_packer(refills, packer, rows, R, B, sink=None, label_names=False, progress=None, fates=None):
    """The replay of one of the paper's packers; refills: a refill source (audit/feed.py). From FORK_MIN_ROWS
    rows on, the core runs in a forked child while this process keeps the tables of the chunk before.
    fates: a FateTable (audit/fate_table.py) that keeps each retired source's numbers, or None."""
    tally = Tally(R, rows * (R - 1))
    tally.on_fold = None if fates is None else fates.add
    watch = PropositionWatch(B, R)
    curve, end = [], None
    chunks = forked(core_chunks, refills, packer, rows, R, B, fork=rows >= FORK_MIN_ROWS,
                    wire=(_chunk_to_wire, _chunk_from_wire))
    with closing(chunks):  # a tally that fails (or Ctrl-C) ends the forked core now, not when the traceback goes
        for ch in chunks:
            if isinstance(ch, CoreEnd):
                end = ch
                continue
            _tally_chunk(ch, tally, watch, curve, packer, R, sink, label_names)
            if progress is not None:
                progress(ch.done)
    return finish(tally, watch, packer, end.rows, R, B, end.passes_started, end.added_bos, end.buffered_tokens, curve,
                  budget_rows=rows)


def _tally_chunk(ch, tally, watch, curve, packer, R, sink, label_names):
    """One CoreChunk into the tables, the Proposition watch, the buffer curve and the events file."""
    if ch.arrivals:
        tally.arrive(ch.arrivals[0][1], np.concatenate([x[2] for x in ch.arrivals]), _labels(ch.arrivals))
    events = np.fromiter(chain.from_iterable(ch.events), np.int64, 6 * len(ch.events)).reshape(-1, 6)  # < asarray
    rec, idx = _records(events, tally, R, ch.first_row)
    tally.add_events(rec, *lead_flags(packer, rec["lead_bos"]), idx=idx)
    masses = watch.feed(Firsts(events[:, 0]), ch.arrivals, ch.marks, np.flatnonzero(rec["source_len"] > R))
    curve += [p + [m] for p, m in zip(ch.points, masses)]
    if sink is not None:
        sink.write(rec, _event_labels(tally, rec) if label_names else None)
    tally.retire(ch.buffered)


def _labels(arrivals):
    if all(x[3] is None for x in arrivals):
        return None
    return np.concatenate([np.asarray(x[3], dtype=object) if x[3] is not None else np.full(len(x[2]), None, object)
                           for x in arrivals])


def _event_labels(tally, rec):
    lab = tally.live["label"][np.searchsorted(tally.live["id"], rec["source_id"])]
    return np.asarray(tally.labels.names, dtype=object)[lab]


def finish(tally, watch, packer, rows, R, B, passes, added_bos, buffered, curve, applies=None, unstarted=None,
           budget_rows=None):
    """Retire what is still buffered at the horizon and assemble the summary; unstarted: whether every
    protected source is buffered and unstarted, when the caller has retired them already. rows: the rows
    made; budget_rows: the rows asked for (rows, unless the stream ended first)."""
    if unstarted is None:
        unstarted = _protected_unstarted(tally.live, watch.ps.members)
    ps = watch.ps
    tally.retire(None)
    t = tally.tables()
    applies = (packer not in NOT_IN_FAMILY) if applies is None else applies
    budget_rows = rows if budget_rows is None else budget_rows
    out = {"packer": packer, "row_capacity": R, "buffer": B, "rows": rows, "targets": rows * (R - 1),
           "budget_rows": budget_rows, "budget_reached": rows >= budget_rows, "passes_started": passes, **t, "bos_added": int(added_bos), "buffered": int(buffered)}
    out["sources_overdrawn"] = tally.n["overdrawn"]
    out["partition_holds"] = partition_holds(out)
    out["protected"] = {
        "size": len(ps.members), "tokens": int(ps.mass),
        "share_of_arrived": ps.mass / out["tokens_arrived"] if out["tokens_arrived"] else 0.0,
        "share_of_buffered": ps.mass / buffered if buffered else 0.0,
        "proposition_held": (watch.violation is None) if applies else None,
        "first_violation": watch.violation if applies else None, "applies": bool(applies),
        "why_not": None if applies else NOT_IN_FAMILY.get(packer, "its rule is not the paper's family"),
    }
    if applies:
        out["protected"]["all_buffered_unstarted"] = unstarted
    out["plot"] = {**tally.plot_data(), "buffer_curve": curve, "protected_lengths": sorted(k[0] for k in ps.heap)}
    return out


def partition_holds(s) -> bool:
    """Arrived tokens (and added markers) = emitted + discarded + buffered, with nothing buffered below zero and no
    source giving more tokens than it has (a traced packer's buffered term is what the others leave: the sum alone
    could not fail)."""
    return (s["tokens_arrived"] + s["bos_added"] == s["emitted"] + s["discarded"] + s["buffered"]
            and s["buffered"] >= 0 and s["sources_overdrawn"] == 0)


def _protected_unstarted(live, members):
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
    out = finish(tally, watch, name, made, R, B, None, tot.added, buffered, [], applies=applies,
                 unstarted=not tot.member_started, budget_rows=rows)
    out["discarded"] = tot.discarded  # never-emitted sources are discarded without an event
    out["partition_holds"] = partition_holds(out)
    out["protected"]["why_not"] = None if applies else (why_not or "its rule is not the paper's family")
    out["trace"] = {"rows_yielded": dec.n, "stream_ended": bool(dec.ended), "rows_reached": made,
                    "padding": dec.counts["pad"], "other_inserted": dec.counts["other_inserted"],
                    "row_tokens": dec.counts["row_tokens"], "unresolved_sources": 0 if dec.ended else tot.never}
    out["padding_share"] = dec.counts["pad"] / (made * R) if made else 0.0
    return out
