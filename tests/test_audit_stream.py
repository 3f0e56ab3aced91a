"""The streaming audit (the compiled core's windows pulled on demand, events to parquet a chunk at a
time, the sources' numbers folded in as they retire) against the in-memory replay through the Python
tally and watch: the same events and the same summary on random streams, at any chunk size; the
Proposition watch still sees a violation when it checks only the events of long sources; a stream
generated in chunks, or memory-mapped, replays as the same stream held in memory; a chunk stays
within CHUNK_EVENTS events, and the buffer curve is the buffer as the core holds it."""
import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import audit.compute as compute
import audit.events as events
from audit.events import EVENT_DTYPE, EventSink, read_events
from audit.feed import ChunkedRefills, MappedRefills, PassRefills
from audit.metrics import summarize_replay
from audit.proposition import PropositionWatch, ProtectedSet
from audit.replay import Replay
from audit.synthetic import census_chunks
from loaders.core import PACKERS
from loaders.reference import ReferenceCore
from loaders.stream import DocumentStream


@settings(max_examples=15, deadline=None)
@given(st.data())
def test_streaming_replay_equals_the_in_memory_replay(tmp_path_factory, data):
    R = data.draw(st.integers(3, 40))
    B = data.draw(st.integers(1, 30))
    lengths = data.draw(st.lists(st.sampled_from([1, 2, R // 2 + 1, R, R + 1, 3 * R, 7 * R]), min_size=1, max_size=200))
    stream = DocumentStream.from_lengths(lengths, refill_docs=data.draw(st.integers(1, 16)))
    out = tmp_path_factory.mktemp("s")
    old = compute.CHUNK_EVENTS
    compute.CHUNK_EVENTS = data.draw(st.integers(1, 40))  # many chunks: buffered sources carried across them
    try:
        for packer in PACKERS:
            rows = data.draw(st.integers(1, 60))
            sink = EventSink(out, packer)
            got = compute.replay_packer(PassRefills(stream.lengths, stream.refills), packer, rows, R, B, sink)
            sink.close()
            rep = Replay(stream, packer, rows, R, B)
            assert np.array_equal(read_events(out / f"events_{packer}.parquet"), rep.events)
            want = summarize_replay(rep)
            got.pop("plot")
            assert got == want, packer
            # without an events file the chunks are ARRAY_CHUNK_EVENTS at most: the same summary
            alone = compute.replay_packer(PassRefills(stream.lengths, stream.refills), packer, rows, R, B)
            alone.pop("plot")
            assert alone == want, packer
    finally:
        compute.CHUNK_EVENTS = old


def test_the_watch_reports_a_selection_of_a_protected_source_with_or_without_candidates():
    # R = 4, B = 3: sources 0 (len 9) and 1 (len 7) are the two longest long arrivals, so both are protected;
    # an event selecting source 1 violates the Proposition at event index 2
    raw = [(2, 0, 3, 0, 0, 0), (3, 0, 1, 0, 0, 0), (1, 0, 4, 3, 1, 0)]
    arrivals = [(0, 0, np.array([9, 7, 3, 1]), None)]
    for cand in (None, [2]):
        w = PropositionWatch(3, 4)
        w.feed(raw, arrivals, candidates=cand)
        assert w.violation == {"event": 2, "source_id": 1, "source_len": 7}, cand
    w = PropositionWatch(3, 4)
    w.feed(raw[:2], arrivals)
    assert w.violation is None and w.ps.members == {0, 1} and w.ps.mass == 16


def test_chunked_and_mapped_synthetic_streams_replay_as_the_same_stream_in_memory(tmp_path):
    lengths = np.concatenate(list(census_chunks(30_000, seed=3, chunk=7_000)))
    assert len(lengths) == 30_000 and lengths.min() >= 2
    stream = DocumentStream.from_lengths(lengths)
    np.save(tmp_path / "lengths.npy", lengths.astype(np.int32))
    b = compute.replay_packer(PassRefills(stream.lengths, stream.refills), "original", 800, 2049, 1000)
    b.pop("plot")
    for refills in (ChunkedRefills(census_chunks(30_000, seed=3, chunk=7_000)),
                    MappedRefills(tmp_path / "lengths.npy", window_docs=5_000)):
        a = compute.replay_packer(refills, "original", 800, 2049, 1000)
        a.pop("plot")
        assert a == b, type(refills).__name__


class _EventsPerChunk:
    """An EventSink stand-in that keeps how many events each chunk holds."""

    def __init__(self):
        self.events = []

    def write(self, rec, labels=None):
        self.events.append(len(rec["source_id"]))


def test_a_chunk_never_outgrows_chunk_events_and_the_curve_is_the_buffer_as_the_core_holds_it(monkeypatch):
    monkeypatch.setattr(compute, "CHUNK_EVENTS", 7)
    monkeypatch.setattr(compute, "PLOT_POINTS", 4)
    rng = np.random.default_rng(8)
    lengths = rng.integers(1, 40, 400)
    lengths[::9] = rng.integers(60, 200, len(lengths[::9]))
    stream = DocumentStream.from_lengths(lengths, refill_docs=8)
    R, B, sink = 33, 12, _EventsPerChunk()
    s = compute.replay_packer(PassRefills(stream.lengths, stream.refills), "original", 62, R, B, sink)
    assert max(sink.events) <= 7 and sum(sink.events) == s["selection_events"]
    # a point every 15 rows and one at the horizon: the buffer's tokens and the protected mass after every
    # arrival so far, as the Python core holds them at that row's end
    core, want = ReferenceCore(stream, "original", R, B), []
    for rows in (15, 15, 15, 15, 2):
        core.pack_rows(rows, [])
        ps = ProtectedSet(B, R)
        for i in range(core.arrived_docs):
            ps.arrive(i, int(lengths[i % len(lengths)]))
        want.append([core.rows_done * (R - 1), core.buffered_tokens(), ps.mass])
    assert s["plot"]["buffer_curve"] == want


def test_an_event_chunk_that_fails_on_the_writer_thread_fails_the_next_write_or_close(tmp_path, monkeypatch):
    monkeypatch.setattr(events, "ROW_GROUP_EVENTS", 1)  # every chunk its row group
    rec = np.zeros(3, EVENT_DTYPE)
    for then in ("write", "close"):
        sink = EventSink(tmp_path / "no such folder", then)
        sink.write(rec)  # the writer thread cannot open the file
        with pytest.raises(OSError, match="no such folder"):
            sink.write(rec) if then == "write" else sink.close()


def test_chunks_are_gathered_into_row_groups_of_row_group_events(tmp_path, monkeypatch):
    # the parquet writer keeps each row group's metadata until it closes: one row group per chunk grew with the stream
    monkeypatch.setattr(events, "ROW_GROUP_EVENTS", 10)
    rng = np.random.default_rng(1)
    rec = np.zeros(97, EVENT_DTYPE)
    rec["source_id"] = np.arange(97)
    labels = np.array(rng.choice(["x", "y"], 97), dtype=object)
    sink, a = EventSink(tmp_path, "g"), 0
    while a < 97:
        b = min(97, a + int(rng.integers(1, 4)))
        sink.write(rec[a:b], labels[a:b])
        a = b
    sink.close()
    f = pq.ParquetFile(tmp_path / "events_g.parquet")
    sizes = [f.metadata.row_group(i).num_rows for i in range(f.num_row_groups)]
    assert sum(sizes) == 97 and all(10 <= n <= 12 for n in sizes[:-1]) and len(sizes) <= 10
    assert np.array_equal(read_events(tmp_path / "events_g.parquet"), rec)
    assert f.read().column("label").to_pylist() == labels.tolist()
