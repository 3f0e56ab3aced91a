"""The compiled core's references (docs/baseline.md, "Packing"), for the tests and the benches; never a path a user picks.

ReferencePacker: a Python list scanned exactly as the packing rules read, tokens and all.
ReferenceCore: the Python selection core that ran before the compiled one (buckets of lengths), on lengths.

ReferencePacker's buffer is a list in arrival order. Fit: the first index holding the largest length
<= remaining. Otherwise: the first index holding the smallest length; original,
segment-first and random spans pop it and discard the rest; lossless replaces it in place
by its suffix (no new BOS). Tests hold loaders/core.py against both, event for event and, for
ReferencePacker, token for token. Events are tuples (source_id, span_start, emitted, discarded,
kind, lead_bos): the compiled core's RAW_DTYPE records, as .tolist() gives them.
"""
import random
from bisect import bisect_right, insort
from heapq import heapify, heappop, heappush

import numpy as np

from loaders.core import CROP, FIT, RANDOM_SPAN_SEED, check_settings


class ReferencePacker:
    def __init__(self, docs, refills, packer="original", R=2049, B=1000, bos=0, seed=RANDOM_SPAN_SEED):
        self.docs, self.refills = [list(d) for d in docs], list(refills)
        self.packer, self.R, self.B, self.bos = packer, R, B, bos
        self.buf = []  # [source_id, span_start, lead_bos, tokens]
        self.k = 0
        self.p = 0
        self.rng = random.Random(seed)

    def _refill(self):
        n = len(self.docs)
        lo, hi = self.refills[self.k], self.refills[self.k + 1]
        for i in range(lo, hi):
            toks = self.docs[i]
            src = self.p * n + i
            if self.packer == "segment_first" and len(toks) > self.R:
                text = toks[1:]
                step = self.R - 1
                for c in range(0, len(text), step):
                    if c == 0:
                        self.buf.append([src, 0, 0, [toks[0]] + text[:step]])
                    else:
                        self.buf.append([src, 1 + c, 1, [self.bos] + text[c:c + step]])
            else:
                self.buf.append([src, 0, 0, list(toks)])
        self.k += 1
        if self.k == len(self.refills) - 1:
            self.k, self.p = 0, self.p + 1

    def next_rows(self, n_rows):
        rows, events = [], []
        for _ in range(n_rows):
            row = []
            while len(row) < self.R:
                while len(self.buf) < self.B:
                    self._refill()
                rem = self.R - len(row)
                best, best_len = -1, 0
                for idx, span in enumerate(self.buf):
                    if len(span[3]) <= rem and len(span[3]) > best_len:
                        best, best_len = idx, len(span[3])
                if best >= 0:
                    src, start, lead, toks = self.buf.pop(best)
                    row += toks
                    events.append((src, start, len(toks), 0, FIT, lead))
                    continue
                short = min(range(len(self.buf)), key=lambda j: len(self.buf[j][3]))
                src, start, lead, toks = self.buf[short]
                if self.packer == "lossless":
                    self.buf[short] = [src, start + rem, 0, toks[rem:]]
                    row += toks[:rem]
                    events.append((src, start, rem, 0, CROP, lead))
                    continue
                self.buf.pop(short)
                if self.packer == "random_span":
                    d = self.rng.randrange(len(toks) - rem + 1)
                    row += [toks[0]] + toks[1 + d:1 + d + rem - 1]
                    events.append((src, 1 + d, rem, len(toks) - rem, CROP, 1))
                else:
                    row += toks[:rem]
                    events.append((src, start, rem, len(toks) - rem, CROP, lead))
            rows.append(row)
        return rows, events


class ReferenceCore:
    """The Python selection core this repository ran until the compiled one (loaders/core.py) replaced it:
    a sorted list of lengths, a heap of sequence numbers per length, a dict of spans. Events are tuples
    (source_id, span_start, emitted, discarded, kind, lead_bos) appended to a list."""

    def __init__(self, stream, packer="original", row_capacity=2049, buffer_size=1000, seed=RANDOM_SPAN_SEED):
        check_settings(packer, row_capacity, buffer_size)
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
