"""The Proposition of section 3, checked at every selection boundary of a replay.

Protected set: the largest min(B-1, N_L) keys (L_i, i) among the long (L > R) original
sources that have arrived. A protected span can only change or leave the buffer by being
selected, so "every protected occurrence is buffered, unchanged and unstarted at every
selection boundary" holds exactly when no event ever selects a source that is protected
at that moment. Arrivals are interleaved with events through the core's refill log.
"""
import heapq

import numpy as np


class ProtectedSet:
    def __init__(self, B, R):
        self.cap, self.R = B - 1, R
        self.heap = []  # min-heap of (length, source_id)
        self.members = set()
        self.mass = 0

    def arrive(self, src, length):
        if length <= self.R or self.cap <= 0:
            return
        key = (length, src)
        if len(self.heap) < self.cap:
            heapq.heappush(self.heap, key)
        elif key > self.heap[0]:
            old = heapq.heapreplace(self.heap, key)
            self.members.discard(old[1])
            self.mass -= old[0]
        else:
            return
        self.members.add(src)
        self.mass += length


def check_proposition(stream, raw_events, refill_log, B, R, mass_trace=False):
    """Returns (first_violation or None, ProtectedSet at the end, optional mass trace).

    raw_events: core tuples; refill_log: (events_before, first_source_id, n_docs) tuples.
    mass_trace: protected token mass before every event (a list), for plots.
    """
    ps = ProtectedSet(B, R)
    lengths, n = stream.lengths, stream.n
    trace = [] if mass_trace else None
    r = 0
    for e, ev in enumerate(raw_events):
        while r < len(refill_log) and refill_log[r][0] <= e:
            _, first, cnt = refill_log[r]
            for src in range(first, first + cnt):
                ps.arrive(src, int(lengths[src % n]))
            r += 1
        if trace is not None:
            trace.append(ps.mass)
        if ev[0] in ps.members:
            return ({"event": e, "source_id": ev[0], "source_len": int(lengths[ev[0] % n])}, ps, trace)
    while r < len(refill_log):
        _, first, cnt = refill_log[r]
        for src in range(first, first + cnt):
            ps.arrive(src, int(lengths[src % n]))
        r += 1
    return None, ps, trace


class Firsts:
    """Source ids in an array read as PropositionWatch.feed reads the core's tuples: item e is (source_id,)."""

    def __init__(self, src):
        self.src = src

    def __len__(self):
        return len(self.src)

    def __getitem__(self, e):
        return (int(self.src[e]),)


class PropositionWatch:
    """check_proposition fed chunk by chunk: arrivals and events interleaved, memory B - 1 keys."""

    def __init__(self, B, R):
        self.ps = ProtectedSet(B, R)
        self.R = R
        self.violation = None
        self.events_seen = 0

    def _arrive(self, first, lengths):
        for i in np.flatnonzero(np.asarray(lengths) > self.R).tolist():
            self.ps.arrive(first + i, int(lengths[i]))

    def feed(self, raw, arrivals, marks=(), candidates=None):
        """raw: this chunk's core tuples; arrivals: (events_before, first_source, lengths, _) with
        events_before counted within raw; candidates: the indices of the events that can select a
        protected source (those of sources longer than R; None: every event). Returns the protected
        mass at each event index in marks."""
        members = self.ps.members
        todo = range(len(raw)) if candidates is None else np.asarray(candidates).tolist()
        masses, m, r = [], 0, 0
        marks = list(marks)
        for e in todo:
            while r < len(arrivals) and arrivals[r][0] <= e:
                while m < len(marks) and marks[m] < arrivals[r][0]:
                    masses.append(self.ps.mass)
                    m += 1
                self._arrive(arrivals[r][1], arrivals[r][2])
                r += 1
            while m < len(marks) and marks[m] <= e:
                masses.append(self.ps.mass)
                m += 1
            if raw[e][0] in members and self.violation is None:
                self.violation = {"event": self.events_seen + e, "source_id": raw[e][0],
                                  "source_len": self._length_of(raw[e][0], arrivals)}
        for a in arrivals[r:]:
            while m < len(marks) and marks[m] < a[0]:
                masses.append(self.ps.mass)
                m += 1
            self._arrive(a[1], a[2])
        masses += [self.ps.mass] * (len(marks) - m)
        self.events_seen += len(raw)
        return masses

    def _length_of(self, src, arrivals):
        for L, s in self.ps.heap:
            if s == src:
                return L
        return None
