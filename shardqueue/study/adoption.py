"""The proposal's adoption rule (section 4), applied mechanically to efficiency points.

Inputs: efficiency points per arm ("A", "B", "C") and seed (two seeds), all measured on
the same reference curve. Definitions used here and printed in the report:
  * seed spread: for each arm, the absolute difference between its two seeds' points;
    the seed spread is the largest of the three (the "larger within-arm difference").
  * threshold = max(0.6, 2 × seed spread) efficiency points.
  * B − A and B − C are paired by seed (same seed: same initialisation and order seed).
  * Adopt only if, for both seeds, B − A > threshold and B − C > threshold.
Three verdicts, never confused:
  * "adopted within this tested setting": every point measured, both comparisons above
    the threshold at both seeds;
  * "not adopted": every point measured, some comparison not above the threshold (the
    proposal: the queue stays an analysis tool and the baseline stays in place);
  * "not measurable": some efficiency points were refused (the reference curve, even at its
    cap, does not span the loss), so the rule could not be applied; the reasons are listed.
"""
ADOPTED = "adopted within this tested setting"
NOT_ADOPTED = "not adopted"
NOT_MEASURABLE = "not measurable"
VERDICTS = (ADOPTED, NOT_ADOPTED, NOT_MEASURABLE)
FLOOR = 0.6


def seed_spread(points):
    """(spread, arm, per-arm differences); None values make the spread unknown (None)."""
    per = {}
    for arm, by_seed in sorted(points.items()):
        vals = list(by_seed.values())
        if len(vals) != 2:
            raise ValueError(f"arm {arm}: {len(vals)} seeds; the rule is defined for two")
        per[arm] = None if None in vals else abs(vals[0] - vals[1])
    if any(v is None for v in per.values()):
        return None, None, per
    arm = max(per, key=lambda a: per[a])
    return per[arm], arm, per


def adoption(points, refusals=None):
    """Apply the rule; returns the numbers, the verdict and its reasons (one line each).

    refusals: {run name: reason} for refused points (shown as the "not measurable" reasons)."""
    for arm in ("A", "B", "C"):
        if arm not in points:
            raise ValueError(f"efficiency points for arm {arm} are missing")
    seeds = sorted(points["B"])
    if sorted(points["A"]) != seeds or sorted(points["C"]) != seeds:
        raise ValueError("arms A, B and C must be measured at the same two seeds")
    spread, spread_arm, per_arm = seed_spread(points)
    threshold = None if spread is None else max(FLOOR, 2.0 * spread)

    def diff(x, y):
        return None if x is None or y is None else x - y

    b_a = {s: diff(points["B"][s], points["A"][s]) for s in seeds}
    b_c = {s: diff(points["B"][s], points["C"][s]) for s in seeds}
    reasons = []
    if threshold is None:
        missing = [f"{a}_s{s}" for a in ("A", "B", "C") for s in seeds if points[a][s] is None]
        reasons += [f"{n}: {(refusals or {}).get(n) or 'efficiency points refused'}" for n in missing]
    else:
        for name, d in (("B-A", b_a), ("B-C", b_c)):
            for s in seeds:
                if d[s] is None:
                    reasons.append(f"{name} at seed {s} is not defined")
                elif not d[s] > threshold:
                    reasons.append(f"{name} at seed {s} is {d[s]:+.2f}, not above the threshold {threshold:.2f}")
    adopt = not reasons
    verdict = ADOPTED if adopt else (NOT_MEASURABLE if threshold is None else NOT_ADOPTED)
    return {"seeds": seeds, "b_minus_a": b_a, "b_minus_c": b_c, "seed_spread": spread, "seed_spread_arm": spread_arm,
            "per_arm_seed_difference": per_arm, "threshold": threshold, "floor": FLOOR, "adopt": adopt,
            "verdict": verdict, "measured": threshold is not None, "reasons": reasons}
