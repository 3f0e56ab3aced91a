"""Refills pulled on demand: the replay's memory is the buffer and a chunk, not the stream.

A refill source is an iterator of (lengths, labels) per buffer refill, in arrival order,
pass after pass; it counts the passes it has begun. `PullingCore` is the selection core that
trains (loaders/core.py), unchanged, fed from such an iterator instead of a whole
DocumentStream held in memory.
"""
import numpy as np

from loaders.core import RANDOM_SPAN_SEED, PackerCore


class StreamEnded(Exception):
    """The refill source has no more documents (a finite stream, or a stated bound)."""


class _Cursor:
    """What PackerCore reads of its stream, for refills pulled one at a time.

    The core numbers a document pass_idx * stream.n + i; with n = 1 and pass_idx set to the
    next global arrival index before each refill, the number is that index plus i.
    """
    n = 1
    name = "pulled refills"

    def __init__(self):
        self.lengths = np.ones(1, dtype=np.int64)
        self.refills = np.array([0, 1], dtype=np.int64)


class PullingCore(PackerCore):
    """PackerCore whose refills come from `refills` (an iterator of (lengths, labels))."""

    def __init__(self, refills, packer="original", row_capacity=2049, buffer_size=1000, seed=RANDOM_SPAN_SEED):
        super().__init__(_Cursor(), packer, row_capacity, buffer_size, seed)
        self._pull = iter(refills)
        self.next_source = 0
        self.arrivals = []  # (events_before, first_source, lengths, labels) since the last take_arrivals()

    def _refill(self, n_events):
        try:
            lengths, labels = next(self._pull)
        except StopIteration:
            raise StreamEnded from None
        self._lengths = lengths.tolist()
        self._refills = [0, len(self._lengths), len(self._lengths) + 1]  # never the pass's last refill: no wrap
        self.refill_idx, self.pass_idx = 0, self.next_source
        super()._refill(n_events)
        self.arrivals.append((n_events, self.next_source, lengths, labels))
        self.next_source += len(lengths)
        self.pass_idx = 0

    def take_arrivals(self):
        out, self.arrivals = self.arrivals, []
        return out

    def buffered_sources(self) -> np.ndarray:
        """Source ids with a span still buffered (sorted, unique)."""
        return np.unique(np.fromiter((s[0] for s in self.spans.values()), dtype=np.int64, count=len(self.spans)))


class PassRefills:
    """Refills of one in-memory pass (lengths, refill boundaries, optional labels), repeated forever."""

    def __init__(self, lengths, refills, labels=None, max_passes=None):
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.bounds = np.asarray(refills, dtype=np.int64)
        self.labels = None if labels is None else np.asarray(labels)
        self.max_passes = max_passes
        self.passes_started = 0

    def __iter__(self):
        while self.max_passes is None or self.passes_started < self.max_passes:
            self.passes_started += 1
            for a, b in zip(self.bounds[:-1].tolist(), self.bounds[1:].tolist()):
                yield self.lengths[a:b], (None if self.labels is None else self.labels[a:b])


class ChunkedRefills:
    """Refills cut from a stream that comes in chunks (a generator of length arrays), one pass."""

    def __init__(self, chunks, refill_docs=128):
        self.chunks, self.refill_docs = chunks, refill_docs
        self.passes_started = 0

    def __iter__(self):
        self.passes_started = 1
        rest = np.zeros(0, dtype=np.int64)
        for c in self.chunks:
            rest = np.concatenate([rest, np.asarray(c, dtype=np.int64)])
            k = len(rest) // self.refill_docs * self.refill_docs
            for a in range(0, k, self.refill_docs):
                yield rest[a:a + self.refill_docs], None
            rest = rest[k:]
        if len(rest):
            yield rest, None
