"""The buffer core shared by all four packers, on lengths alone.

Spans live in buckets keyed by current length; each bucket is a min-heap of insertion
sequence numbers, and `lens` is the sorted list of non-empty lengths. "Longest span that
fits the remaining space, earliest arrival first" is one bisect plus one heappop; "the
shortest, earliest first" is lens[0] plus one heappop. The baseline scans a Python list
instead; the list order is insertion order, so the sequence number is the tie key, and a
lossless suffix keeps its number (it stays in place in the list). No scan of the buffer.

The core only decides; it emits one event per selection:
    (source_id, span_start, emitted, discarded, kind, lead_bos)
and an emission's tokens are [BOS] * lead_bos + source[span_start : span_start + emitted - lead_bos].
kind is the rule that selected the span (FIT: whole current span; CROP: shortest, cut).
A lossless continuation is visible as span_start > 0 with lead_bos = 0; a segment-first
chunk k > 0 and a random-span crop carry lead_bos = 1. (There is no `continue` or `segment`
kind: a lossless suffix can be taken by either rule, so one label could not carry both
facts, and the packer plus span_start already say it.)
"""
import random
from bisect import bisect_right, insort
from heapq import heapify, heappop, heappush

import numpy as np

FIT, CROP = 0, 1
KIND_NAMES = ("fit", "crop")
PACKERS = ("original", "lossless", "segment_first", "random_span")
RANDOM_SPAN_SEED = 314159265


class PackerCore:
    """Selection state for one packer over a DocumentStream (lengths are enough)."""

    def __init__(self, stream, packer="original", row_capacity=2049, buffer_size=1000, seed=RANDOM_SPAN_SEED):
        if packer not in PACKERS:
            raise ValueError(f"unknown packer {packer!r}; choose one of {', '.join(PACKERS)}")
        if row_capacity < 2 or buffer_size < 1:
            raise ValueError("row capacity must be >= 2 and buffer size >= 1")
        self.stream, self.packer = stream, packer
        self.R, self.B, self.seed = int(row_capacity), int(buffer_size), seed
        self._lengths = stream.lengths.tolist()
        self._refills = stream.refills.tolist()
        self.spans = {}  # seq -> (source_id, span_start, lead_bos)
        self.buckets = {}  # current length -> heap of seq
        self.lens = []  # sorted non-empty lengths
        self.next_seq = 0
        self.pass_idx = 0
        self.refill_idx = 0
        self.arrived_docs = 0  # original documents that entered the buffer
        self.added_bos = 0  # segment-first BOS markers beyond each source's own
        self.rows_done = 0
        self.row_first_event = 0
        self.rng = random.Random(seed)  # random-span crops only; never torch's generator
        self.refill_log = None  # set to a list to record (events_before, first_source, n_docs)

    # ---- insertion ---------------------------------------------------------------
    def _push(self, length, entry):
        seq = self.next_seq
        self.next_seq = seq + 1
        self.spans[seq] = entry
        h = self.buckets.get(length)
        if h is None:
            self.buckets[length] = [seq]
            insort(self.lens, length)
        else:
            heappush(h, seq)

    def _refill(self, n_events):
        k = self.refill_idx
        lo, hi = self._refills[k], self._refills[k + 1]
        base = self.pass_idx * self.stream.n
        if self.refill_log is not None:
            self.refill_log.append((n_events, base + lo, hi - lo))
        if self.packer == "segment_first":
            self._push_segmented(lo, hi, base)
        else:
            # _push inlined: this loop inserts every document of the stream (846,848 a pass at the paper's scale)
            lengths, spans, buckets, lens = self._lengths, self.spans, self.buckets, self.lens
            seq = self.next_seq
            for i in range(lo, hi):
                L = lengths[i]
                spans[seq] = (base + i, 0, 0)
                h = buckets.get(L)
                if h is None:
                    buckets[L] = [seq]
                    insort(lens, L)
                else:
                    h.append(seq)  # a new sequence number is the largest: appended, the heap is still a heap
                seq += 1
            self.next_seq = seq
        self.arrived_docs += hi - lo
        self.refill_idx = k + 1
        if self.refill_idx == len(self._refills) - 1:
            self.refill_idx = 0
            self.pass_idx += 1

    def _push_segmented(self, lo, hi, base):
        """Segment-first: a source longer than R enters as chunk 0 (its own BOS + 2048 text tokens) and later
        chunks of a new BOS + at most 2048 text tokens, in order."""
        R = self.R
        t = R - 1
        for i in range(lo, hi):
            L = self._lengths[i]
            src = base + i
            if L > R:
                self._push(R, (src, 0, 0))
                s = R
                while s < L:
                    e = min(s + t, L)
                    self._push(e - s + 1, (src, s, 1))
                    self.added_bos += 1
                    s = e
            else:
                self._push(L, (src, 0, 0))

    # ---- selection ---------------------------------------------------------------
    def pack_rows(self, n_rows, events):
        """Fill n_rows rows; append one event tuple per selection to `events`."""
        R, B = self.R, self.B
        spans, buckets, lens = self.spans, self.buckets, self.lens
        lossless = self.packer == "lossless"
        rand = self.packer == "random_span"
        randrange = self.rng.randrange
        ev = events.append
        for _ in range(n_rows):
            self.row_first_event = len(events)  # where this row began: a stream that ends inside it cuts it there
            pos = 0
            while pos < R:
                while len(spans) < B:
                    self._refill(len(events))
                rem = R - pos
                i = bisect_right(lens, rem)
                if i:
                    L = lens[i - 1]
                    h = buckets[L]
                    seq = heappop(h)
                    if not h:
                        del buckets[L]
                        del lens[i - 1]
                    src, start, lead = spans.pop(seq)
                    ev((src, start, L, 0, FIT, lead))
                    pos += L
                    continue
                L = lens[0]
                h = buckets[L]
                seq = heappop(h)
                if not h:
                    del buckets[L]
                    del lens[0]
                if lossless:
                    src, start, lead = spans[seq]
                    spans[seq] = (src, start + rem, 0)  # the suffix stays in place, no new BOS
                    nl = L - rem
                    h2 = buckets.get(nl)
                    if h2 is None:
                        buckets[nl] = [seq]
                        insort(lens, nl)
                    else:
                        heappush(h2, seq)
                    ev((src, start, rem, 0, CROP, lead))
                else:
                    src, start, lead = spans.pop(seq)
                    if rand:
                        # BOS + a uniformly placed run of rem-1 text tokens out of L-1
                        ev((src, 1 + randrange(L - rem + 1), rem, L - rem, CROP, 1))
                    else:
                        ev((src, start, rem, L - rem, CROP, lead))
                pos = R
            self.rows_done += 1

    # ---- inspection --------------------------------------------------------------
    @property
    def count(self):
        """Buffered spans."""
        return len(self.spans)

    def buffered(self):
        """[(seq, source_id, span_start, lead_bos, current_length)] in insertion order."""
        length_of = {}
        for L, h in self.buckets.items():
            for seq in h:
                length_of[seq] = L
        return [(seq, *self.spans[seq], length_of[seq]) for seq in sorted(self.spans)]

    def buffered_tokens(self) -> int:
        return sum(L * len(h) for L, h in self.buckets.items())

    # ---- state -------------------------------------------------------------------
    def state_dict(self) -> dict:
        buf = self.buffered()
        arr = np.asarray([b for b in buf], dtype=np.int64).reshape(-1, 5)
        return {
            "packer": self.packer, "R": self.R, "B": self.B, "seed": self.seed,
            "stream_n": self.stream.n, "buffer": arr, "next_seq": self.next_seq,
            "pass_idx": self.pass_idx, "refill_idx": self.refill_idx,
            "arrived_docs": self.arrived_docs, "added_bos": self.added_bos,
            "rows_done": self.rows_done, "rng": self.rng.getstate(),
        }

    def load_state_dict(self, st: dict) -> None:
        for key, have in (("packer", self.packer), ("R", self.R), ("B", self.B), ("stream_n", self.stream.n)):
            if st[key] != have:
                raise ValueError(f"loader state is for {key}={st[key]!r}, this loader has {have!r}")
        self.spans, self.buckets = {}, {}
        for seq, src, start, lead, L in np.asarray(st["buffer"]).reshape(-1, 5).tolist():
            self.spans[seq] = (src, start, lead)
            self.buckets.setdefault(L, []).append(seq)
        for h in self.buckets.values():
            heapify(h)
        self.lens = sorted(self.buckets)
        for key in ("next_seq", "pass_idx", "refill_idx", "arrived_docs", "added_bos", "rows_done"):
            setattr(self, key, int(st[key]))
        self.rng.setstate(st["rng"])
