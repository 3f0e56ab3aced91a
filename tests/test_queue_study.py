"""The queue study: reference-curve identifiability, efficiency points, the adoption rule,
arm C's random rejections, the presets' plans, and the report's schema."""
import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, queue_script

from records.study import SchemaError, validate
from shardqueue.study.adoption import ADOPTED, NOT_ADOPTED, NOT_MEASURABLE, UNRESOLVED, adoption, seed_spread
from shardqueue.study.curve_fit import STARTS, check_identifiable, curve, fit_from, residual
from shardqueue.study.efficiency import (
    average_curves,
    efficiency_points,
    equivalent_targets,
)
from shardqueue.study.presets import PROXY_TARGET_PARAMS, plan
from shardqueue.study.random_rejection import (
    decision_window,
    fewest_accepted,
    plan_c,
    rejected_positions,
    rejections_to_match,
)


# ---- reference curve -------------------------------------------------------------------
def test_identifiability_accepts_a_power_law_and_recovers_it():
    rng = np.random.default_rng(1)
    D = np.arange(1, 11) * 4096.0
    L = curve(D, 2.0, 8.0, 0.4, D0=4096.0) + rng.normal(0, 0.003, len(D))
    fit = check_identifiable(D, L)
    assert fit["ok"], fit["reason"]
    assert abs(fit["a"] - 2.0) < 0.1 and abs(fit["c"] - 0.4) < 0.03 and abs(fit["b"] - 8.0) < 0.3
    lo, hi = fit["intervals"]["c"]
    assert lo < 0.4 < hi
    assert abs(residual(fit, D[3], L[3] + 0.5) - (0.5 + L[3] - curve(D[3], fit["a"], fit["b"], fit["c"], fit["D0"]))) < 1e-12


def test_identifiability_fields_and_intervals_against_a_numerical_covariance():
    D = np.array([1000.0, 2000, 4000, 8000, 16000, 32000])
    L = 2.0 + 1.5 * (D / 1000) ** -0.5 + np.random.default_rng(0).normal(0, 1e-3, len(D))
    fit = check_identifiable(D, L)
    assert fit["ok"] and fit["reason"] == "" and fit["points"] == 6 and fit["D0"] == 1000.0
    assert fit["thresholds"]["min_points"] == 5 and fit["start_disagreement"] < 0.01
    assert [st["c0"] for st in fit["starts"]] == list(STARTS) and all(st["converged"] for st in fit["starts"])
    for st in fit["starts"]:
        assert [st["a"], st["b"], st["c"], st["sse"]] == pytest.approx([fit["a"], fit["b"], fit["c"], fit["sse"]], rel=1e-3)
    # the reference: sum of squares and a central-difference Jacobian in (a, ln b, ln c) at the fitted point
    x = D / 1000
    assert fit["sse"] == pytest.approx(float(((fit["a"] + fit["b"] * x ** -fit["c"] - L) ** 2).sum()), rel=1e-9)
    half = 1.959963984540054 * np.sqrt(np.diag(fit["sse"] / (6 - 3) * np.linalg.inv(_numerical_normal_matrix(D, fit))))
    a, b, c = fit["a"], fit["b"], fit["c"]
    assert fit["intervals"]["a"] == pytest.approx([a - half[0], a + half[0]], rel=1e-5)
    assert fit["intervals"]["b"] == pytest.approx([b * math.exp(-half[1]), b * math.exp(half[1])], rel=1e-5)
    assert fit["intervals"]["c"] == pytest.approx([c * math.exp(-half[2]), c * math.exp(half[2])], rel=1e-5)
    # the same curve in other units of D (below 1, and spanning exactly a factor 2) is not refused for its units
    assert check_identifiable(D / 1e5, L)["ok"]
    assert check_identifiable(np.linspace(1000, 2000, 6), L)["reason"] != "all points at the same number of trained targets"


def test_identifiability_refuses_bad_input_in_its_lines():
    D, L = np.array([1.0, 2, 4, 8, 16]), np.array([3.0, 2.5, 2.2, 2.1, 2.05])
    assert check_identifiable(D[:4], L[:4])["reason"] == "4 points; the fit needs at least 5"
    assert not check_identifiable(D, L)["reason"].startswith("5 points")
    bad = "trained targets must be positive and losses finite"
    assert check_identifiable(np.r_[0.0, D[1:]], L)["reason"] == bad
    assert check_identifiable(D, np.r_[np.nan, L[1:]])["reason"] == bad
    assert check_identifiable(np.r_[np.inf, D[1:]], L)["reason"] == bad
    assert check_identifiable(np.full(5, 3.0), L)["reason"] == "all points at the same number of trained targets"


@pytest.mark.parametrize("noise", [0.0, 0.01])
def test_identifiability_refuses_a_flat_curve(noise):
    rng = np.random.default_rng(2)
    D = np.arange(1, 11) * 4096.0
    fit = check_identifiable(D, 3.0 + rng.normal(0, noise, len(D)) if noise else np.full(len(D), 3.0))
    assert not fit["ok"]
    assert fit["reason"] and "\n" not in fit["reason"]


def test_identifiability_refuses_too_few_points_and_a_weak_decline():
    D = np.arange(1, 11) * 4096.0
    assert "at least" in check_identifiable(D[:4], curve(D[:4], 2.0, 8.0, 0.4, 4096.0))["reason"]
    # a real but tiny decline buried in noise: the parameters are not pinned down
    L = curve(D, 5.0, 0.3, 0.5, 4096.0) + np.random.default_rng(3).normal(0, 0.02, len(D))
    assert not check_identifiable(D, L)["ok"]


# Seven stage-A-like curves (losses rounded to 1e-3) that the check refuses, one for each of its
# rarer lines; D is D0 * (1, 2, ...). Each line is read against values the test computes itself.
REFUSED = {
    "no covariance": (2000, [2.786, 2.595, 2.479, 2.365, 2.207, 1.981, 2.122]),
    "unbounded": (2000, [2.344, 2.512, 2.151, 2.704, 2.129]),
    "b too wide": (4000, [2.183, 2.076, 2.072, 1.998, 2.067]),  # c's interval is too wide as well: b is named first
    "c too wide": (1000, [3.511, 2.983, 2.193, 2.532, 2.272, 2.339, 2.264, 2.282]),
    "a too wide": (2000, [2.358, 2.087, 2.139, 2.023, 2.021, 1.934]),
    "starts disagree": (2000, [4.012, 2.959, 3.163, 3.578, 3.082, 3.28, 2.899, 3.374]),
    # losses near 0 whose starts differ most in a: |a| < the loss range < 1, so the range scales that difference
    "starts disagree near 0": (2000, [0.011, -0.083, -0.032, 0.163, 0.129, -0.067, 0.466]),
    "one start fails": (4000, [2.06, 1.944, 1.973, 1.96, 2.035, 1.923]),
    "four starts fail": (4000, [2.189, 2.025, 2.054, 2.066, 2.012, 2.037, 1.983]),
}


def _numerical_normal_matrix(D, fit):
    """JᵀJ at the reported fit, from a central-difference Jacobian in (a, ln b, ln c) on D / D0."""
    x, t = np.asarray(D) / fit["D0"], np.array([fit["a"], math.log(fit["b"]), math.log(fit["c"])])
    f = lambda t: t[0] + math.exp(t[1]) * x ** -math.exp(t[2])  # noqa: E731
    J = np.stack([(f(t + h) - f(t - h)) / 2e-6 for h in np.eye(3) * 1e-6], axis=1)
    return J.T @ J


@pytest.mark.parametrize("case", list(REFUSED))
def test_identifiability_refuses_in_its_own_line_each_rarer_case(case):
    d0, L = REFUSED[case]
    L = np.array(L)
    D = d0 * np.arange(1.0, len(L) + 1)
    fit = check_identifiable(D, L)
    assert not fit["ok"] and fit["D0"] == d0
    # the reported parameters are those of the start with the smallest sum of squares
    best = min(fit["starts"], key=lambda s: s["sse"])
    assert [fit["a"], fit["b"], fit["c"], fit["sse"]] == [best["a"], best["b"], best["c"], best["sse"]]
    if case.endswith(("start fails", "starts fail")):
        # the line names exactly the starts reported unconverged, and not all of them; one case runs each start
        # alone (a start that does not converge costs its 2,000 iterations: the other case would take seconds)
        failed = [s["c0"] for s in fit["starts"] if not s["converged"]]
        if case == "one start fails":
            assert failed == [c0 for c0 in STARTS if not fit_from(D / d0, L, c0)[2]]
        assert 0 < len(failed) < len(STARTS)
        assert fit["reason"] == f"the fit did not converge from start(s) c0 = {', '.join(map(str, failed))}"
        return
    assert all(s["converged"] for s in fit["starts"])
    # the starts' largest difference: a relative to max(|a|, loss range), ln b and ln c absolutely
    scale = max(abs(fit["a"]), float(L.max() - L.min()))
    spread = max(max(abs(s["a"] - fit["a"]) / scale, abs(math.log(s["b"] / fit["b"])), abs(math.log(s["c"] / fit["c"])))
                 for s in fit["starts"])
    assert fit["start_disagreement"] == pytest.approx(spread, rel=1e-9, abs=1e-15)
    if case.startswith("starts disagree"):
        assert spread > 0.01 and (case == "starts disagree") == (abs(fit["a"]) > L.max() - L.min())
        assert fit["reason"] == f"starts converge to different parameters (largest difference {spread:.3g} > 0.01)"
        return
    assert spread <= 0.01
    H = _numerical_normal_matrix(D, fit)
    cond = float(np.linalg.cond(H))
    if case == "no covariance":
        assert cond > 1e12 and "intervals" not in fit
        printed = re.fullmatch(r"the fit's covariance does not exist \(JᵀJ condition number (\S+) > 1e\+12\)", fit["reason"])
        assert printed and float(printed[1]) == pytest.approx(cond, rel=0.02)
        return
    assert cond < 1e12
    half = 1.959963984540054 * np.sqrt(np.diag(fit["sse"] / (len(L) - 3) * np.linalg.inv(H)))
    if case == "unbounded":
        assert max(half[1], half[2]) > 700 and "intervals" not in fit
        assert fit["reason"] == "a parameter interval is unbounded (its log half-width exceeds 700)"
        return
    # the intervals are set before their widths are judged: a, then b, then c
    (alo, ahi), (blo, bhi), (clo, chi) = (fit["intervals"][k] for k in "abc")
    assert [(ahi - alo) / 2, math.log(bhi / blo) / 2, math.log(chi / clo) / 2] == pytest.approx(half, rel=1e-4)
    loss_range = float(L.max() - L.min())
    if case == "a too wide":
        assert half[0] > loss_range
        assert fit["reason"] == (f"interval of a too wide (half-width {(ahi - alo) / 2:.3g} > 1.0 x loss range "
                                 f"{loss_range:.3g})")
        return
    assert half[0] <= loss_range
    name, width = ("b", math.sqrt(bhi / blo)) if case == "b too wide" else ("c", math.sqrt(chi / clo))
    assert width > 2 and (name == "b" or math.sqrt(bhi / blo) <= 2)
    assert fit["reason"] == f"interval of {name} too wide (x{width:.3g} either way; the limit is x2)"


# ---- efficiency points -----------------------------------------------------------------
def _log_linear_curve():
    # L = 6 - 0.5 ln D is exactly linear in log D, so the interpolation is exact and the answer known
    D = np.array([1e4, 2e4, 4e4, 8e4, 1.6e5])
    return D, 6.0 - 0.5 * np.log(D)


def test_efficiency_points_on_a_constructed_curve():
    D, L = _log_linear_curve()
    d_arm = 3e4
    for extra in (0.25, -0.2, 0.0, 1.5):
        loss = 6.0 - 0.5 * math.log(d_arm * (1 + extra))
        e = efficiency_points(D, L, d_arm, loss)
        assert e["points"] == pytest.approx(100 * extra, abs=1e-9)
    # at a grid point exactly
    assert equivalent_targets(D, L, L[2])[0] == pytest.approx(4e4)


def test_efficiency_points_refuse_extrapolation():
    D, L = _log_linear_curve()
    below = efficiency_points(D, L, 3e4, L.min() - 0.01)
    above = efficiency_points(D, L, 3e4, L.max() + 0.01)
    assert below["points"] is None and "extrapolation" in below["reason"]
    assert above["points"] is None and "above every point" in above["reason"]


def test_efficiency_takes_the_first_crossing_of_a_non_monotone_curve():
    D = np.array([1.0, 2.0, 4.0, 8.0])
    L = np.array([3.0, 2.0, 2.5, 1.0])  # a bump: 2.25 is crossed first between D=1 and D=2
    d_eq, _ = equivalent_targets(D, L, 2.25)
    assert d_eq == pytest.approx(math.exp(0.75 * math.log(2.0)))


def test_average_curves_interpolates_in_log_targets_inside_the_common_range():
    a = ([1e4, 4e4], [4.0, 2.0])
    b = ([2e4, 3e4, 5e4], [3.0, 3.0, 3.0])
    D, L = average_curves([a, b])
    assert D == [2e4, 3e4, 4e4]  # 1e4 and 5e4 lie outside the range both cover
    assert L[0] == pytest.approx((3.0 + 3.0) / 2)  # a at 2e4 is halfway in log D: 3.0
    assert L[2] == pytest.approx((2.0 + 3.0) / 2)


def test_equivalent_targets_refuses_each_bad_input_with_its_line():
    from shardqueue.study.efficiency import equivalent_targets as eq

    assert eq([1.0], [2.0], 2.0) == (None, "the reference curve needs at least two points")
    assert eq([1.0, 2.0], [2.0], 2.0) == (None, "the reference curve needs at least two points")
    bad_d = "the reference curve's trained targets must be positive and strictly increasing"
    assert eq([1.0, 1.0, 2.0], [3.0, 2.0, 1.0], 2.0) == (None, bad_d)  # repeated D
    assert eq([0.0, 1.0, 2.0], [3.0, 2.0, 1.0], 2.0) == (None, bad_d)  # D = 0
    assert eq([1.0, 2.0], [3.0, 2.0], float("nan")) == (None, "the arm's loss is not finite")
    assert eq([1.0, 2.0, 4.0], [3.0, 2.0, 1.0], 0.5) == (
        None, "loss 0.5000 is below every point of the reference curve (lowest 1.0000); "
              "beyond D = 4 it would be an extrapolation")
    assert eq([1.0, 2.0, 4.0], [3.0, 2.0, 1.0], 3.5) == (
        None, "loss 3.5000 is above every point of the reference curve (highest 3.0000)")


def test_equivalent_targets_on_two_points_at_their_ends_and_on_a_flat_stretch():
    from shardqueue.study.efficiency import equivalent_targets as eq

    d, why = eq([1.0, 4.0], [2.0, 1.0], 1.5)  # halfway in log D between 1 and 4: D = 2
    assert d == pytest.approx(2.0) and why == ""
    assert eq([1.0, 2.0], [3.0, 2.0], 2.0) == (pytest.approx(2.0), "")  # the loss is the curve's last point
    assert eq([1.0, 2.0], [1.0, 1.0], 1.0) == (1.0, "")  # flat: the smallest D that reaches it
    assert efficiency_points([1.0, 4.0], [2.0, 1.0], 1.0, 1.5) == {"points": pytest.approx(100.0),
                                                                 "d_eq": pytest.approx(2.0), "reason": ""}
    assert efficiency_points([1.0, 4.0], [2.0, 1.0], 1.0, 0.5) == {
        "points": None, "d_eq": None,
        "reason": "loss 0.5000 is below every point of the reference curve (lowest 1.0000); "
                  "beyond D = 4 it would be an extrapolation"}


def test_average_curves_refuses_nothing_to_average_and_disjoint_ranges_but_takes_a_shared_end():
    with pytest.raises(ValueError) as e:
        average_curves([])
    assert str(e.value) == "no curves to average"
    with pytest.raises(ValueError) as e:
        average_curves([([1.0, 2.0], [3.0, 2.0]), ([4.0, 8.0], [2.0, 1.0])])
    assert str(e.value) == "the curves share no range of trained targets"
    assert average_curves([([1.0, 2.0], [3.0, 2.0]), ([2.0, 8.0], [1.0, 0.0])]) == ([2.0], [1.5])


def test_local_slope_uses_only_points_within_a_factor_two():
    from shardqueue.study.efficiency import local_slope

    # on the line L = 5 - 0.5 ln D at 25, 50, 100; 20 (below 50/2) and 120 (above 2 x 50) lie far off it
    D = [20.0, 25.0, 50.0, 100.0, 120.0]
    L = [0.0] + [5 - 0.5 * math.log(d) for d in D[1:4]] + [9.0]
    beta, n, why = local_slope(D, L, 50.0)
    assert beta == pytest.approx(-0.5) and n == 3 and why == ""
    assert local_slope([1000.0, 2000.0, 1e5], [3.0, 2.0, 1.0], 2000.0) == (
        None, 2, "2 points within a factor 2 of D = 2,000; 3 needed")
    # a slope of exactly zero does not fall; nor does a flat curve at 1.1, whose fitted slope is rounding
    # noise (its standard error's floor is n eps |L| / sqrt(Sxx)), so |t| stays near 1, far from 6.314 at 1 df
    zero = local_slope([50.0, 100.0, 200.0], [0.0, 0.0, 0.0], 100.0)
    assert zero[:2] == (None, 3) and zero[2].startswith("the selection loss does not fall clearly with D near D = 100")
    flat = local_slope([50.0, 100.0, 200.0], [1.1, 1.1, 1.1], 100.0)
    assert flat[:2] == (None, 3) and "with 1 df; falling needs t < -6.314" in flat[2]


def _axis(gaps):
    # a flat curve at 2.0 makes each gap 2.0 - loss exactly; beta = -0.5 comes from the raw points
    from shardqueue.study.efficiency import per_axis

    D = [50.0, 100.0, 200.0]
    runs = {(a, s): (100.0, 2.0 - g) for (a, s), g in gaps.items()}
    flat = ([50.0, 200.0], [2.0, 2.0])
    return per_axis({43: flat, 44: flat}, D, [5 - 0.5 * math.log(d) for d in D], 100.0, runs)


def test_per_axis_threshold_at_its_floor_and_ties_with_twice_the_spread():
    # every arm's seeds agree: spread 0, threshold = |beta| ln(1 + 0.6/100) = 0.5 ln 1.006
    floor = _axis({("A", 43): 0.0, ("A", 44): 0.0, ("B", 43): 0.5, ("B", 44): 0.5, ("C", 43): 0.25, ("C", 44): 0.25})
    assert floor["threshold_bpb"] == pytest.approx(0.5 * math.log(1.006), rel=1e-9)
    assert floor["seed_spread_bpb"] == 0.0 and floor["passes"]
    assert floor["b_minus_c_bpb"] == {"43": 0.25, "44": 0.25}
    # C's seeds differ by 0.25: threshold 0.5; B - A = 0.5 exactly (a tie is not above), B - C = 1.0 and 0.75
    tie_a = _axis({("A", 43): 0.0, ("A", 44): 0.0, ("B", 43): 0.5, ("B", 44): 0.5, ("C", 43): -0.5, ("C", 44): -0.25})
    assert tie_a["seed_spread_bpb"] == 0.25 and tie_a["threshold_bpb"] == 0.5
    assert tie_a["b_minus_a_bpb"] == {"43": 0.5, "44": 0.5} and tie_a["b_minus_c_bpb"] == {"43": 1.0, "44": 0.75}
    assert not tie_a["passes"]
    # the same with the roles of A and C swapped: B - C ties
    tie_c = _axis({("C", 43): 0.0, ("C", 44): 0.0, ("B", 43): 0.5, ("B", 44): 0.5, ("A", 43): -0.5, ("A", 44): -0.25})
    assert tie_c["b_minus_c_bpb"] == {"43": 0.5, "44": 0.5} and not tie_c["passes"]


# ---- adoption rule ---------------------------------------------------------------------
def _points(b, a=(0.0, 0.2), c=(0.1, -0.1)):
    return {"A": {43: a[0], 44: a[1]}, "B": {43: b[0], 44: b[1]}, "C": {43: c[0], 44: c[1]}}


def test_seed_spread_is_the_largest_arms_mean_pairwise_difference():
    spread, arm, per = seed_spread(_points((1.0, 1.5)))
    assert spread == pytest.approx(0.5) and arm == "B"
    assert {k: v["mean_pairwise"] for k, v in per.items()} == {"A": pytest.approx(0.2), "B": pytest.approx(0.5),
                                                               "C": pytest.approx(0.2)}
    # three seeds: A's pairs differ by 1, 3 and 2 -> mean 2 (the literal largest difference, 3, is shown, not used)
    spread, arm, per = seed_spread({"A": {1: 0.0, 2: 1.0, 3: 3.0}, "B": {1: 0.0, 2: 0.0, 3: 0.5},
                                    "C": {1: 0.0, 2: 0.0, 3: 0.0}})
    assert spread == pytest.approx(2.0) and arm == "A" and per["A"]["largest_pairwise"] == 3.0
    assert per["B"] == {"mean_pairwise": pytest.approx(1.0 / 3), "largest_pairwise": 0.5}


def test_adoption_on_both_sides_of_the_floor():
    # spread 0.2 -> threshold max(0.6, 0.4) = 0.6; B - A and B - C at both seeds decide
    yes = adoption(_points((0.9, 1.0)))
    assert yes["threshold"] == pytest.approx(0.6) and yes["adopt"] and yes["verdict"] == ADOPTED and yes["rule_met"]
    no = adoption(_points((0.65, 0.75)))  # B - A at seed 44 is 0.55 < 0.6
    assert not no["adopt"] and not no["rule_met"] and no["verdict"] != ADOPTED
    assert any("B-A at seed 44" in r for r in no["reasons"])


def test_adoption_on_both_sides_of_twice_the_seed_spread():
    # A's seeds differ by 1.0 -> threshold 2.0 > 0.6
    a = (0.0, 1.0)
    yes = adoption(_points((3.1, 3.05), a=a, c=(0.5, 0.6)))
    assert yes["seed_spread"] == pytest.approx(1.0) and yes["threshold"] == pytest.approx(2.0) and yes["adopt"]
    no = adoption(_points((2.9, 2.95), a=a, c=(0.5, 0.6)))  # B - A at seed 44 is 1.95: above 0.6, below 2.0
    assert no["threshold"] == pytest.approx(2.0) and not no["adopt"]
    assert no["reasons"][0] == "B-A at seed 44 is +1.95, not above the threshold 2.00"


def test_adoption_needs_b_above_c_too_and_refuses_missing_points():
    no = adoption(_points((2.0, 2.0), c=(1.8, 1.8), a=(0.0, 0.0)))  # beats A by 2, C by only 0.2
    assert not no["adopt"] and [r for r in no["reasons"] if "seed" in r and "B-A" in r] == []
    # B - C is 0.2 at both seeds: its interval is [0.2, 0.2], at or below T = 0.6: the data say it is under
    assert no["intervals"]["B-C"]["reading"] == "below" and no["verdict"] == NOT_ADOPTED
    miss = adoption(_points((None, 2.0)), {"B_s43": "loss 2.40 is below every point of the reference curve"})
    assert not miss["adopt"] and miss["threshold"] is None and miss["verdict"] == NOT_MEASURABLE
    assert miss["reasons"] == ["B_s43: loss 2.40 is below every point of the reference curve"]
    assert miss["intervals"] == {} and "baseline stays" not in miss["verdict"]


def test_the_committed_small_study_is_unresolved_not_not_adopted():
    # the small study committed before 2026-12-02: B - A +60.98 / +42.69, B - C +12.01 / +62.77, C's seeds 69.05 apart:
    # T = 2 x 69.05 = 138.10. B - A: mean 51.835, se = |60.98 - 42.69| / 2 = 9.145, t(1 df) = 12.7062:
    # [51.835 - 116.198, 51.835 + 116.198] = [-64.363, +168.033], holding 0 and T.
    got = adoption({"A": {43: 0.0, 44: 0.0}, "B": {43: 60.98, 44: 42.69}, "C": {43: 48.97, 44: -20.08}})
    assert got["threshold"] == pytest.approx(138.10) and got["seed_spread_arm"] == "C"
    iv = got["intervals"]["B-A"]
    assert iv["df"] == 1 and iv["se"] == pytest.approx(9.145) and iv["t"] == pytest.approx(12.7062, abs=1e-4)
    assert iv["low"] == pytest.approx(-64.363, abs=1e-3) and iv["high"] == pytest.approx(168.033, abs=1e-3)
    assert iv["reading"] == "contains" and iv["contains_zero"] and iv["floor_reading"] == "contains"
    assert got["verdict"] == UNRESOLVED and not got["rule_met"]


def test_not_adopted_only_when_an_interval_lies_under_the_threshold():
    # three seeds; A and B each 0, 10, 20 apart (mean pairwise (10 + 20 + 10) / 3 = 13.33): T = 26.67.
    # B - A = 1 at every seed: the interval [1, 1] lies under T: the data say the gain is under the threshold.
    a = {1: 0.0, 2: 10.0, 3: 20.0}
    got = adoption({"A": a, "B": {k: v + 1 for k, v in a.items()}, "C": a})
    assert got["threshold"] == pytest.approx(80 / 3) and got["verdict"] == NOT_ADOPTED
    assert got["intervals"]["B-A"]["low"] == got["intervals"]["B-A"]["high"] == 1.0


def test_intervals_above_the_threshold_adopt_where_every_seed_does_not():
    # ten seeds; A = 0, 8, 0, 8, ... (mean pairwise 25 x 8 / 45 = 4.444); B - A = 8 at the first seed, 12 at the
    # other nine, so B = 8, 20, 12, 20, 12, ...: one 8, four 12s, five 20s, mean pairwise
    # (4 x 4 + 5 x 12 + 20 x 8) / 45 = 236 / 45 = 5.244: T = 10.489, and B - A at the first seed (8) is under it.
    # B - A: mean 11.6, sd sqrt(1.6), se 0.4, t(9 df) = 2.2622: [10.695, 12.505], above T. C = A - 10.
    a = {s: 8.0 * (s % 2) for s in range(10)}
    d = {s: 8.0 if s == 0 else 12.0 for s in range(10)}
    got = adoption({"A": a, "B": {s: a[s] + d[s] for s in a}, "C": {s: a[s] - 10 for s in a}})
    assert got["threshold"] == pytest.approx(2 * 236 / 45) and not got["rule_met"]
    iv = got["intervals"]["B-A"]
    assert iv["low"] == pytest.approx(11.6 - 2.2622 * 0.4, abs=1e-3) and iv["reading"] == "above"
    assert got["verdict"] == ADOPTED


def test_adoption_returns_every_number_and_a_tie_with_the_threshold_is_not_above_it():
    # spread 0.5 in every arm -> threshold max(0.6, 2 x 0.5) = 1.0; B - A = 1.0 exactly at both seeds (not above,
    # and its interval [1, 1] lies at T: not adopted); B - C = 0.5. All values are exact in binary.
    got = adoption({"A": {43: 0.0, 44: 0.5}, "B": {43: 1.0, 44: 1.5}, "C": {43: 0.5, 44: 1.0}})
    iv = got.pop("intervals")
    assert got == {"rule": got["rule"], "seeds": [43, 44], "b_minus_a": {43: 1.0, 44: 1.0},
                   "b_minus_c": {43: 0.5, 44: 0.5}, "seed_spread": 0.5, "seed_spread_arm": "A",
                   "per_arm_spread": {a: {"mean_pairwise": 0.5, "largest_pairwise": 0.5} for a in "ABC"},
                   "threshold": 1.0, "floor": 0.6, "threshold_if_largest_pairwise": 1.0, "rule_met": False,
                   "adopt": False, "verdict": NOT_ADOPTED, "measured": True,
                   "reasons": ["B-A at seed 43 is +1.00, not above the threshold 1.00",
                               "B-A at seed 44 is +1.00, not above the threshold 1.00",
                               "B-C at seed 43 is +0.50, not above the threshold 1.00",
                               "B-C at seed 44 is +0.50, not above the threshold 1.00",
                               "B-A: mean +1.00, 95% interval [+1.00, +1.00] (t, 1 df) lies at or below the threshold 1.00",
                               "B-C: mean +0.50, 95% interval [+0.50, +0.50] (t, 1 df) lies at or below the threshold 1.00"]}
    assert got["rule"].startswith("Adopt the queue only if B beats both A and C")
    assert iv["B-A"]["reading"] == "below" and iv["B-C"]["floor_reading"] == "below"
    miss = adoption(_points((None, 2.0)))  # no reason given for the refusal: the default line
    assert miss["reasons"] == ["B_s43: efficiency points refused"] and miss["measured"] is False


@pytest.mark.parametrize("points,message", [
    ({"A": {43: 0.0, 44: 0.0}, "B": {43: 0.0, 44: 0.0}}, "efficiency points for arm C are missing"),
    ({"A": {43: 0.0, 45: 0.0}, "B": {43: 0.0, 44: 0.0}, "C": {43: 0.0, 44: 0.0}},
     "arms A, B and C must be measured at the same seeds"),
    ({"A": {43: 0.0, 44: 0.0}, "B": {43: 0.0, 44: 0.0}, "C": {43: 0.0, 45: 0.0}},
     "arms A, B and C must be measured at the same seeds"),
    ({"A": {43: 0.0}, "B": {43: 0.0}, "C": {43: 0.0}}, "arm A: 1 seed(s); the rule needs at least two"),
])
def test_adoption_refuses_incomplete_points_with_the_reason(points, message):
    with pytest.raises(ValueError) as e:
        adoption(points)
    assert str(e.value) == message


def test_adoption_reasons_read_each_case_by_hand():
    # three seeds, every arm 0 / 1 / 2 apart (mean pairwise (1 + 2 + 1) / 3 = 4/3): T = 8/3 = 2.67
    base = {43: 0.0, 44: 1.0, 45: 2.0}
    lifted = {s: v + 50 for s, v in base.items()}
    met = adoption({"A": base, "B": lifted, "C": base})  # B - A = B - C = 50 at every seed: se 0, [50, 50]
    ivs = " interval [+50.00, +50.00] (t, 2 df) lies above the threshold 2.67"
    assert met["reasons"] == ["the rule as written is met at every seed", "B-A: mean +50.00, 95%" + ivs,
                              "B-C: mean +50.00, 95%" + ivs] and met["verdict"] == ADOPTED
    same = adoption({"A": base, "B": base, "C": base})  # B identical to A: [0, 0] holds 0 at both of its ends
    assert same["intervals"]["B-A"]["contains_zero"] and same["verdict"] == NOT_ADOPTED
    assert same["reasons"][-1] == ("B-C: mean +0.00, 95% interval [+0.00, +0.00] (t, 2 df) lies at or below "
                                   "the threshold 2.67 and contains 0")
    assert same["reasons"][0] == "B-A at seed 43 is +0.00, not above the threshold 2.67"
    # the committed small study's numbers (see above) at 90%: t(1 df, 0.95) = 6.3138, 51.835 +- 6.3138 x 9.145
    small = {"A": {43: 0.0, 44: 0.0}, "B": {43: 60.98, 44: 42.69}, "C": {43: 48.97, 44: -20.08}}
    got = adoption(small, level=0.90)
    assert got["intervals"]["B-A"]["t"] == pytest.approx(6.3138, abs=1e-4)
    assert got["reasons"][-2] == ("B-A: mean +51.83, 90% interval [-5.90, +109.57] (t, 1 df) lies at or below "
                                  "the threshold 138.10 and contains 0") and got["verdict"] == NOT_ADOPTED
    assert adoption(small)["reasons"][-2] == ("B-A: mean +51.83, 95% interval [-64.36, +168.03] (t, 1 df) contains "
                                              "the threshold 138.10 and contains 0")
    # a refused point: nothing is met and no spread is known
    gone = adoption({**small, "C": {43: None, 44: -20.08}}, refusals={"C_s43": "beyond the cap"})
    assert gone["verdict"] == NOT_MEASURABLE and gone["rule_met"] is False and gone["reasons"] == ["C_s43: beyond the cap"]
    assert gone["per_arm_spread"]["C"] == {"mean_pairwise": None, "largest_pairwise": None}


def test_the_report_says_what_the_intervals_resolve_and_leave_open():
    from shardqueue.study.report import resolution_lines

    # the small study's numbers: B - A [-64.36, +168.03] and B - C both hold 0 and T = 138.10: nothing resolved
    got = resolution_lines(adoption({"A": {43: 0.0, 44: 0.0}, "B": {43: 60.98, 44: 42.69}, "C": {43: 48.97, 44: -20.08}}))
    assert got[1].startswith("**What this study resolves** (95% intervals): nothing. **What it leaves open:** whether "
                             "B beats A at all (the interval of B-A holds 0); whether B's gain over A exceeds T = 138.10")
    # B - A 50 at every seed (above 0 and above T = 2.67); B - C 0 at every seed ([0, 0]: holds 0, at or below T)
    base = {43: 0.0, 44: 1.0, 45: 2.0}
    got = resolution_lines(adoption({"A": base, "B": {s: v + 50 for s, v in base.items()}, "C": {s: v + 50 for s, v in base.items()}}))
    assert got[1] == ("**What this study resolves** (95% intervals): B beats A (the interval of B-A lies above 0); B's gain "
                      "over A exceeds T = 2.67; B's gain over C is at most T = 2.67 (the interval lies at or below it). "
                      "**What it leaves open:** whether B beats C at all (the interval of B-C holds 0).")


def test_the_runs_table_counts_a_branch_check_return_apart_from_the_rejections():
    """A new user's probe: a shard the branch check returned (verdict "phase": no rejection) showed in the study's
    table as a rejection that was neither deferred nor quarantined, while arm C's one random rejection showed as
    deferred. Hand-worked: B rolled back two shards, one deferred and one returned; C rolled back two, deferred."""
    from shardqueue.study.report import runs_lines

    def run(name, **d):
        return {"name": name, "trained_targets": 1000, "final_selection": {"mean": 2.0}, "final_control": {"x": 2.5},
                "decisions": {"accept": 5, "flag": 2, **d}, "decay": {"updates": 1, "targets": 100}}

    s = {"runs": [run("B_s43", reject=2, deferred=1, returned=1), run("C_s43", reject=2, deferred=2)],
         "budget_check": {"rule": "r", "held": True}}
    lines = runs_lines(s)
    assert "| Accepted | Flagged | Rolled back | Deferred | Quarantined | Returned |" in lines[2]
    assert "| 5 | 2 | 2 | 1 | 0 | 1 | 1, 100 |" in lines[4] and "| 5 | 2 | 2 | 2 | 0 | 0 | 1, 100 |" in lines[5]
    assert any("returned by the branch check, which blamed the training phase (no rejection" in ln for ln in lines)


# ---- intervals and the seed plan ---------------------------------------------------------
@pytest.mark.parametrize("df,t", [(1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622), (30, 2.0423),
                                  (10 ** 6, 1.9600)])
def test_t_quantile_against_the_printed_table(df, t):
    from shardqueue.study.intervals import t_quantile

    assert t_quantile(0.975, df) == pytest.approx(t, abs=1e-4)


def test_paired_interval_and_pairwise_spreads_by_hand():
    from shardqueue.study.intervals import largest_pairwise_difference, mean_pairwise_difference, paired_interval

    # 1..5: mean 3, sd sqrt(10 / 4), se sqrt(2.5 / 5) = 0.70711, t(4 df) = 2.7764
    iv = paired_interval([1, 2, 3, 4, 5])
    assert (iv["n"], iv["df"], iv["mean"]) == (5, 4, 3.0) and iv["sd"] == pytest.approx(math.sqrt(2.5))
    assert iv["low"] == pytest.approx(3 - 2.7764 * 0.70711, abs=1e-4)
    assert iv["high"] == pytest.approx(3 + 2.7764 * 0.70711, abs=1e-4)
    assert mean_pairwise_difference([0, 1, 3]) == 2.0 and largest_pairwise_difference([0, 1, 3]) == 3.0
    with pytest.raises(ValueError):
        paired_interval([1.0])


def test_seeds_needed_against_the_t_table():
    from shardqueue.study.power import seeds_needed

    # width 2 t(n-1) sigma / sqrt(n) with sigma = 1 against 0.6: n = 45: 2 x 2.0154 / 6.7082 = 0.6009 (too wide);
    # n = 46: 2 x 2.0141 / 6.7823 = 0.5939
    assert seeds_needed(1.0, 0.6) == 46
    # at n = 2: 2 x 12.7062 x sigma / sqrt(2) = 17.969 sigma
    assert seeds_needed(0.6 / 17.97, 0.6) == 2 and seeds_needed(0.6 / 17.96, 0.6) == 3
    assert seeds_needed(None, 0.6) is None and seeds_needed(0.0, 0.6) == 2


def test_the_seed_plan_from_stage_a_by_hand():
    from shardqueue.study.power import plan_seeds, seeds_to_use, stage_a_slope

    # the mean control loss 3, 2.5, 2 at D = e, e^2, e^3: slope -0.5 per unit ln D; D = 0 is left out
    states = [{"x": 9.0, "y": 9.0}] + [{"x": v - 0.1, "y": v + 0.1} for v in (3.0, 2.5, 2.0)]
    assert stage_a_slope([0.0, math.e, math.e ** 2, math.e ** 3], states) == (pytest.approx(-0.5), "")
    assert stage_a_slope([1.0, 2.0], states[:2])[0] is None
    assert "does not fall" in stage_a_slope([1.0, 2.0, 3.0], [{"x": 1.0}] * 3)[1]
    # sigma_run = (0.02 + 0.04) / 2 = 0.03; B - A: 0.03 sqrt 2 = 0.042426 BPB; one point = 0.2 ln 1.01 BPB:
    # 0.042426 / 0.00199007 = 21.319 points
    pw = plan_seeds({"a": 0.02, "b": 0.04}, -0.2)
    assert pw["sigma_run_bpb"] == pytest.approx(0.03) and pw["sigma_diff_bpb"] == pytest.approx(0.042426, abs=1e-6)
    assert pw["sigma_diff_points"] == pytest.approx(21.319, abs=1e-3) and pw["seeds_needed"] > 1000
    assert plan_seeds({"a": 0.02}, None, "no slope")["seeds_needed"] is None
    assert seeds_to_use(12, (43, 44), 10) == tuple(range(43, 53))
    assert seeds_to_use(5, (43, 44), 10) == (43, 44, 45, 46, 47)
    assert seeds_to_use(1, (43, 44), 10) == (43, 44) and seeds_to_use(99, (43, 44), 0) == (43, 44)


def test_stage_a_falls_only_when_its_slope_clears_its_own_standard_error():
    from shardqueue.study.power import stage_a_slope

    D = [math.e ** k for k in (1, 2, 3, 4, 5)]  # ln D = 1..5: mean 3, Sxx = 4 + 1 + 0 + 1 + 4 = 10
    # flat: the slope is 0 up to rounding, whatever the kernel; t is rounding over its own floor, far from -2.353
    beta, why = stage_a_slope(D, [{"x": 1.1}] * 5)
    assert beta is None and "does not fall clearly" in why and "3 df" in why
    # noisy flat 1.0, 1.02, 0.99, 1.01, 0.995: Sxy = -2(1.0) - 1.02 + 1.01 + 2(0.995) = -0.02, slope -0.002;
    # residuals -0.007, 0.015, -0.013, 0.009, -0.004: SSE 0.00054, s^2 0.00018, se sqrt(0.00018 / 10) = 0.0042426,
    # t = -0.4714 against the one-sided 95% t at 3 df, -2.353
    beta, why = stage_a_slope(D, [{"x": v} for v in (1.0, 1.02, 0.99, 1.01, 0.995)])
    assert beta is None
    assert "slope -0.002 +/- 0.0042, t = -0.47 with 3 df; falling needs t < -2.353 (one-sided 95%)" in why
    # clearly falling: 3 - 0.5 ln D with noise +-0.01 (+, -, +, -, +): Sxy of the noise is 0, so slope -0.5;
    # residuals 0.008, -0.012, 0.008, -0.012, 0.008: SSE 0.00048, se sqrt(0.00016 / 10) = 0.004, t = -125
    falling = [{"x": 3 - 0.5 * k + e} for k, e in zip((1, 2, 3, 4, 5), (0.01, -0.01, 0.01, -0.01, 0.01))]
    assert stage_a_slope(D, falling) == (pytest.approx(-0.5, rel=1e-12), "")
    # a descent of one float64 step per state is exactly linear (no residual) but is rounding: the standard
    # error's floor 5 eps 1.1 / sqrt(10) = 3.9e-16 against a slope of -2.2e-16 gives t = -0.57
    ulps = [{"x": 1.1 - k * np.spacing(1.1)} for k in range(5)]
    assert stage_a_slope(D, ulps)[0] is None and "t = -0.57" in stage_a_slope(D, ulps)[1]
    # the same slope with noise 100 times larger: se 0.4, t = -1.25, not enough at 3 df
    noisy = [{"x": 3 - 0.5 * k + 100 * e} for k, e in zip((1, 2, 3, 4, 5), (0.01, -0.01, 0.01, -0.01, 0.01))]
    assert stage_a_slope(D, noisy)[0] is None and "t = -1.25" in stage_a_slope(D, noisy)[1]


def test_leave_one_out_curves_hold_only_the_other_seeds():
    from shardqueue.study.reference_curve import leave_one_out

    per = {"43": {"D": [10.0, 40.0], "L": [9.0, 8.0]}, "44": {"D": [10.0, 30.0], "L": [3.0, 2.0]},
           "45": {"D": [20.0, 40.0], "L": [1.8, 1.9]}}
    loo = leave_one_out(per)
    # without 43: 10: 3.0, 20: 1.8, 30: 2.0, 40: 1.9 -> 1.8 and 2.0 fold into 1.9, which ties with 1.9
    assert loo["43"] == ([10.0, 20.0, 30.0, 40.0], [3.0, 1.9, 1.9, 1.9])
    two = leave_one_out({"43": per["43"], "44": per["44"]})
    assert two == {"43": ([10.0, 30.0], [3.0, 2.0]), "44": ([10.0, 40.0], [9.0, 8.0])}  # each seed's is the other's
    with pytest.raises(ValueError):
        leave_one_out({"43": per["43"]})


# ---- arm C -----------------------------------------------------------------------------
def test_arm_c_matches_b_rejections_not_its_flags_or_a_rate():
    # B flagged 5 shards, 2 recovered, 3 were rejected over 47 decisions; C's window here is 40 decisions, where
    # the old rate rule would give round(3 / 47 x 40) = round(2.55) = 3 and a floor 2
    b = {"flag": 5, "recovered": 2, "reject": 3}
    assert rejections_to_match(b) == 3
    cp = plan_c(b, 43, budget=80_000, largest_shard=2_200, context=128, rows_per_update=8, decay_updates=8)
    assert cp["count"] == 3 and len(cp["positions"]) == 3 and len(set(cp["positions"])) == 3
    # by hand: 80,000 / 2,200 -> 37 stable shards; 2,200 targets = 18 rows = 3 updates, so a decay of 8 updates
    # needs 3 more: 40 accepted at the fewest, and the 3 rejections are drawn among the first 40 + 3 - 1 = 42
    assert cp["min_accepted"] == 40 and cp["window"] == 42 and max(cp["positions"]) < 42


def test_arm_c_refuses_an_impossible_placement_in_one_line():
    with pytest.raises(ValueError, match="5 rejections cannot be placed among 4 decisions"):
        rejected_positions(5, 4, 43)
    with pytest.raises(ValueError, match="min_accepted 0 is below 1"):
        decision_window(2, 0)


def test_arm_c_window_by_hand():
    # budget 10,000 over shards of at most 2,500 targets: 4 accepted; a 2,500-target shard is 20 rows of 128,
    # 3 updates of 8 rows; a decay of 8 updates needs 3 such shards: 7 accepted at the fewest
    assert fewest_accepted(10_000, 2_500, 128, 8, 8) == 7
    assert fewest_accepted(10_000, 2_500, 128, 8, 0) == 4
    assert decision_window(3, 7) == 9 and decision_window(0, 7) == 0


def test_arm_c_rejects_at_its_drawn_positions_and_the_other_arms_decide_as_their_policies():
    # the micro study of tests/test_queue_study_run.py makes no rejection in B, so C's policy is checked here
    from shardqueue.engine.runner import Runner
    from shardqueue.study.arms import arm_a_plan, arm_b_plan, arm_c_plan

    calib = {"sigma": {"x": 0.1, "y": 0.1}, "k": 2.0, "frac": 0.5}  # threshold k x sigma = 0.2 per domain
    c = arm_c_plan(43, 1000, 4, 2, [2, 5], 0.3).policy_on(calib)
    assert [c.flag(p, None, None) for p in range(7)] == [[], [], ["random"], [], [], ["random"], []]
    assert c.name == "random" and c.unrecovered(None, None, ["random"], None) == ["random"]  # never recovers
    b = arm_b_plan(43, 1000, 4, 2).policy_on(calib)
    assert b.flag(2, {"x": 1.0, "y": 1.0}, {"x": 1.3, "y": 1.1}) == ["x"]  # position 2 is C's, but B's rule decides
    assert arm_a_plan(43, 1000, 4, 2).policy_on(calib).flag(5, {"x": 1.0}, {"x": 9.0}) == []
    # arm A stops at its budget, and once its reference curve covers every final loss
    a = object.__new__(Runner)
    a.shards, a.state, a.stable_ended = {"s1": {"tokens": 600}, "s2": {"tokens": 500}}, {"accepted": ["s1"]}, False
    a.plan = arm_a_plan(43, 1000, 4, 2)
    assert a.budget_left()
    a.state["accepted"].append("s2")
    assert not a.budget_left()  # 1,100 accepted targets: the budget is spent
    a.state["accepted"].pop()
    a.stable_ended = True
    assert not a.budget_left()


def test_the_reference_curves_table_says_where_each_branch_was_taken_and_which_thresholds_it_serves():
    """A new user's probe: a branch taken at 6,805 accepted targets was shown as "branch at 4,584" (its threshold), and
    the 0.707 threshold its shard also crossed was missing. Hand-worked: thresholds 100 and 141 crossed by one commit
    at 180 (one branch), 200 by the commit at 230, then the own decay."""
    from shardqueue.study.report import reference_curve_lines
    from shardqueue.study.run import a_curves

    sel = {"a": 3.0}
    run = {"arm": "A", "seed": 43, "start_targets": 10, "accounting": {"trained_targets": 410},
           "final": {"selection": {"a": 2.0}},
           "branches": [{"threshold": 100, "accepted_targets": 180, "D": 200, "selection": sel},
                        {"threshold": 141, "accepted_targets": 180, "D": 200, "selection": sel, "repeat_of": 100},
                        {"threshold": 200, "accepted_targets": 230, "D": 260, "selection": {"a": 2.5}}]}
    c = a_curves([run])["43"]
    assert (c["D"], c["threshold"], c["accepted"], c["also_thresholds"]) == (
        [190, 250, 400], [100, 200, "own decay"], [180, 230, None], [[141], [], []])
    rc = {"fractions": [0.5, 0.707, 1.0], "cap": 1.5, "coverage_by_seed": {}, "per_seed": {"43": c}, "D": [], "L": []}
    rows = [ln for ln in reference_curve_lines({"reference_curve": rc}) if ln.startswith("| 43 |")]
    assert rows == ["| 43 | branch at 180 accepted targets (threshold 100; also threshold 141: one shard crossed them) "
                    "| 190 | 3.0000 |", "| 43 | branch at 230 accepted targets (threshold 200) | 250 | 2.5000 |",
                    "| 43 | own decay | 400 | 2.0000 |"]


def test_arm_a_branches_at_each_threshold_once_and_ends_its_stable_phase_once_covered():
    # arm A's observer after each commit, on a stand-in runner, each branch's score scripted
    from types import SimpleNamespace

    from shardqueue.study.arms import ReferenceBranches

    def arm_a(cover_below=2.5, budget_threshold=500):
        a = ReferenceBranches([50, 100, 200, 300, 500, 700], budget_threshold, cover_below)
        lines, means = [], iter([3.0, 2.5, 2.2, 2.1])
        runner = SimpleNamespace(shards={f"s{i}": {"tokens": n} for i, n in enumerate([100, 250, 100, 100, 100, 100])},
                                 state={"accepted": [], "flagged": None}, decay_start=None, stable_ended=False,
                                 log=lines.append, lines=lines)
        a.reference_branch = lambda r, t, acc: {"threshold": t, "accepted_targets": acc, "selection_mean": next(means),
                                                "seconds": 1.5}
        return a, runner

    def accept(a, runner, sid, flagged=None):
        runner.state["accepted"].append(sid)
        runner.state["flagged"] = flagged
        a.committed(runner, [])
        return [(b["threshold"], b["accepted_targets"], b.get("repeat_of")) for b in a.branches]

    a, r = arm_a()
    # 100 accepted targets cross 50 and 100: one branch, and the second threshold repeats it (not trained)
    assert accept(a, r, "s0") == [(50, 100, None), (100, 100, 50)]
    assert accept(a, r, "s1", flagged="s9") == [(50, 100, None), (100, 100, 50)]  # never while a shard is flagged
    # the next commit, at 450, crosses 200 and 300: a repeat of the newest branch (not of the second)
    assert accept(a, r, "s2") == [(50, 100, None), (100, 100, 50), (200, 450, None), (300, 450, 200)]
    assert a.branches[3]["seconds"] == 0.0 and a.branches[3]["selection_mean"] == 2.5 and a.branches[2]["seconds"] == 1.5
    assert a.covered and not a.stopped  # 2.5 <= 2.5: the curve covers (at its level, too)
    # covered, but 500 is the budget's own threshold: still branched
    assert accept(a, r, "s3")[2:] == [(200, 450, None), (300, 450, 200), (500, 550, None)]
    assert accept(a, r, "s4")[-1] == (500, 550, None) and not a.stopped  # 650: below the next threshold
    # past the budget's threshold with the curve covered: the stable phase ends there, with no branch at 700
    assert accept(a, r, "s5")[-1] == (500, 550, None) and a.stopped and r.stable_ended
    assert r.lines == ["  reference curve covers 2.5000: arm A ends its stable phase at 750 accepted targets"]
    # with no cover level, or no budget threshold, arm A branches at every threshold to the end
    for kw in ({"cover_below": None}, {"budget_threshold": None}):
        b, rb = arm_a(**kw)
        assert [accept(b, rb, s)[-1][0] for s in ["s0", "s1", "s2", "s3", "s4", "s5"]] == [100, 300, 300, 500, 500, 700]  # 100, 350, 450, 550, 650, 750
        assert b.covered == (kw.get("cover_below", 1) is not None) and not b.stopped and not rb.stable_ended
    # a decay in progress never branches either
    c, rc = arm_a()
    rc.decay_start = 3
    assert accept(c, rc, "s0") == [] and not c.stopped


def test_every_drawn_position_is_reached_even_when_c_ends_as_early_as_it_can():
    # C ends once it has accepted `least` shards; it rejects at the drawn positions. Simulated decision by decision.
    for least in range(1, 8):
        for k in range(0, 7):
            for seed in range(30):
                pos = set(rejected_positions(k, decision_window(k, least), seed))
                accepted, rejected, p = 0, 0, 0
                while accepted < least:
                    if p in pos:
                        rejected += 1
                    else:
                        accepted += 1
                    p += 1
                assert rejected == k, (least, k, seed, sorted(pos))


def test_random_rejections_follow_count_and_seed_and_repeat_exactly():
    for k in (0, 1, 4, 10):
        pos = rejected_positions(k, 40, 43)
        assert len(pos) == k and len(set(pos)) == k and all(0 <= p < 40 for p in pos) and pos == sorted(pos)
        assert pos == rejected_positions(k, 40, 43)
    assert rejected_positions(10, 40, 43) != rejected_positions(10, 40, 44)
    # identical in a fresh interpreter (no hidden global state)
    code = "from shardqueue.study.random_rejection import rejected_positions; print(rejected_positions(10, 40, 43))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert json.loads(out) == rejected_positions(10, 40, 43)
    with pytest.raises(ValueError):
        rejected_positions(5, 4, 1)


# ---- presets ---------------------------------------------------------------------------
def test_proxy64m_plan_is_within_five_percent_of_64m_parameters():
    pl = plan("proxy64m")
    assert abs(pl["parameters"] / PROXY_TARGET_PARAMS - 1) < 0.05
    assert pl["pool_shards"] >= 1.5 * pl["budget_shards"]
    per_run = (pl["budget_shards"] + pl["decay_shards"]) * pl["shard_targets"]
    assert pl["arms"]["B"]["trained_targets"] == pl["arms"]["C"]["trained_targets"] == per_run
    assert pl["targets_per_update"] == 32768 and pl["shard_targets"] == 655_360_000


def test_the_plan_counts_the_model_a_corpus_vocabulary_makes():
    """A study on a corpus prepared with its own vocabulary trains a model of that vocabulary (run.with_corpus_vocab):
    its plan counts that model's parameters and FLOPs, not the preset's 8,192-token one. The reference: the model
    built from the run's config, its tensors counted."""
    from shardqueue.study.presets import PRESETS, train_config
    from training.trainer import build_model

    setting = PRESETS["tiny"].with_vocab(400)
    model = build_model(train_config(setting, 0), "cpu", seed=0)
    own, preset = plan("tiny", setting), plan("tiny")
    assert own["parameters"] == sum(t.numel() for t in model.parameters()) < preset["parameters"]
    assert own["flops_per_target"] < preset["flops_per_target"] and own["total_flops"] < preset["total_flops"]
    assert own["preset"] == "tiny" and own["shard_targets"] == preset["shard_targets"]


def test_dry_run_prints_the_plan(capsys):
    # the script itself, as a user runs it from any folder, finds the package on its own (--help: no torch to import)
    r = subprocess.run([sys.executable, str(ROOT / "queue" / "study.py"), "--help"], capture_output=True, text=True,
                       cwd="/")
    assert r.returncode == 0 and "--dry-run" in r.stdout, r.stderr
    assert queue_script("study").main(["--preset", "proxy64m", "--dry-run"]) == 0  # its main(), as the script calls it
    out = capsys.readouterr().out
    assert "65,864,334 parameters" in out and "| B (per seed) |" in out and "FLOPs" in out and "GB" in out
    assert "stage A (once): 10 shards" in out and "GPU-hours" in out and "128 GiB host memory" in out
    assert "host memory, peak" in out and "disk" in out and "fits the node" in out


# ---- report schema ---------------------------------------------------------------------
def test_schema_names_the_missing_key():
    with pytest.raises(SchemaError, match="'preset' is missing"):
        validate({"schema": "x"})
    with pytest.raises(SchemaError, match=r"summary\.schema: expected str"):
        validate({"schema": 3})


def test_a_summary_of_the_schema_before_reads_with_its_budget_verdict_named_held():
    """queue-study/4 called the budget check's verdict "equal" where the arms may train budgets a shard apart (a new
    user's probe: "equal": true beside a report saying 24% apart); /5 says "held", and the committed study of /4 reads
    as /5."""
    from records.study import VERSION, StudySummary

    old = json.loads((ROOT / "docs/results/queue_study_planned/summary.json").read_text())
    assert old["schema"] == "queue-study/4" and "equal" in old["budget_check"]
    s = StudySummary.load(ROOT / "docs/results/queue_study_planned/summary.json").values
    assert s["schema"] == VERSION == "queue-study/5" and "equal" not in s["budget_check"]
    assert s["budget_check"]["held"] is old["budget_check"]["equal"]
    with pytest.raises(SchemaError, match="held"):
        validate({**s, "budget_check": old["budget_check"]})


# ---- budgets and accounting from the logs ------------------------------------------------------
def _run(name, arm, stable, decay=512, start=10_000, decay_updates=4):
    D = start + stable + decay
    if arm == "A":
        return {"name": name, "arm": arm, "start_targets": start, "accounting": {},
                "branches": [{"threshold": 4096, "D": D, "decay_targets": decay, "decay_updates": decay_updates,
                              "selection": {}, "control": {}}]}
    return {"name": name, "arm": arm, "start_targets": start, "final": {"selection": {}, "control": {}},
            "accounting": {"trained_targets": D, "decay_targets": decay, "decay_updates": decay_updates}}


def test_budget_check_accepts_equal_budgets_and_names_an_unequal_run():
    from shardqueue.study.run import budget_check

    ok = budget_check([_run("A_s43", "A", 4200), _run("B_s43", "B", 4096), _run("C_s43", "C", 5000)], 4096, 1100)
    assert ok["held"] and ok["stable"] == {"A_s43": 4200, "B_s43": 4096, "C_s43": 5000}
    short = budget_check([_run("A_s43", "A", 4200), _run("B_s43", "B", 3000)], 4096, 1100)
    assert not short["held"] and short["problems"] == ["B_s43: 3,000 stable-phase targets for a budget of 4,096 "
                                                        "(short of it: its queue ran out of shards)"]
    over = budget_check([_run("A_s43", "A", 4200), _run("C_s43", "C", 5300)], 4096, 1100)
    assert not over["held"] and over["problems"] == ["C_s43: 5,300 stable-phase targets for a budget of 4,096 "
                                                      "(1,204 past it, the largest candidate shard 1,100)"]
    # the decay's length is its updates (LR 1 -> 0); its targets may differ by the shards' masked padding
    pad = budget_check([_run("A_s43", "A", 4200), _run("B_s43", "B", 4200, decay=600)], 4096, 1100)
    assert pad["held"]
    dec = budget_check([_run("A_s43", "A", 4200), _run("B_s43", "B", 4200, decay_updates=5)], 4096, 1100)
    assert not dec["held"] and dec["problems"] == ["decay lengths differ: A_s43 4 updates, B_s43 5 updates"]


def test_accounting_separates_accepted_from_wasted_work():
    from shardqueue.study.accounting import accounting, control_trace

    def train(sid, role, n, **kw):
        return {"event": "train", "shard": sid, "role": role, "updates": n, "targets": 100 * n, "seconds": 1.0 * n,
                "screen": {"score": 0.0}, "losses": {"d": 1.0}, "ref": {"d": 0.9}, "history_targets": 0, **kw}

    recs = [{"event": "start", "losses": {"d": 1.0}, "start_targets": 0},
            train("s1", "candidate", 2, position=0, flagged=[]), {"event": "accept", "shard": "s1"},
            train("s2", "candidate", 2, position=1, flagged=["d"]),
            train("s3", "recovery", 3, tested="s2", unrecovered=["d"]),
            {"event": "rollback", "shard": "s2"}, {"event": "return_front", "shard": "s3"},
            {"event": "branch", "shard": "s2", "possible": True, "updates": 1, "targets": 100, "seconds": 0.5},
            {"event": "reject", "shard": "s2", "outcome": "deferred", "sources": {"x": 1.0}},
            train("s3", "candidate", 3, position=2, flagged=[]), {"event": "accept", "shard": "s3"},
            {"event": "decay", "trained": [{"updates": 4, "targets": 400, "seconds": 2.0}], "history_targets": 1000,
             "scores": {"control": {"d": 0.5}}}]
    acc = accounting(recs)
    assert acc["wasted_updates"] == {"rejected": 2, "recovery": 3, "branch": 1}
    assert acc["accepted_updates"] == 2 + 3 + 4 and acc["accepted_targets"] == 500 and acc["decay_targets"] == 400
    assert acc["decisions"]["reject"] == 1 and acc["decisions"]["deferred"] == 1 and acc["decisions"]["flag"] == 1
    assert acc["rejected"] == [{"shard": "s2", "sources": {"x": 1.0}, "outcome": "deferred", "position": 1}]
    assert acc["screen_passes"] == 4 and acc["candidates"] == 3 and acc["trained_targets"] == 1000
    marks = [t["mark"] for t in control_trace(recs)]
    assert marks == ["start", "accept", "flag", "reject", "rollback", "accept", "decay"]


def test_polish_axis_rule():
    from shardqueue.study.non_english import is_polish, polish_axis

    assert is_polish("Zażółć gęślą jaźń, a to jest zwykłe polskie zdanie o łące i śniegu.")
    assert not is_polish("An ordinary English sentence about meadows and snow, with naïve café accents.")
    assert not is_polish("Где находится библиотека? Это русский текст.")
    res = polish_axis(["Zażółć gęślą jaźń i łąka."] * 3 + ["plain text"] * 10)
    assert not res["present"] and res["documents"] == [0, 1, 2] and res["text"].startswith("absent: 3 of 13")


def test_curve_variant_measures_residuals_from_the_frozen_curve():
    from shardqueue.policy.measured import CurveResiduals, QueueRule

    curves = {"a": {"a": 2.0, "b": 1.0, "c": 0.5, "D0": 100.0}}
    rule = CurveResiduals(QueueRule({"a": 0.1, "b": 0.1}, 2.0, 0.5, "clean"), curves)
    got = rule.seen({"a": 2.6, "b": 3.0}, 400.0)
    assert got["a"] == pytest.approx(2.6 - (2.0 + 1.0 * 4.0 ** -0.5)) and got["b"] == 3.0
    # the reference moves with the model's trained targets
    assert rule.seen({"a": 2.6, "b": 3.0}, 100.0)["a"] == pytest.approx(2.6 - 3.0)
    # and the rule judges the residuals as the basic rule judges losses
    assert rule.flag(0, {"a": 0.0, "b": 0.0}, {"a": 0.3, "b": 0.1}) == ["a"] and rule.branch_check.mode == "clean"


# ---- the reference curve's span and shape ---------------------------------------------------
def test_reference_fractions_are_evenly_spaced_in_log_d_below_the_cap():
    from shardqueue.study.reference_curve import fractions

    assert fractions(0.25, 4.0, 1) == [0.25, 0.5, 1.0, 2.0]
    got = fractions(0.5, 2.0, 2)
    assert got == pytest.approx([0.5, 0.7071, 1.0, 1.4142], abs=1e-4)
    with pytest.raises(ValueError):
        fractions(1.5, 4.0, 1)  # 1.0 (the budget) must be a point


def test_monotone_fit_averages_only_what_noise_folds():
    from shardqueue.study.reference_curve import curve_from_seeds, monotone

    # 2.0, 1.8, 1.9, 1.5: the rise 1.8 -> 1.9 folds; those two become their mean 1.85
    assert monotone([1, 2, 3, 4], [2.0, 1.8, 1.9, 1.5]) == ([1, 2, 3, 4], [2.0, 1.85, 1.85, 1.5])
    # two seeds pooled, sorted by D: 3.0 (D=10), 2.6 (D=11), 2.8 (D=20), 2.2 (D=21) -> 2.6 and 2.8 pooled to 2.7
    D, L = curve_from_seeds({"43": {"D": [10, 20], "L": [3.0, 2.8]}, "44": {"D": [11, 21], "L": [2.6, 2.2]}})
    assert D == [10, 11, 20, 21] and L == pytest.approx([3.0, 2.7, 2.7, 2.2])


def test_coverage_names_the_losses_outside_the_span():
    from shardqueue.study.reference_curve import coverage

    c = coverage([3.0, 2.5, 2.2], {"A_s43": 2.5, "B_s43": 2.1, "C_s44": 3.2})
    assert not c["ok"] and c["below"] == ["B_s43"] and c["above"] == ["C_s44"]
    assert coverage([3.0, 2.2], {"B_s43": 2.2})["ok"]


def test_per_axis_equivalent_on_a_hand_worked_curve():
    from shardqueue.study.efficiency import per_axis

    # L = 5 - 0.5 ln D exactly: beta = -0.5; at D = 100 the curve is 5 - 0.5 ln 100 = 2.6974
    D = [50.0, 100.0, 200.0]
    L = [5 - 0.5 * math.log(d) for d in D]
    runs = {("A", 43): (100.0, L[1]), ("A", 44): (100.0, L[1] + 0.01), ("B", 43): (100.0, L[1] - 0.05),
            ("B", 44): (100.0, L[1] - 0.06), ("C", 43): (100.0, L[1]), ("C", 44): (100.0, L[1])}
    got = per_axis({43: (D, L), 44: (D, L)}, D, L, 100.0, runs)
    assert got["beta"] == pytest.approx(-0.5) and got["slope_points"] == 3
    assert got["gaps_bpb"]["B_s44"] == pytest.approx(0.06) and got["gaps_bpb"]["A_s44"] == pytest.approx(-0.01)
    assert got["bpb_per_point"] == pytest.approx(0.5 * math.log(1.01))
    # seed spread of gaps 0.01 (A and B both): threshold max(0.5 ln 1.006, 0.02) = 0.02
    assert got["threshold_bpb"] == pytest.approx(0.02)
    assert got["b_minus_a_bpb"] == {"43": pytest.approx(0.05), "44": pytest.approx(0.07)}
    assert got["passes"]
    # B - A gaps 0.05 and 0.07: mean 0.06, se = 0.02 / 2, t(1 df) = 12.7062
    iv = got["intervals_bpb"]["B-A"]
    assert (iv["low"], iv["high"]) == (pytest.approx(0.06 - 0.127062, abs=1e-5), pytest.approx(0.06 + 0.127062, abs=1e-5))
    flat = per_axis({43: (D, L), 44: (D, L)}, D, [2.0, 2.0, 2.0], 100.0, runs)
    assert not flat["defined"] and "does not fall" in flat["reason"] and len(flat["gaps_bpb"]) == 6


# ---- the screen's agreement ----------------------------------------------------------------
def test_spearman_and_auc_against_hand_worked_values():
    from shardqueue.checks.run_summary import auc, ranks, spearman

    assert list(ranks([10, 20, 20, 5])) == [2.0, 3.5, 3.5, 1.0]
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ranks x 1 2 3 4, y 2 1 4 3: d^2 = 1+1+1+1 = 4 -> rho = 1 - 6*4/(4*15) = 0.6
    assert spearman([1, 2, 3, 4], [2, 1, 4, 3]) == pytest.approx(0.6)
    # positives 0.9, 0.4; negatives 0.5, 0.1: pairs won 1+1 (0.9), 0+1 (0.4) = 3 of 4
    assert auc([0.9, 0.4, 0.5, 0.1], [1, 1, 0, 0]) == pytest.approx(0.75)
    assert auc([0.3, 0.3], [1, 0]) == pytest.approx(0.5) and auc([1.0], [1]) is None


# ---- stage A: calibration split, schedule ----------------------------------------------------
def test_held_out_rate_is_reported_on_transitions_that_did_not_choose_k():
    from shardqueue.policy.rule import calibrate

    sig = [{"d": 1.0 + 0.1 * (t % 2)} for t in range(6)]  # deltas +-0.1: sigma = 0.1095
    choose = [{"d": 1.0}] * 5  # flat: the first grid point (k 1.5, frac 0.5) passes
    # report transitions: a rise of 1.0 that stays (unrecovered) -> one false rejection in 3 transitions
    report = [{"d": 1.0}, {"d": 2.0}, {"d": 2.0}, {"d": 2.0}, {"d": 2.0}]
    rec = calibrate(sig, choose, report)
    assert rec["k"] == 1.5 and rec["frac"] == 0.5 and rec["rate_kind"] == "held-out"
    assert (rec["false_rejections"], rec["transitions"]) == (1, 3)
    assert rec["choice"] == {"false_rejections": 0, "transitions": 3}
    assert calibrate(sig, choose)["rate_kind"] == "in-sample"


def test_schedule_keeps_weight_decay_constant_and_warms_up():
    from shardqueue.engine.schedule import decay, warmup
    from shardqueue.engine.training import train_rows
    from training.trainer import Trainer

    w = warmup(0, 4)
    assert [w(i) for i in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert warmup(2, 4)(0) == 0.75 and warmup(10, 0) == 1.0
    d = decay(2, 8)
    assert [d(i) for i in range(7)] == [0.75, 0.625, 0.5, 0.375, 0.25, 0.125, 0.0]
    from training.config import resolve_config

    cfg = resolve_config(None, ["depth=1", "width=32", "heads=2", "kv_heads=2", "context=32", "short_window=16",
                                "vocab=400", "micro_rows=8", "accum=1"])
    tr = Trainer(cfg, "cpu")
    x = np.zeros((8, cfg.context), dtype=np.int64)
    for step in (0, 500, 900):  # late in any horizon the baseline's weight decay would have fallen
        train_rows(tr, x, x, step, cfg.updates, 8, 1, 1.0)
        assert all(g["weight_decay"] == cfg.weight_decay for g in tr.muon.param_groups)


@pytest.mark.parametrize("argv, line", [
    (["--workers", "0"], "error: --workers 0: must be at least 1"),
    (["--ray-address", "10.0.0.1:6379"], "error: --ray-address 10.0.0.1:6379: applies to --engine ray only")])
def test_a_dry_run_refuses_what_the_run_would(argv, line, capsys):
    """A new user's probe: --dry-run printed a plan for --workers 0, and for a Ray address without --engine ray."""
    assert queue_script("study").main(["--preset", "tiny", "--dry-run", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == line + "\n"


def test_proxy64m_stage_a_is_ten_shards_and_its_dry_run_states_the_node():
    from shardqueue.study.presets import PRESETS, SUB_SHARD_NOTE

    pl = plan("proxy64m")
    assert pl["stage_a"]["shards"] == 10 and pl["stage_a"]["shared_shards"] == 10
    p = PRESETS["proxy64m"]
    # held-out shards (2 + 1) at 24 checkpoints: 72 states + the last sigma state = 73 states, 71 transitions;
    # 10 choose k and frac, and the report set (from the 11th state) holds 60 transitions
    states = 1 + (p.held_out_shards + 1) * p.checkpoints_per_shard
    assert states - 2 == 71 and states - (p.choose_transitions + 1) - 2 == 60
    n = pl["node"]
    assert n["gpus"] == 8 and n["host_memory_gib"] == 128 and n["runs_in_parallel"] == 6
    assert "cannot bound whole-shard false rejections" in SUB_SHARD_NOTE


def test_small_preset_meets_its_design_rules():
    from shardqueue.study.presets import PRESETS

    p = PRESETS["small"]
    pl = plan("small")
    assert p.budget_shards >= 3 * pl["stage_a"]["shared_shards"]  # stable phase >= 3 x shared stage A
    # held-out states: the last sigma state + one per held-out shard (held_out_shards + 1 of them); the report
    # set starts at state choose + 1 (no shard shared with the choice set) and each transition needs a recovery state
    states = 1 + p.held_out_shards + 1
    assert states - (p.choose_transitions + 1) - 2 >= 59 and p.choose_transitions > 0 and p.held_out_branch
    assert p.damaged_shards >= 4 and p.reference_cap >= 2
    # the planned preset is the small setting with the seeds stage A plans, at most max_seeds
    from dataclasses import replace

    q = PRESETS["planned"]
    assert replace(q, max_seeds=0) == p and q.max_seeds >= 6


def test_a_study_preset_names_its_bad_seed_settings():
    from dataclasses import replace

    from errors import DataError
    from shardqueue.study.presets import PRESETS

    with pytest.raises(ValueError, match="seeds must be two or more"):
        replace(PRESETS["tiny"], seeds=(43,))
    with pytest.raises(ValueError, match=r"max_seeds \(1\) is below the 2 seeds given"):
        replace(PRESETS["tiny"], max_seeds=1)
    with pytest.raises(DataError, match="'max_seeds': -1 must be at least 0"):
        replace(PRESETS["tiny"], max_seeds=-1)


def test_identifiability_refuses_nearly_flat_noisy_losses_without_overflow():
    # nearly flat, noisy stage-A losses once overflowed exp() of the interval's log half-width (now: c too wide)
    D = [1000.0 * (i + 1) for i in range(11)]
    L = [6.0, 5.2, 5.19, 5.21, 5.2, 5.18, 5.2, 5.21, 5.19, 5.2, 5.2]
    res = check_identifiable(D, L)
    assert not res["ok"] and res["reason"]


def test_curve_fit_intervals_use_the_residual_variance_of_three_fitted_parameters():
    # an independent reference: residuals at the reported fit, a central-difference Jacobian in (a, ln b, ln c)
    # on D / D0, s^2 = SSE / (n - 3) for three fitted parameters, half-width 1.96 sqrt(s^2 [(J'J)^-1]_aa)
    D = np.array([1.0, 2.0, 3.0, 4.0, 6.0, 8.0]) * 1000.0
    L = curve(D, 2.0, 1.0, 0.5, D0=1000.0) + np.array([0.01, -0.012, 0.006, 0.004, -0.009, 0.005])
    fit = check_identifiable(D, L)
    x = D / fit["D0"]
    theta = np.array([fit["a"], math.log(fit["b"]), math.log(fit["c"])])

    def model(t):
        return t[0] + math.exp(t[1]) * x ** (-math.exp(t[2]))

    r = model(theta) - L
    h = 1e-6
    J = np.stack([(model(theta + h * e) - model(theta - h * e)) / (2 * h) for e in np.eye(3)], axis=1)
    s2 = float(r @ r) / (len(D) - 3)
    half = 1.959964 * math.sqrt(s2 * np.linalg.inv(J.T @ J)[0, 0])
    lo, hi = fit["intervals"]["a"]
    assert (hi - lo) / 2 == pytest.approx(half, rel=1e-4)


def test_run_cost_from_a_log_by_hand():
    from shardqueue.study.accounting import run_cost

    recs = [{"event": "start", "time": 100.0},
            {"event": "train", "role": "candidate", "targets": 100, "seconds": 1.0, "history_targets": 1100,
             "time": 102.0},
            {"event": "accept", "time": 102.5},
            {"event": "train", "role": "candidate", "targets": 200, "seconds": 2.0, "history_targets": 1300,
             "time": 105.0},
            {"event": "train", "role": "recovery", "targets": 300, "seconds": 3.0, "history_targets": 1600,
             "time": 109.0},
            {"event": "rollback", "time": 109.5},
            {"event": "branch", "possible": True, "targets": 50, "seconds": 0.5, "time": 110.0},
            {"event": "train", "role": "candidate", "targets": 100, "seconds": 1.0, "history_targets": 1400,
             "time": 112.0},
            {"event": "done", "time": 115.0}]
    # every target trained, kept or wasted: 100 + 200 + 300 + 50 + 100; 7.5 s of training; 15 s from start to done
    assert run_cost(recs) == {"trained_targets": 750, "training_s": 7.5, "wall_s": 15.0, "records": 5}
    # up to the first train record whose history reaches 1,300 targets
    assert run_cost(recs, until_targets=1300) == {"trained_targets": 300, "training_s": 3.0, "wall_s": 5.0,
                                                  "records": 2}


def test_compute_per_arm_means_and_b_over_a_by_hand():
    from shardqueue.study.findings import compute_per_arm

    def c(arm, t, tr, w):
        return {"arm": arm, "seed": 0, "trained_targets": t, "training_s": tr, "wall_s": w}

    got = compute_per_arm({"A_s1": c("A", 100, 10, 20), "A_s2": c("A", 200, 20, 40), "B_s1": c("B", 300, 30, 90),
                           "B_s2": c("B", 500, 50, 110), "C_s1": c("C", 100, 1, 1), "C_s2": c("C", 100, 1, 1)})
    assert got["per_arm"]["A"] == {"seeds": 2, "trained_targets": 150, "training_s": 15, "wall_s": 30}
    assert got["per_arm"]["B"] == {"seeds": 2, "trained_targets": 400, "training_s": 40, "wall_s": 100}
    assert got["b_over_a"] == {"trained_targets": pytest.approx(400 / 150), "wall_s": pytest.approx(100 / 30),
                               "wall_vs_a_training_s": pytest.approx(100 / 15)}


def test_workers_below_one_are_refused_before_anything_is_made(tmp_path, capsys):
    import argparse

    from conftest import one_line_error
    from shardqueue.study.run import run_study

    rc = run_study(argparse.Namespace(preset="tiny", out=str(tmp_path / "s"), data_dir=None, dry_run=False,
                                      curve=False, calibration=None, device="cpu", workers=0))
    one_line_error(capsys, rc, "--workers 0: must be at least 1")
    assert not (tmp_path / "s").exists()


def test_arm_a_costs_its_plain_training_to_the_budget_without_its_earlier_branches(tmp_path):
    from shardqueue.study.run import run_costs

    recs = [{"event": "start", "time": 100.0},
            {"event": "train", "role": "candidate", "targets": 1000, "seconds": 2.0, "history_targets": 6000,
             "time": 110.0},
            {"event": "train", "role": "candidate", "targets": 1000, "seconds": 2.0, "history_targets": 7000,
             "time": 130.0},
            {"event": "train", "role": "candidate", "targets": 1000, "seconds": 2.0, "history_targets": 8000,
             "time": 150.0}]
    (tmp_path / "A_s43").mkdir()
    (tmp_path / "A_s43" / "decisions.jsonl").write_text(
        "".join(json.dumps({"seq": i + 1, **r}) + "\n" for i, r in enumerate(recs)))
    branches = [{"threshold": 500, "seconds": 6.0},  # taken between the first two shards: reference work
                {"threshold": 1000, "seconds": 5.0, "train_seconds": 1.5, "decay_targets": 300,
                 "stable_history_targets": 7000}]
    got = run_costs(tmp_path, [{"arm": "A", "seed": 43, "name": "A_s43", "branches": branches}], 1000)
    # two stable shards (2,000 targets, 4 s) and the decay branch's 300 targets and 1.5 s of training; wall:
    # 30 s to the second shard, less the 6 s earlier branch, plus the 5 s branch at the budget
    assert got == {"A_s43": {"arm": "A", "seed": 43, "trained_targets": 2300, "training_s": 5.5, "wall_s": 29.0}}


def test_arms_ending_at_one_point_stay_visible_in_the_selection_figure(tmp_path, monkeypatch):
    """Arms with no rejection end where plain training ends (the main job's A, B and C at seed 43): their final
    points are drawn largest first, A's circle around B's square around C's triangle, none hidden."""
    from shardqueue.study import figures

    from matplotlib.figure import Figure

    drawn = []
    monkeypatch.setattr(figures.plt, "close", drawn.append)
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: None)  # the layout is what is read, not the file
    curve = {"D": [500, 1000, 2000], "L": [2.8, 2.5, 2.3]}
    runs = [{"arm": a, "seed": 43, "trained_targets": 1000, "final_selection": {"mean": 2.5}} for a in "CBA"]
    figures.selection_figure({"adoption": {"seeds": [43]}, "runs": runs,
                              "reference_curve": {**curve, "per_seed": {"43": curve}}}, tmp_path / "s.png")
    finals = [ln for ln in drawn[0].axes[0].lines if len(ln.get_xdata()) == 1]
    assert [(ln.get_marker(), ln.get_markersize()) for ln in finals] == [("o", 15), ("s", 11), ("^", 7)]
    # the legend beside the axes, not over them: inside at the upper right it hid a run's final point there
    ax, r = drawn[0].axes[0], drawn[0].canvas.get_renderer()
    assert ax.get_legend().get_window_extent(r).x0 > ax.get_window_extent(r).x1
