"""The trace (run a packer on tracer documents, decode its rows) against the replay it must
equal: our four packers traced give the replay's events, event for event, and the same
tables (hypothesis streams, and the small offline corpus); a traced export passes the
standard-library checker; hand-worked rows decode as worked out by hand."""
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.adapters import FIRST_ID, concat_chunk, ours
from audit.api import trace
from audit.compute import replay_packer, trace_packer
from audit.events import EventSink, read_events, write_csv
from audit.feed import PassRefills
from audit.replay import Replay
from audit.trace import RowDecoder, TracerDocs, decode_rows, run_trace
from conftest import ROOT
from errors import DataError
from loaders.core import PACKERS
from loaders.stream import DocumentStream, open_split

TABLES = ("tokens_arrived", "sources_arrived", "emitted", "discarded", "buffered", "bos_added", "partition_holds",
          "selection_events", "crop_events", "crop_median_emitted", "crops_emitting_only_bos", "sources_started",
          "sources_fully_emitted", "sources_never_started", "sources_longer_than_R_started", "retention_by_stratum",
          "startup_delay_targets", "by_label", "position_exposure", "continuation_rows")


def canonical(ev, packer):
    """A random-span crop that keeps the source's first tokens, or only its BOS, is token for token
    the prefix crop (span start 0, no lead BOS): that is how its rows read."""
    ev = ev.copy()
    if packer == "random_span":
        m = (ev["lead_bos"] == 1) & ((ev["span_start"] == 1) | (ev["emitted"] == 1))
        ev["span_start"][m] = 0
        ev["lead_bos"][m] = 0
    return ev


def trace_ours(stream, packer, rows, R, B, refill_docs, sink=None):
    # enough passes of tracer documents to reach the horizon (the replay says how many arrive by then)
    passes = -(-Replay(stream, packer, rows, R, B).core.arrived_docs // stream.n)
    return trace_packer(ours(packer, R, B, refill_docs), PassRefills(stream.lengths, stream.refills, max_passes=passes),
                        packer, rows, R, B, FIRST_ID, sink=sink, applies=packer != "segment_first")


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_trace_of_our_packers_equals_their_replay(tmp_path_factory, data):
    R = data.draw(st.integers(3, 40))
    B = data.draw(st.integers(1, 30))
    lengths = data.draw(st.lists(st.sampled_from([1, 2, R // 2 + 1, R - 1, R, R + 1, 2 * R, 3 * R + 2, 7 * R]),
                                 min_size=1, max_size=150))
    refill_docs = data.draw(st.integers(1, 16))
    stream = DocumentStream.from_lengths(lengths, refill_docs=refill_docs)
    out = tmp_path_factory.mktemp("tr")
    for packer in PACKERS:
        rows = data.draw(st.integers(1, 40))
        sink = EventSink(out, packer)
        traced = trace_ours(stream, packer, rows, R, B, refill_docs, sink)
        sink.close()
        want = Replay(stream, packer, rows, R, B).events
        assert np.array_equal(read_events(out / f"events_{packer}.parquet"), canonical(want, packer)), packer
        replayed = replay_packer(PassRefills(stream.lengths, stream.refills), packer, rows, R, B)
        for k in TABLES:
            assert traced[k] == replayed[k], (packer, k)
        assert traced["protected"]["proposition_held"] == replayed["protected"]["proposition_held"]
        assert traced["rows_out_of_order"] == 0, packer  # ours keep each document's order in a row


@pytest.mark.parametrize("packer", PACKERS)
def test_trace_equals_replay_on_the_offline_corpus(small_corpus, tmp_path, packer):
    s = open_split(small_corpus, "stdlib", "train")
    stream = DocumentStream(s.lengths, s.refills)
    R, B, rows = 129, 40, 300
    sink = EventSink(tmp_path, packer)
    traced = trace_ours(stream, packer, rows, R, B, 128, sink)
    sink.close()
    assert np.array_equal(read_events(tmp_path / f"events_{packer}.parquet"),
                          canonical(Replay(stream, packer, rows, R, B).events, packer))
    replayed = replay_packer(PassRefills(stream.lengths, stream.refills), packer, rows, R, B)
    assert all(traced[k] == replayed[k] for k in TABLES)


@pytest.mark.parametrize("packer", ["original", "lossless", "segment_first"])
def test_packing_checker_accepts_a_traced_export(tmp_path, packer):
    rng = np.random.default_rng(4)
    lengths = rng.integers(1, 40, 300)
    lengths[::11] = rng.integers(50, 200, len(lengths[::11]))
    stream = DocumentStream.from_lengths(lengths, refill_docs=16)
    sink = EventSink(tmp_path, packer)
    trace_ours(stream, packer, 60, 33, 12, 16, sink)
    sink.close()
    write_csv(read_events(tmp_path / f"events_{packer}.parquet"), tmp_path / "events.csv")
    (tmp_path / "lengths.txt").write_text(
        "".join(" ".join(map(str, lengths[a:b])) + "\n" for a, b in zip(stream.refills[:-1], stream.refills[1:])))
    r = subprocess.run([sys.executable, "-I", "-S", str(ROOT / "checkers" / "packing_checker.py"), "--events",
                        str(tmp_path / "events.csv"), "--lengths", str(tmp_path / "lengths.txt"), "--packer", packer,
                        "--row-capacity", "33", "--buffer", "12", "--rows", "60"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("match:"), r.stdout + r.stderr


def test_hand_worked_rows_decode_as_worked_out():
    # documents of lengths 3, 5, 4: tracer ids 16-18, 19-23, 24-27 (FIRST_ID = 16); BOS 1, pad 0
    docs = TracerDocs([(np.array([3, 5, 4]), None)], FIRST_ID)
    list(docs)
    rows = [np.array([16, 17, 18, 19, 20]), np.array([1, 22, 23, 0, 0]), np.array([24, 26, 27, -25, 25])]
    runs, markers, counts = decode_rows(rows, docs, bos_id=1, pad_id=0)
    got = sorted(zip(runs["src"].tolist(), runs["a"].tolist(), runs["b"].tolist(), runs["row"].tolist(),
                     runs["off"].tolist(), runs["lead"].tolist(), runs["kind_of_lead"].tolist()))
    want = sorted([(0, 0, 3, 0, 0, 0, 0), (1, 0, 2, 0, 3, 0, 0),  # row 0: source 0 whole, source 1's first two
                   (1, 3, 5, 1, 0, 1, 1),  # row 1: a BOS the packer added, then source 1's positions 3-4
                   (2, 2, 4, 2, 0, 1, 2),  # row 2: source 2's own first token moved before its positions 2-3
                   (2, 1, 2, 2, 3, 1, 1)])  # and a marker naming position 1 (-25), then that position
    assert got == want
    assert counts == {"pad": 2, "other_inserted": 0}
    assert len(markers["at"]) == 0


def test_fates_a_cut_span_a_continuation_and_a_never_started_source():
    # concatenate-and-chunk at R = 4 over lengths 6, 1, 3: rows [s0 0-3], [s0 4-5, s1 0, s2 0], [s2 1-2]
    refills = PassRefills(np.array([6, 1, 3]), np.array([0, 3]), max_passes=1)
    tr = run_trace(concat_chunk(4), refills, 4, 2, FIRST_ID)
    ev = tr.events
    got = list(zip(ev["src"].tolist(), ev["a"].tolist(), ev["b"].tolist(), ev["row"].tolist(), ev["crop"].tolist()))
    assert got == [(0, 0, 4, 0, True), (0, 4, 6, 1, False), (1, 0, 1, 1, False), (2, 0, 1, 1, True), (2, 1, 3, 2, False)]
    assert ev["disc"].tolist() == [0] * 5 and tr.arrived == 3 and tr.ended
    # the same stream, but a packer that never emits source 1: it is discarded, never started
    def skip_one(docs):
        for i, d in enumerate(docs):
            if i != 1:
                yield d
    refills = PassRefills(np.array([6, 1, 3]), np.array([0, 3]), max_passes=1)
    s = trace_packer(skip_one, refills, "skip", 3, 6, 1, FIRST_ID)
    assert (s["sources_never_started"], s["discarded"], s["emitted"], s["buffered"]) == (1, 1, 9, 0)


def test_a_packer_that_emits_a_document_twice_fails_the_partition():
    # a traced packer's buffered term is what emitted and discarded leave: the sum alone would always add up.
    # Documents of 3 and 4 tokens at R = 8, each emitted twice: 7 tokens arrived, 14 emitted
    def twice(docs):
        for d in docs:
            yield list(d)
            yield list(d)

    # the API refuses it in one line (its figures were returned, a verdict that read as a finding, before)
    with pytest.raises(DataError) as e:
        trace(twice, [3, 4], row_capacity=8, buffer=1, targets=7 * 4)
    assert str(e.value) == ("twice: the partition does not add up: 2 source(s) emitted more tokens than they hold, "
                            "-7 tokens buffered at the end (a token emitted twice, or given to another document)")
    ok = trace(lambda docs: (list(d) for d in docs), [3, 4], row_capacity=8, buffer=1, targets=7 * 2, name="once")
    assert ok["partition_holds"] and ok["sources_overdrawn"] == 0


def out_of_order_by_hand(rows, lengths, horizon, bos_id):
    """(budget rows in which a document's tokens are out of order, the first place as (row, document, position, the
    other position, whether it came before)), a token at a time. A token that neither follows its predecessor in the
    document nor begins a sequence (position 0, or right after a BOS, a marker naming it, or its document's first
    token moved before it as its BOS: the trace's decoding rules) must come after every earlier token of its document
    in the row and before every later one of a smaller position. A moved first token is a BOS, not a position."""
    starts = np.cumsum([0, *lengths])

    def where(t):
        g = int(t) - FIRST_ID
        d = int(np.searchsorted(starts, g, side="right")) - 1
        return d, g - int(starts[d])

    bad, first = set(), None
    for r, row in enumerate(rows[:horizon]):
        toks = []  # (document, position, continues a piece without a BOS) of the row's document tokens
        moved = False
        for i, t in enumerate(row):
            if t < FIRST_ID:
                moved = False
                continue  # inserted by the packer
            d, pos = where(t)
            before = row[i - 1] if i else None
            led = before in (bos_id, -t) or moved
            nxt = where(row[i + 1]) if i + 1 < len(row) and row[i + 1] >= FIRST_ID else None
            moved = pos == 0 and not led and nxt is not None and nxt[0] == d and nxt[1] > 1
            if moved:
                continue  # its document's first token standing in for the BOS of the span after it
            toks.append((d, pos, not led and pos > 0 and before != t - 1))
        for k, (d, pos, cont) in enumerate(toks):
            if not cont:
                continue
            earlier = [p for e, p, _ in toks[:k] if e == d and p >= pos]
            later = [p for e, p, _ in toks[k + 1:] if e == d and p < pos]
            if earlier or later:
                bad.add(r)
                first = first or (r, d, pos, *((max(earlier), True) if earlier else (min(later), False)))
    return len(bad), first


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_rows_holding_a_documents_tokens_out_of_order_are_counted_as_token_by_token(data):
    """A packer that cuts each document into pieces, may reverse a piece, puts pieces in a random order within a
    window, adds separators and cuts rows of R: the decoder's count of out-of-order rows and its first place equal
    a token-by-token walk of the rows, across decode batches and the horizon."""
    lengths = data.draw(st.lists(st.integers(1, 12), min_size=1, max_size=25))
    R = data.draw(st.integers(2, 16))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    p_reverse, window = data.draw(st.sampled_from([0.0, 0.1, 0.5])), data.draw(st.integers(1, 4))
    made = []

    def scrambler(docs):
        pieces = []
        for d in docs:
            cuts = np.sort(rng.choice(np.arange(1, len(d)), size=rng.integers(0, len(d)), replace=False)) \
                if len(d) > 1 else []
            for p in np.split(np.asarray(d), cuts):
                pieces.append(p[::-1] if rng.random() < p_reverse else p)
                if rng.random() < 0.3:
                    pieces.append(np.array([1]))  # a separator the packer adds
        order = np.argsort(np.arange(len(pieces)) + rng.uniform(0, window, len(pieces)))
        flat = np.concatenate([pieces[i] for i in order])
        for i in range(0, len(flat), R):
            made.append(flat[i:i + R].tolist())
            yield made[-1]

    horizon = data.draw(st.integers(1, 40))
    dec = RowDecoder(scrambler, [(np.array(lengths), None)], R, horizon, FIRST_ID, bos_id=1,
                     batch_rows=data.draw(st.integers(1, 5)), drain_rows=10)
    for _ in dec.batches():
        pass
    dec.docs.table.close()
    n, first = out_of_order_by_hand(made, lengths, horizon, bos_id=1)
    assert dec.out_of_order["rows"] == n
    got = dec.out_of_order["first"]
    assert (got and (got["row"], got["source"], got["position"], got["other_position"], got["other_before"])) == first


def test_a_reversing_packer_is_said_and_its_counts_stay_those_of_its_tokens():
    # lengths 3 and 4 at R = 8, each document a row of its own, reversed: ids 16-18 and 19-22 (FIRST_ID = 16)
    rev = trace(lambda docs: (list(d)[::-1] for d in docs), [3, 4], row_capacity=8, buffer=1, targets=7 * 2,
                name="rev")
    # row 0 reads positions 2, 1, 0: the first piece, position 2, continues without a BOS and position 0 comes after
    assert (rev["rows_out_of_order"], rev["out_of_order_first"]) == (2, {"row": 0, "source": 0, "position": 2,
                                                                           "other_position": 0, "other_before": False})
    # rotated (d[1:] then d[0]): the first piece continues without a BOS and its position 0 comes after it
    rot = trace(lambda docs: (list(d)[1:] + list(d)[:1] for d in docs), [3, 4], row_capacity=8, buffer=1,
                targets=7 * 2, name="rot")
    assert (rot["rows_out_of_order"], rot["out_of_order_first"]) == (2, {"row": 0, "source": 0, "position": 1,
                                                                           "other_position": 0, "other_before": False})
    assert rev["partition_holds"] and rev["emitted"] == 7  # each token once, in pieces of one token
    fwd = trace(lambda docs: (list(d) for d in docs), [3, 4], row_capacity=8, buffer=1, targets=7 * 2, name="fwd")
    assert (fwd["rows_out_of_order"], fwd["out_of_order_first"]) == (0, None)


def test_the_documents_are_one_stream_however_a_packer_reads_them():
    """zip(docs, docs), iter() once, and next(docs): each row the first nine tokens of two consecutive documents.
    zip(docs, docs) made no row before (each iter() read the refills again) and next(docs) raised TypeError."""
    def pairs(docs):
        for a, b in zip(docs, docs):
            yield (list(a) + list(b))[:9]

    def one_iterator(docs):
        it = iter(docs)
        for a, b in zip(it, it):
            yield (list(a) + list(b))[:9]

    def by_next(docs):
        while True:
            try:
                a, b = next(docs), next(docs)
            except StopIteration:
                return
            yield (list(a) + list(b))[:9]

    for f in (pairs, one_iterator, by_next):
        s = trace(f, [5, 12, 3, 20] * 10, row_capacity=9, buffer=2, targets=80, name=f.__name__)
        # ten rows of nine tokens, two documents each: (5, 12) gives 5 + 4 tokens, (3, 20) 3 + 6
        assert (s["rows"], s["sources_arrived"], s["emitted"], s["sources_started"]) == (10, 20, 90, 20), f.__name__
        assert s["partition_holds"], f.__name__
