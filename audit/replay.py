"""Replay a length stream through a packer up to a target budget (the code that trains).

The budget counts consumed targets only: rows = targets / (R - 1), so the trainer's final
prefetched-but-unused microbatch is excluded by construction.
"""
import math

import numpy as np

from loaders.core import PackerCore
from loaders.packers import events_to_records

PAPER_UPDATES = 953
TARGETS_PER_UPDATE = 524_288  # 64 rows x 2048 targets x 4 accumulation steps
PAPER_TARGETS = PAPER_UPDATES * TARGETS_PER_UPDATE  # 499,646,464


class Replay:
    """Everything an audit reads: events, refill log, final core state."""

    def __init__(self, stream, packer, rows, R, B, seed=None):
        kw = {} if seed is None else {"seed": seed}
        self.core = PackerCore(stream, packer, R, B, **kw)
        self.core.refill_log = []
        self.raw = self.core.pack_rows(rows)
        self.stream, self.packer, self.rows, self.R, self.B = stream, packer, rows, R, B
        self.events = events_to_records(self.raw, stream, R)

    @property
    def refill_log(self):
        return self.core.refill_log

    def arrived_lengths(self) -> np.ndarray:
        """Original lengths of the arrived sources, by global arrival index."""
        n = self.core.arrived_docs
        return self.stream.lengths[np.arange(n) % self.stream.n]


def rows_for_targets(targets, R):
    if targets % (R - 1):
        raise ValueError(f"target budget {targets} is not a whole number of rows of {R - 1} targets")
    return targets // (R - 1)


def first_long_emission(stream, R=2049, B=1000, packer="original", chunk_rows=1024, max_rows=None):
    """Target offset at which the first source longer than R first emits (None if never)."""
    core = PackerCore(stream, packer, R, B)
    limit = max_rows or math.inf
    while core.rows_done < limit:
        first_row = core.rows_done
        raw = core.pack_rows(int(min(chunk_rows, limit - first_row)))
        long_ = np.flatnonzero(stream.lengths[raw["source_id"] % stream.n] > R)
        if len(long_):
            j = int(long_[0])
            row, off = divmod(int(first_row * R + raw["emitted"][:j].sum()), R)
            return row * (R - 1) + max(off - 1, 0)
    return None
