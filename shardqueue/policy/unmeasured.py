"""The policies that decide without reading the losses: plain order (the study's arm A), random rejection, and
rejection at fixed positions (arm C: as many rejections as the queue made, at positions drawn in advance).

A rejection they make goes through the queue's own mechanics (recovery shard, rollback, deferral,
quarantine); their flag is the word "random", never a measured domain, and it stays unrecovered."""
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PlainOrder:
    name = "plain"
    can_flag = False
    branch_check = None

    def seen(self, losses, trained_targets):
        return losses

    def flag(self, position, ref, after):
        return []

    def unrecovered(self, ref, flagged_after, flagged, after):
        return []


@dataclass(frozen=True)
class RandomRejection:
    """A candidate is flagged with probability reject_rate by a generator seeded with (seed, position)."""
    seed: int
    reject_rate: float
    name = "random"
    can_flag = True
    branch_check = None

    def seen(self, losses, trained_targets):
        return losses

    def flag(self, position, ref, after):
        u = np.random.default_rng([self.seed, 7919, position]).random()
        return ["random"] if u < self.reject_rate else []

    def unrecovered(self, ref, flagged_after, flagged, after):
        return flagged


@dataclass(frozen=True)
class FixedPositions:
    """The candidates at these positions are flagged, the others accepted (study/random_rejection.py draws them)."""
    positions: frozenset
    name = "random"
    can_flag = True
    branch_check = None

    def seen(self, losses, trained_targets):
        return losses

    def flag(self, position, ref, after):
        return ["random"] if position in self.positions else []

    def unrecovered(self, ref, flagged_after, flagged, after):
        return flagged
