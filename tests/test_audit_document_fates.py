"""The per-document fate table (audit/fate_table.py): hand-worked streams checked row by row (one wrapped
into a second pass, one whose budget ends with a document waiting and two never reached, one whose
packer drops a document unseen), and on random streams its sums against the summary's partition and
never-started counts, for every replayed packer, wrapped or not."""
import numpy as np
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.adapters import Spec
from audit.fate_table import FATES, NEVER_STARTED, DocumentIndex
from audit.pipeline import StreamInput, audit_packer, horizon, more_passes
from audit.report import _long_documents
from loaders.core import PACKERS

COLUMNS = ("fate", "arrivals", "first_arrival", "last_arrival", "emitted", "discarded", "buffered", "first_target",
           "first_position", "last_position")


def _stream(lengths, passes=None, labels=None):
    L = np.asarray(lengths, np.int64)
    return StreamInput("hand", "lengths", L, np.arange(len(L) + 1), labels, DocumentIndex.one_file("hand.txt", L, labels),
                       passes)


def _fates(tmp_path, stream, packer, rows, R, B, user=None):
    s = audit_packer(stream, packer, rows, R, B, tmp_path, user=user)
    t = pq.read_table(tmp_path / f"fates_{packer}.parquet").to_pylist()
    return s, t


def test_a_stream_wrapped_into_its_second_pass_row_by_row(tmp_path):
    # R = 4 (3 targets a row), B = 2, one document per refill; documents of 2, 6, 1, 3 tokens (arrivals 0-3, then
    # 4 = doc 0 and 5 = doc 1 again). Row 0: doc 0 fits whole (offset 0), doc 2 fits (offset 2), doc 3 is cropped to
    # 1 token, 2 discarded (offset 3). Row 1: arrival 4 (doc 0) fits (offset 0); arrival 5 (doc 1) joins arrival 1
    # in the 6-token bucket and the earlier, arrival 1, is cropped to 2 tokens, 4 discarded (offset 2).
    # At the horizon arrival 5 waits in the buffer, whole: doc 1 is started, partly emitted, and has 6 buffered.
    s, t = _fates(tmp_path, _stream([2, 6, 1, 3]), "original", 2, 4, 2)
    want = [  # fate, arrivals, first, last, emitted, discarded, buffered, first target, first and last position
        ("whole", 2, 0, 4, 4, 0, 0, 0, 0, 1),
        ("partial", 2, 1, 5, 2, 4, 6, 4, 0, 1),  # row 1 offset 2: 1 * 3 + (2 - 1) targets before it
        ("whole", 1, 2, 2, 1, 0, 0, 1, 0, 0),
        ("partial", 1, 3, 3, 1, 2, 0, 2, 0, 0)]
    assert [tuple(r[c] for c in COLUMNS) for r in t] == want
    assert [(r["doc"], r["file"], r["row"], r["length"]) for r in t] == [(0, "hand.txt", 0, 2), (1, "hand.txt", 1, 6),
                                                                         (2, "hand.txt", 2, 1), (3, "hand.txt", 3, 3)]
    d = s["documents"]
    assert d["arrivals"] == 6 and d["by_fate"] == {"whole": 2, "partial": 2, "waiting": 0, "dropped": 0,
                                                   "not_arrived": 0}
    assert s["sources_arrived"] == 6 and s["passes_started"] == 2
    # the verdict's arrivals of long sources, as documents: doc 1 (6 > R) arrived twice and was started
    assert _long_documents(s) == " (0 of its 1 documents longer than R that arrived)"


def test_a_budget_that_ends_with_a_document_waiting_and_two_never_reached(tmp_path):
    # R = 4, B = 2, documents of 6, 5, 1, 1 labelled a, b, a, b: row 0 takes in doc 0 and doc 1; neither fits, the
    # shorter (doc 1, 5 tokens) is cropped to 4 and 1 is discarded; the budget of one row ends there
    labels = np.array(["a", "b", "a", "b"], dtype=object)
    s, t = _fates(tmp_path, _stream([6, 5, 1, 1], labels=labels), "original", 1, 4, 2)
    assert [tuple(r[c] for c in COLUMNS) for r in t] == [
        ("waiting", 1, 0, 0, 0, 0, 6, None, None, None),
        ("partial", 1, 1, 1, 4, 1, 0, 0, 0, 3),
        ("not_arrived", 0, None, None, 0, 0, 0, None, None, None),
        ("not_arrived", 0, None, None, 0, 0, 0, None, None, None)]
    assert [r["label"] for r in t] == ["a", "b", "a", "b"]
    by_label = {g["label"]: g for g in s["documents"]["by_label"]}
    assert (by_label["a"]["waiting"], by_label["a"]["not_arrived"], by_label["b"]["partial"]) == (1, 1, 1)
    assert s["documents"]["longer_than_R"] == {"whole": 0, "partial": 1, "waiting": 1, "dropped": 0, "not_arrived": 0}
    assert _long_documents(s) == ""  # read once: each arrival is a document, the verdict's count says it already


def _drop_long(R):
    def pack(docs):  # rows of one document each, a document longer than R dropped unseen
        for d in docs:
            if len(d) <= R:
                yield list(d)
    return pack


def test_a_document_a_packer_drops_unseen_is_dropped(tmp_path):
    spec = Spec("drop_long", lambda R, B, w: _drop_long(R), why_not="a test packer")
    s, t = _fates(tmp_path, _stream([3, 9, 2], passes=1), "drop_long", 5, 4, 1, user=spec)
    assert [r["fate"] for r in t] == ["whole", "dropped", "whole"]
    assert (t[1]["discarded"], t[1]["emitted"], t[1]["buffered"]) == (9, 0, 0)
    assert s["rows"] == 2 and s["budget_rows"] == 5 and not s["budget_reached"]  # the input ended after two rows


def _concat_cut(R):
    def pack(docs):  # the documents run together and cut into rows of R tokens; the last, shorter piece dropped
        run = []
        for d in docs:
            run += list(d)
            while len(run) >= R:
                yield run[:R]
                run = run[R:]
    return pack


def test_documents_a_packer_pulls_and_drops_at_the_end_of_its_input_are_dropped_not_never_reached(tmp_path):
    # eight documents of 5 tokens, read once, cut into rows of R = 15: rows 0-1 hold documents 0-5 whole, and the
    # last 10 tokens (documents 6 and 7) never fill a row. The packer pulled both before its input ended, short
    # of the budget's 4 rows: they arrived and were dropped (their 10 tokens discarded), none is "never reached"
    spec = Spec("concat_cut", lambda R, B, w: _concat_cut(R), why_not="a test packer")
    s, t = _fates(tmp_path, _stream([5] * 8, passes=1), "concat_cut", 4, 15, 1, user=spec)
    assert [r["fate"] for r in t] == ["whole"] * 6 + ["dropped"] * 2
    assert [(r["arrivals"], r["discarded"]) for r in t[6:]] == [(1, 5), (1, 5)]
    assert (s["rows"], s["sources_arrived"], s["tokens_arrived"], s["emitted"], s["discarded"]) == (2, 8, 40, 30, 10)
    assert s["partition_holds"]


def test_a_traced_packer_that_loses_tokens_reads_a_wrapping_stream_until_it_makes_the_budget(tmp_path):
    # documents of 3, 9 and 2 tokens, R = 4, the 9 dropped: 2 rows a pass. The budget's 7 rows need 4 passes;
    # a packer that lost nothing would need ceil(7 * 4 / 14) = 2, where its input ran out after 4 rows. By row 7
    # it has pulled 10 documents (the 3 of pass 4 the last): 4 passes begun, doc 0 arrived 4 times, the others 3
    spec = Spec("drop_long", lambda R, B, w: _drop_long(R), why_not="a test packer")
    s, t = _fates(tmp_path, _stream([3, 9, 2]), "drop_long", 7, 4, 1, user=spec)
    assert (s["rows"], s["budget_reached"], s["passes_started"], s["sources_arrived"]) == (7, True, 4, 10)
    assert [(r["fate"], r["arrivals"]) for r in t] == [("whole", 4), ("dropped", 3), ("whole", 3)]
    assert "passes_cap" not in s


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_the_fates_add_up_to_the_partition_and_the_never_started_counts(tmp_path_factory, data):
    R = data.draw(st.integers(3, 30))
    B = data.draw(st.integers(1, 12))
    lengths = data.draw(st.lists(st.sampled_from([1, 2, R - 1, R, R + 1, 2 * R, 5 * R]), min_size=1, max_size=60))
    passes = data.draw(st.sampled_from([None, 1, 2]))
    rows = data.draw(st.integers(1, 50))
    packer = data.draw(st.sampled_from(PACKERS))
    s, t = _fates(tmp_path_factory.mktemp("f"), _stream(lengths, passes), packer, rows, R, B)
    total = {c: sum(r[c] for r in t) for c in ("emitted", "discarded", "buffered", "arrivals")}
    added_emitted = s["emitted"] - total["emitted"]  # segment-first's own BOS markers before later chunks
    assert 0 <= added_emitted <= s["bos_added"]
    assert total["discarded"] == s["discarded"] and total["arrivals"] == s["sources_arrived"]
    assert total["emitted"] + total["discarded"] + total["buffered"] == s["tokens_arrived"]
    assert total["buffered"] + s["bos_added"] - added_emitted == s["buffered"]
    counts = {f: sum(r["fate"] == f for r in t) for f in FATES}
    assert counts == s["documents"]["by_fate"]
    if s["passes_started"] == 1:  # every document arrived at most once: documents are arrivals
        assert sum(counts[f] for f in NEVER_STARTED) == s["sources_never_started"]
        assert counts["whole"] == s["sources_fully_emitted"]
    assert all(r["arrivals"] == 0 for r in t if r["fate"] == "not_arrived")
    assert all(r["emitted"] == r["length"] * r["arrivals"] - r["discarded"] - r["buffered"] for r in t)


def test_one_pass_ends_the_replay_at_the_last_row_it_could_fill(tmp_path):
    # the stream of the first test read once (--passes 1): row 0 as there takes in all four documents; row 1 would
    # need a fifth to keep B = 2 buffered, so the replay stops after row 0 with doc 1 waiting, 6 tokens buffered
    s, t = _fates(tmp_path, _stream([2, 6, 1, 3], passes=1), "original", 5, 4, 2)
    assert (s["rows"], s["budget_rows"], s["budget_reached"], s["passes_started"]) == (1, 5, False, 1)
    assert [tuple(r[c] for c in COLUMNS) for r in t] == [
        ("whole", 1, 0, 0, 2, 0, 0, 0, 0, 1),
        ("waiting", 1, 1, 1, 0, 0, 6, None, None, None),
        ("whole", 1, 2, 2, 1, 0, 0, 1, 0, 0),
        ("partial", 1, 3, 3, 1, 2, 0, 2, 0, 0)]
    assert s["partition_holds"] and s["buffered"] == 6


def test_a_budget_past_the_passes_given_is_said_so_not_called_repeated_arrivals():
    # 14 tokens a pass, 21 targets: 1.5 passes asked of a stream read once (--passes 1)
    passes, said = horizon(21, _stream([3, 9, 2], passes=1))
    assert passes == 1.5 and "but --passes 1 ends the stream first" in said and "repeatedly" not in said
    assert "only with padding or rows cut short" in said  # a padding packer still makes them (foundry_binpack)
    assert "every source arrives repeatedly" in horizon(21, _stream([3, 9, 2]))[1]  # a stream that wraps
    # a budget under one pass whose buffer read ahead into later passes: as many arrivals as passes began
    assert horizon(7, _stream([3, 9, 2]), started=2)[1].endswith("2 passes began, so some sources arrived twice.")
    assert horizon(7, _stream([3, 9, 2]), started=4)[1].endswith("4 passes began, so some sources arrived up to 4 times.")


def test_a_packer_traced_again_on_more_passes_only_while_it_makes_rows_and_at_most_8_times_as_many():
    ended = {"passes_cap": 2, "rows": 4}
    assert more_passes(ended, 7, -1) == 4  # ceil(2 * 7 * 1.1 / 4) = 4: the rows' share, 10 % over
    assert more_passes({"passes_cap": 2, "rows": 1}, 5000, -1) == 16  # not 11,000 passes: 8 times the try's at most
    assert more_passes({"passes_cap": 2, "rows": 0}, 7, -1) is None  # no row from its first try: none will come
    assert more_passes({"passes_cap": 4, "rows": 4}, 7, 4) is None  # no more rows than the try before
    assert more_passes({"passes_cap": 2, "rows": 7}, 7, -1) is None and more_passes({"rows": 4}, 7, -1) is None
