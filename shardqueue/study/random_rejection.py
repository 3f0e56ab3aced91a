"""Arm C's rejected positions: as many random rejections as arm B made at the same seed.

Arm C matches the data arm B removed: its number of rejections is B's number of rejections
(every `reject` record of B's log: each rolls a trained shard back), not a rate times C's own
number of decisions, which gives fewer when C decides fewer times. B's flags that recovered
removed nothing and do not count.

Positions count C's shard decisions in the order it makes them (0 = the first shard judged).
C ends once its accepted shards fill the budget and the final decay, so it makes at least
L = min_accepted + k decisions when it rejects k times, min_accepted being the fewest accepted
shards that can do that (every shard as large as the pool's largest). The k positions are drawn
among the first L + k - 1 decisions: the i-th smallest drawn position is at most L - 1 + i, and
only i rejections and so at most L - 1 acceptances come before it, so C has not ended when it
comes. Every drawn position is reached and C rejects exactly k times unless its pool runs dry
(reported). The draw is without replacement from a generator seeded by (seed, STREAM) alone,
so the same count, window and seed give the same positions on every rerun and every machine,
independent of the model's own random streams.
"""
import math

import numpy as np

STREAM = 0xC0FFEE  # separates this draw from any other use of the same seed


def rejections_to_match(b_decisions):
    """Arm C's number of rejections: arm B's rejections (not its flags) at the same seed."""
    return int(b_decisions["reject"])


def updates_of(tokens, context, rows_per_update):
    """Updates one shard of `tokens` targets trains: its rows (the last padded) in updates of rows_per_update."""
    return math.ceil(math.ceil(tokens / context) / rows_per_update)


def fewest_accepted(budget, largest_shard, context, rows_per_update, decay_updates):
    """The fewest shards an arm accepts before it ends: enough for the budget of accepted targets, then
    enough for the final decay's updates, every shard the pool's largest."""
    stable = math.ceil(budget / largest_shard)
    decay = math.ceil(decay_updates / updates_of(largest_shard, context, rows_per_update)) if decay_updates else 0
    return stable + decay


def decision_window(count, min_accepted):
    """How many of C's first decisions the positions are drawn from (every one of them is reached)."""
    if min_accepted < 1:
        raise ValueError(f"min_accepted {min_accepted} is below 1")
    return min_accepted + count - 1 if count else 0


def rejected_positions(count, window, seed):
    """Sorted positions (0-based) of `count` rejections among the first `window` decisions."""
    if count < 0 or count > window and count:
        raise ValueError(f"{count} rejections cannot be placed among {window} decisions")
    rng = np.random.default_rng([int(seed), STREAM])
    return sorted(int(p) for p in rng.choice(window, size=count, replace=False)) if count else []


def plan_c(b_decisions, seed, budget, largest_shard, context, rows_per_update, decay_updates):
    """{"count", "min_accepted", "window", "positions"}: arm C's rejections at one seed."""
    k = rejections_to_match(b_decisions)
    m = fewest_accepted(budget, largest_shard, context, rows_per_update, decay_updates)
    w = decision_window(k, m)
    return {"count": k, "min_accepted": m, "window": w, "positions": rejected_positions(k, w, seed)}
