"""The audit's per-stratum and "longer than R" numbers against a brute-force replay.

The brute force keeps the buffer as a plain list and scans it for every selection (the
rule of the paper, section 3: the longest buffered span that fits the remaining space,
earliest arrival first; otherwise the shortest, earliest first, cropped). Everything the
audit reports per source is then counted from its own events: per-stratum sources,
started, loaded and emitted tokens, fully emitted, the ">R" counts, and the mass
partition from emitted, discarded and still-buffered tokens (not from the flag).
Lengths are drawn at the stratum bounds and at R so that an off-by-one shows. Position
exposure is counted position by position, against the tally's arithmetic on tenths.
"""
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.compute import replay_packer
from audit.feed import PassRefills
from audit.metrics import summarize_replay
from audit.replay import Replay
from audit.tally import Multiset
from loaders.stream import DocumentStream


# the audit's length strata, BOS included, written out here rather than imported (inclusive upper bounds)
STRATA = (32, 128, 512, 1024, 2049, 4096, 8192, 16384)
LABELS = ["1-32", "33-128", "129-512", "513-1024", "1025-2049", "2050-4096", "4097-8192", "8193-16384", ">16384"]


def brute_replay(lengths, refill_docs, packer, R, B, rows):
    """Per-event (source, emitted own tokens, emitted, discarded, source length, target offset) and the final buffer."""
    n = len(lengths)
    bounds = list(range(0, n, refill_docs)) + [n]
    buf = []  # [seq, source, current length, extra BOS (segment-first chunks after the first)]
    seq, nxt, arrived, added, events = 0, 0, [], 0, []

    def refill():
        nonlocal seq, nxt, added
        k = nxt % (len(bounds) - 1)
        base = (nxt // (len(bounds) - 1)) * n
        for i in range(bounds[k], bounds[k + 1]):
            L, src = lengths[i], base + i
            arrived.append(L)
            if packer == "segment_first" and L > R:
                parts = [(R, 0)]  # own BOS + R-1 text tokens, then BOS + up to R-1 text tokens each
                rest = L - R
                while rest > 0:
                    take = min(R - 1, rest)
                    parts.append((take + 1, 1))
                    added += 1
                    rest -= take
            else:
                parts = [(L, 0)]
            for length, extra in parts:
                buf.append([seq, src, length, extra])
                seq += 1
        nxt += 1

    for row in range(rows):
        pos = 0
        while pos < R:
            while len(buf) < B:
                refill()
            rem = R - pos
            fits = [e for e in buf if e[2] <= rem]
            if fits:
                e = min(fits, key=lambda e: (-e[2], e[0]))
                take, disc = e[2], 0
                buf.remove(e)
            else:
                e = min(buf, key=lambda e: (e[2], e[0]))
                take = rem
                if packer == "lossless":
                    disc = 0
                    e[2] -= rem  # the suffix stays buffered under its sequence number (never an extra BOS here)
                else:
                    disc = e[2] - rem
                    buf.remove(e)
            events.append((e[1], take - e[3], take, disc, lengths[e[1] % n], row * (R - 1) + max(pos - 1, 0), not fits))
            pos += take
    groups = len(bounds) - 1
    return events, arrived, added, sum(e[2] for e in buf), -(-nxt // groups)  # passes started (a partial one counts)


def expected_summary(lengths, refill_docs, packer, R, B, rows):
    events, arrived, added, buffered, passes = brute_replay(lengths, refill_docs, packer, R, B, rows)
    own = [0] * len(arrived)
    for src, own_tok, *_rest in events:
        own[src] += own_tok
    started = [False] * len(arrived)
    for e in events:
        started[e[0]] = True
    strata = []
    for L in arrived:  # first stratum whose inclusive upper bound holds L
        strata.append(next((k for k, b in enumerate(STRATA) if L <= b), len(STRATA)))
    per = [{"stratum": lab, "sources": 0, "started": 0, "loaded_tokens": 0, "emitted_tokens": 0} for lab in LABELS]
    for i, L in enumerate(arrived):
        p = per[strata[i]]
        p["sources"] += 1
        p["started"] += started[i]
        p["loaded_tokens"] += L
        p["emitted_tokens"] += own[i]
    emitted, discarded = sum(e[2] for e in events), sum(e[3] for e in events)
    long_ev = [e for e in events if e[4] > R]
    crops = sorted(e[2] for e in events if e[6])
    # protected set (paper, section 3): the min(B - 1, N_L) largest keys (length, arrival) among arrived long sources
    long_keys = sorted((L, i) for i, L in enumerate(arrived) if L > R)
    protected = long_keys[len(long_keys) - min(B - 1, len(long_keys)):] if B > 1 else []
    mass = sum(L for L, _ in protected)
    seg = packer == "segment_first"
    # segment-first: the Proposition does not apply (pre-segmentation removes its hypothesis), nothing is claimed
    prot = {"applies": False, "proposition_held": None, "first_violation": None} if seg else {
        "size": len(protected), "tokens": mass, "share_of_arrived": mass / sum(arrived),
        "share_of_buffered": mass / buffered if buffered else 0.0, "applies": True, "proposition_held": True,
        "first_violation": None, "all_buffered_unstarted": not any(started[i] for _, i in protected)}
    return {
        "packer": packer, "row_capacity": R, "buffer": B, "rows": rows, "targets": rows * (R - 1),
        "passes_started": passes, "crop_events": len(crops), "crops_emitting_only_bos": crops.count(1),
        "crop_median_emitted": float(np.median(crops)) if crops else None, "protected": prot,
        "sources_arrived": len(arrived), "tokens_arrived": sum(arrived), "bos_added": added,
        "emitted": emitted, "discarded": discarded, "buffered": buffered,
        "partition_holds": sum(arrived) + added == emitted + discarded + buffered,
        "sources_started": sum(started), "sources_never_started": len(arrived) - sum(started),
        "sources_fully_emitted": sum(o == L for o, L in zip(own, arrived)),
        "sources_longer_than_R_arrived": sum(L > R for L in arrived),
        "sources_longer_than_R_started": sum(s for s, L in zip(started, arrived) if L > R),
        "startup_delay_targets": min(e[5] for e in long_ev) if long_ev else None,
        "long_emitted": sum(e[2] for e in long_ev),
        "retention_by_stratum": per,
    }


EDGES = sorted({b + d for b in STRATA[:4] for d in (-1, 0, 1)})  # 31, 32, 33, 127, ..., 1025


@st.composite
def setting(draw):
    R = draw(st.sampled_from([8, 32, 33, 128, 129]))
    B = draw(st.integers(1, 12))
    palette = draw(st.lists(st.sampled_from(EDGES + [1, 2, R - 1, R, R + 1, 3 * R]), min_size=1, max_size=6))
    lengths = draw(st.lists(st.sampled_from(palette), min_size=1, max_size=40))
    return R, B, lengths, draw(st.integers(1, 8)), draw(st.integers(1, 12))


@settings(max_examples=60, deadline=None)
@given(setting(), st.sampled_from(["original", "lossless", "segment_first", "random_span"]))
def test_strata_and_R_counts_equal_a_brute_force_replay(s, packer):
    R, B, lengths, refill_docs, rows = s
    stream = DocumentStream.from_lengths(lengths, refill_docs=refill_docs)
    got = summarize_replay(Replay(stream, packer, rows, R, B))
    # random spans select exactly as the original packer; only the cut's position is random
    want = expected_summary(lengths, refill_docs, "original" if packer == "random_span" else packer, R, B, rows)
    assert got["packer"] == packer
    for key in ("row_capacity", "buffer", "rows", "targets", "passes_started", "crop_events", "crops_emitting_only_bos",
                "crop_median_emitted",
                "sources_arrived", "tokens_arrived", "bos_added", "emitted", "discarded", "buffered",
                "sources_started", "sources_never_started", "sources_fully_emitted", "sources_longer_than_R_arrived",
                "sources_longer_than_R_started", "startup_delay_targets", "partition_holds"):
        assert got[key] == want[key], key
    assert want["partition_holds"]
    assert {k: got["protected"][k] for k in want["protected"]} == want["protected"]
    assert ("all_buffered_unstarted" in got["protected"]) == (packer != "segment_first")
    share = want["long_emitted"] / want["emitted"]
    assert abs(got["share_emitted_from_long_sources"] - share) < 1e-12
    for g, w in zip(got["retention_by_stratum"], want["retention_by_stratum"], strict=True):
        assert {k: g[k] for k in w} == w
        assert g["retained"] == (w["emitted_tokens"] / w["loaded_tokens"] if w["loaded_tokens"] else None)


def test_a_source_of_exactly_R_tokens_is_not_longer_than_R():
    # R = 8, B = 1: sources 8, 9, 8 arrive one at a time; row 0 takes the first 8 whole,
    # row 1 crops the 9 to 8 (1 discarded); the third never arrives (no selection needed it).
    # Only the 9 is longer than R, and it started, at target 7 (row 1 starts after 7 targets).
    stream = DocumentStream.from_lengths([8, 9, 8], refill_docs=1)
    got = summarize_replay(Replay(stream, "original", 2, 8, 1))
    assert got["sources_longer_than_R_arrived"] == 1 and got["sources_longer_than_R_started"] == 1
    assert (got["emitted"], got["discarded"], got["buffered"]) == (16, 1, 0)
    assert got["sources_fully_emitted"] == 1 and got["startup_delay_targets"] == 7


def test_segment_first_counts_a_sources_own_tokens_not_the_added_markers():
    # R = 8, B = 1, one source of 20 tokens per refill: chunks 8 (own BOS + 7), 8 (new BOS + 7), 6 (new BOS + 5).
    # rows: [chunk 0], [chunk 1], [chunk 2 + 2 tokens of the next arrival's shortest chunk, cropped]
    # source 0 emits 8 + 7 + 5 = 20 own tokens: fully emitted; source 1 emits 1 own token (BOS markers excluded)
    stream = DocumentStream.from_lengths([20], refill_docs=1)
    got = summarize_replay(Replay(stream, "segment_first", 3, 8, 1))
    assert (got["sources_arrived"], got["tokens_arrived"], got["bos_added"]) == (2, 40, 4)
    assert (got["emitted"], got["discarded"], got["buffered"]) == (24, 4, 16)
    assert got["sources_fully_emitted"] == 1 and got["sources_started"] == 2
    (first,) = [r for r in got["retention_by_stratum"] if r["sources"]]
    assert (first["stratum"], first["loaded_tokens"], first["emitted_tokens"]) == ("1-32", 40, 21)


def brute_exposure(rep):
    """Position exposure counted position by position: every arrived position, and every position an event
    emits ([span_start, span_start + emitted - lead BOS), plus position 0 when random spans move the BOS
    in front), each in tenth 10p // L of its source's stratum."""
    arrived = rep.arrived_lengths()
    per_arr = {lab: [0] * 10 for lab in LABELS}
    per_em = {lab: [0] * 10 for lab in LABELS}
    stratum = [LABELS[next((k for k, b in enumerate(STRATA) if L <= b), len(STRATA))] for L in arrived]
    for i, L in enumerate(arrived.tolist()):
        for p in range(L):
            per_arr[stratum[i]][10 * p // L] += 1
    for e in rep.events:
        L, a, lead = int(e["source_len"]), int(e["span_start"]), int(e["lead_bos"])
        for p in range(a, a + int(e["emitted"]) - lead):
            per_em[stratum[e["source_id"]]][10 * p // L] += 1
        if lead and rep.packer == "random_span":
            per_em[stratum[e["source_id"]]][0] += 1
    return [{"stratum": lab, "arrived_tokens": per_arr[lab], "emitted_tokens": per_em[lab]}
            for lab in LABELS if sum(per_arr[lab])]


def brute_long_tenths(rep):
    """The first and last tenth of the sources longer than R, position by position as brute_exposure counts them."""
    out = dict.fromkeys(("first_arrived", "first_emitted", "last_arrived", "last_emitted"), 0)
    tenth = {0: "first", 9: "last"}
    for L in rep.arrived_lengths().tolist():
        for p in range(L):
            if L > rep.R and 10 * p // L in tenth:
                out[f"{tenth[10 * p // L]}_arrived"] += 1
    for e in rep.events:
        L, a, lead = int(e["source_len"]), int(e["span_start"]), int(e["lead_bos"])
        if L <= rep.R:
            continue
        for p in range(a, a + int(e["emitted"]) - lead):
            if 10 * p // L in tenth:
                out[f"{tenth[10 * p // L]}_emitted"] += 1
        if lead and rep.packer == "random_span":
            out["first_emitted"] += 1
    return out


@settings(max_examples=40, deadline=None)
@given(setting(), st.sampled_from(["original", "lossless", "segment_first", "random_span"]))
def test_position_exposure_equals_a_position_by_position_count(s, packer):
    """The table by stratum, and the first and last tenth of the sources longer than R (the comparison's, whatever
    strata R falls between: R is drawn at, between and off the strata's bounds)."""
    R, B, lengths, refill_docs, rows = s
    rep = Replay(DocumentStream.from_lengths(lengths, refill_docs=refill_docs), packer, rows, R, B)
    got = summarize_replay(rep)
    assert ([{k: g[k] for k in ("stratum", "arrived_tokens", "emitted_tokens")} for g in got["position_exposure"]]
            == brute_exposure(rep))
    assert got["longer_than_R_tenths"] == brute_long_tenths(rep)


def test_a_random_spans_moved_bos_is_position_0_of_its_long_source():
    """Random spans that start inside a long source move its BOS in front (lead); the tenths count that BOS as the
    source's position 0, as the exposure table does. Fixed, as the drawn settings above rarely reach it."""
    rep = Replay(DocumentStream.from_lengths([20, 3, 30, 5] * 3, refill_docs=2), "random_span", 12, 8, 2)
    assert sum(1 for e in rep.events if e["lead_bos"] and e["source_len"] > 8) == 11  # the case is met
    assert summarize_replay(rep)["longer_than_R_tenths"] == brute_long_tenths(rep)


@pytest.mark.parametrize("packer", ["original", "lossless", "segment_first", "random_span"])
def test_the_comparisons_long_tenths_are_the_frontiers_for_an_r_between_the_strata_bounds(packer):
    """R = 20 lies inside the paper's stratum 1-32: the comparison's "> R" tenths count every source longer than 20
    (once, they counted only the strata wholly above R, here those of 33 tokens and more), and its last tenth is
    the frontier's, which the compiled replay counts apart (its reference length, here R)."""
    rng = np.random.default_rng(11)
    L = rng.integers(1, 60, size=3000)  # a third of them 21-32 tokens: in the stratum that R splits
    s = replay_packer(PassRefills(L, np.arange(0, len(L) + 1, 8)), packer, 200, 20, 6, ref_length=20)
    t, ref = s["longer_than_R_tenths"], s["longer_than_ref"]
    assert (t["last_arrived"], t["last_emitted"]) == (ref["last_tenth_arrived"], ref["last_tenth_emitted"])
    assert t["first_arrived"] == sum(-(-x // 10) for x in L[:s["sources_arrived"]].tolist() if x > 20)
    assert t["last_emitted"] > 0 and t["first_arrived"] > sum(-(-x // 10) for x in L[:s["sources_arrived"]] if x > 32)


def test_a_multiset_added_to_in_chunks_counts_as_a_counter_does():
    rng = np.random.default_rng(3)
    m, want = Multiset(), Counter()
    for _ in range(30):
        x = rng.integers(0, 50, rng.integers(0, 20)) ** 2  # repeats within a chunk and across chunks, and new values
        m.add(x)
        want.update(x.tolist())
    assert list(zip(m.values.tolist(), m.counts.tolist())) == sorted(want.items())
