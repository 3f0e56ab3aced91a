"""The rejection rule and its calibration (proposal section 2, "rejection and curve rules").

A shard is flagged when some domain's held-out loss rose by more than k * sigma_d over
the last accepted state; it is rejected when, after the next shard, the flagged domains
have not come back within k * sigma_d of that state (an unrecovered rise). sigma_d is the
spread of shard-to-shard loss changes on a homogeneous source; k starts at the pre-set
3 (the proposal's illustration) and is raised along a fixed grid until the measured
false-rejection rate on that calibration sequence is below the target (5%).
"""
import numpy as np


def rises(before, after, sigma, k, domains=None):
    """Domains whose loss rose by more than k * sigma_d."""
    doms = sorted(before) if domains is None else domains
    return [d for d in doms if after[d] - before[d] > k * sigma[d]]


def false_rejections(losses, sigma, k):
    """Fraction of judged shards in a calibration sequence that the rule would reject.

    losses: per-domain losses after each shard, index 0 = before the first shard. The
    reference moves to the newest accepted state, as in the queue. A flagged shard is
    judged by the next one; that next shard only served as the recovery test when the
    rise was unrecovered (the queue would roll both back), so it is not judged itself. A
    flagged last shard cannot be judged.
    """
    ref, rejected, judged, t, n = losses[0], 0, 0, 1, len(losses) - 1
    while t <= n:
        flagged = rises(ref, losses[t], sigma, k)
        if not flagged:
            ref, judged, t = losses[t], judged + 1, t + 1
            continue
        if t + 1 > n:
            break
        if rises(ref, losses[t + 1], sigma, k, flagged):
            rejected, judged = rejected + 1, judged + 1
        else:
            ref, judged = losses[t + 1], judged + 2
        t += 2
    return rejected / judged if judged else 0.0


def calibrate(losses, k_grid=(3.0, 3.5, 4.0, 5.0, 6.0, 8.0), target=0.05):
    """sigma_d from the shard-to-shard changes, and the smallest k on the grid under the target."""
    doms = sorted(losses[0])
    deltas = {d: np.diff([l[d] for l in losses]) for d in doms}
    sigma = {d: float(np.std(deltas[d], ddof=1)) if len(deltas[d]) > 1 else float("inf") for d in doms}
    rates = {k: false_rejections(losses, sigma, k) for k in k_grid}
    ok = [k for k in k_grid if rates[k] < target]
    return {"sigma": sigma, "k": (min(ok) if ok else max(k_grid)), "false_rejection_rates": rates, "target": target,
            "shards": len(losses) - 1, "deltas": {d: v.tolist() for d, v in deltas.items()}}
