"""Efficiency points on the selection axis, measured against arm A's reference curve.

Definition (written into the study report verbatim, see DEFINITION):
  The reference curve is arm A's selection loss (BPB, after the same final decay) against
  trained targets D, averaged over A's two seeds, piecewise linear in log D between its
  points. For an arm that ends at D_arm trained targets with final selection loss L, the
  equivalent budget D_eq is the smallest D at which the reference curve reaches L, and
      efficiency points = 100 × (D_eq / D_arm − 1),
  the percentage of extra trained targets plain training (A) would need to match the arm
  (negative: the arm is worse than A at its own budget). When L lies outside the losses
  the curve spans (below its lowest or above its highest point), D_eq would be an
  extrapolation: the points are refused (None, with the reason), not guessed.
"""
import math

import numpy as np

DEFINITION = (
    "Reference curve: arm A's selection loss (bits per byte, each point after the same final decay) against "
    "trained targets D, averaged over A's two seeds on a common grid (each seed interpolated linearly in log D), "
    "piecewise linear in log D between points. For an arm with D_arm trained targets and final selection loss L, "
    "D_eq is the smallest D at which the reference curve reaches L, and efficiency points = 100 x (D_eq / D_arm - 1): "
    "the percentage of extra trained targets plain training would need to match the arm (negative: worse than plain "
    "training). A loss outside the range the curve spans would need extrapolation and is refused, not guessed.")


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
