"""The four packers: fast core == literal reference, invariants, state, ranks."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.proposition import check_proposition
from conftest import one_line_error
from loaders import bench as packer_bench
from loaders.batches import MicrobatchLoader
from loaders.core import CROP, FIT, PACKERS
from loaders.packers import Packer, materialize
from loaders.reference import ReferencePacker
from loaders.stream import DocumentStream

BOS = 0


@st.composite
def streams(draw):
    R = draw(st.integers(2, 64))
    B = draw(st.integers(1, 40))
    # few distinct lengths -> heavy ties
    palette = draw(st.lists(st.integers(1, 5 * R), min_size=1, max_size=6))
    lengths = draw(st.lists(st.sampled_from(palette), min_size=1, max_size=80))
    refill = draw(st.integers(1, 12))
    # token value encodes (document, position) so any misplaced token is detected
    docs = [[BOS] + [1 + 1000 * d + j for j in range(1, L)] for d, L in enumerate(lengths)]
    return R, B, docs, refill


def _stream(docs, refill):
    return DocumentStream.from_token_lists(docs, refill)


@settings(max_examples=150, deadline=None)
@given(streams(), st.sampled_from(PACKERS), st.integers(1, 25), st.integers(0, 25))
def test_fast_equals_reference_across_save_restore(sr, packer, n1, n2):
    R, B, docs, refill = sr
    s = _stream(docs, refill)
    ref = ReferencePacker(docs, s.refills.tolist(), packer, R, B, bos=BOS)
    fast = Packer(s, packer, R, B)
    raw1 = fast.next_raw(n1)
    rows1, ev1 = ref.next_rows(n1)
    assert raw1.tolist() == ev1
    assert materialize(raw1, s, R).tolist() == rows1
    # save, continue in a fresh packer restored from the state
    state = fast.state_dict()
    restored = Packer(s, packer, R, B)
    restored.load_state_dict(state)
    raw2 = restored.next_raw(n2)
    rows2, ev2 = ref.next_rows(n2)
    assert raw2.tolist() == ev2
    if n2:
        assert materialize(raw2, s, R).tolist() == rows2
    else:  # zero rows asked: nothing selected, nothing packed
        assert len(raw2) == 0 and rows2 == [] and len(materialize(raw2, s, R)) == 0
    assert np.array_equal(fast.next_raw(n2), raw2)  # the original keeps going identically too


def _brute_protected(arrived, B, R):
    long = sorted((L, i) for i, L in arrived if L > R)
    return {i for _, i in long[max(0, len(long) - (B - 1)):]} if B > 1 else set()


@settings(max_examples=120, deadline=None)
@given(streams(), st.sampled_from(["original", "lossless"]), st.integers(1, 40))
def test_proposition_at_every_selection_boundary(sr, packer, n_rows):
    R, B, docs, refill = sr
    s = _stream(docs, refill)
    p = Packer(s, packer, R, B)
    p.core.refill_log = log = []
    raw = p.next_raw(n_rows).tolist()
    # brute force: recompute the protected set from scratch before every selection
    arrived, r = [], 0
    for e, ev in enumerate(raw):
        while r < len(log) and log[r][0] <= e:
            arrived += [(src, int(s.lengths[src % s.n])) for src in range(log[r][1], log[r][1] + log[r][2])]
            r += 1
        assert ev[0] not in _brute_protected(arrived, B, R), f"protected source {ev[0]} selected at event {e}"
    while r < len(log):
        arrived += [(src, int(s.lengths[src % s.n])) for src in range(log[r][1], log[r][1] + log[r][2])]
        r += 1
    violation, ps, _ = check_proposition(s, raw, log, B, R)
    assert violation is None
    assert ps.members == _brute_protected(arrived, B, R)
    # protected sources are buffered whole and unstarted at the end
    buffered = {src: (start, L) for _, src, start, _, L in p.core.buffered()}
    for src in ps.members:
        assert buffered[src] == (0, int(s.lengths[src % s.n]))


def test_proposition_checker_catches_a_violation():
    # B=3, R=4: two long sources arrive (5, 6); selecting the protected one must be flagged
    s = DocumentStream.from_lengths([5, 6, 1], refill_docs=3)
    log = [(0, 0, 3)]
    fake = [(1, 0, 4, 2, CROP, 0)]
    violation, _, _ = check_proposition(s, fake, log, B=3, R=4)
    assert violation is not None and violation["source_id"] == 1


@settings(max_examples=120, deadline=None)
@given(streams(), st.sampled_from(PACKERS), st.integers(1, 40))
def test_mass_is_conserved(sr, packer, n_rows):
    R, B, docs, refill = sr
    s = _stream(docs, refill)
    p = Packer(s, packer, R, B)
    _, ev = p.next_rows(n_rows)
    arrived = int(sum(s.lengths[i % s.n] for i in range(p.core.arrived_docs)))
    buffered = p.core.buffered_tokens()
    assert arrived + p.core.added_bos == ev["emitted"].sum() + ev["discarded"].sum() + buffered
    assert ev["emitted"].sum() == n_rows * R
    if packer == "lossless":
        assert ev["discarded"].sum() == 0


@settings(max_examples=100, deadline=None)
@given(streams(), st.integers(1, 40))
def test_segment_first_chunks_cover_text_once(sr, n_rows):
    R, B, docs, refill = sr
    s = _stream(docs, refill)
    p = Packer(s, "segment_first", R, B)
    p.next_raw(n_rows)
    # every arrived source: its chunks (buffered + emitted + discarded) tile its text exactly
    chunks = {}
    for seq, src, start, lead, L in p.core.buffered():
        chunks.setdefault(src, []).append((start, L, lead))
    p2 = Packer(s, "segment_first", R, B)
    raw = p2.next_raw(n_rows)
    for src, start, emitted, discarded, _k, lead in raw.tolist():
        chunks.setdefault(src, []).append((start, emitted + discarded, lead))
    for src, parts in chunks.items():
        L = int(s.lengths[src % s.n])
        parts.sort()
        for start, length, lead in parts:
            assert length <= R
            assert lead == (1 if start > 0 else 0)  # chunk 0 keeps the source's BOS, later ones get a new one
        text_covered = sum(length - 1 for _, length, _ in parts)
        starts = [x[0] for x in parts]
        assert text_covered == L - 1
        assert starts == [0] + [1 + (R - 1) * k for k in range(1, len(parts))]


@settings(max_examples=100, deadline=None)
@given(streams(), st.integers(1, 40))
def test_random_span_matches_original_choices(sr, n_rows):
    R, B, docs, refill = sr
    s = _stream(docs, refill)
    po, pr = Packer(s, "original", R, B), Packer(s, "random_span", R, B)
    torch.manual_seed(0)
    before = torch.random.get_rng_state()
    rows_o, ev_o = po.next_rows(n_rows)
    rows_r, ev_r = pr.next_rows(n_rows)
    assert torch.equal(torch.random.get_rng_state(), before)  # no torch randomness consumed
    for f in ("source_id", "row", "row_offset", "emitted", "discarded", "kind"):
        assert np.array_equal(ev_o[f], ev_r[f]), f
    flat = rows_r.reshape(-1)
    for e in ev_r:
        frag = flat[e["row"] * R + e["row_offset"]: e["row"] * R + e["row_offset"] + e["emitted"]]
        assert frag[0] == BOS  # BOS positions identical to the original
        doc = docs[e["source_id"] % len(docs)]
        if e["kind"] == FIT:
            assert frag.tolist() == doc
        else:
            a = e["span_start"]
            assert 1 <= a and a + e["emitted"] - 1 <= len(doc)
            assert frag[1:].tolist() == doc[a:a + e["emitted"] - 1]  # one contiguous run


@settings(max_examples=40, deadline=None)
@given(streams(), st.sampled_from(PACKERS), st.integers(1, 4), st.integers(0, 3))
def test_ranks_together_equal_single_process(sr, packer, rows, prefetch):
    R, B, docs, refill = sr
    s = _stream(docs, refill)
    n_micro = 12
    single = MicrobatchLoader(Packer(s, packer, R, B), rows)
    want = [next(single)[0] for _ in range(n_micro)]
    for W in (2, 3):
        got = {}
        for r in range(W):
            ld = MicrobatchLoader(Packer(s, packer, R, B), rows, rank=r, world=W, prefetch=prefetch)
            for j in range(n_micro // W):
                got[j * W + r] = next(ld)[0]
            ld.close()
        assert all(torch.equal(got[m], want[m]) for m in range(n_micro))


@settings(max_examples=40, deadline=None)
@given(streams(), st.sampled_from(PACKERS), st.integers(1, 8), st.integers(0, 2))
def test_loader_state_resumes_identically_with_prefetch(sr, packer, k, prefetch):
    R, B, docs, refill = sr
    s = _stream(docs, refill)
    a = MicrobatchLoader(Packer(s, packer, R, B), 3, prefetch=prefetch)
    for _ in range(k):
        next(a)
    st_ = a.state_dict()
    cont = [next(a) for _ in range(4)]
    a.close()
    b = MicrobatchLoader(Packer(s, packer, R, B), 3)
    b.load_state_dict(st_)
    for x, y in cont:
        bx, by = next(b)
        assert torch.equal(bx, x) and torch.equal(by, y)
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are inputs shifted by one


@pytest.mark.parametrize("flag", ["--rows", "--ref-rows"])
def test_the_packer_benchmark_refuses_a_count_below_one(tmp_path, capsys, flag):
    one_line_error(capsys, packer_bench.main([flag, "-1", "--data-dir", str(tmp_path)]), f"{flag} -1: must be at least 1")
