"""Arm A's reference curve: where its decay branches sit, one monotone curve from the seeds'
points, the curve each seed is measured against (the other seeds' points: leave one out), and
whether it spans every loss it must measure.

Branch points are spaced evenly in log D: fractions 2^(j / per_doubling) of the stable
budget, from `lowest` up to (not including) the cap; the cap is arm A's own run budget,
whose in-queue decay is the last point. Arm A stops earlier once a branch reached the
lowest loss the curve must cover (arms.ReferenceBranches).

The curve is the isotonic (non-increasing in D) least-squares fit to both seeds' points
pooled (pool-adjacent-violators): where noise would fold the curve, neighbouring points
are averaged until it no longer does; elsewhere the points are kept. More training on
the same pool is assumed not to raise the selection loss; the report shows each seed's
raw points beside the fit.

Every run at seed s is measured against the curve of arm A's other seeds (leave_one_out): a
curve that holds seed s's own points would measure arm A against itself (its points would be
zero by construction and its seed spread zero), and B and C at seed s share arm A's
initialisation and order seed. With two seeds each seed's curve is the other seed's.
"""
import math


def fractions(lowest, cap, per_doubling):
    """Reference fractions of the budget below the cap, evenly spaced in log D; 1.0 is always one of them."""
    lo = round(math.log2(lowest) * per_doubling)
    hi = round(math.log2(cap) * per_doubling)
    out = [2 ** (j / per_doubling) for j in range(lo, hi)]
    if 1.0 not in out:
        raise ValueError("the reference fractions must contain 1.0 (the budget)")
    return out


def monotone(D, L):
    """Non-increasing least-squares fit of L against D (D sorted ascending); returns (D, fitted L)."""
    pts = sorted(zip(D, L))
    blocks = []  # [sum, count]
    for _, y in pts:
        blocks.append([y, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] < blocks[-1][0] / blocks[-1][1]:
            s, n = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += n
    fit = [s / n for s, n in blocks for _ in range(n)]
    return [x for x, _ in pts], fit


def curve_from_seeds(per_seed):
    """{seed: {"D": [...], "L": [...]}} -> (D, fitted L) from all seeds' points pooled, with distinct D.

    Equal D (possible across seeds) are merged into their mean loss so D is strictly increasing."""
    D, L = [], []
    for c in per_seed.values():
        D += list(c["D"])
        L += list(c["L"])
    d, f = monotone(D, L)
    out_d, out_l = [], []
    for x, y in zip(d, f):
        if out_d and x == out_d[-1]:
            continue  # equal D got equal fitted values (PAV pools ties only if they fold; keep the first)
        out_d.append(float(x))
        out_l.append(float(y))
    return out_d, out_l


def leave_one_out(per_seed):
    """{seed: (D, fitted L)}: for each seed, the monotone curve of every other seed's points."""
    if len(per_seed) < 2:
        raise ValueError(f"a leave-one-out curve needs arm A at two or more seeds (got {len(per_seed)})")
    return {s: curve_from_seeds({k: c for k, c in per_seed.items() if k != s}) for s in per_seed}


def coverage(L, losses):
    """{"ok", "lowest", "highest", "below": [...], "above": [...]}: arm losses outside the curve's span."""
    lo, hi = min(L), max(L)
    below = sorted(n for n, v in losses.items() if v < lo)
    above = sorted(n for n, v in losses.items() if v > hi)
    return {"ok": not below and not above, "lowest": lo, "highest": hi, "below": below, "above": above}
