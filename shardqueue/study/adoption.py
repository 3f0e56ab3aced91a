"""The proposal's adoption rule (section 4), applied to efficiency points, with the paired
intervals beside it that say what a failure of the rule means.

The rule, verbatim (RULE): "Adopt the queue only if B beats both A and C on the independent
selection axis by more than max(0.6, 2 × seed spread) efficiency points".

Inputs: efficiency points per arm ("A", "B", "C") and seed, every run at seed s measured on
the reference curve that leaves seed s out. Definitions (printed in the report):
  * an arm's seed spread: the mean of |x_i - x_j| over its pairs of seeds. At two seeds this is
    the one within-arm difference the proposal defines; at n seeds it estimates the same
    quantity (how far two seeds of one arm lie apart). The literal "largest within-arm
    difference" over all pairs (max - min) is shown beside it but not used: its expected value
    grows with n (1.13 sigma at 2 seeds, 2.33 at 5, 3.08 at 10), so every added seed would
    raise the threshold, the opposite of what adding seeds is for.
  * seed spread = the largest arm's spread; threshold T = max(0.6, 2 x seed spread).
  * B - A and B - C are paired by seed (same seed: same initialisation and rotation order).
  * the rule as written is met when B - A > T and B - C > T at every seed.
  * intervals.paired_interval: the 95% t interval (n - 1 degrees of freedom) of the mean of
    B - A over seeds, and of B - C.
Four verdicts, never confused:
  * "adopted within this tested setting": the rule as written is met, or both intervals lie
    wholly above T (at more than two seeds "every seed" grows stricter with each seed added;
    the intervals then carry the rule);
  * "not adopted": the rule is not met and the data say a gain is under the threshold: the
    interval of B - A or of B - C lies wholly at or below T (the proposal: the queue stays an
    analysis tool and the baseline stays in place);
  * "unresolved": neither: the rule is not met, but no interval lies wholly below T (usually an
    interval holds both zero and T); more seeds could decide;
  * "not measurable": some efficiency points were refused (the reference curve, even at its
    cap, does not span the loss), so the rule could not be applied; the reasons are listed.
"""
from shardqueue.study.intervals import largest_pairwise_difference, mean_pairwise_difference, paired_interval

ADOPTED = "adopted within this tested setting"
NOT_ADOPTED = "not adopted"
UNRESOLVED = "unresolved"
NOT_MEASURABLE = "not measurable"
VERDICTS = (ADOPTED, NOT_ADOPTED, UNRESOLVED, NOT_MEASURABLE)
FLOOR = 0.6
LEVEL = 0.95
RULE = ("Adopt the queue only if B beats both A and C on the independent selection axis by more than "
        "max(0.6, 2 × seed spread) efficiency points")
DEFINITION = (
    "The proposal's rule, verbatim: \"" + RULE + "\". An arm's seed spread is the mean absolute difference between "
    "its seeds' efficiency points over all pairs of seeds: at two seeds the one within-arm difference the proposal "
    "defines, at more seeds an estimate of the same thing (how far two seeds of one arm lie apart). The literal "
    "\"largest within-arm difference\" over all pairs (max - min) is shown beside it but not used, because its "
    "expected value grows with the number of seeds (1.13 sigma at 2, 2.33 at 5, 3.08 at 10): every seed added would "
    "raise the threshold. Seed spread = the largest arm's; threshold T = max(0.6, 2 x seed spread). B - A and B - C "
    "are paired by seed. The rule as written is met when B - A and B - C exceed T at every seed. Beside it: the mean "
    "of B - A over seeds, and of B - C, with a 95% t interval (n - 1 degrees of freedom; it assumes roughly normal "
    "paired differences; a paired bootstrap is not used because at a handful of seeds it has few distinct resamples "
    "and at two seeds its interval is just the two differences, far too narrow). Verdicts: \"" + ADOPTED + "\" when "
    "the rule as written is met, or both intervals lie above T; \"" + NOT_ADOPTED + "\" when the rule is not met and "
    "the interval of B - A or of B - C lies at or below T (the data say that gain is under the threshold: the queue "
    "stays an analysis tool and the baseline stays in place, as the proposal says); \"" + UNRESOLVED + "\" when "
    "neither (the rule is not met, but the data cannot say the gain is under the threshold: usually an interval "
    "holds both 0 and T; more seeds could decide); \"" + NOT_MEASURABLE + "\" when some points were refused even "
    "with the reference curve at its cap (reasons listed).")


def seed_spread(points):
    """(spread, arm, {arm: {"mean_pairwise", "largest_pairwise"}}); None values make the spread unknown (None)."""
    per = {}
    for arm, by_seed in sorted(points.items()):
        vals = list(by_seed.values())
        if len(vals) < 2:
            raise ValueError(f"arm {arm}: {len(vals)} seed(s); the rule needs at least two")
        per[arm] = ({"mean_pairwise": None, "largest_pairwise": None} if None in vals else
                    {"mean_pairwise": mean_pairwise_difference(vals), "largest_pairwise": largest_pairwise_difference(vals)})
    if any(v["mean_pairwise"] is None for v in per.values()):
        return None, None, per
    arm = max(per, key=lambda a: per[a]["mean_pairwise"])
    return per[arm]["mean_pairwise"], arm, per


def reading(iv, threshold):
    """Where an interval lies against the threshold: "above", "below" (at or below) or "contains"."""
    if iv["low"] > threshold:
        return "above"
    if iv["high"] <= threshold:
        return "below"
    return "contains"


def adoption(points, refusals=None, level=LEVEL):
    """Apply the rule and read the intervals; returns the numbers, the verdict and its reasons (one line each).

    refusals: {run name: reason} for refused points (shown as the "not measurable" reasons)."""
    for arm in ("A", "B", "C"):
        if arm not in points:
            raise ValueError(f"efficiency points for arm {arm} are missing")
    seeds = sorted(points["B"])
    if sorted(points["A"]) != seeds or sorted(points["C"]) != seeds:
        raise ValueError("arms A, B and C must be measured at the same seeds")
    spread, spread_arm, per_arm = seed_spread(points)
    threshold = None if spread is None else max(FLOOR, 2.0 * spread)
    largest = None if spread is None else max(v["largest_pairwise"] for v in per_arm.values())

    def diff(x, y):
        return None if x is None or y is None else x - y

    b_a = {s: diff(points["B"][s], points["A"][s]) for s in seeds}
    b_c = {s: diff(points["B"][s], points["C"][s]) for s in seeds}
    out = {"rule": RULE, "seeds": seeds, "b_minus_a": b_a, "b_minus_c": b_c, "seed_spread": spread,
           "seed_spread_arm": spread_arm, "per_arm_spread": per_arm, "threshold": threshold, "floor": FLOOR,
           "threshold_if_largest_pairwise": None if largest is None else max(FLOOR, 2.0 * largest),
           "rule_met": False, "intervals": {}, "adopt": False, "measured": threshold is not None, "reasons": []}
    if threshold is None:
        missing = [f"{a}_s{s}" for a in ("A", "B", "C") for s in seeds if points[a][s] is None]
        out["reasons"] = [f"{n}: {(refusals or {}).get(n) or 'efficiency points refused'}" for n in missing]
        return {**out, "verdict": NOT_MEASURABLE}
    rule_reasons = [f"{name} at seed {s} is {d[s]:+.2f}, not above the threshold {threshold:.2f}"
                    for name, d in (("B-A", b_a), ("B-C", b_c)) for s in seeds if not d[s] > threshold]
    for name, d in (("B-A", b_a), ("B-C", b_c)):
        iv = paired_interval([d[s] for s in seeds], level)
        iv.update(reading=reading(iv, threshold), contains_zero=iv["low"] <= 0 <= iv["high"],
                  floor_reading=reading(iv, FLOOR))
        out["intervals"][name] = iv
    ivs = out["intervals"]
    rule_met = not rule_reasons
    above = all(iv["reading"] == "above" for iv in ivs.values())
    below = [n for n, iv in ivs.items() if iv["reading"] == "below"]
    if rule_met or above:
        verdict = ADOPTED
    elif below:
        verdict = NOT_ADOPTED
    else:
        verdict = UNRESOLVED
    iv_reasons = [f"{n}: mean {iv['mean']:+.2f}, {level:.0%} interval [{iv['low']:+.2f}, {iv['high']:+.2f}] "
                  f"(t, {iv['df']} df) " + {"above": "lies above", "below": "lies at or below",
                                            "contains": "contains"}[iv["reading"]]
                  + f" the threshold {threshold:.2f}" + (" and contains 0" if iv["contains_zero"] else "")
                  for n, iv in ivs.items()]
    out.update(rule_met=rule_met, adopt=verdict == ADOPTED, verdict=verdict,
               reasons=(["the rule as written is met at every seed"] if rule_met else rule_reasons) + iv_reasons)
    return out
