"""Arm C's rejected positions: random rejection at the rate arm B measured.

Positions count shard decisions in the order the queue makes them (0 = the first shard
judged). For a rate r over n positions exactly round(r × n) positions are rejected, drawn
without replacement from a generator seeded by (seed, STREAM) alone, so the same rate,
count and seed give the same positions on every rerun and on every machine, and they are
independent of the model's own random streams.
"""
import numpy as np

STREAM = 0xC0FFEE  # separates this draw from any other use of the same seed


def rejected_positions(rate, n_positions, seed):
    """Sorted positions (0-based) to reject among n_positions decisions."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rejection rate {rate} is not in [0, 1]")
    if n_positions < 0:
        raise ValueError(f"n_positions {n_positions} is negative")
    k = int(round(rate * n_positions))
    rng = np.random.default_rng([int(seed), STREAM])
    return sorted(int(p) for p in rng.choice(n_positions, size=k, replace=False)) if k else []

