"""The trace's emissions resolved and tallied a range of sources at a time, from disk.

A source's fate (which of its tokens a later emission still takes, which are never taken)
is known only once the packer has stopped or the drain is over, and a packer may hold a
document for as long as it likes; so the trace used to keep every decoded emission and
every document in memory to the end. Here the decoded batches go to disk as they come,
in chunks sorted by source (KeyedSpill); afterwards each range of sources is read back
whole, resolved by trace.resolve exactly as the whole stream was, and tallied; the
budget's events then go to the events file in emission order, read back from disk by
ranges of emission index. The Proposition watch reads the emissions as they are decoded.
Memory: a decode batch, a spill chunk and one range, whatever the stream's length.
"""
import numpy as np

from audit.events import EVENT_DTYPE, EVENT_FIELDS, records_from_columns
from audit.proposition import Firsts
from audit.spill import KeyedSpill
from audit.trace import resolve
from loaders.core import CROP, FIT

RANGE_SOURCES = 1 << 14  # sources resolved together: the peak of a range (its arrays, its lists) stays small
RUN_DTYPE = np.dtype([("eid", np.int64), ("src", np.int64), ("a", np.int64), ("b", np.int64), ("row", np.int64),
                      ("off", np.int64), ("lead", np.int8), ("kind_of_lead", np.int8)])
EVENT_ROW = np.dtype(EVENT_DTYPE.descr + [("eid", np.int64), ("label", np.int64)])


def spill_decoded(dec, watch, folder):
    """Decode every batch of `dec` (a trace.RowDecoder) to disk, sorted by source in chunks; the
    budget's events are fed to the watch as they come (emission index = index among them)."""
    spill = KeyedSpill(folder, "runs", RUN_DTYPE, "src")
    eid, prev = 0, 0
    for ev, first_row, pulled in dec.batches():
        n = len(ev["src"])
        rec = np.zeros(n, RUN_DTYPE)
        for k in RUN_DTYPE.names[1:]:
            rec[k] = ev[k]
        rec["eid"] = eid + np.arange(n)
        spill.add(rec)
        eid += n
        if first_row < dec.rows:  # a batch inside the budget (batches end at the horizon)
            prev = _watch(watch, ev, first_row, pulled, prev, dec.docs.table)
    spill.flush()
    return spill


def _watch(watch, ev, first_row, pulled, prev, table):
    """Arrivals at row boundaries (the documents pulled by the time each row came out), then the events."""
    first_event = np.searchsorted(ev["row"], first_row + np.arange(len(pulled)))
    new = np.flatnonzero(np.diff(np.r_[prev, pulled]) > 0)
    arrivals = []
    if len(new):
        L = table.column("len", prev, int(pulled[-1]))
        before = np.r_[prev, pulled[new][:-1]]
        for e, a, b in zip(first_event[new].tolist(), before.tolist(), pulled[new].tolist()):
            arrivals.append((e, a, L[a - prev:b - prev], None))
        prev = int(pulled[-1])
    watch.feed(Firsts(ev["src"]), arrivals, candidates=np.flatnonzero(ev["len"] > watch.R))
    return prev


class Totals:
    """What the summary needs beside the tally, added up over the ranges."""

    def __init__(self):
        self.tokens = self.added = self.emitted = self.discarded = self.never = 0
        self.member_started = False


def tally_ranges(spill, dec, tally, rows, R, members, folder, keep_events):
    """Resolve and tally the arrived sources a range at a time; returns (Totals, the budget's events
    keyed by emission index on disk, or None)."""
    table, tot = dec.docs.table, Totals()
    members = np.asarray(sorted(members), np.int64)
    events = KeyedSpill(folder, "events", EVENT_ROW, "eid") if keep_events else None
    for lo in range(0, dec.arrived, RANGE_SOURCES):
        hi = min(lo + RANGE_SOURCES, dec.arrived)
        r = spill.read(lo, hi)  # by chunk and source: resolve puts them back in emission order
        ev = {k: r[k].astype(np.int64) for k in RUN_DTYPE.names}
        ev["src"] -= lo
        L = table.column("len", lo, hi)
        ev = resolve(ev, L, rows, dec.ended)
        rec, eid, lab = _tally_range(tally, ev, L, lo, table.column("label", lo, hi), rows, R, dec.ended, tot)
        m = members[(members >= lo) & (members < hi)] - lo
        tot.member_started |= bool((tally.live["nev"][m] > 0).any())
        tally.retire(None)
        if events is not None:
            out = np.zeros(len(rec), EVENT_ROW)
            for f in EVENT_FIELDS:
                out[f] = rec[f]
            out["eid"], out["label"] = eid, lab
            events.add(out)
    return tot, events


def _tally_range(tally, ev, L, lo, labels, rows, R, ended, tot):
    """One range's resolved emissions into the tally (sources lo.., all of them live until retired)."""
    h = ev["row"] < rows
    s = ev["src"][h]
    rec = records_from_columns(s + lo, L[s], ev["a"][h], ev["emitted"][h], ev["disc"][h], ev["row"][h], ev["off"][h],
                               np.where(ev["crop"][h], CROP, FIT), ev["lead"][h], R)
    tally.arrive(lo, L, label_ids=labels)
    kol = ev["kind_of_lead"][h]
    tally.add_events(rec, (kol == 1).astype(np.int64), (kol == 2).astype(np.int64))
    never = ev["never"] if ended else np.zeros(0, np.int64)
    tally.live["disc"][never] += L[never]  # never-emitted sources are discarded without an event
    tot.tokens += int(L.sum())
    tot.added += int((ev["kind_of_lead"] == 1).sum())  # every emission of an arrived source, drain included
    tot.emitted += int(rec["emitted"].sum())
    tot.discarded += int(rec["discarded"].sum()) + int(L[never].sum())
    tot.never += len(ev["never"])
    return rec, ev["eid"][h], labels[s]


def write_in_emission_order(events, sink, names=None):
    """The budget's events from disk to the sink, a window of emission indices at a time."""
    window = events.chunk
    for e0 in range(0, events.records, window):
        r = events.read(e0, e0 + window)
        r = r[np.argsort(r["eid"])]
        rec = np.zeros(len(r), EVENT_DTYPE)
        for f in EVENT_FIELDS:
            rec[f] = r[f]
        sink.write(rec, None if names is None else np.asarray(names, dtype=object)[r["label"]])
