"""Official BPB, CE, perplexity, window and bin statistics against hand-worked values.

The "model" predicts the same distribution p = (1/2, 1/4, 1/8, 1/8) over a 4-token
vocabulary at every position, so a target's loss is a whole number of bits: token 0 costs
1 bit, token 1 two, tokens 2 and 3 three. Token bytes are (0, 1, 2, 3): token 0 is special
(no bytes, its loss counts nowhere). Every expected value below is worked out by hand in
the comments, never taken from the code under test.
"""
import hashlib
import math

import numpy as np
import pytest
import torch

from eval.compare import pair_sources, window_cells
from eval.official import row_statistics, score_fixed_shape, scores
from eval.scoring import bin_index, bpb, score_rows
from eval.windows import BEGIN, TAIL, WindowSpec, build_windows, counts_per_stratum, stratum_of
from loaders.stream import DocumentStream

LN2 = math.log(2)
TOKEN_BYTES = np.array([0, 1, 2, 3])


class FixedDistribution(torch.nn.Module):
    """Logits log p at every position, whatever the input; the loss is the usual cross entropy."""

    def __init__(self):
        super().__init__()
        self.logp = torch.log(torch.tensor([0.5, 0.25, 0.125, 0.125], dtype=torch.float64))  # exact bits

    def forward(self, x, y, reduction="mean"):
        logits = self.logp.expand(*x.shape, 4)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, 4), y.reshape(-1), ignore_index=-1,
                                                 reduction=reduction)


class LinearDistribution(torch.nn.Module):
    """The same distribution from a float32 linear layer, as a real model computes logits: under
    bf16 autocast its logits round (log 1/8 to about 1e-2), so a score made with autocast on CPU shows."""

    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(1, 4, bias=False)
        with torch.no_grad():
            self.head.weight.copy_(torch.log(torch.tensor([[0.5], [0.25], [0.125], [0.125]])))

    def forward(self, x, y, reduction="mean"):
        logits = self.head(torch.ones(*x.shape, 1))
        return torch.nn.functional.cross_entropy(logits.reshape(-1, 4).float(), y.reshape(-1), ignore_index=-1,
                                                 reduction=reduction)


def test_score_rows_by_hand():
    # row 0 targets 1,2,0,3: bits 2+3+(0 not counted)+3 = 8, bytes 1+2+0+3 = 6, counted 3
    # row 1 targets 3,1 then padding: bits 3+2 = 5, bytes 3+1 = 4, counted 2
    # bins [0,2) and [2,4): row 0 -> (5 bits, 3 bytes, 2) and (3 bits, 3 bytes, 1); row 1 -> (5, 4, 2) and (0, 0, 0)
    y = np.array([[1, 2, 0, 3], [3, 1, -1, -1]])
    x = np.zeros_like(y)
    nats, nbytes, count = score_rows(FixedDistribution(), x, y, TOKEN_BYTES, [0, 2, 4], "cpu")
    np.testing.assert_allclose(nats, np.array([[5, 3], [5, 0]]) * LN2, rtol=1e-12)
    assert nbytes.tolist() == [[3, 3], [4, 0]] and count.tolist() == [[2, 1], [2, 0]]
    # totals: 13 bits over 10 bytes and 5 counted targets
    s = scores({"nats": nats.sum(1), "bytes": nbytes.sum(1), "count": count.sum(1)})
    assert bpb(nats, nbytes) == pytest.approx(13 / 10, rel=1e-12)
    assert s["bpb"] == pytest.approx(13 / 10, rel=1e-12)
    assert s["ce"] == pytest.approx(13 * LN2 / 5, rel=1e-12)
    assert s["perplexity"] == pytest.approx(2 ** (13 / 5), rel=1e-12)
    assert s["counted_targets"] == 5 and s["bytes"] == 10


class ModeRecording(FixedDistribution):
    """FixedDistribution that records whether it was in training mode at each forward."""

    def forward(self, x, y, reduction="mean"):
        self.modes = [*getattr(self, "modes", []), self.training]
        return super().forward(x, y, reduction)


@pytest.mark.parametrize("training", [True, False])
def test_scoring_runs_in_eval_mode_and_gives_the_model_back_in_its_own(training):
    # a curve probe between two training updates must leave the model training; scoring an
    # evaluated model must not switch it to training
    m = ModeRecording().train(training)
    y = np.array([[1, 2, 0, 3]])
    score_rows(m, np.zeros_like(y), y, TOKEN_BYTES, [0, 4], "cpu")
    assert m.modes == [False] and m.training is training


def test_bin_index_past_the_last_edge_goes_to_the_last_bin():
    assert bin_index(7, [0, 2, 4]).tolist() == [0, 0, 1, 1, 1, 1, 1]
    assert bin_index(4, [0, 1, 3, 4]).tolist() == [0, 1, 1, 2]


def test_official_statistics_on_a_packed_stream_by_hand():
    # R = 5, B = 1, one source per refill: sources [0,1,2], [0,3,1,2,2], [0,1]
    # row 0: [0,1,2] fits; 2 left, the 5 does not fit and is cropped to [0,3] -> [0,1,2,0,3]
    # row 1: [0,1] fits; 3 left, the stream wraps and [0,1,2] fits -> [0,1,0,1,2]
    # (with a buffer of 1000 the whole 5 would fill row 0: the buffer must be the one passed)
    # row 0 targets 1,2,0,3: 8 bits, 6 bytes, 3 counted; row 1 targets 1,0,1,2: 2+2+3 = 7 bits, 4 bytes, 3 counted
    stream = DocumentStream.from_token_lists([[0, 1, 2], [0, 3, 1, 2, 2], [0, 1]], refill_docs=1)
    st = row_statistics(LinearDistribution(), stream, TOKEN_BYTES, batches=2, rows=1, R=5, device="cpu", buffer=1)
    np.testing.assert_allclose(st["nats"], np.array([8, 7]) * LN2, rtol=1e-6)  # float32 logits, no autocast on CPU
    assert st["bytes"].tolist() == [6, 4] and st["count"].tolist() == [3, 3]
    rows = np.array([[0, 1, 2, 0, 3], [0, 1, 0, 1, 2]], dtype=np.int64)
    assert st["fingerprint"] == hashlib.sha256(rows[:1].tobytes() + rows[1:].tobytes()).hexdigest()
    s = scores(st)
    assert s["bpb"] == pytest.approx(15 / 10, rel=1e-6)  # 15 bits over 10 bytes
    assert s["ce"] == pytest.approx(15 * LN2 / 6, rel=1e-6)
    assert s["perplexity"] == pytest.approx(2 ** (15 / 6), rel=1e-6)
    # the tolerance can see bf16: with autocast the same stream scores off by far more than 1e-6
    bf16 = row_statistics(LinearDistribution(), stream, TOKEN_BYTES, batches=2, rows=1, R=5, device="cpu",
                          autocast=True, buffer=1)
    assert abs(bf16["nats"].sum() / (15 * LN2) - 1) > 1e-4


def test_a_short_batch_is_padded_to_the_fixed_shape_and_counts_nowhere():
    shapes = []

    class Recording(LinearDistribution):
        def forward(self, x, y, reduction="mean"):
            shapes.append(tuple(x.shape))
            assert x.dtype == y.dtype == torch.int64  # token ids, padding included (an embedding needs integers)
            return super().forward(x, y, reduction)

    # one row (targets 1,2,0,3 as above) padded to 3: the same 8 bits, 6 bytes, 3 counted, one row back
    x, y = np.zeros((1, 4), np.int64), np.array([[1, 2, 0, 3]])
    nats, nbytes, count = score_fixed_shape(Recording(), x, y, TOKEN_BYTES, [0, 4], "cpu", batch=3)
    assert shapes == [(3, 4)]
    np.testing.assert_allclose(nats, [[8 * LN2]], rtol=1e-6)
    assert nbytes.tolist() == [[6]] and count.tolist() == [[3]]
    score_fixed_shape(Recording(), x, y, TOKEN_BYTES, [0, 4], "cpu")  # no batch size: the shape as given
    assert shapes[-1] == (1, 4)


SPEC = WindowSpec(context=4, strata=(2, 5, 8), bins=(0, 2, 4), per_stratum=10, seed=0)


def test_strata_boundaries_are_inclusive_upper_bounds():
    assert SPEC.labels() == ["1-2", "3-5", "6-8", ">8"]
    assert stratum_of([1, 2, 3, 5, 6, 8, 9, 100], SPEC).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


def test_windows_by_hand():
    # lengths 2, 5, 8, 9 with R = 5: the first two have only a beginning window, 8 and 9 also a tail
    docs = [[0, 11], [0, 21, 22, 23, 24], [0, 31, 32, 33, 34, 35, 36, 37], [0, 41, 42, 43, 44, 45, 46, 47, 48]]
    win = build_windows(DocumentStream.from_token_lists(docs, refill_docs=4), SPEC)
    assert win["x"].tolist() == [
        [0, 0, 0, 0],  # source 0: x = BOS, the rest padding (filled with BOS)
        [0, 21, 22, 23],
        [0, 31, 32, 33], [0, 34, 35, 36],  # tail: BOS + the final 4 text tokens 34..37
        [0, 41, 42, 43], [0, 45, 46, 47],  # tail: BOS + 45..48
    ]
    assert win["y"].tolist() == [
        [11, -1, -1, -1],
        [21, 22, 23, 24],
        [31, 32, 33, 34], [34, 35, 36, 37],
        [41, 42, 43, 44], [45, 46, 47, 48],
    ]
    assert win["kind"].tolist() == [BEGIN, BEGIN, BEGIN, TAIL, BEGIN, TAIL]
    assert win["stratum"].tolist() == [0, 1, 2, 2, 3, 3] and win["source_len"].tolist() == [2, 5, 8, 8, 9, 9]
    assert counts_per_stratum(win, SPEC) == [
        {"stratum": "1-2", "sources": 1, "tail_windows": 0}, {"stratum": "3-5", "sources": 1, "tail_windows": 0},
        {"stratum": "6-8", "sources": 1, "tail_windows": 1}, {"stratum": ">8", "sources": 1, "tail_windows": 1}]


def _evidence(rows, stratum=2):
    """rows: (source, kind, bytes per bin, baseline nats per bin, condition nats per bin), all in one stratum."""
    return {"source_index": np.array([r[0] for r in rows]), "kind": np.array([r[1] for r in rows]),
            "stratum": np.full(len(rows), stratum), "bytes": np.array([r[2] for r in rows], float),
            "baseline_s43_nats": np.array([r[3] for r in rows], float), "c_s43_nats": np.array([r[4] for r in rows], float)}


# source 0: begin bytes (2,2), delta nats (+1, +1); tail bytes (1,3), delta (-2, 0)
# source 1: begin bytes (4,4), delta (0, +1);  tail bytes (2,2), delta (-1, 0)
TWO_SOURCES = [(0, BEGIN, [2, 2], [1, 1], [2, 2]), (0, TAIL, [1, 3], [3, 1], [1, 1]),
               (1, BEGIN, [4, 4], [2, 2], [2, 3]), (1, TAIL, [2, 2], [1, 2], [0, 2])]


def _interaction(src, ev):
    """Tail minus beginning BPB delta of a resample (list of source numbers), written out from the definitions."""
    def delta(kind):
        rows = [np.flatnonzero((ev["source_index"] == s_) & (ev["kind"] == kind))[0] for s_ in src]
        d = sum((ev["c_s43_nats"][r] - ev["baseline_s43_nats"][r]).sum() for r in rows)
        return d / (LN2 * sum(ev["bytes"][r].sum() for r in rows))
    return delta(TAIL) - delta(BEGIN)


def test_window_deltas_are_ratios_of_sums_by_hand():
    # begin delta = (2 + 1) / (ln2 * 12) = 1/(4 ln2)   (a mean of per-source ratios would be 5/(16 ln2))
    # tail delta = (-2 - 1) / (ln2 * 8) = -3/(8 ln2); interaction = -(3/8 + 1/4)/ln2 = -5/(8 ln2)
    # bins (summed over sources, per bin): begin (1, 2)/(12 ln2), tail (-3, 0)/(8 ln2)
    ev = _evidence(TWO_SOURCES)
    contrasts = {(2, "c", 43), (5, "c", 43)}  # two declared contrasts: Bonferroni level 1 - 0.05/2
    (cell,) = window_cells(ev, ["c"], "baseline", [43], [2], contrasts, replicates=200, alpha=0.05, seed=1)
    assert (cell["stratum"], cell["condition"], cell["seed"], cell["sources"]) == (2, "c", 43, 2)
    assert cell["begin_delta"] == pytest.approx(1 / (4 * LN2), rel=1e-12)
    assert cell["tail_delta"] == pytest.approx(-3 / (8 * LN2), rel=1e-12)
    assert cell["interaction"] == pytest.approx(-5 / (8 * LN2), rel=1e-12)
    assert cell["begin_bins"] == pytest.approx([1 / (12 * LN2), 2 / (12 * LN2)], rel=1e-12)
    assert cell["tail_bins"] == pytest.approx([-3 / (8 * LN2), 0.0], abs=1e-12)
    assert cell["declared"] and cell["adjusted_level"] == pytest.approx(0.975)
    # the paired bootstrap, recomputed from its definition: PCG64 with the named seed draws
    # `replicates` resamples of the sources (integers in [0, n)); quantiles 2.5/97.5% and
    # alpha/(2m) = 0.0125 / 0.9875 for the declared contrast
    draws = np.random.default_rng(1).integers(0, 2, size=(200, 2))
    reps = np.array([_interaction(list(d), ev) for d in draws])
    assert cell["interval95"] == pytest.approx(list(np.quantile(reps, [0.025, 0.975])), rel=1e-12)
    assert cell["interval_adjusted"] == pytest.approx(list(np.quantile(reps, [0.0125, 0.9875])), rel=1e-12)
    # every resample lies between "source 0 twice" (-1/ln2) and "source 1 twice" (-3/(8 ln2))
    assert -1 / LN2 - 1e-12 <= cell["interval_adjusted"][0] and cell["interval_adjusted"][1] <= -3 / (8 * LN2) + 1e-12


def test_bootstrap_quantiles_on_a_finer_distribution():
    # six sources with different deltas: the resampled interactions take many values, so the
    # 2.5/97.5% and the Bonferroni 0.625/99.375% quantiles (four declared contrasts) differ
    rows = []
    for i in range(6):
        rows += [(i, BEGIN, [2 + i, 3], [1.0, 1.0], [1.0 + 0.3 * i, 1.5]), (i, TAIL, [1, 2 + i], [2.0, 2.0], [2.0 - 0.5 * i, 2.1])]
    ev = _evidence(rows)
    contrasts = {(2, "c", 43), (5, "c", 43), (6, "c", 43), (7, "c", 43)}
    (cell,) = window_cells(ev, ["c"], "baseline", [43], [2], contrasts, replicates=400, alpha=0.05, seed=20261008)
    draws = np.random.default_rng(20261008).integers(0, 6, size=(400, 6))
    reps = np.array([_interaction(list(d), ev) for d in draws])
    assert cell["interval95"] == pytest.approx(list(np.quantile(reps, [0.025, 0.975])), rel=1e-12)
    assert cell["interval_adjusted"] == pytest.approx(list(np.quantile(reps, [0.05 / 8, 1 - 0.05 / 8])), rel=1e-12)
    assert cell["adjusted_level"] == pytest.approx(1 - 0.05 / 4)
    assert cell["interval_adjusted"][0] < cell["interval95"][0] < cell["interval95"][1] < cell["interval_adjusted"][1]


def test_window_cells_skip_what_is_missing_and_keep_going():
    ev = _evidence(TWO_SOURCES)
    # stratum 1 has no windows at all, seed 44 has no condition run: both skipped, stratum 2 / seed 43 still there
    cells = window_cells(ev, ["c"], "baseline", [44, 43], [1, 2], set(), replicates=10, alpha=0.05, seed=1)
    assert [(c["stratum"], c["seed"]) for c in cells] == [(2, 43)] and "declared" not in cells[0]
    # a condition run whose same-seed baseline is missing is skipped too
    ev["c_s44_nats"] = ev["c_s43_nats"]
    cells = window_cells(ev, ["c"], "baseline", [44, 43], [2], set(), replicates=10, alpha=0.05, seed=1)
    assert [c["seed"] for c in cells] == [43]


def test_pair_sources_by_hand():
    # rows: 0 begin s5 (stratum 2), 1 tail s5 (2), 2 begin s6 (2, no tail), 3 begin s7 (3), 4 tail s7 (3), 5 tail s8 (2, no begin)
    kind = np.array([BEGIN, TAIL, BEGIN, BEGIN, TAIL, TAIL])
    src = np.array([5, 5, 6, 7, 7, 8])
    stratum = np.array([2, 2, 2, 3, 3, 2])
    b, t = pair_sources(kind, src, stratum, 2)
    assert b.tolist() == [0] and t.tolist() == [1]
    b, t = pair_sources(kind, src, stratum, 3)
    assert b.tolist() == [3] and t.tolist() == [4]
    b, t = pair_sources(kind, src, stratum, 4)
    assert b.dtype == t.dtype == np.int64 and len(b) == len(t) == 0  # usable as (empty) indices


def test_bootstrap_of_one_source_is_a_point():
    # one source: every replicate is that source, so both intervals are the interaction itself
    # begin: +1 / (ln2 * 4); tail: -1 / (ln2 * 2); interaction = -(1/2 + 1/4)/ln2 = -3/(4 ln2)
    ev = _evidence([(7, BEGIN, [2, 2], [1, 1], [2, 1]), (7, TAIL, [1, 1], [1, 1], [0, 1])])
    (cell,) = window_cells(ev, ["c"], "baseline", [43], [2], {(2, "c", 43)}, replicates=50, alpha=0.05, seed=3)
    assert cell["interaction"] == pytest.approx(-3 / (4 * LN2), rel=1e-12)
    assert cell["interval95"] == pytest.approx([-3 / (4 * LN2)] * 2, rel=1e-12)
    assert cell["interval_adjusted"] == pytest.approx([-3 / (4 * LN2)] * 2, rel=1e-12)
    assert cell["adjusted_level"] == pytest.approx(0.95)


def test_the_official_stream_packs_at_the_papers_buffer_by_default():
    # the queue scores with the default (shardqueue/api.py): it must be the paper's B = 1000, no autocast
    import inspect

    params = inspect.signature(row_statistics).parameters
    assert params["buffer"].default == 1000 and params["autocast"].default is False
