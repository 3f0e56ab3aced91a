"""The selection core shared by all four packers and the audit, on lengths alone: decisions only.

The decisions are made by one compiled loop (loaders/kernel.py, numba; its machine code is cached
beside it, so only the first process compiles). This module feeds it: the stream's refills a window
at a time (a whole pass of a DocumentStream, or the windows an audit pulls from a stream too long to
hold), room in its pools when a refill needs more, and the random-span crops' starts, drawn here from
random.Random(314159265) in crop order (they depend on the crops alone, so the standard-library
checker reproduces every draw). It keeps the state a checkpoint saves, in the same form as the
Python core before it (loaders/reference.py ReferenceCore, the tests' reference).

One event per selection, as numpy columns, never tuples; pack_rows returns them as RAW_DTYPE
records (source_id, span_start, emitted, discarded, kind, lead_bos), and an emission's tokens are
[BOS] * lead_bos + source[span_start : span_start + emitted - lead_bos]. kind is the rule that
selected the span (FIT: the whole current span; CROP: the shortest, cut). A lossless continuation
is visible as span_start > 0 with lead_bos = 0; a segment-first chunk k > 0 and a random-span crop
carry lead_bos = 1. Ties go to the earliest insertion (the baseline scans a list in insertion
order), and a lossless suffix keeps its place (its sequence number).
"""
import random
from typing import NamedTuple

import numpy as np

from loaders import kernel as K

FIT, CROP = K.FIT, K.CROP
KIND_NAMES = ("fit", "crop")
PACKERS = ("original", "lossless", "segment_first", "random_span")
RANDOM_SPAN_SEED = 314159265
RAW_DTYPE = np.dtype([("source_id", np.int64), ("span_start", np.int64), ("emitted", np.int64),
                      ("discarded", np.int64), ("kind", np.int8), ("lead_bos", np.int8)])
EVENTS_CHUNK = 1 << 16  # events the loop writes before it hands them over (one selection emits at least a token)
_NONE = np.zeros(0, np.int64)


class StreamEnded(Exception):
    """The refill source has no more documents; `events`: the selections of the row it cut short (the row is
    abandoned: the next one starts empty)."""

    def __init__(self, events=None):
        super().__init__("the refill source has no more documents")
        self.events = events


class Chunk(NamedTuple):
    """What the loop wrote since the last chunk (views into its arrays: read them before the next one)."""
    events: np.ndarray  # [kernel.N_EVENT_COLS, n]: kernel.E_SRC, E_LEN, ... rows
    retired: np.ndarray  # [kernel.N_RETIRED_COLS, m]: the sources whose last span left, as they left
    points: np.ndarray  # [3, p]: rows, buffered tokens, protected tokens at every curve step's row end


def check_settings(packer, row_capacity, buffer_size):
    if packer not in PACKERS:
        raise ValueError(f"unknown packer {packer!r}; choose one of {', '.join(PACKERS)}")
    if row_capacity < 2 or buffer_size < 1:
        raise ValueError("row capacity must be >= 2 and buffer size >= 1")


class PackerCore:
    """Selection state for one packer over a DocumentStream (its lengths and refills; it repeats, pass after
    pass), or over pulled windows (PackerCore.pulling). watch: keep the Proposition's protected set."""

    def __init__(self, stream, packer="original", row_capacity=2049, buffer_size=1000, seed=RANDOM_SPAN_SEED,
                 watch=False):
        check_settings(packer, row_capacity, buffer_size)
        self.stream, self.packer, self.R, self.seed, self.watch = stream, packer, int(row_capacity), seed, watch
        self._pull = None
        self._fresh(int(buffer_size))
        self.refill_log = None  # set to a list to record (events_before, first_source, n_docs) per refill
        if stream is not None:
            self._window(stream.lengths, stream.refills, None, 0)

    @classmethod
    def pulling(cls, windows, packer="original", row_capacity=2049, buffer_size=1000, seed=RANDOM_SPAN_SEED,
                watch=False):
        """A core whose documents come from `windows`, an iterator of (lengths, refill boundaries from 0 to
        len(lengths), label ids or None), pulled when the next refill is needed; sources are numbered by arrival."""
        core = cls(None, packer, row_capacity, buffer_size, seed, watch)
        core._pull = iter(windows)
        core._window(_NONE, np.zeros(1, np.int64), None, 0)
        return core

    def _fresh(self, B):
        R = self.R
        self.rng = random.Random(self.seed)  # random-span crops only; never torch's generator
        st = self._st = np.zeros(K.N_STATE, np.int64)
        st[K.S_R], st[K.S_B], st[K.S_PACKER], st[K.S_VEV] = R, B, PACKERS.index(self.packer), -1
        st[K.S_PCAP] = B - 1 if self.watch else 0
        self._head, self._tail = np.full(R + 1, -1, np.int64), np.full(R + 1, -1, np.int64)
        self._bits = np.zeros((R >> 5) + 1, np.int64)
        self._ph = np.zeros((st[K.S_PCAP], 3), np.int64)
        self._sp, self._so = np.zeros((0, 6), np.int64), np.zeros((0, K.N_SOURCE_COLS), np.int64)
        self._sp_free, self._so_free, self._heap = _NONE, _NONE, _NONE
        self._grow(2 * (B + 128) + 64, 2 * (B + 128) + 64)
        self._events_capacity(EVENTS_CHUNK)
        self._pts = np.zeros((3, 0), np.int64)
        self._log = np.zeros((3, 0), np.int64)
        self._pass, self._next_base = 0, 0

    def _grow(self, n_sp, n_so):
        """Room for at least n_sp spans and n_so sources (doubling): the new slots go on the free stacks."""
        for pool, free, n, width in (("_sp", "_sp_free", n_sp, 6), ("_so", "_so_free", n_so, K.N_SOURCE_COLS)):
            old = getattr(self, pool)
            if n <= len(old):
                continue
            n = max(n, 2 * len(old))
            new = np.full((n, width), -1, np.int64)
            new[:len(old)] = old
            fr = np.zeros(n, np.int64)
            top = self._st[K.S_SP_FREE if pool == "_sp" else K.S_SO_FREE]
            fr[:top] = getattr(self, free)[:top]
            fr[top:top + n - len(old)] = np.arange(len(old), n)[::-1]
            self._st[K.S_SP_FREE if pool == "_sp" else K.S_SO_FREE] = top + n - len(old)
            setattr(self, pool, new)
            setattr(self, free, fr)
        if len(self._heap) < len(self._sp):
            heap = np.zeros(len(self._sp), np.int64)
            heap[:len(self._heap)] = self._heap
            self._heap = heap

    def _events_capacity(self, n):
        # empty, not zeros: only the pages the loop writes are ever touched (a loader makes a few events a row)
        self._ev = np.empty((K.N_EVENT_COLS, n), np.int64)
        self._ret = np.empty((K.N_RETIRED_COLS, n), np.int64)  # a source retires with an event: never more
        self._st[K.S_NEV] = self._st[K.S_NRET] = 0

    def _window(self, lengths, bounds, labels, base):
        self._wl, self._wb = _read_only(lengths), _read_only(bounds)
        self._wlab = _read_only(_NONE if labels is None else labels)
        self._st[K.S_LABELLED] = labels is not None
        self._st[K.S_BASE], self._st[K.S_K] = base, 0
        self._next_base = base + len(lengths)

    def _next_window(self):
        if self._pull is None:  # a DocumentStream: the next pass
            self._pass += 1
            self._window(self._wl, self._wb, None, self._pass * self.stream.n)
            return
        try:
            lengths, bounds, labels = next(self._pull)
        except StopIteration:
            raise StreamEnded from None
        self._window(lengths, bounds, labels, self._next_base)

    # ---- running the loop ---------------------------------------------------------------------------------
    def _step(self, goal):
        """Run the loop toward `goal` rows, dealing with every stop but a full event output; DONE or EVENTS_FULL."""
        st = self._st
        while True:
            n0 = st[K.S_NEV]
            why = K.run(st, self._sp, self._so, self._sp_free, self._so_free, self._head, self._tail, self._bits,
                        self._heap, self._ph, self._wl, self._wb, self._wlab, self._ev, self._ret, self._pts,
                        self._log, goal)
            if self.packer == "random_span":
                self._draw(n0, st[K.S_NEV])
            if self._log.shape[1]:
                self.refill_log.extend(map(tuple, self._log[:, :st[K.S_NLOG]].T.tolist()))
                st[K.S_NLOG] = 0
            if why == K.NEED_WINDOW:
                self._next_window()
            elif why == K.NEED_ROOM:
                self._grow(self.count + st[K.S_NEED_SP], len(self._so) - st[K.S_SO_FREE] + st[K.S_NEED_SO])
            elif why in (K.DONE, K.EVENTS_FULL):
                return why

    def _draw(self, lo, hi):
        """Random spans: each crop's start, 1 + randrange(discarded + 1), drawn in crop order; and the last position
        the crop emits, in the record of its source (which retired with it: under random spans every selection takes
        a whole source, so event i retired the source of record i)."""
        ev = self._ev
        crops = lo + np.flatnonzero(ev[K.E_KIND, lo:hi] == CROP)
        randrange = self.rng.randrange
        ev[K.E_START, crops] = [1 + randrange(d + 1) for d in ev[K.E_DISC, crops].tolist()]
        text = ev[K.E_EMIT, crops] > 1  # BOS and at least one text token
        self._ret[K.T_PMAX, crops[text]] = ev[K.E_START, crops[text]] + ev[K.E_EMIT, crops[text]] - 2

    def _take(self, copy=True):
        st = self._st
        out = Chunk(self._ev[:, :st[K.S_NEV]], self._ret[:, :st[K.S_NRET]], self._pts[:, :st[K.S_NPTS]])
        if copy:
            out = Chunk(*(a.copy() for a in out))
        st[K.S_NEV] = st[K.S_NRET] = st[K.S_NPTS] = 0
        return out

    def pack_rows(self, n_rows):
        """Fill n_rows rows: their selections as RAW_DTYPE records. A pulled core whose windows run out raises
        StreamEnded with the selections of the row it cut short."""
        goal, parts = self.rows_done + int(n_rows), []
        if self.refill_log is not None and not self._log.shape[1]:
            self._log = np.zeros((3, 4096), np.int64)
        try:
            while self._step(goal) == K.EVENTS_FULL:
                parts.append(self._take().events)
        except StreamEnded:
            parts.append(self._take().events)
            self._st[K.S_POS] = 0
            raise StreamEnded(raw_records(np.concatenate(parts, axis=1))) from None
        parts.append(self._take().events)
        return raw_records(np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0])

    def chunks(self, rows, capacity, step=0):
        """Pack up to `rows` rows a Chunk at a time (views, each valid until the next), at most `capacity` events
        each; a curve point every `step` rows (0: none)."""
        self._events_capacity(capacity)
        self._st[K.S_STEP] = step
        self._pts = np.zeros((3, (rows // step + 1) if step else 0), np.int64)
        while self._step(rows) == K.EVENTS_FULL:
            yield self._take(copy=False)
        yield self._take(copy=False)

    # ---- inspection ---------------------------------------------------------------------------------------
    def __getattr__(self, name):
        if name in _SCALARS:
            return int(self._st[_SCALARS[name]])
        raise AttributeError(name)

    @property
    def B(self):
        return int(self._st[K.S_B])

    @B.setter
    def B(self, value):  # the trace of our own packer drains what is buffered with B = 1 once the stream ends
        self._st[K.S_B] = value

    @property
    def pass_idx(self):
        return self._pass + int(self._st[K.S_K] == len(self._wb) - 1)

    @property
    def refill_idx(self):
        k = int(self._st[K.S_K])
        return 0 if k == len(self._wb) - 1 else k

    @property
    def next_source(self):
        """The arrival number of the next source to arrive."""
        return self._next_base if self._st[K.S_K] == len(self._wb) - 1 else int(self._st[K.S_BASE] + self._wb[self._st[K.S_K]])

    def _live(self):
        return np.flatnonzero(self._sp[:, K.P_SREC] >= 0)

    def buffer_array(self) -> np.ndarray:
        """int64 [count, 5]: (seq, source_id, span_start, lead_bos, current_length) in insertion order."""
        sp, so = self._sp, self._so
        occ = self._live()
        rows = np.stack([sp[occ, K.P_SEQ], so[sp[occ, K.P_SREC], K.O_SRC], sp[occ, K.P_START], sp[occ, K.P_LEAD],
                         sp[occ, K.P_LEN]], axis=1).reshape(-1, 5)
        return rows[np.argsort(rows[:, 0], kind="stable")]

    def buffered(self):
        """[(seq, source_id, span_start, lead_bos, current_length)] in insertion order."""
        return [tuple(r) for r in self.buffer_array().tolist()]

    def buffered_tokens(self) -> int:
        return int(self._st[K.S_TOKENS])

    def buffered_sources(self) -> np.ndarray:
        """Source ids with a span still buffered (sorted, unique)."""
        return np.unique(self._so[self._sp[self._live(), K.P_SREC], K.O_SRC])

    def live_sources(self) -> np.ndarray:
        """[kernel.N_RETIRED_COLS, n]: the records of the sources with a span still buffered, by id."""
        so = self._so
        live = np.flatnonzero(so[:, K.O_SPANS] > 0)
        live = live[np.argsort(so[live, K.O_SRC])]
        cols = (K.O_SRC, K.O_LEN, K.O_LABEL, K.O_OWN, K.O_DISC, K.O_NEV, K.O_FIRST, K.O_PMIN, K.O_PMAX)
        return np.stack([so[live, c] for c in cols]).reshape(K.N_RETIRED_COLS, -1)

    def protected(self):
        """The protected set now: (lengths sorted, its tokens, the first violation or None, whether every member
        is still buffered and unstarted)."""
        st, ph, so = self._st, self._ph[:self._st[K.S_PHEAP]], self._so
        rec = ph[:, 2]
        live = (so[rec, K.O_SRC] == ph[:, 1]) & (so[rec, K.O_SPANS] > 0)
        unstarted = bool(live.all() and not (so[rec[live], K.O_NEV] > 0).any())
        violation = None if st[K.S_VEV] < 0 else {"event": int(st[K.S_VEV]), "source_id": int(st[K.S_VSRC]),
                                                   "source_len": int(st[K.S_VLEN])}
        return sorted(ph[:, 0].tolist()), int(st[K.S_PMASS]), violation, unstarted

    # ---- state --------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "packer": self.packer, "R": self.R, "B": self.B, "seed": self.seed,
            "stream_n": self.stream.n, "buffer": self.buffer_array(), "next_seq": self.next_seq,
            "pass_idx": int(self.pass_idx), "refill_idx": self.refill_idx,
            "arrived_docs": self.arrived_docs, "added_bos": self.added_bos,
            "rows_done": self.rows_done, "rng": self.rng.getstate(),
        }

    def load_state_dict(self, st: dict) -> None:
        for key, have in (("packer", self.packer), ("R", self.R), ("B", self.B), ("stream_n", self.stream.n)):
            if st[key] != have:
                raise ValueError(f"loader state is for {key}={st[key]!r}, this loader has {have!r}")
        buf = np.asarray(st["buffer"], np.int64).reshape(-1, 5)
        buf = np.ascontiguousarray(buf[np.argsort(buf[:, 0], kind="stable")])
        self._fresh(self.B)
        self._grow(len(buf) + 1, len(buf) + 1)
        s = self._st
        K.restore(s, self._sp, self._so, self._sp_free, self._so_free, self._head, self._tail, self._bits, self._heap,
                  buf, np.ascontiguousarray(self.stream.lengths[buf[:, 1] % self.stream.n], np.int64))
        self._pass = int(st["pass_idx"])
        self._window(self._wl, self._wb, None, self._pass * self.stream.n)
        s[K.S_K] = int(st["refill_idx"])
        for key, at in (("next_seq", K.S_NEXT_SEQ), ("arrived_docs", K.S_ARRIVED), ("added_bos", K.S_ADDED),
                        ("rows_done", K.S_ROWS)):
            s[at] = int(st[key])
        self.rng.setstate(st["rng"])


_SCALARS = {"count": K.S_COUNT, "next_seq": K.S_NEXT_SEQ, "arrived_docs": K.S_ARRIVED, "added_bos": K.S_ADDED,
            "rows_done": K.S_ROWS}


def _read_only(a):
    """A C-contiguous int64 view that the loop may not write: one compiled signature whoever made the window (Ray
    hands its workers read-only arrays; a second signature would be compiled again in every worker)."""
    v = np.ascontiguousarray(a, np.int64).view()
    v.setflags(write=False)
    return v


def raw_records(ev) -> np.ndarray:
    """RAW_DTYPE records from event columns ([kernel.N_EVENT_COLS, n])."""
    out = np.empty(ev.shape[1], RAW_DTYPE)
    for name, row in (("source_id", K.E_SRC), ("span_start", K.E_START), ("emitted", K.E_EMIT),
                      ("discarded", K.E_DISC), ("kind", K.E_KIND), ("lead_bos", K.E_LEAD)):
        out[name] = ev[row]
    return out
