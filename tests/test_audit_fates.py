"""The trace resolved and tallied a range of sources at a time from disk (audit/fates.py, audit/spill.py)
against the computation it replaced, which held every emission and document in memory and resolved
them at once (kept below as the reference, on trace.run_trace): the same summary, key for key, and
the same events file, on random streams through packers that cut, truncate, skip, hold documents
back to the end and emit pieces out of order, with ranges, chunks and the in-memory document window
down to one or a few, so that sources, emissions and documents cross every boundary."""
import numpy as np
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

import audit.fates as fates
import audit.spill as spill
import audit.trace as trace
from audit.adapters import BOS, FIRST_ID, PAD, concat_chunk, ours
from audit.compute import finish, protected_of, protected_unstarted, trace_packer
from audit.events import EventSink, read_events, records_from_columns
from audit.feed import PassRefills
from audit.proposition import PropositionWatch
from audit.spill import DocTable, KeyedSpill
from audit.tally import Tally
from audit.trace import out_of_order, run_trace
from loaders.core import CROP, FIT


def in_memory(packer_fn, refills, name, rows, R, B, drain_rows=None, label_names=False, applies=False):
    """trace_packer as it was before the chunked resolution: every emission resolved at once, in memory.
    Returns (summary, events records, event labels)."""
    tr = run_trace(packer_fn, refills, R, rows, FIRST_ID, BOS, PAD, drain_rows)
    ev, L = tr.events, tr.lengths
    h = ev["row"] < rows
    rec = records_from_columns(ev["src"][h], L[ev["src"][h]], ev["a"][h], ev["emitted"][h], ev["disc"][h],
                               ev["row"][h], ev["off"][h], np.where(ev["crop"][h], CROP, FIT), ev["lead"][h], R)
    tally = Tally(R, rows * (R - 1))
    tally.arrive(0, L, tr.labels)
    kol = ev["kind_of_lead"][h]
    tally.add_events(rec, (kol == 1).astype(np.int64), (kol == 2).astype(np.int64))
    never = ev["never"] if ev["ended"] else np.zeros(0, np.int64)
    tally.live["disc"][never] += L[never]
    watch = PropositionWatch(B, R)
    watch.feed([(s,) for s in rec["source_id"].tolist()], _row_arrivals(tr, rec))
    added_all = int((ev["kind_of_lead"] == 1).sum())
    discarded = int(rec["discarded"].sum()) + int(L[never].sum())
    buffered = int(L.sum()) + added_all - int(rec["emitted"].sum()) - discarded
    lab = np.asarray(tally.labels.names, dtype=object)[tally.live["label"][rec["source_id"]]] if label_names else None
    made = tr.rows  # the rows the packer made within the budget: fewer where its input ended first
    out = finish(tally, protected_of(watch, protected_unstarted(tally.live, watch.ps.members)), name, made, R, B,
                 None, added_all, buffered, [], applies=applies, budget_rows=rows)
    out["discarded"] = discarded
    out["partition_holds"] = out["tokens_arrived"] + out["bos_added"] == out["emitted"] + out["discarded"] + out["buffered"]
    out["protected"]["why_not"] = None if applies else "its rule is not the paper's family"
    out["trace"] = {"rows_yielded": tr.rows_yielded, "stream_ended": bool(tr.ended), "rows_reached": tr.rows,
                    "padding": tr.counts["pad"], "other_inserted": tr.counts["other_inserted"],
                    "row_tokens": tr.counts["row_tokens"], "unresolved_sources": 0 if tr.ended else len(ev["never"]),
                    "input_ended": tr.input_ended}
    out["padding_share"] = tr.counts["pad"] / (made * R) if made else 0.0
    out["rows_out_of_order"], out["out_of_order_first"] = out_of_order(tr.events, rows)  # all of them at once
    return out, rec, lab


def _row_arrivals(tr, rec):
    first_event_of_row = np.searchsorted(rec["row"], np.arange(len(tr.pulled_at_row)))
    out, prev = [], 0
    for r, p in enumerate(tr.pulled_at_row.tolist()):
        if p > prev:
            out.append((int(first_event_of_row[r]), prev, tr.lengths[prev:p], None))
            prev = p
    return out


# ---- packers that exercise the resolution ----------------------------------------------------------
def truncate(R):
    """One document per row, cut to R: the rest of a long one never comes (discarded at its crop)."""
    def run(docs):
        for d in docs:
            yield d[:R]
    return run


def hold_long_skip_some(R, skip=5):
    """Short documents at once, every `skip`-th never; the long ones held to the very end (after any
    horizon), then cut into rows: a source emitted long after the sources around it."""
    def run(docs):
        held = []
        for i, d in enumerate(docs):
            if i % skip == skip - 1:
                continue
            if len(d) > R:
                held.append(d)
            else:
                yield d
        for d in held:
            for a in range(0, len(d), R):
                yield d[a:a + R]
    return run


def scrambled_pieces(R, seed):
    """Each document cut into pieces of random size, some dropped, the rest emitted in a shuffled window
    of pieces, some behind a BOS: a source's spans out of order, with gaps the resolution must date."""
    def run(docs):
        rng = np.random.default_rng(seed)
        window = []
        for d in docs:
            a = 0
            while a < len(d):
                b = min(len(d), a + int(rng.integers(1, R)))
                if rng.random() < 0.8:
                    window.append(np.r_[BOS, d[a:b]][:R] if rng.random() < 0.3 else d[a:b])
                a = b
            if len(window) > 6:
                rng.shuffle(window)
                yield from window[:4]
                window = window[4:]
        yield from window
    return run


PACKERS = {"concat_chunk": lambda R, B, seed: concat_chunk(R), "truncate": lambda R, B, seed: truncate(R),
           "hold": lambda R, B, seed: hold_long_skip_some(R), "scrambled": lambda R, B, seed: scrambled_pieces(R, seed),
           "original": lambda R, B, seed: ours("original", R, B, 4),
           "segment_first": lambda R, B, seed: ours("segment_first", R, B, 4)}


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_the_chunked_trace_equals_the_in_memory_resolution(tmp_path_factory, data):
    R = data.draw(st.integers(3, 24))
    B = data.draw(st.integers(1, 12))
    lengths = np.array(data.draw(st.lists(st.integers(1, 5 * R), min_size=1, max_size=120)))
    bounds = np.append(np.arange(0, len(lengths), data.draw(st.integers(1, 9))), len(lengths))
    labels = np.array(data.draw(st.lists(st.sampled_from(["a", "b", None]), min_size=len(lengths),
                                         max_size=len(lengths))), dtype=object) if data.draw(st.booleans()) else None
    name = data.draw(st.sampled_from(sorted(PACKERS)))
    rows = data.draw(st.integers(1, 40))
    drain = data.draw(st.sampled_from([None, 0, 3]))
    seed = data.draw(st.integers(0, 9))
    applies = data.draw(st.booleans())  # the protected set's fate reported for any packer, started or not
    out = tmp_path_factory.mktemp("fates")
    want, want_rec, want_lab = in_memory(PACKERS[name](R, B, seed), PassRefills(lengths, bounds, labels, 2), name,
                                         rows, R, B, drain, labels is not None, applies)
    small = {(fates, "RANGE_SOURCES"): data.draw(st.integers(1, 6)), (spill, "SPILL_RECORDS"): data.draw(st.integers(1, 8)),
             (spill, "KEEP_DOCS"): data.draw(st.integers(1, 4)), (trace, "BATCH_TOKENS"): R * data.draw(st.integers(1, 5))}
    old = {k: getattr(*k) for k in small}
    try:  # every source range, spill chunk, document window and decode batch a few at most
        for (mod, attr), v in small.items():
            setattr(mod, attr, v)
        sink = EventSink(out, name)
        got = trace_packer(PACKERS[name](R, B, seed), PassRefills(lengths, bounds, labels, 2), name, rows, R, B,
                           FIRST_ID, BOS, PAD, drain, sink=sink, label_names=labels is not None,
                           applies=applies)
        sink.close()
    finally:
        for (mod, attr), v in old.items():
            setattr(mod, attr, v)
    assert got == want, name
    assert np.array_equal(read_events(out / f"events_{name}.parquet"), want_rec), name
    if labels is not None:
        assert pq.read_table(out / f"events_{name}.parquet").column("label").to_pylist() == list(want_lab)
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")], "the spill folder is removed"


def test_a_document_table_on_disk_finds_every_token_and_reads_every_range(tmp_path):
    rng = np.random.default_rng(5)
    L = rng.integers(0, 9, 300)  # documents of length 0 too: a token belongs to the last one starting at or before it
    t = DocTable(tmp_path, keep=16)
    for a in range(0, 300, 7):
        t.append(L[a:a + 7], np.arange(a, min(a + 7, 300)))
    assert 0 < t.on_disk < 300 and t.n - t.on_disk <= 32  # most of it on disk, the newest in memory
    starts = np.cumsum(L) - L
    g = np.arange(int(L.sum()))
    assert np.array_equal(t.find(g), np.searchsorted(starts, g, side="right") - 1)
    for d0, d1 in ((0, 300), (17, 18), (250, 300), (5, 5), (40, 290)):
        assert np.array_equal(t.column("len", d0, d1), L[d0:d1])
        assert np.array_equal(t.column("label", d0, d1), np.arange(d0, d1))
    assert np.array_equal(t.starts(290, 301), np.append(starts[290:], L.sum()))
    t.close()


def test_a_keyed_spill_returns_exactly_the_records_of_a_key_range(tmp_path):
    rng = np.random.default_rng(6)
    dt = np.dtype([("k", np.int64), ("v", np.int64)])
    recs = np.zeros(500, dt)
    recs["k"], recs["v"] = rng.integers(0, 60, 500), np.arange(500)
    s = KeyedSpill(spill.Folder(tmp_path), "x", dt, "k", chunk=37)
    for a in range(0, 500, 23):
        s.add(recs[a:a + 23])
    assert len(s.chunks) > 5
    for lo, hi in ((0, 60), (10, 11), (59, 100), (30, 20), (-5, 3)):
        got = s.read(lo, hi)
        want = recs[(recs["k"] >= lo) & (recs["k"] < hi)]
        assert sorted(got["v"].tolist()) == sorted(want["v"].tolist())
