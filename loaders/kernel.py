"""The selection core's compiled loop (numba, cached on disk): every decision of the four packers, on lengths.

All state lives in numpy arrays that the loop reads and writes in place, so it can stop anywhere (the
next refill is not in the window it was given; an output array is full; the pools need room) and the
caller (loaders/core.py) goes on from exactly there.

Buffered spans sit in a pool `sp` (one row each: source record, span start, current length, lead BOS,
insertion sequence number, next span of its bucket). A span of length L <= R is in bucket L, a list
kept in sequence order, and bit L of `bits` says the bucket is not empty: "the longest that fits rem,
earliest first" is the highest set bit <= rem and its bucket's head; "the shortest, earliest first"
is the lowest set bit's head. A span longer than R never fits; those wait in a min-heap keyed by
(length, sequence) and are only ever taken as the shortest, when no span of length <= R is
buffered. A lossless suffix keeps its sequence number (it stays in its place in the baseline's list).

Each arrived source has a record in a second pool `so` (id, length, label, its live spans, and what
the audit counts of it: own tokens emitted, tokens discarded, events, the target offset of its
first event, whether it is protected, its first and last position emitted). When its last span leaves, the record is written to the
retired output and freed. The protected set of the paper's Proposition (the B - 1 longest sources
longer than R that have arrived, keyed (length, id)) is a min-heap `ph`; a selection of a source
that is protected at that moment is the first violation.
"""
import numpy as np
from numba import njit

# st: the core's scalars
(S_R, S_B, S_PACKER, S_COUNT, S_NEXT_SEQ, S_ARRIVED, S_ADDED, S_ROWS, S_POS, S_TOKENS, S_K, S_BASE, S_NEV, S_NRET,
 S_NLOG, S_NPTS, S_SP_FREE, S_SO_FREE, S_HEAP, S_PCAP, S_PHEAP, S_PMASS, S_VEV, S_VSRC, S_VLEN, S_EVTOTAL, S_STEP,
 S_NEED_SP, S_NEED_SO, S_LABELLED, N_STATE) = range(31)
ORIGINAL, LOSSLESS, SEGMENT_FIRST, RANDOM_SPAN = range(4)
FIT, CROP = 0, 1
# a span's row in sp
P_SREC, P_START, P_LEN, P_LEAD, P_SEQ, P_NEXT = range(6)
# a source's row in so
O_SRC, O_LEN, O_LABEL, O_SPANS, O_OWN, O_DISC, O_NEV, O_FIRST, O_PROT, O_PMIN, O_PMAX = range(11)
N_SOURCE_COLS = 11
# the event output, one row per column: ev[E_SRC, i] is event i's source id
E_SRC, E_LEN, E_START, E_EMIT, E_DISC, E_KIND, E_LEAD, E_ROW, E_OFF, E_LABEL = range(10)
N_EVENT_COLS = 10
# the retired output: a source's record as it left (columns, like ev)
T_SRC, T_LEN, T_LABEL, T_OWN, T_DISC, T_NEV, T_FIRST, T_PMIN, T_PMAX = range(9)
N_RETIRED_COLS = 9
NO_POSITION = np.iinfo(np.int64).max  # the first exposed position of a source none of whose positions is emitted
# why the loop stopped
DONE, NEED_WINDOW, NEED_ROOM, EVENTS_FULL, LOG_FULL = range(5)

# Compiled once per machine and cached beside this file (a second process loads the machine code). None uses numba's
# runtime (_nrt=False: the loop only reads and writes arrays its caller made): its reference counts on the arrays each
# helper names made the loop five times slower (0.23 s of CPU against 0.043 s for the paper-scale replay, 2026-12-06).
# The loop lets go of the GIL, so the audit's events file is written on another thread meanwhile. The loop's phases
# (_refill, _select and the steps they take: _protect, _push, _emit, _release) are inlined into the entry points by
# numba; the small leaf helpers (bit scans, bucket and heap operations) are compiled on their own, and LLVM inlines
# them when it links them into an entry point (its machine code calls none of them). Numba's own inlining copies a
# callee's IR block by block at each call site: with the leaves inlined that way too, every loop the tests run took
# 6.3-6.5 s of CPU to compile against 4.8-4.9 s, and the paper-scale replay 84-94 ms against 79-81 ms (three
# alternating pairs, 2026-12-07).
_entry = njit(cache=True, _nrt=False, nogil=True)
_inline = njit(cache=True, inline="always", _nrt=False)
_leaf = njit(cache=True, _nrt=False)


# ---- lengths <= R: buckets in sequence order, a bitmap of the non-empty ones (32 bits an int64 word) -------
@_leaf
def _msb32(m):
    b = 0
    if m >= 65536:
        m >>= 16
        b += 16
    if m >= 256:
        m >>= 8
        b += 8
    if m >= 16:
        m >>= 4
        b += 4
    if m >= 4:
        m >>= 2
        b += 2
    if m >= 2:
        b += 1
    return b


@_leaf
def _highest_at_most(bits, x):
    """The largest non-empty length <= x (0: none)."""
    w = x >> 5
    m = bits[w] & ((2 << (x & 31)) - 1)
    while m == 0:
        w -= 1
        if w < 0:
            return 0
        m = bits[w]
    return (w << 5) + _msb32(m)


@_leaf
def _lowest(bits):
    for w in range(len(bits)):
        m = bits[w]
        if m:
            return (w << 5) + _msb32(m & -m)
    return 0


@_leaf
def _bucket_append(sp, head, tail, bits, slot, L):
    """At the end of bucket L, which keeps its spans in sequence order: every insert is the newest of its bucket.
    A new span has the largest sequence number, and a lossless suffix, which keeps its older number, always enters
    an empty bucket: the span it was cut from was the shortest buffered, and the suffix is shorter still."""
    sp[slot, P_NEXT] = -1
    t = tail[L]
    if t < 0:
        head[L] = slot
        bits[L >> 5] |= 1 << (L & 31)
    else:
        sp[t, P_NEXT] = slot
    tail[L] = slot


@_leaf
def _bucket_pop(sp, head, tail, bits, L):
    slot = head[L]
    nxt = sp[slot, P_NEXT]
    head[L] = nxt
    if nxt < 0:
        tail[L] = -1
        bits[L >> 5] &= ~(1 << (L & 31))
    return slot


# ---- lengths > R: a min-heap of slots keyed (length, sequence) ------------------------------------------
@_leaf
def _before(sp, a, b):
    return sp[a, P_LEN] < sp[b, P_LEN] or (sp[a, P_LEN] == sp[b, P_LEN] and sp[a, P_SEQ] < sp[b, P_SEQ])


@_leaf
def _heap_push(heap, n, sp, slot):
    i = n
    heap[i] = slot
    while i > 0:
        p = (i - 1) >> 1
        if not _before(sp, heap[i], heap[p]):
            break
        heap[i], heap[p] = heap[p], heap[i]
        i = p


@_leaf
def _heap_pop(heap, n, sp):
    top = heap[0]
    n -= 1
    heap[0] = heap[n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _before(sp, heap[c + 1], heap[c]):
            c += 1
        if not _before(sp, heap[c], heap[i]):
            break
        heap[i], heap[c] = heap[c], heap[i]
        i = c
    return top


@_leaf
def _insert(st, sp, head, tail, bits, heap, slot):
    L = sp[slot, P_LEN]
    if L <= st[S_R]:
        _bucket_append(sp, head, tail, bits, slot, L)
    else:
        _heap_push(heap, st[S_HEAP], sp, slot)
        st[S_HEAP] += 1


# ---- the protected set: min-heap ph[i] = (length, source id, source record) of capacity B - 1 ------------
@_leaf
def _ph_less(ph, i, j):
    return ph[i, 0] < ph[j, 0] or (ph[i, 0] == ph[j, 0] and ph[i, 1] < ph[j, 1])


@_leaf
def _ph_swap(ph, i, j):
    for c in range(3):
        ph[i, c], ph[j, c] = ph[j, c], ph[i, c]


@_leaf
def _ph_down(ph, n, i):
    while True:
        c = 2 * i + 1
        if c >= n:
            return
        if c + 1 < n and _ph_less(ph, c + 1, c):
            c += 1
        if not _ph_less(ph, c, i):
            return
        _ph_swap(ph, i, c)
        i = c


@_inline
def _protect(st, so, ph, src, L, srec):
    """The arrival of a source longer than R: it joins the protected set if it is among the B - 1 longest."""
    n = st[S_PHEAP]
    if n < st[S_PCAP]:
        ph[n, 0], ph[n, 1], ph[n, 2] = L, src, srec
        i = n
        while i > 0 and _ph_less(ph, i, (i - 1) >> 1):
            _ph_swap(ph, i, (i - 1) >> 1)
            i = (i - 1) >> 1
        st[S_PHEAP] = n + 1
    elif L > ph[0, 0] or (L == ph[0, 0] and src > ph[0, 1]):
        old = ph[0, 2]
        if so[old, O_SRC] == ph[0, 1] and so[old, O_SPANS] > 0:
            so[old, O_PROT] = 0
        st[S_PMASS] -= ph[0, 0]
        ph[0, 0], ph[0, 1], ph[0, 2] = L, src, srec
        _ph_down(ph, n, 0)
    else:
        return
    so[srec, O_PROT] = 1
    st[S_PMASS] += L


# ---- arrivals -------------------------------------------------------------------------------------------
@_inline
def _push(st, sp, so, sp_free, head, tail, bits, heap, L, srec, start, lead):
    st[S_SP_FREE] -= 1
    slot = sp_free[st[S_SP_FREE]]
    sp[slot, P_SREC], sp[slot, P_START], sp[slot, P_LEN], sp[slot, P_LEAD] = srec, start, L, lead
    sp[slot, P_SEQ] = st[S_NEXT_SEQ]
    st[S_NEXT_SEQ] += 1
    so[srec, O_SPANS] += 1
    st[S_COUNT] += 1
    st[S_TOKENS] += L
    _insert(st, sp, head, tail, bits, heap, slot)


@_leaf
def _entries(L, R, seg):
    """Buffer entries of one source: segment-first cuts one longer than R into R, then BOS + at most R - 1."""
    return 1 + (L - R + R - 2) // (R - 1) if seg and L > R else 1


@_inline
def _refill(st, sp, so, sp_free, so_free, head, tail, bits, heap, ph, wl, wb, wlab, log):
    """The window's next refill into the buffer (NEED_ROOM when the pools cannot hold it: nothing changed)."""
    k = st[S_K]
    lo, hi = wb[k], wb[k + 1]
    R = st[S_R]
    seg = st[S_PACKER] == SEGMENT_FIRST
    need = 0
    for i in range(lo, hi):
        need += _entries(wl[i], R, seg)
    if st[S_SP_FREE] < need or st[S_SO_FREE] < hi - lo:
        st[S_NEED_SP], st[S_NEED_SO] = need, hi - lo
        return NEED_ROOM
    if log.shape[1]:
        if st[S_NLOG] >= log.shape[1]:
            return LOG_FULL
        n = st[S_NLOG]
        log[0, n], log[1, n], log[2, n] = st[S_EVTOTAL], st[S_BASE] + lo, hi - lo
        st[S_NLOG] = n + 1
    for i in range(lo, hi):
        L = wl[i]
        src = st[S_BASE] + i
        st[S_SO_FREE] -= 1
        srec = so_free[st[S_SO_FREE]]
        so[srec, O_SRC], so[srec, O_LEN], so[srec, O_LABEL] = src, L, wlab[i] if st[S_LABELLED] else 0
        so[srec, O_SPANS], so[srec, O_OWN], so[srec, O_DISC], so[srec, O_NEV] = 0, 0, 0, 0
        so[srec, O_FIRST], so[srec, O_PROT], so[srec, O_PMIN], so[srec, O_PMAX] = -1, 0, NO_POSITION, -1
        # the whole source, or segment-first's chunks of one longer than R: chunk 0 (its own BOS and R - 1 tokens),
        # then a new BOS and at most R - 1 tokens each; one push site (each site inlines the buffer's code again)
        s = 0
        while s < L:
            if not (seg and L > R):
                e, n, lead = L, L, 0
            elif s == 0:
                e, n, lead = R, R, 0
            else:
                e = min(s + R - 1, L)
                n, lead = e - s + 1, 1
            _push(st, sp, so, sp_free, head, tail, bits, heap, n, srec, s, lead)
            st[S_ADDED] += lead
            s = e
        if L > R and st[S_PCAP] > 0:
            _protect(st, so, ph, src, L, srec)
    st[S_ARRIVED] += hi - lo
    st[S_K] = k + 1
    return DONE


# ---- selections -----------------------------------------------------------------------------------------
@_inline
def _emit(st, sp, so, ev, slot, emitted, discarded, kind, start, lead):
    """Event row st[S_NEV], and what the audit counts of its source."""
    i = st[S_NEV]
    srec = sp[slot, P_SREC]
    pos = st[S_POS]
    ev[E_SRC, i], ev[E_LEN, i], ev[E_START, i], ev[E_EMIT, i] = so[srec, O_SRC], so[srec, O_LEN], start, emitted
    ev[E_DISC, i], ev[E_KIND, i], ev[E_LEAD, i], ev[E_ROW, i] = discarded, kind, lead, st[S_ROWS]
    ev[E_OFF, i], ev[E_LABEL, i] = pos, so[srec, O_LABEL]
    # a segment-first chunk's lead BOS is a marker the packer added, not one of the source's tokens
    so[srec, O_OWN] += emitted - (lead if st[S_PACKER] == SEGMENT_FIRST else 0)
    so[srec, O_DISC] += discarded
    # the source's own positions [start, start + emitted - lead); a random-span crop's lead is the source's own BOS
    # (position 0), and its start is drawn after the loop, which then sets its last position (PackerCore._draw)
    stands = lead != 0 and st[S_PACKER] == RANDOM_SPAN
    if emitted > lead or stands:
        so[srec, O_PMIN] = min(so[srec, O_PMIN], 0 if stands else start)
        so[srec, O_PMAX] = max(so[srec, O_PMAX], start + emitted - lead - 1 if emitted > lead and not stands else 0)
    if so[srec, O_NEV] == 0:
        so[srec, O_FIRST] = st[S_ROWS] * (st[S_R] - 1) + max(pos - 1, 0)  # targets before it
    so[srec, O_NEV] += 1
    if so[srec, O_PROT] and st[S_VEV] < 0:
        st[S_VEV], st[S_VSRC], st[S_VLEN] = st[S_EVTOTAL], so[srec, O_SRC], so[srec, O_LEN]
    st[S_NEV] = i + 1
    st[S_EVTOTAL] += 1


@_inline
def _release(st, sp, so, sp_free, so_free, ret, slot):
    """The span leaves the buffer; its source retires with its last span."""
    st[S_COUNT] -= 1
    st[S_TOKENS] -= sp[slot, P_LEN]
    srec = sp[slot, P_SREC]
    sp[slot, P_SREC] = -1
    sp_free[st[S_SP_FREE]] = slot
    st[S_SP_FREE] += 1
    so[srec, O_SPANS] -= 1
    if so[srec, O_SPANS] == 0:
        j = st[S_NRET]
        ret[T_SRC, j], ret[T_LEN, j], ret[T_LABEL, j] = so[srec, O_SRC], so[srec, O_LEN], so[srec, O_LABEL]
        ret[T_OWN, j], ret[T_DISC, j], ret[T_NEV, j] = so[srec, O_OWN], so[srec, O_DISC], so[srec, O_NEV]
        ret[T_FIRST, j], ret[T_PMIN, j], ret[T_PMAX, j] = so[srec, O_FIRST], so[srec, O_PMIN], so[srec, O_PMAX]
        st[S_NRET] = j + 1
        so_free[st[S_SO_FREE]] = srec
        st[S_SO_FREE] += 1


@_inline
def _select(st, sp, so, sp_free, so_free, head, tail, bits, heap, ev, ret):
    """One selection: the longest span that fits the row's rest, else the shortest, cropped (the row is full). Each
    helper is called from one place (each call site inlines it again: compile time)."""
    R, packer = st[S_R], st[S_PACKER]
    rem = R - st[S_POS]
    small = st[S_HEAP] < st[S_COUNT]  # some span of length <= R is buffered
    L = _highest_at_most(bits, rem) if small else 0
    fit = L > 0
    if small and not fit:
        L = _lowest(bits)
    if small:
        slot = _bucket_pop(sp, head, tail, bits, L)
    else:
        slot = _heap_pop(heap, st[S_HEAP], sp)
        st[S_HEAP] -= 1
        L = sp[slot, P_LEN]
    start, lead = sp[slot, P_START], sp[slot, P_LEAD]
    if fit:
        emitted, discarded, kind = L, 0, FIT
    else:
        emitted, discarded, kind = rem, 0 if packer == LOSSLESS else L - rem, CROP
        if packer == RANDOM_SPAN:  # BOS + a run of rem - 1 text tokens; its start is drawn by the caller
            start, lead = 0, 1
    _emit(st, sp, so, ev, slot, emitted, discarded, kind, start, lead)
    if fit or packer != LOSSLESS:
        _release(st, sp, so, sp_free, so_free, ret, slot)
    else:  # lossless: the suffix stays, with its sequence number and no new BOS
        sp[slot, P_START] += rem
        sp[slot, P_LEAD] = 0
        sp[slot, P_LEN] = L - rem
        st[S_TOKENS] -= rem
        _insert(st, sp, head, tail, bits, heap, slot)
    st[S_POS] = st[S_POS] + L if fit else R


@_entry
def run(st, sp, so, sp_free, so_free, head, tail, bits, heap, ph, wl, wb, wlab, ev, ret, pts, log, goal):
    """Pack rows until st[S_ROWS] == goal (DONE) or a stop: the next refill is past the window (NEED_WINDOW), the
    pools cannot hold it (NEED_ROOM), ev or log is full (EVENTS_FULL, LOG_FULL). Every step's state is in the
    arrays, so calling again after the caller has dealt with the stop goes on exactly. Every st[S_STEP]-th row
    end writes (rows, buffered tokens, protected tokens) to pts."""
    R, cap = st[S_R], ev.shape[1]
    while st[S_ROWS] < goal:
        while st[S_POS] < R:
            while st[S_COUNT] < st[S_B]:
                if st[S_K] >= len(wb) - 1:
                    return NEED_WINDOW
                why = _refill(st, sp, so, sp_free, so_free, head, tail, bits, heap, ph, wl, wb, wlab, log)
                if why != DONE:
                    return why
            if st[S_NEV] >= cap:
                return EVENTS_FULL
            _select(st, sp, so, sp_free, so_free, head, tail, bits, heap, ev, ret)
        st[S_ROWS] += 1
        st[S_POS] = 0
        if st[S_STEP] and st[S_ROWS] % st[S_STEP] == 0 and st[S_NPTS] < pts.shape[1]:
            n = st[S_NPTS]
            pts[0, n], pts[1, n], pts[2, n] = st[S_ROWS], st[S_TOKENS], st[S_PMASS]
            st[S_NPTS] = n + 1
    return DONE


@_entry
def restore(st, sp, so, sp_free, so_free, head, tail, bits, heap, buf, lengths):
    """A saved buffer back into empty pools: buf rows (seq, source id, span start, lead BOS, current length) in
    sequence order, lengths[i] the original length of row i's source. Spans of one source are adjacent (a
    source's segment-first chunks are pushed one after another)."""
    prev = -1
    srec = -1
    for i in range(buf.shape[0]):
        src = buf[i, 1]
        if src != prev:
            st[S_SO_FREE] -= 1
            srec = so_free[st[S_SO_FREE]]
            so[srec, O_SRC], so[srec, O_LEN], so[srec, O_LABEL], so[srec, O_SPANS] = src, lengths[i], 0, 0
            so[srec, O_OWN], so[srec, O_DISC], so[srec, O_NEV], so[srec, O_FIRST], so[srec, O_PROT] = 0, 0, 0, -1, 0
            so[srec, O_PMIN], so[srec, O_PMAX] = NO_POSITION, -1
            prev = src
        st[S_NEXT_SEQ] = buf[i, 0]
        _push(st, sp, so, sp_free, head, tail, bits, heap, buf[i, 4], srec, buf[i, 2], buf[i, 3])
