"""Efficiency points on the selection axis, measured against arm A's reference curve, and their
per-axis equivalent (the proposal "Can a model help choose its next training data?" allows
"efficiency points or its per-axis equivalent").

Both definitions are written into the study report verbatim (DEFINITION, AXIS_DEFINITION):
  D counts the targets trained after the shared start (stage A's warm-up and sigma shards,
  which every arm starts from): the stable phase plus the final decay. The shared training
  is left out because it is the same in every arm; counting it would shrink every ratio of
  D toward 1 and make the points measure almost nothing.
  The reference curve of a run at seed s is arm A's selection loss (BPB, each point after
  the same final decay) against D from arm A's other seeds (leave one out: the curve never
  holds the run's own seed), pooled and fitted non-increasing (reference_curve.py),
  piecewise linear in log D. For an arm that ends at D_arm with final selection loss L, D_eq
  is the smallest D at which the curve reaches L, and
      efficiency points = 100 x (D_eq / D_arm - 1).
  A loss outside the span of the curve would need extrapolation: refused, with the reason.
  Per-axis equivalent: beta is the least-squares slope of selection loss against ln D over
  arm A's points (all seeds) within a factor 2 of the budget's D; the gap of a run is
  L_curve(D_arm) - L (BPB, positive: better than plain training at its own D), on the same
  leave-one-out curve; one efficiency point is worth |beta| x ln(1.01) BPB there, and the
  threshold's equivalent is max(|beta| x ln(1.006), 2 x seed spread of gaps), the spread
  being adoption.py's (the largest arm's mean pairwise difference). Gaps exist for every run,
  refused points or not.
"""
import math

import numpy as np

from shardqueue.study.intervals import judged_slope, mean_pairwise_difference, paired_interval, slope_text

DEFINITION = (
    "D = targets trained after the shared start (the stable phase plus the final decay; stage A's shared warm-up and "
    "sigma shards are the same in every arm and are left out, so ratios of D measure what the arms did). Reference "
    "curve of a run at seed s: arm A's selection loss (bits per byte, each point after the same final decay) against "
    "D, from arm A's other seeds only (leave one out: no run is measured on a curve that holds its own seed, so arm "
    "A's points are measured too, not zero by construction), pooled and fitted non-increasing in D "
    "(pool-adjacent-violators: points that noise would fold are averaged), piecewise linear in log D. For an arm "
    "with D_arm and final selection loss L, D_eq is the smallest D at which the reference curve reaches L, and efficiency points = 100 x (D_eq / D_arm - 1): the percentage of "
    "extra trained targets plain training would need to match the arm (negative: worse than plain training). A loss "
    "outside the range the curve spans would need extrapolation and is refused, not guessed.")
AXIS_DEFINITION = (
    "Per-axis equivalent (in bits per byte on the selection axis): beta = least-squares slope of arm A's selection "
    "loss against ln D over its points (all seeds) with D within a factor 2 of the budget's D. A run's gap = "
    "L_curve(D_arm) - L_arm on its seed's leave-one-out curve (positive: better than plain training at the same D). "
    "One efficiency point is worth |beta| x ln(1.01) BPB; the threshold's equivalent is max(|beta| x ln(1.006), "
    "2 x the seed spread of gaps), the seed spread being the largest arm's mean pairwise difference between seeds. "
    "B - A and B - C are differences of gaps at the same seed, with their 95% t intervals over the seeds. Defined whenever beta falls (t below the one-sided 95% t quantile at n - 2 df), "
    "whether or not efficiency points were refused.")


def equivalent_targets(D, L, loss):
    """(D_eq, reason): the first crossing of loss on the curve (D ascending), log-linear in D."""
    D, L = np.asarray(D, dtype=float), np.asarray(L, dtype=float)
    if len(D) < 2 or len(D) != len(L):
        return None, "the reference curve needs at least two points"
    if np.any(np.diff(D) <= 0) or np.any(D <= 0):
        return None, "the reference curve's trained targets must be positive and strictly increasing"
    if not math.isfinite(loss):
        return None, "the arm's loss is not finite"
    for i in range(len(D) - 1):
        lo, hi = L[i], L[i + 1]
        if (lo - loss) * (hi - loss) <= 0:
            if lo == hi:
                return float(D[i]), ""
            t = (lo - loss) / (lo - hi)
            return float(math.exp(math.log(D[i]) + t * (math.log(D[i + 1]) - math.log(D[i])))), ""
    if loss < L.min():
        return None, (f"loss {loss:.4f} is below every point of the reference curve (lowest {L.min():.4f}); "
                      f"beyond D = {D[np.argmin(L)]:.4g} it would be an extrapolation")
    return None, f"loss {loss:.4f} is above every point of the reference curve (highest {L.max():.4f})"


def efficiency_points(D, L, d_arm, loss):
    """{"points": float or None, "d_eq": ..., "reason": ...} for one arm and seed."""
    d_eq, why = equivalent_targets(D, L, loss)
    if d_eq is None:
        return {"points": None, "d_eq": None, "reason": why}
    return {"points": 100.0 * (d_eq / float(d_arm) - 1.0), "d_eq": d_eq, "reason": ""}


def average_curves(curves):
    """Seed average of curves [(D, L), ...] on the union of their D inside the common range.

    Each curve is interpolated linearly in log D; points outside the range every curve
    covers are dropped (no extrapolation here either).
    """
    if not curves:
        raise ValueError("no curves to average")
    lo = max(float(np.min(d)) for d, _ in curves)
    hi = min(float(np.max(d)) for d, _ in curves)
    if lo > hi:
        raise ValueError("the curves share no range of trained targets")
    grid = np.unique(np.concatenate([np.asarray(d, dtype=float) for d, _ in curves]))
    grid = grid[(grid >= lo) & (grid <= hi)]
    vals = [np.interp(np.log(grid), np.log(np.asarray(d, dtype=float)), np.asarray(l, dtype=float))
            for d, l in curves]
    return grid.tolist(), np.mean(vals, axis=0).tolist()


def local_slope(D, L, d_at, level=0.95):
    """(beta, n points, reason): least-squares slope of L against ln D over points with D in [d_at/2, 2 d_at];
    None unless it falls at `level` against its own standard error (intervals.judged_slope)."""
    D, L = np.asarray(D, dtype=float), np.asarray(L, dtype=float)
    keep = (D >= d_at / 2) & (D <= d_at * 2)
    if keep.sum() < 3:
        return None, int(keep.sum()), f"{int(keep.sum())} points within a factor 2 of D = {d_at:,.0f}; 3 needed"
    if np.ptp(D[keep]) == 0:
        return None, int(keep.sum()), f"every point near D = {d_at:,.0f} is at the same D; no slope"
    s = judged_slope(np.log(D[keep]).tolist(), L[keep].tolist(), level)
    if not s["falls"]:
        return None, int(keep.sum()), (f"the selection loss does not fall clearly with D near D = {d_at:,.0f} "
                                       f"({slope_text(s, level)})")
    return s["beta"], int(keep.sum()), ""


def curve_at(D, L, d):
    """The curve's loss at d (linear in log D; the end values beyond its ends)."""
    return float(np.interp(math.log(d), np.log(np.asarray(D, dtype=float)), np.asarray(L, dtype=float)))


def per_axis(curves, raw_D, raw_L, d_budget, runs, floor_points=0.6):
    """Gaps (BPB) of every run, B - A and B - C per seed in BPB, and the threshold's equivalent.

    curves: {seed: (D, L)}, the curve each seed's runs are measured on (leave one out);
    runs: {(arm, seed): (D_arm, L)}. Returns a dict; "defined" False with a reason when beta is not."""
    beta, n, why = local_slope(raw_D, raw_L, d_budget)
    gaps = {f"{a}_s{s}": curve_at(*curves[s], d) - loss for (a, s), (d, loss) in runs.items()}
    out = {"gaps_bpb": gaps, "beta": beta, "slope_points": n, "defined": beta is not None, "reason": why}
    if beta is None:
        return out
    seeds = sorted({s for _, s in runs})
    spread = max(mean_pairwise_difference([gaps[f"{a}_s{s}"] for s in seeds]) for a in "ABC")
    thr = max(abs(beta) * math.log(1 + floor_points / 100), 2 * spread)
    b_a = {str(s): gaps[f"B_s{s}"] - gaps[f"A_s{s}"] for s in seeds}
    b_c = {str(s): gaps[f"B_s{s}"] - gaps[f"C_s{s}"] for s in seeds}
    out.update({"bpb_per_point": abs(beta) * math.log(1.01), "seed_spread_bpb": spread, "threshold_bpb": thr,
                "b_minus_a_bpb": b_a, "b_minus_c_bpb": b_c,
                "intervals_bpb": {"B-A": paired_interval(list(b_a.values())), "B-C": paired_interval(list(b_c.values()))},
                "passes": all(v > thr for v in b_a.values()) and all(v > thr for v in b_c.values())})
    return out
