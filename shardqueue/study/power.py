"""How many seeds per arm the study needs, planned from stage A's noise before any arm trains.

The question: with n seeds per arm, is the 95% t interval of the mean paired difference B - A
(about two standard errors either side) narrower than the proposal's threshold floor of 0.6
efficiency points? An interval narrower than the floor cannot contain both zero and the
threshold, so the verdict cannot be "unresolved" for the usual reason.

The planning model (its figures come from stage A alone, the only training done before the arms):
  * sigma_run: the spread of one run's final selection loss between seeds is taken to be the
    mean over the control domains of sigma_d, stage A's spread of shard-to-shard loss changes on
    a homogeneous source: a seed reorders every shard, so a final loss carries at least one
    shard's worth of that noise;
  * B - A at one seed is the difference of two such runs: sigma_diff = sqrt(2) x sigma_run (no
    credit is taken for the pairing);
  * beta: the least-squares slope of the mean control loss against ln D over stage A's measured
    states; one efficiency point is worth |beta| x ln(1.01) BPB (the per-axis equivalent's
    conversion), so sigma_diff in points = sigma_diff / (|beta| ln 1.01).
Stage A lies before the budget, where the loss still falls faster: |beta| near the budget is
likely smaller and the points noisier, so the planned count is a lower bound. The report sets
it beside the count that the measured paired spread asks for.
"""
import math

import numpy as np

from shardqueue.study.intervals import judged_slope, slope_text, t_quantile

FLOOR_POINTS = 0.6
LEVEL = 0.95
MOST_SEEDS = 10 ** 9  # a search bound, not a plan


def interval_width(sigma, n, level=LEVEL):
    """Expected width of the t interval of a mean of n paired differences of spread sigma."""
    return 2 * t_quantile(0.5 + level / 2, n - 1) * sigma / math.sqrt(n)


def seeds_needed(sigma, width, level=LEVEL):
    """The smallest n >= 2 whose interval (interval_width) is narrower than width; None when sigma is unknown."""
    if sigma is None or not math.isfinite(sigma):
        return None
    if sigma <= 0:
        return 2
    if interval_width(sigma, MOST_SEEDS, level) >= width:
        return None
    lo, hi = 2, MOST_SEEDS  # the width falls with n: bisect for the first n below width
    if interval_width(sigma, lo, level) < width:
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if interval_width(sigma, mid, level) < width else (mid, hi)
    return hi


def stage_a_slope(D, states, level=LEVEL):
    """(beta, reason): least-squares slope of the mean control loss against ln D over stage A's states
    (D > 0 only), or None with a one-line reason when it cannot be used. "Falling" is judged against the
    slope's own standard error at `level` (intervals.judged_slope), never by its sign alone."""
    pts = [(math.log(d), sum(s.values()) / len(s)) for d, s in zip(D, states) if d > 0]
    if len(pts) < 3:
        return None, f"{len(pts)} stage-A states with D > 0; 3 needed for a slope and its standard error"
    if len({x for x, _ in pts}) == 1:
        return None, "every stage-A state has the same D; no slope"
    s = judged_slope([x for x, _ in pts], [y for _, y in pts], level)
    if not s["falls"]:
        return None, f"the control loss does not fall clearly over stage A (BPB per unit ln D): {slope_text(s, level)}"
    return s["beta"], ""


def plan_seeds(sigma, beta, beta_reason="", floor=FLOOR_POINTS, level=LEVEL):
    """The seed plan from stage A: {"sigma_run_bpb", "sigma_diff_bpb", "beta", "points_per_bpb",
    "sigma_diff_points", "floor", "level", "seeds_needed", "reason"}."""
    sig = sum(sigma.values()) / len(sigma)
    out = {"sigma_run_bpb": sig, "sigma_diff_bpb": math.sqrt(2) * sig, "beta": beta, "floor": floor,
           "level": level, "points_per_bpb": None, "sigma_diff_points": None, "seeds_needed": None,
           "reason": beta_reason}
    if beta is None:
        return out
    per = 1 / (abs(beta) * math.log(1.01))
    out.update(points_per_bpb=per, sigma_diff_points=out["sigma_diff_bpb"] * per)
    out["seeds_needed"] = seeds_needed(out["sigma_diff_points"], floor, level)
    if out["seeds_needed"] is None:
        out["reason"] = f"more than {MOST_SEEDS:,} seeds"
    return out


def seeds_to_use(needed, fixed, most):
    """The seeds a study runs: the preset's own seeds when it plans none (most = 0: the proposal's two),
    else the planned count, at least the preset's seeds and at most `most`, continuing from its first seed."""
    if not most:
        return tuple(fixed)
    n = min(most, max(len(fixed), needed or most))
    return tuple(fixed[0] + i for i in range(n))
