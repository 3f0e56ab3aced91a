"""The rejection rule, the recovery criterion and a calibration that can fail.

Rule (the proposal's basic rule, section 2). With L_d the held-out control BPB of domain
d and ref the last accepted state, a shard is *flagged* when some domain rose by more
than k * sigma_d. A flagged shard is judged after one more (recovery) shard: it is
*unrecovered*, hence rejected, when some flagged domain still sits more than
frac * k * sigma_d above ref. frac < 1 makes the recovery test stricter than "back
inside the flag threshold": a rise must mostly vanish, not merely dip below k * sigma_d.

Calibration (stage A). sigma_d is the sample spread (ddof=1) of the shard-to-shard
changes over ten shards of one homogeneous source. The false-rejection rate is measured
on *held-out* transitions of further shards of that source (never on the deltas that set
sigma_d, where a k of 3 could not fail): transition t (state t-1 -> t, recovery state t+1)
counts as a false rejection when the rule, with reference state t-1, would reject it in
any domain. k and frac come from a grid fixed before calibration runs; the first grid
point (in the written order) whose held-out rate is below the target is chosen; if none
is, calibration fails. The rate's one-sided 95% Clopper-Pearson upper bound is reported.

When a second, disjoint set of held-out transitions is given (report_states), k and frac
are chosen on the first set only and the reported rate is the one measured on the second
("held-out"); otherwise the reported rate is the one on the transitions that chose k and
frac, and it is labelled "in-sample" (it is optimistic: the grid point was picked for it).
"""
import math

import numpy as np

K_GRID = (1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0)
# at each k the lenient recovery first: a false rejection costs two shards of work, and both
# criteria are stricter than "back inside k * sigma_d" (frac = 1)
FRAC_GRID = (0.5, 0.25)
TARGET = 0.05


def rises(before, after, sigma, k, domains=None):
    """Domains whose loss rose by more than k * sigma_d."""
    doms = sorted(before) if domains is None else domains
    return [d for d in doms if after[d] - before[d] > k * sigma[d]]


def unrecovered(ref, after, sigma, k, frac, flagged):
    """Flagged domains still more than frac * k * sigma_d above the reference."""
    return [d for d in flagged if after[d] - ref[d] > frac * k * sigma[d]]


def branch_verdict(mode, clean_rose, source_rose):
    """What a first-rotation rejection's branch check blames: "phase" (the shard is returned), "source"
    or "shard" (the rejection counts). clean_rose / source_rose: whether the branch on a clean reserve
    shard / on another shard of the same source rose in every flagged domain (None: not branched on).
    literal, the proposal's check: a same-source rise blames the phase. clean: only a clean rise does;
    a same-source rise alone blames the source."""
    if mode == "literal":
        return "phase" if source_rose else "shard"
    if clean_rose:
        return "phase"
    return "source" if source_rose else "shard"


def judge(ref, after, after_recovery, sigma, k, frac):
    """(flagged domains, unrecovered domains) of one transition and its recovery state."""
    f = rises(ref, after, sigma, k)
    return f, (unrecovered(ref, after_recovery, sigma, k, frac, f) if f else [])


def held_out_rate(states, sigma, k, frac):
    """(false rejections, transitions) over held-out states: transitions 1..len-2, each with its recovery state."""
    bad = sum(bool(judge(states[t - 1], states[t], states[t + 1], sigma, k, frac)[1]) for t in range(1, len(states) - 1))
    return bad, max(0, len(states) - 2)


def sigma_from(states):
    doms = sorted(states[0])
    return {d: float(np.std(np.diff([s[d] for s in states]), ddof=1)) for d in doms}


def binom_cdf(x, n, p):
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(x + 1))


def clopper_pearson_upper(x, n, conf=0.95):
    """One-sided upper confidence bound for a binomial rate x/n (exact, by bisection)."""
    if n == 0:
        return 1.0
    if x >= n:
        return 1.0
    lo, hi = x / n, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if binom_cdf(x, n, mid) > 1 - conf:
            lo = mid
        else:
            hi = mid
    return hi


def rate_kind(rec):
    """"held-out" or "in-sample": which transitions measured a calibration record's false-rejection rate (a
    record written before held-out reporting has no rate_kind, and was in-sample)."""
    return rec.get("rate_kind", "in-sample")


def calibrate(sigma_states, held_states, report_states=None, k_grid=K_GRID, frac_grid=FRAC_GRID, target=TARGET):
    """sigma_d from sigma_states (n+1 states = n deltas); k and frac chosen on held_states; the
    false-rejection rate reported on report_states (held-out) or on held_states (in-sample).

    Returns the calibration record; `ok` is False (with `reason`) when no grid point is
    below the target on the held-out transitions.
    """
    if len(sigma_states) < 3:
        raise ValueError("need at least 3 states (2 deltas) to estimate sigma")
    if len(held_states) < 3:
        raise ValueError("need at least 3 held-out states (one judged transition with its recovery)")
    sigma = sigma_from(sigma_states)
    grid = []
    for k in k_grid:
        for frac in frac_grid:
            bad, n = held_out_rate(held_states, sigma, k, frac)
            grid.append({"k": k, "frac": frac, "false_rejections": bad, "transitions": n, "rate": bad / n,
                         "upper95": clopper_pearson_upper(bad, n)})
    chosen = next((g for g in grid if g["rate"] < target), None)
    rec = {"sigma": sigma, "grid": grid, "k_grid": list(k_grid), "frac_grid": list(frac_grid), "target": target,
           "sigma_deltas": {d: np.diff([s[d] for s in sigma_states]).tolist() for d in sigma},
           "held_out_deltas": {d: np.diff([s[d] for s in held_states]).tolist() for d in sigma}, "ok": chosen is not None}
    if chosen is None:
        best = min(grid, key=lambda g: g["rate"])
        rec["reason"] = (f"no grid point has a false-rejection rate below {target:.0%} on the choosing transitions "
                         f"(best: k={best['k']}, frac={best['frac']}: {best['false_rejections']}/{best['transitions']})")
        return rec
    rec.update({"k": chosen["k"], "frac": chosen["frac"], "false_rejection_rate": chosen["rate"],
                "false_rejections": chosen["false_rejections"], "transitions": chosen["transitions"],
                "upper95": chosen["upper95"], "rate_kind": "in-sample",
                "choice": {"false_rejections": chosen["false_rejections"], "transitions": chosen["transitions"]}})
    if report_states is not None:
        if len(report_states) < 3:
            raise ValueError("need at least 3 report states (one judged transition with its recovery)")
        bad, n = held_out_rate(report_states, sigma, chosen["k"], chosen["frac"])
        rec.update({"false_rejection_rate": bad / n, "false_rejections": bad, "transitions": n,
                    "upper95": clopper_pearson_upper(bad, n), "rate_kind": "held-out",
                    "report_deltas": {d: np.diff([s[d] for s in report_states]).tolist() for d in sigma}})
    return rec
