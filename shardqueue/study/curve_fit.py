"""The frozen reference curve of the curve-guided variant, L̂(D) = a + b·D^(−c), and the
identifiability check it must pass before any rule uses it (the proposal's section 2).

The fit is least squares in (a, ln b, ln c) with D scaled by its smallest value D0 (so b
is reported at that scale too: L̂ = a + b·(D/D0)^(−c)); b > 0 and c > 0 hold by
construction. It is a Levenberg–Marquardt iteration in numpy (no scipy here), started
from several exponents c; at each start a and b come from linear least squares.

Identifiability, with thresholds written down here, before any calibration runs:
  * at least MIN_POINTS points;
  * every start converges, and all starts land on the same parameters: the largest
    difference in a (relative to |a|), in ln b and in ln c is below AGREE_REL;
  * the covariance s²(JᵀJ)⁻¹ exists (JᵀJ condition number below MAX_COND) and every
    95% interval is finite; the intervals of ln b and ln c have half-width below
    MAX_LOG_HALFWIDTH (b and c known within a factor of 2 either way), and the interval
    of a has half-width below A_HALFWIDTH_VS_RANGE × (range of the observed losses).
Otherwise the curve is refused with a one-line reason and the basic rule is used.
"""
import math

import numpy as np

from shardqueue.policy.measured import curve  # the curve's one definition: the curve-guided rule reads it too

STARTS = (0.05, 0.2, 0.5, 1.0, 2.0)  # initial exponents c
MIN_POINTS = 5
AGREE_REL = 0.01
MAX_COND = 1e12
Z95 = 1.959963984540054
MAX_LOG_HALFWIDTH = math.log(2.0)
A_HALFWIDTH_VS_RANGE = 1.0
THRESHOLDS = {"starts": list(STARTS), "min_points": MIN_POINTS, "agree_rel": AGREE_REL, "max_cond": MAX_COND,
              "z": Z95, "max_log_halfwidth_b_c": MAX_LOG_HALFWIDTH, "a_halfwidth_vs_loss_range": A_HALFWIDTH_VS_RANGE}


def _residual_jac(theta, x, y):
    a, lb, lc = theta
    b, c = math.exp(lb), math.exp(lc)
    p = b * x ** (-c)
    r = a + p - y
    J = np.stack([np.ones_like(x), p, p * (-np.log(x)) * c], axis=1)
    return r, J


def _linear_ab(x, y, c):
    """a, b by least squares for a fixed exponent; b floored at a small positive value."""
    A = np.stack([np.ones_like(x), x ** (-c)], axis=1)
    (a, b), *_ = np.linalg.lstsq(A, y, rcond=None)
    floor = 1e-3 * max(float(np.ptp(y)), 1e-12)
    return float(a), float(max(b, floor))


def fit_from(x, y, c0, max_iter=2000, tol=1e-12):
    """One Levenberg–Marquardt run from exponent c0; returns (theta, sse, converged)."""
    a0, b0 = _linear_ab(x, y, c0)
    theta = np.array([a0, math.log(b0), math.log(c0)])
    r, J = _residual_jac(theta, x, y)
    sse, lam = float(r @ r), 1e-3
    for _ in range(max_iter):
        g = J.T @ r
        H = J.T @ J
        step = None
        while lam < 1e16:
            try:
                step = np.linalg.solve(H + lam * np.diag(np.diag(H) + 1e-30), -g)
            except np.linalg.LinAlgError:
                lam *= 10
                continue
            cand = theta + step
            if abs(cand[2]) > 5 or abs(cand[1]) > 60:  # c beyond e^±5 or b beyond e^±60: running away
                lam *= 10
                continue
            r2, J2 = _residual_jac(cand, x, y)
            sse2 = float(r2 @ r2)
            if sse2 <= sse:
                break
            lam *= 10
        else:
            return theta, sse, False
        done = sse - sse2 <= tol * max(sse, 1e-300) and float(np.max(np.abs(step))) < 1e-8
        theta, r, J, sse, lam = cand, r2, J2, sse2, max(lam / 10, 1e-12)
        if done or sse < 1e-300:
            return theta, sse, True
    return theta, sse, False


def check_identifiable(D, L):
    """Fit the reference curve and decide whether it is identifiable.

    Returns {"ok", "reason", "a", "b", "c", "D0", "intervals", "starts", "thresholds"};
    `reason` is one line when ok is False.
    """
    D, L = np.asarray(D, dtype=float), np.asarray(L, dtype=float)
    res = {"ok": False, "reason": "", "thresholds": THRESHOLDS, "points": int(len(D))}
    if len(D) != len(L) or len(D) < MIN_POINTS:
        res["reason"] = f"{len(D)} points; the fit needs at least {MIN_POINTS}"
        return res
    if not (np.all(np.isfinite(D)) and np.all(np.isfinite(L)) and np.all(D > 0)):
        res["reason"] = "trained targets must be positive and losses finite"
        return res
    D0 = float(D.min())
    x = D / D0
    if np.ptp(x) == 0:
        res["reason"] = "all points at the same number of trained targets"
        return res
    fits = [fit_from(x, L, c0) for c0 in STARTS]
    res["D0"] = D0
    res["starts"] = [{"c0": c0, "a": float(t[0]), "b": math.exp(t[1]), "c": math.exp(t[2]), "sse": s, "converged": ok}
                     for c0, (t, s, ok) in zip(STARTS, fits)]
    best = min(range(len(fits)), key=lambda i: fits[i][1])
    theta, sse, _ = fits[best]
    a, b, c = float(theta[0]), math.exp(theta[1]), math.exp(theta[2])
    res.update({"a": a, "b": b, "c": c, "sse": sse})
    if not all(ok for _, _, ok in fits):
        bad = [str(s["c0"]) for s in res["starts"] if not s["converged"]]
        res["reason"] = f"the fit did not converge from start(s) c0 = {', '.join(bad)}"
        return res
    # compared in the fitted coordinates: a relative to the loss scale, ln b and ln c absolutely
    a_scale = max(abs(a), float(np.ptp(L)), 1e-12)
    spread = max(max(abs(float(t[0]) - a) / a_scale, abs(float(t[1]) - float(theta[1])),
                     abs(float(t[2]) - float(theta[2]))) for t, _, _ in fits)
    res["start_disagreement"] = spread
    if spread > AGREE_REL:
        res["reason"] = f"starts converge to different parameters (largest difference {spread:.3g} > {AGREE_REL})"
        return res
    _, J = _residual_jac(theta, x, L)
    H = J.T @ J
    cond = float(np.linalg.cond(H))
    if not math.isfinite(cond) or cond > MAX_COND:
        res["reason"] = f"the fit's covariance does not exist (JᵀJ condition number {cond:.3g} > {MAX_COND:.0e})"
        return res
    dof = len(D) - 3
    s2 = sse / dof if dof > 0 else float("inf")
    cov = s2 * np.linalg.inv(H)
    half = Z95 * np.sqrt(np.maximum(np.diag(cov), 0.0))
    if not np.all(np.isfinite(half)):
        res["reason"] = "a parameter interval is not finite"
        return res
    half = [float(h) for h in half]
    if max(half[1], half[2]) > 700:  # exp() of the log half-width would overflow: the interval is unbounded
        res["reason"] = "a parameter interval is unbounded (its log half-width exceeds 700)"
        return res
    res["intervals"] = {"a": [a - half[0], a + half[0]], "b": [b * math.exp(-half[1]), b * math.exp(half[1])],
                        "c": [c * math.exp(-half[2]), c * math.exp(half[2])]}
    rng = float(np.ptp(L))
    if half[0] > A_HALFWIDTH_VS_RANGE * rng:
        res["reason"] = f"interval of a too wide (half-width {half[0]:.3g} > {A_HALFWIDTH_VS_RANGE} x loss range {rng:.3g})"
        return res
    for name, h in (("b", half[1]), ("c", half[2])):
        if h > MAX_LOG_HALFWIDTH:
            res["reason"] = (f"interval of {name} too wide (x{math.exp(h):.3g} either way; the limit is "
                             f"x{math.exp(MAX_LOG_HALFWIDTH):.3g})")
            return res
    res["ok"] = True
    return res


def residual(fit, D, loss):
    """Observed minus reference loss at D trained targets (the curve-guided rule's input)."""
    return float(loss - curve(D, fit["a"], fit["b"], fit["c"], fit["D0"]))
