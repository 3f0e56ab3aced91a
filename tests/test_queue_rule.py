"""The queue's rule at its boundaries, with the calibration the main job's queue stage chooses.

The main job's stage A (queue stage, offline corpus, 2026-11-30) chose k = 2.5 and
frac = 0.5 with 0 of 12 held-out false rejections; its sigma_d are written out below.
Per domain: a rise just below k * sigma_d is not flagged, just above is; a flagged domain
just inside frac * k * sigma_d above the reference has recovered, just outside has not.
The thresholds are strict (">"), so a rise of exactly k * sigma_d does not flag.
"""
import pytest

from shardqueue.policy.rule import K_GRID, binom_cdf, calibrate, clopper_pearson_upper, held_out_rate, judge, rises, unrecovered

K, FRAC = 2.5, 0.5
SIGMA = {"comments": 0.06621991499080326, "docstrings": 0.03624198425609755, "library_code": 0.03440408603326004,
         "reference_prose": 0.034106159956631514, "test_code": 0.0218873586686666}
REF = {"comments": 3.1, "docstrings": 2.7, "library_code": 2.2, "reference_prose": 3.4, "test_code": 2.0}
EPS = 1e-6  # relative: far above float rounding at these magnitudes, far below any real rise


def _plus(base, d, amount):
    return {**base, d: base[d] + amount}


@pytest.mark.parametrize("d", sorted(SIGMA))
def test_flag_threshold_per_domain(d):
    t = K * SIGMA[d]
    assert rises(REF, _plus(REF, d, t * (1 - EPS)), SIGMA, K) == []
    assert rises(REF, _plus(REF, d, t * (1 + EPS)), SIGMA, K) == [d]
    # the threshold is this domain's: the same rise in a domain with a larger sigma is not flagged
    other = max(SIGMA, key=SIGMA.get) if d != max(SIGMA, key=SIGMA.get) else min(SIGMA, key=SIGMA.get)
    if SIGMA[other] > SIGMA[d]:
        assert rises(REF, _plus(REF, other, t * (1 + EPS)), SIGMA, K) == []


@pytest.mark.parametrize("d", sorted(SIGMA))
def test_recovery_threshold_per_domain(d):
    limit = FRAC * K * SIGMA[d]
    assert unrecovered(REF, _plus(REF, d, limit * (1 - EPS)), SIGMA, K, FRAC, [d]) == []
    assert unrecovered(REF, _plus(REF, d, limit * (1 + EPS)), SIGMA, K, FRAC, [d]) == [d]
    # only flagged domains are judged for recovery
    assert unrecovered(REF, _plus(REF, d, limit * 2), SIGMA, K, FRAC, []) == []


def test_exactly_at_the_thresholds_is_inside():
    # binary fractions, so every sum is exact: k * sigma = 0.625, frac * k * sigma = 0.3125
    sigma, ref = {"a": 0.25}, {"a": 1.0}
    assert rises(ref, {"a": 1.625}, sigma, K) == []
    assert unrecovered(ref, {"a": 1.3125}, sigma, K, FRAC, ["a"]) == []
    assert unrecovered(ref, {"a": 1.3125 + 2 ** -20}, sigma, K, FRAC, ["a"]) == ["a"]


def test_judge_flags_then_checks_recovery_of_the_flagged_domains_only():
    up = K * SIGMA["test_code"] * (1 + EPS)
    after = _plus(REF, "test_code", up)
    inside = _plus(REF, "test_code", FRAC * K * SIGMA["test_code"] * (1 - EPS))
    outside = _plus(REF, "test_code", FRAC * K * SIGMA["test_code"] * (1 + EPS))
    assert judge(REF, after, inside, SIGMA, K, FRAC) == (["test_code"], [])
    assert judge(REF, after, outside, SIGMA, K, FRAC) == (["test_code"], ["test_code"])
    # an unflagged candidate is never judged unrecovered, whatever the recovery state
    assert judge(REF, REF, _plus(REF, "comments", 1.0), SIGMA, K, FRAC) == ([], [])
    # a rise in another domain at recovery does not count: only the flagged ones are judged
    assert judge(REF, after, _plus(inside, "comments", 1.0), SIGMA, K, FRAC) == (["test_code"], [])


def test_calibration_chooses_the_first_grid_point_below_the_target():
    # sigma states: deltas +1, -1, +1, -1 -> sigma = sqrt(4/3) (ddof = 1)
    sigma_states = [{"a": v} for v in (0.0, 1.0, 0.0, 1.0, 0.0)]
    s = (4 / 3) ** 0.5
    # held out: one rise of 2.2 sigma that stays (transition 1 of 3), then flat. At k = 1.5 and
    # 2.0 it flags and does not recover (2.2 sigma > frac * k * sigma): 1/3 false rejections;
    # at k = 2.5 nothing flags. So the choice is k = 2.5 with the lenient frac = 0.5, as in the main job.
    held = [{"a": v} for v in (0.0, 2.2 * s, 2.2 * s, 2.2 * s, 2.2 * s)]
    rec = calibrate(sigma_states, held)
    assert rec["sigma"]["a"] == pytest.approx(s, rel=1e-12)
    assert rec["ok"] and (rec["k"], rec["frac"]) == (K, FRAC) and rec["false_rejections"] == 0
    assert rec["transitions"] == 3
    rates = {(g["k"], g["frac"]): (g["false_rejections"], g["transitions"]) for g in rec["grid"]}
    assert rates[(1.5, 0.5)] == rates[(2.0, 0.25)] == (1, 3)
    assert K_GRID.index(K) == 2  # the grid is fixed in the written order: 1.5, 2.0, 2.5, ...
    # a rate equal to the target (1/3 here) is not "below" it: k = 1.5 and 2.0 are still passed over
    assert calibrate(sigma_states, held, target=1 / 3)["k"] == K


def test_calibration_record_by_hand():
    s = (4 / 3) ** 0.5
    rec = calibrate([{"a": v} for v in (0.0, 1.0, 0.0, 1.0, 0.0)], [{"a": v} for v in (0.0, 2.2 * s, 2.2 * s, 2.2 * s, 2.2 * s)])
    assert rec["k_grid"] == list(K_GRID) and rec["frac_grid"] == [0.5, 0.25] and rec["target"] == 0.05
    assert rec["sigma_deltas"] == {"a": [1.0, -1.0, 1.0, -1.0]}
    assert rec["held_out_deltas"]["a"] == pytest.approx([2.2 * s, 0, 0, 0], abs=1e-12)
    assert rec["grid"][0]["rate"] == pytest.approx(1 / 3) and rec["false_rejection_rate"] == 0
    assert rec["upper95"] == pytest.approx(1 - 0.05 ** (1 / 3), rel=1e-9)  # 0 of 3: (1 - u)^3 = 0.05
    assert "reason" not in rec
    # three states are enough on both sides (2 deltas for sigma; one transition with its recovery)
    assert calibrate([{"a": v} for v in (0.0, 1.0, 0.0)], [{"a": 0.0}] * 3)["ok"]
    with pytest.raises(ValueError, match=r"^need at least 3 states \(2 deltas\) to estimate sigma$"):
        calibrate([{"a": 0.0}, {"a": 1.0}], [{"a": 0.0}] * 3)
    with pytest.raises(ValueError, match=r"^need at least 3 held-out states \(one judged transition with its recovery\)$"):
        calibrate([{"a": v} for v in (0.0, 1.0, 0.0)], [{"a": 0.0}] * 2)


def test_a_failing_calibration_names_the_best_grid_point():
    # held out: 0 -> 100 (flags and stays up at every k) then 100 -> 100 + 2.2 sigma (flags and
    # stays up at k <= 2 only): 2/2 false rejections at k 1.5 and 2, 1/2 from k 2.5 on
    s = (4 / 3) ** 0.5
    rec = calibrate([{"a": v} for v in (0.0, 1.0, 0.0, 1.0, 0.0)],
                    [{"a": v} for v in (0.0, 100.0, 100.0 + 2.2 * s, 100.0 + 2.2 * s)])
    assert not rec["ok"] and "k" not in rec
    assert rec["reason"] == ("no grid point has a false-rejection rate below 5% on the choosing transitions "
                             "(best: k=2.5, frac=0.5: 1/2)")


def test_held_out_rate_counts_each_transition_against_its_own_reference():
    # sigma 1, k 2, frac 0.5. A: only 2.5 -> 5.5 (t = 2) flags and stays up: 1 of 4 transitions
    assert held_out_rate([{"a": v} for v in (2.5, 2.5, 5.5, 5.5, 5.5, 0.0)], {"a": 1.0}, 2.0, 0.5) == (1, 4)
    # B: the last judged transition (t = 3, 0 -> 3, recovery 3) counts too
    assert held_out_rate([{"a": v} for v in (0.0, 0.0, 0.0, 3.0, 3.0)], {"a": 1.0}, 2.0, 0.5) == (1, 3)
    assert held_out_rate([{"a": 0.0}] * 2, {"a": 1.0}, 2.0, 0.5) == (0, 0)  # nothing to judge


def test_rises_in_named_domains_only():
    before, after = {"a": 0.0, "b": 0.0}, {"a": 5.0, "b": 5.0}
    assert rises(before, after, {"a": 1.0, "b": 1.0}, 2.0) == ["a", "b"]
    assert rises(before, after, {"a": 1.0, "b": 1.0}, 2.0, ["b"]) == ["b"]  # the branch check asks about the flagged ones


def test_binomial_cdf_and_clopper_pearson_by_hand():
    assert binom_cdf(1, 3, 0.5) == pytest.approx(4 / 8)
    assert binom_cdf(0, 2, 0.25) == pytest.approx(9 / 16)
    assert binom_cdf(2, 4, 0.5) == pytest.approx(11 / 16)
    assert binom_cdf(1, 4, 0.1) == pytest.approx(0.9 ** 4 + 4 * 0.1 * 0.9 ** 3)
    # 0 of n: the bound solves (1 - u)^n = 1 - conf
    assert clopper_pearson_upper(0, 10) == pytest.approx(1 - 0.05 ** (1 / 10), rel=1e-9)
    assert clopper_pearson_upper(0, 10, conf=0.9) == pytest.approx(1 - 0.1 ** (1 / 10), rel=1e-9)
    # 1 of 10: P(X <= 1) = (1 - u)^10 + 10 u (1 - u)^9 = 0.05 at the bound (about 0.394)
    u = clopper_pearson_upper(1, 10)
    assert (1 - u) ** 10 + 10 * u * (1 - u) ** 9 == pytest.approx(0.05, abs=1e-9) and 0.39 < u < 0.40
    assert clopper_pearson_upper(3, 3) == 1.0 and clopper_pearson_upper(0, 0) == 1.0
    assert clopper_pearson_upper(0, 1) == pytest.approx(0.95, rel=1e-9)  # one trial: 1 - u = 0.05
