"""Refill sources: a stream's documents in arrival order, pulled on demand, so that the replay's memory
is the buffer and a window of lengths, not the stream.

A refill source is iterated a buffer refill at a time, as (lengths, labels), pass after pass (the
trace's packers pull it so); `windows()` gives the same refills many at a time, as (lengths, refill
boundaries, labels), for the compiled core (loaders/core.py PackerCore.pulling), which runs
through a window's refills without coming back here. Both count the passes they have begun.
"""
import numpy as np

from loaders.core import StreamEnded  # noqa: F401 (re-exported: the end of a pulled stream)


class PassRefills:
    """Refills of one in-memory pass (lengths, refill boundaries, optional labels), repeated forever."""

    def __init__(self, lengths, refills, labels=None, max_passes=None):
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.bounds = np.asarray(refills, dtype=np.int64)
        self.labels = None if labels is None else np.asarray(labels)
        self.max_passes = max_passes
        self.passes_started = 0

    def fresh(self):
        """The same source from its start (a replay that must know where a bounded stream ends reads it twice)."""
        return PassRefills(self.lengths, self.bounds, self.labels, self.max_passes)

    def __iter__(self):
        for lengths, bounds, labels in self.windows():
            for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
                yield lengths[a:b], (None if labels is None else labels[a:b])

    def windows(self):
        """A whole pass a window."""
        while self.max_passes is None or self.passes_started < self.max_passes:
            self.passes_started += 1
            yield self.lengths, self.bounds, self.labels


class ChunkedRefills:
    """Refills cut from a stream that comes in chunks (a generator of length arrays), one pass: refills of
    refill_docs documents, cut across the chunks' ends as if the stream were one array."""

    def __init__(self, chunks, refill_docs=128):
        self.chunks, self.refill_docs = chunks, refill_docs
        self.passes_started = 0

    def __iter__(self):
        for lengths, bounds, _ in self.windows():
            for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
                yield lengths[a:b], None

    def windows(self):
        """The whole refills of each chunk (with what the chunk before left over) a window."""
        self.passes_started = 1
        rest, k = np.zeros(0, dtype=np.int64), self.refill_docs
        for c in self.chunks:
            rest = np.concatenate([rest, np.asarray(c, dtype=np.int64)])
            n = len(rest) // k * k
            if n:
                yield rest[:n], np.arange(0, n + 1, k), None
            rest = rest[n:]
        if len(rest):
            yield rest, np.array([0, len(rest)]), None


class MappedRefills:
    """Refills of one pass of lengths in a .npy file, memory-mapped a window at a time: resident memory holds one
    window of the file (the whole file mapped would count every page read as this process's)."""

    def __init__(self, path, refill_docs=128, window_docs=1 << 22):
        self.path, self.refill_docs = path, refill_docs
        self.window_docs = window_docs // refill_docs * refill_docs or refill_docs
        self.passes_started = 0
        self.n = len(np.load(path, mmap_mode="r"))

    def windows(self):
        self.passes_started = 1
        for a in range(0, self.n, self.window_docs):
            m = np.load(self.path, mmap_mode="r")  # mapped afresh, read, and unmapped when m goes
            w = np.array(m[a:a + self.window_docs], dtype=np.int64)  # a copy: nothing keeps the map
            del m
            yield w, np.append(np.arange(0, len(w), self.refill_docs), len(w)), None

    def __iter__(self):
        for lengths, bounds, _ in self.windows():
            for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
                yield lengths[a:b], None
