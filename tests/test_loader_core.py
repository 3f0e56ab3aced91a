"""The packer core (loaders/core.py) on a stream small enough to pack by hand: its events, the
buffer with its sequence numbers, the row count, its saved state, and the exact refusal lines; then the
compiled core against the Python core it replaced on random streams (events, state after every step, a
resumed run), in pulled windows as the audit reads a stream; and its machine code cached, so that a second
process compiles nothing."""
import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT
from loaders import kernel as K
from loaders.core import CROP, FIT, PACKERS, PackerCore, StreamEnded
from loaders.reference import ReferenceCore
from loaders.stream import DocumentStream


def _stream():
    # lengths 3, 5, 2, 4; two documents per refill
    docs = [[0] + [1] * (n - 1) for n in (3, 5, 2, 4)]
    return DocumentStream.from_token_lists(docs, 2)


def test_two_rows_packed_by_hand_and_the_state_between_them():
    core = PackerCore(_stream(), "original", 4, 2)
    ev = core.pack_rows(1).tolist()
    # refill 1 brings 3 (seq 0) and 5 (seq 1); 3 fits the row of 4; the buffer is below B = 2, so refill 2 brings
    # 2 (seq 2) and 4 (seq 3); nothing fits the last slot, so the shortest (2) is cropped to 1, discarding 1
    assert ev == [(0, 0, 3, 0, FIT, 0), (2, 0, 1, 1, CROP, 0)]
    assert core.rows_done == 1 and core.next_seq == 4
    assert core.buffered() == [(1, 1, 0, 0, 5), (3, 3, 0, 0, 4)]
    st = core.state_dict()
    assert st["buffer"].shape == (2, 5) and st["buffer"].tolist() == [[1, 1, 0, 0, 5], [3, 3, 0, 0, 4]]
    assert {k: st[k] for k in st if k not in ("buffer", "rng")} == {
        "packer": "original", "R": 4, "B": 2, "seed": 314159265, "stream_n": 4, "next_seq": 4, "pass_idx": 1,
        "refill_idx": 0, "arrived_docs": 4, "added_bos": 0, "rows_done": 1}
    assert core.pack_rows(1).tolist() == [(3, 0, 4, 0, FIT, 0)] and core.rows_done == 2  # 4 fills the second row exactly


@pytest.mark.parametrize("args,message", [
    (("shortest", 4, 2), "unknown packer 'shortest'; choose one of original, lossless, segment_first, random_span"),
    (("original", 1, 2), "row capacity must be >= 2 and buffer size >= 1"),
    (("original", 4, 0), "row capacity must be >= 2 and buffer size >= 1"),
])
def test_bad_settings_are_refused_with_one_line(args, message):
    with pytest.raises(ValueError) as e:
        PackerCore(_stream(), *args)
    assert str(e.value) == message


def test_a_state_for_another_row_capacity_is_refused_with_one_line():
    st = PackerCore(_stream(), "original", 4, 2).state_dict()
    with pytest.raises(ValueError) as e:
        PackerCore(_stream(), "original", 5, 2).load_state_dict(st)
    assert str(e.value) == "loader state is for R=4, this loader has 5"
    assert isinstance(st["buffer"], np.ndarray)


# ---- the compiled core against the Python core it replaced (loaders/reference.py ReferenceCore) -------------
@st.composite
def _settings(draw):
    """A stream with the cases the core's structures must get right: a few distinct lengths (ties), documents of
    exactly R and R + 1 (the fit bound, the bucket bound, segment-first's first chunk), much longer ones (the
    heap of spans longer than R, several segment-first chunks), B = 1 and B above the stream's size."""
    R = draw(st.integers(2, 48))
    B = draw(st.one_of(st.just(1), st.integers(1, 40), st.integers(200, 400)))
    palette = draw(st.lists(st.one_of(st.sampled_from([1, 2, R - 1, R, R + 1, 2 * R, 2 * R + 1]),
                                      st.integers(1, 6 * R)), min_size=1, max_size=5))
    lengths = draw(st.lists(st.sampled_from(palette), min_size=1, max_size=120))
    return R, B, [max(1, x) for x in lengths], draw(st.integers(1, 16))


@settings(max_examples=150, deadline=None)
@given(_settings(), st.sampled_from(PACKERS), st.lists(st.integers(0, 6), min_size=1, max_size=12),
       st.integers(0, 11))
def test_the_compiled_core_equals_the_python_core_event_for_event_and_state_for_state(s, packer, steps, resume_at):
    """Row by row: the same events, element for element, and the same state after every step (the buffer with
    its sequence numbers, counters, the random-span generator); a core resumed from that state at one of the
    steps goes on with the same events."""
    R, B, lengths, refill = s
    stream = DocumentStream.from_lengths(lengths, refill_docs=refill)
    fast, ref = PackerCore(stream, packer, R, B), ReferenceCore(stream, packer, R, B)
    for i, n in enumerate(steps):
        want = []
        ref.pack_rows(n, want)
        assert fast.pack_rows(n).tolist() == want, (i, n)
        a, b = fast.state_dict(), ref.state_dict()
        assert np.array_equal(a.pop("buffer"), b.pop("buffer")) and a == b, i
        if i == resume_at:
            fast = PackerCore(stream, packer, R, B)
            fast.load_state_dict(a | {"buffer": ref.state_dict()["buffer"]})
    assert fast.buffered() == ref.buffered() and fast.buffered_tokens() == ref.buffered_tokens()


@settings(max_examples=60, deadline=None)
@given(_settings(), st.sampled_from(PACKERS), st.integers(1, 40), st.integers(1, 9))
def test_a_pulled_core_in_windows_equals_the_stream_core(s, packer, rows, window_refills):
    """The audit's core reads the same documents, pass after pass, in windows of a few refills: the same events
    (sources numbered by arrival, as the stream numbers pass p's document i: p * n + i)."""
    R, B, lengths, refill = s
    stream = DocumentStream.from_lengths(lengths, refill_docs=refill)
    bounds = stream.refills

    def windows():
        while True:
            for p in range(0, len(bounds) - 1, window_refills):
                q = min(p + window_refills, len(bounds) - 1)
                yield stream.lengths[bounds[p]:bounds[q]], bounds[p:q + 1] - bounds[p], None

    got = PackerCore.pulling(windows(), packer, R, B).pack_rows(rows).tolist()
    assert got == PackerCore(stream, packer, R, B).pack_rows(rows).tolist()


def test_a_pulled_core_whose_windows_run_out_hands_over_the_row_it_cut_short():
    # R = 4, B = 2: one window of lengths 3, 5; the first row takes 3, then the buffer (5) is below B and there is
    # nothing more: StreamEnded with the row's one event; the next row starts empty
    core = PackerCore.pulling(iter([(np.array([3, 5]), np.array([0, 2]), None)]), "original", 4, 2)
    with pytest.raises(StreamEnded) as e:
        core.pack_rows(1)
    assert e.value.events.tolist() == [(0, 0, 3, 0, FIT, 0)] and core.count == 1 and core.rows_done == 0
    core.B = 1  # drain
    assert core.pack_rows(1).tolist() == [(1, 0, 4, 1, CROP, 0)]


_ONE_RUN = """
import json
import numpy as np
from audit.compute import replay_packer
from audit.feed import PassRefills
from audit import tally
from loaders import kernel
from loaders.core import PackerCore
from loaders.stream import DocumentStream
s = DocumentStream.from_lengths(np.arange(1, 60), refill_docs=4)
c = PackerCore(s, "lossless", 17, 3)
c.pack_rows(5)
PackerCore(s, "lossless", 17, 3).load_state_dict(c.state_dict())
replay_packer(PassRefills(s.lengths, s.refills), "original", 9, 17, 3)
fns = (kernel.run, kernel.restore, tally._event_sums, tally._start_bins)
print(json.dumps({f.__name__: [sum(f.stats.cache_hits.values()), sum(f.stats.cache_misses.values())] for f in fns}))
"""


def test_a_second_process_loads_the_compiled_code_from_the_cache(python_env):
    """Compiled once (by the first process on this machine: the test session's start, conftest.py's pytest_configure,
    made sure of it), then loaded: a process after it compiles neither the core's loop nor the tally's sums."""
    run = subprocess.run([sys.executable, "-c", _ONE_RUN], cwd=ROOT, env=python_env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert all(hits >= 1 and misses == 0 for hits, misses in got.values()), got


@settings(max_examples=60, deadline=None)
@given(_settings(), st.sampled_from(PACKERS), st.integers(1, 30), st.integers(1, 50))
def test_each_sources_record_is_what_its_events_say(s, packer, rows, capacity):
    """What the core keeps of each source (own tokens emitted, discarded, events, its first event's target offset,
    its first and last position emitted) and hands over as it retires, or at the horizon, against the Python core's
    events added up by hand; in chunks of any size."""
    R, B, lengths, refill = s
    stream = DocumentStream.from_lengths(lengths, refill_docs=refill)
    core, parts = PackerCore(stream, packer, R, B), []
    for ch in core.chunks(rows, capacity):
        parts.append(ch.retired.copy())
    got = np.concatenate(parts + [core.live_sources()], axis=1)
    got = {r[K.T_SRC]: r for r in got.T.tolist()}
    ref, raw, want = ReferenceCore(stream, packer, R, B), [], {}
    ref.pack_rows(rows, raw)
    pos = 0
    for src, a, em, disc, _kind, lead in raw:
        w = want.setdefault(src, [0, 0, 0, -1, K.NO_POSITION, -1])
        own_lead = lead if packer == "segment_first" else 0
        stands = lead and packer == "random_span"
        w[0] += em - own_lead
        w[1] += disc
        w[3] = w[3] if w[2] else (pos // R) * (R - 1) + max(pos % R - 1, 0)
        w[2] += 1
        b = a + em - lead
        if b > a or stands:
            w[4] = min(w[4], 0 if stands else a)
            w[5] = max(w[5], b - 1 if b > a else 0)
        pos += em
    assert sorted(got) == list(range(ref.arrived_docs))  # every arrived source once: retired, or still buffered
    for src, r in got.items():
        w = want.get(src, [0, 0, 0, -1, K.NO_POSITION, -1])
        assert r[K.T_LEN] == lengths[src % len(lengths)]
        assert [r[K.T_OWN], r[K.T_DISC], r[K.T_NEV], r[K.T_FIRST], r[K.T_PMIN], r[K.T_PMAX]] == w, (src, r, w)
