"""The streaming audit (refills pulled on demand, events to parquet a chunk at a time, tables
accumulated as sources retire) against the in-memory replay: the same events and the same
summary on random streams, at any chunk size; the Proposition watch still sees a violation
when it checks only the events of long sources; a stream generated in chunks replays as the
same stream held in memory, with the core in a forked child or not; a chunk stays within
CHUNK_ROWS rows however far apart the buffer curve's points are, and the curve is the buffer
as the core holds it; an error in the forked core is raised here; the forked child never
waits on a slow consumer, and a consumer that stops early leaves no child or thread behind."""
import fcntl
import json
import multiprocessing
import multiprocessing.connection
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import audit.compute as compute
import audit.events as events
import audit.forked as forked
from audit.events import EVENT_DTYPE, EventSink, read_events
from audit.feed import ChunkedRefills, PassRefills
from audit.metrics import summarize_replay
from audit.proposition import PropositionWatch, ProtectedSet
from audit.replay import Replay
from audit.synthetic import census_chunks
from loaders.core import PACKERS, PackerCore
from loaders.stream import DocumentStream


@settings(max_examples=15, deadline=None)
@given(st.data())
def test_streaming_replay_equals_the_in_memory_replay(tmp_path_factory, data):
    R = data.draw(st.integers(3, 40))
    B = data.draw(st.integers(1, 30))
    lengths = data.draw(st.lists(st.sampled_from([1, 2, R // 2 + 1, R, R + 1, 3 * R, 7 * R]), min_size=1, max_size=200))
    stream = DocumentStream.from_lengths(lengths, refill_docs=data.draw(st.integers(1, 16)))
    out = tmp_path_factory.mktemp("s")
    old = compute.CHUNK_ROWS, compute.FORK_MIN_ROWS
    compute.CHUNK_ROWS = data.draw(st.integers(1, 9))  # many chunks: live sources carried across them
    compute.FORK_MIN_ROWS = data.draw(st.sampled_from([0, 10 ** 9]))  # the core in a forked child, or here
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
    finally:
        compute.CHUNK_ROWS, compute.FORK_MIN_ROWS = old


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


def test_chunked_synthetic_stream_replays_as_the_same_stream_in_memory():
    lengths = np.concatenate(list(census_chunks(30_000, seed=3, chunk=7_000)))
    assert len(lengths) == 30_000 and lengths.min() >= 2
    stream = DocumentStream.from_lengths(lengths)
    a = compute.replay_packer(ChunkedRefills(census_chunks(30_000, seed=3, chunk=7_000)), "original", 800, 2049, 1000)
    b = compute.replay_packer(PassRefills(stream.lengths, stream.refills), "original", 800, 2049, 1000)
    a.pop("plot")
    b.pop("plot")
    assert a == b


class _RowsPerChunk:
    """An EventSink stand-in that keeps how many rows each chunk of events covers."""

    def __init__(self):
        self.rows = []

    def write(self, rec, labels=None):
        self.rows.append(int(rec["row"].max() - rec["row"].min() + 1))


def test_a_chunk_never_outgrows_chunk_rows_however_far_apart_the_curve_points(monkeypatch):
    # 60 rows and 4 curve points: a point every 15 rows, but chunks of at most 4 rows (before, a chunk
    # was a whole step between points: at 10^8 documents 91,000 rows, and memory grew with the stream)
    monkeypatch.setattr(compute, "CHUNK_ROWS", 4)
    monkeypatch.setattr(compute, "PLOT_POINTS", 4)
    rng = np.random.default_rng(8)
    lengths = rng.integers(1, 40, 400)
    lengths[::9] = rng.integers(60, 200, len(lengths[::9]))
    stream = DocumentStream.from_lengths(lengths, refill_docs=8)
    R, B, sink = 33, 12, _RowsPerChunk()
    s = compute.replay_packer(PassRefills(stream.lengths, stream.refills), "original", 60, R, B, sink)
    assert max(sink.rows) <= 4 and sum(sink.rows) == 60
    # each point: the buffer's tokens and the protected mass after every arrival so far, as the core holds them
    core, want = PackerCore(stream, "original", R, B), []
    for _ in range(4):
        core.pack_rows(15, [])
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


class _PidRefills(PassRefills):
    """PassRefills that note, in a file, the process that reads them (the replay's core)."""

    def __init__(self, path, *a, fail_after=None):
        super().__init__(*a)
        self.path, self.fail_after = path, fail_after

    def __iter__(self):
        self.path.write_text(str(os.getpid()))
        for i, r in enumerate(super().__iter__()):
            if i == self.fail_after:
                raise ValueError("refill source broke")
            yield r


def test_the_replay_with_its_core_in_a_forked_child_is_the_replay_in_this_process(tmp_path, monkeypatch):
    rng = np.random.default_rng(9)
    lengths = rng.integers(1, 80, 3000)
    lengths[::17] = rng.integers(100, 400, len(lengths[::17]))
    stream = DocumentStream.from_lengths(lengths, refill_docs=16)
    monkeypatch.setattr(compute, "CHUNK_ROWS", 7)
    for packer in PACKERS:
        got = {}
        for fork_min in (0, 10 ** 9):
            monkeypatch.setattr(compute, "FORK_MIN_ROWS", fork_min)
            out = tmp_path / f"{packer}-{fork_min}"
            out.mkdir()
            sink = EventSink(out, packer)
            refills = _PidRefills(out / "pid", stream.lengths, stream.refills)
            got[fork_min] = compute.replay_packer(refills, packer, 300, 41, 20, sink), read_events(sink.parquet_path if
                                                                                                  sink.close() else None)
            assert (int((out / "pid").read_text()) == os.getpid()) == (fork_min > 0), "forked when asked, else here"
        assert got[0][0] == got[10 ** 9][0] and np.array_equal(got[0][1], got[10 ** 9][1]), packer


def test_an_error_in_the_forked_core_is_raised_here_with_the_childs_traceback(tmp_path, monkeypatch):
    monkeypatch.setattr(compute, "FORK_MIN_ROWS", 0)
    refills = _PidRefills(tmp_path / "pid", np.full(500, 30), np.arange(0, 501, 10), fail_after=20)
    with pytest.raises(ValueError, match="refill source broke") as e:
        compute.replay_packer(refills, "original", 200, 33, 8)
    assert "in the forked process running the replay's core" in "".join(e.value.__notes__)
    assert int((tmp_path / "pid").read_text()) != os.getpid()


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


@pytest.mark.skipif(not forked.can_fork(), reason="the core is forked on Linux only")
def test_the_pipe_from_the_forked_core_holds_a_whole_chunk(monkeypatch):
    widened = []
    monkeypatch.setattr(forked, "_widen", widened.append)
    monkeypatch.setattr(compute, "FORK_MIN_ROWS", 0)
    compute.replay_packer(PassRefills(np.full(50, 9), np.arange(0, 51, 5)), "original", 5, 17, 4)
    assert len(widened) == 1  # the forked replay's pipe
    monkeypatch.undo()
    recv, send = multiprocessing.get_context("fork").Pipe(duplex=False)
    forked._widen(send)
    assert fcntl.fcntl(send.fileno(), getattr(fcntl, "F_GETPIPE_SZ", 1032)) >= forked.PIPE_BYTES
    recv.close()
    send.close()


def _big_items(marker, n, size):
    for _ in range(n):
        yield bytes(size)
    marker.write_text("sent")


class _TwoArgError(Exception):
    def __init__(self, what, code):  # pickles, but cannot be rebuilt from its args: the reader would fail on it
        super().__init__(what)


def _raises_two_arg_error():
    yield 1
    raise _TwoArgError("refill source broke", 7)


def _endless(size):
    while True:
        yield bytes(size)


@pytest.mark.skipif(not forked.can_fork(), reason="the core is forked on Linux only")
def test_the_forked_child_sends_everything_while_the_consumer_holds_its_first_item(tmp_path):
    # six items of 600 KB overflow the pipe (1 MB): the child finishes only if this process reads them as they come
    marker = tmp_path / "sent"
    items = forked.forked(_big_items, marker, 6, 600_000)
    assert len(next(items)) == 600_000
    deadline = time.monotonic() + 20
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert marker.exists(), "the child waited for the consumer: the pipe was full"
    assert [len(x) for x in items] == [600_000] * 5


@pytest.mark.skipif(not forked.can_fork(), reason="the core is forked on Linux only")
def test_a_consumer_that_stops_early_leaves_no_child_and_no_reader_thread():
    threads, children = threading.active_count(), set(multiprocessing.active_children())
    items = forked.forked(_endless, 300_000)  # fills the inbox and the pipe behind it
    next(items)
    time.sleep(0.2)
    items.close()
    assert threading.active_count() == threads and set(multiprocessing.active_children()) <= children


@pytest.mark.skipif(not forked.can_fork(), reason="the core is forked on Linux only")
def test_a_reader_that_fails_raises_here_instead_of_leaving_the_consumer_waiting(monkeypatch):
    def no_room(self, *args):
        raise MemoryError("no room for the message")

    monkeypatch.setattr(multiprocessing.connection.Connection, "recv", no_room)
    children, got = set(multiprocessing.active_children()), []

    def consume():
        try:
            next(forked.forked(_endless, 10))
        except MemoryError as e:
            got.append(e)

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    t.join(timeout=20)
    assert not t.is_alive(), "the consumer still waits for a reader that is gone"
    assert "no room" in str(got[0]) and set(multiprocessing.active_children()) <= children


@pytest.mark.skipif(not forked.can_fork(), reason="the core is forked on Linux only")
def test_an_exception_that_cannot_be_rebuilt_arrives_as_its_type_and_message_with_the_childs_traceback():
    items = forked.forked(_raises_two_arg_error)
    assert next(items) == 1
    with pytest.raises(RuntimeError, match="_TwoArgError: refill source broke") as e:
        next(items)
    assert "in the forked process running the replay's core" in "".join(e.value.__notes__)


@pytest.mark.skipif(not forked.can_fork(), reason="the core is forked on Linux only")
def test_a_blocked_child_ends_within_seconds_whatever_sigterm_handler_the_parent_installed():
    # the parent's handler raising SystemExit (ray.init()'s) or ignoring SIGTERM; the consumer closing early,
    # failing, or hit by Ctrl-C: the scenarios run in a process (and session) of their own, in tests/forked_endings.py
    script = Path(__file__).with_name("forked_endings.py")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env,
                          start_new_session=True)
    cases = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 0 and len(cases) == 6, done.stderr[-2000:]
    for c in cases:
        assert c["seconds"] < 5 and c["child_gone"], c
        assert c["threads_left"] == 0 and c["fds_left"] == 0, c
