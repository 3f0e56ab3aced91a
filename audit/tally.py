"""Every table of one packer's audit, accumulated chunk by chunk (memory: the live sources).

A source is live from its arrival until none of its spans is buffered any more; then its
numbers are folded into the tables and it is forgotten, so memory follows the buffer, not
the stream. The replay's compiled core (loaders/core.py) keeps each buffered source's numbers
itself and hands over its record when the source retires (fold); the trace (events decoded
from a packer's rows) and the in-memory replay keep them here (arrive, add_events, retire).
The sums over events (mass, crops, continuations, the start-up delay, position exposure)
are one compiled pass over the event columns for both (_event_sums).

Per event, `added` says whether its leading BOS is a marker the packer added (segment-first
chunks after the first: not the source's own token) and `stands_in` whether it stands for
the source's own BOS moved in front of a later span (random spans). A source's own emitted
tokens are emitted - added; its exposed positions are [span_start, span_start + own) for
an event without a lead BOS, else [span_start, span_start + emitted - 1), plus position 0
when the lead stands in.
"""
import numpy as np
from numba import njit

from audit.strata import STRATA, stratum_labels, stratum_of
from loaders import kernel as K
from loaders.core import CROP

DECILES = 10
NO_LABEL = "(no label)"
CURVE_BINS = 400
NONE = K.NO_POSITION  # first target / first position of a source none of whose tokens was emitted
# what the tally keeps of each live source of the trace: its arrival id, length, label id; own tokens emitted, tokens
# discarded, events; its first emission's target offset, and its first and last exposed position (the fate table)
LIVE = ("id", "len", "label", "own", "disc", "nev", "t0", "pmin", "pmax")
HIST_LENGTHS = 1 << 17  # source lengths below this are counted in an array; the rare longer ones in a Multiset
_STRATA = np.asarray(STRATA, np.int64)
_NONE = np.zeros(0, np.int64)
# the event sums' counters (Tally.sums)
(N_EVENTS, N_EMITTED, N_DISCARDED, N_ADDED, N_EMITTED_LONG, N_CONT_ROWS, N_CONT_EVENTS, N_STARTUP, N_REF_LAST,
 N_LONG_FIRST, N_LONG_LAST, N_COUNTERS) = range(12)


def decile_edges(L):
    """Start of each tenth of a source of length L (positions p with 10p // L == d): int64 [n, 11]."""
    L = np.asarray(L, dtype=np.int64)
    return (np.arange(DECILES + 1)[None, :] * L[:, None] + DECILES - 1) // DECILES


def decile_sizes(L):
    """Tokens in each tenth of a source of length L: int64 [n, 10] (spans_by_decile of the whole source)."""
    return np.diff(decile_edges(L), axis=1)


def spans_by_decile(L, a, b):
    """Tokens of each position run [a, b) of a source of length L that fall in each tenth: [n, 10]."""
    e = decile_edges(L)
    lo = np.maximum(e[:, :-1], np.asarray(a)[:, None])
    hi = np.minimum(e[:, 1:], np.asarray(b)[:, None])
    return np.maximum(hi - lo, 0)


def _add_rows(target, rows, values):
    """target[rows] += values, repeated rows adding up (np.add.at on the flattened 1-D view: its fast path)."""
    k = target.shape[1]
    np.add.at(target.reshape(-1), (np.asarray(rows)[:, None] * k + np.arange(k)).reshape(-1), values.reshape(-1))


def median_of_counts(counts):
    """np.median of the multiset {v: counts[v]} (the mean of the two middle values for an even size)."""
    n = int(counts.sum())
    if not n:
        return None
    c = np.cumsum(counts)
    lo, hi = np.searchsorted(c, (n - 1) // 2, side="right"), np.searchsorted(c, n // 2, side="right")
    return float((lo + hi) / 2)


class Multiset:
    """Counts of int values as sorted (values, counts) arrays, added to a chunk at a time: memory is the
    distinct values, work per chunk its own values plus a pass over them."""

    def __init__(self):
        self.values, self.counts = np.zeros(0, np.int64), np.zeros(0, np.int64)

    def add(self, x):
        if not len(x):
            return
        u, c = np.unique(np.asarray(x, np.int64), return_counts=True)
        pos = np.searchsorted(self.values, u)
        hit = pos < len(self.values)
        hit[hit] = self.values[pos[hit]] == u[hit]
        self.counts[pos[hit]] += c[hit]
        if not hit.all():
            self.values = np.insert(self.values, pos[~hit], u[~hit])
            self.counts = np.insert(self.counts, pos[~hit], c[~hit])

    def by_decile(self, S):
        """Tokens in each tenth of every counted source length, added up by the length's stratum: [S, 10]."""
        out = np.zeros((S, DECILES), np.int64)
        _add_rows(out, stratum_of(self.values), decile_sizes(self.values) * self.counts[:, None])
        return out


class LengthCounts:
    """Counts of source lengths (as Multiset): an array below HIST_LENGTHS, a Multiset above."""

    def __init__(self):
        self.hist, self.above = np.zeros(HIST_LENGTHS, np.int64), Multiset()

    def add(self, x):
        x = np.asarray(x, np.int64)
        small = x < HIST_LENGTHS
        self.hist += np.bincount(x[small], minlength=HIST_LENGTHS)
        self.above.add(x[~small])

    def multiset(self):
        m = Multiset()
        v = np.flatnonzero(self.hist)
        m.values, m.counts = np.concatenate([v, self.above.values]), np.concatenate([self.hist[v], self.above.counts])
        return m


@njit(cache=True, _nrt=False, nogil=True)  # only reads and writes the arrays it is given (see loaders/kernel.py)
def _event_sums(L, a, em, disc, kind, lead, row, off, added, stands, R, ref, strata, dec, whole, crop, n):
    """The sums over one chunk of events, into dec (tokens emitted by stratum and tenth of the source), whole
    (events that emit their whole source, by its length, when below len(whole)), crop (crops by tokens
    emitted) and n (the N_* counters; N_REF_LAST: tokens of the last tenth of sources longer than ref, when
    ref >= 0; N_LONG_FIRST and N_LONG_LAST: of the first and last tenth of sources longer than R, the tenths of the
    position exposure table, its BOS standing in counted at position 0 as there). An event's own positions are
    [a, a + emitted - lead)."""
    for i in range(len(L)):
        Li, ai = L[i], a[i]
        bi = ai + em[i] - lead[i]
        s = 0
        while s < len(strata) and strata[s] < Li:
            s += 1
        if ai == 0 and bi == Li and Li < len(whole):
            whole[Li] += 1
        elif bi > ai:
            for d in range(10 * ai // Li, min(10 * (bi - 1) // Li, 9) + 1):
                lo, hi = max((d * Li + 9) // 10, ai), min(((d + 1) * Li + 9) // 10, bi)
                if hi > lo:
                    dec[s, d] += hi - lo
        if stands[i]:
            dec[s, 0] += 1  # the source's own BOS, moved in front of a later span
        if 0 <= ref < Li:
            n[N_REF_LAST] += max(bi - max(ai, (9 * Li + 9) // 10), 0)
        if Li > R:
            n[N_LONG_FIRST] += max(min(bi, (Li + 9) // 10) - ai, 0) + (stands[i] > 0)
            n[N_LONG_LAST] += max(bi - max(ai, (9 * Li + 9) // 10), 0)
        if kind[i] == CROP and em[i] <= R:
            crop[em[i]] += 1
        n[N_EVENTS] += 1
        n[N_EMITTED] += em[i]
        n[N_DISCARDED] += disc[i]
        n[N_ADDED] += added[i]
        if Li > R:
            n[N_EMITTED_LONG] += em[i]
            t = row[i] * (R - 1) + max(off[i] - 1, 0)
            if n[N_STARTUP] < 0 or t < n[N_STARTUP]:
                n[N_STARTUP] = t
        if ai > 0 and lead[i] == 0:
            n[N_CONT_EVENTS] += 1
            if off[i] == 0:
                n[N_CONT_ROWS] += 1


LABEL_COLS = ("docs", "tokens", "emitted", "discarded", "buffered", "started", "longest_never_started")
STRATUM_COLS = ("sources", "started", "loaded", "emitted", "fully")
F_LONG_ARRIVED, F_LONG_STARTED, F_REF_ARRIVED, F_REF_STARTED, F_REF_LAST, F_LONG_FIRST, F_LONG_LAST, F_COUNTERS = range(8)


@njit(cache=True, _nrt=False, nogil=True)  # only reads and writes the arrays it is given (see loaders/kernel.py)
def _fold_sums(L, own, disc, nev, label, R, ref, strata, bs, f, lab, hist):
    """Retired sources into bs (STRATUM_COLS by stratum), f (the F_* counters, the tokens of the first and last
    tenth of each source longer than R among them; the ref ones when ref >= 0), lab
    (LABEL_COLS by label id) and hist (sources by length, those below len(hist))."""
    for i in range(len(L)):
        Li, started = L[i], nev[i] > 0
        if Li < len(hist):
            hist[Li] += 1
        s = 0
        while s < len(strata) and strata[s] < Li:
            s += 1
        bs[0, s] += 1
        bs[1, s] += started
        bs[2, s] += Li
        bs[3, s] += own[i]
        bs[4, s] += own[i] == Li
        if Li > R:
            f[F_LONG_ARRIVED] += 1
            f[F_LONG_STARTED] += started
            f[F_LONG_FIRST] += (Li + 9) // 10
            f[F_LONG_LAST] += Li - (9 * Li + 9) // 10
        if 0 <= ref < Li:
            f[F_REF_ARRIVED] += 1
            f[F_REF_STARTED] += started
            f[F_REF_LAST] += Li - (9 * Li + 9) // 10
        k = label[i]
        lab[k, 0] += 1
        lab[k, 1] += Li
        lab[k, 2] += own[i]
        lab[k, 3] += disc[i]
        lab[k, 4] += Li - own[i] - disc[i]
        lab[k, 5] += started
        if not started and Li > lab[k, 6]:
            lab[k, 6] = Li


@njit(cache=True, _nrt=False)
def _start_bins(first, L, R, edges, curve_all, curve_long):
    """Each started source (first >= 0: its first event's target offset) into its bin of the start curves: the bin b
    with edges[b] <= first < edges[b + 1] (np.searchsorted(edges, first, "right") - 1), clipped to the bins."""
    n, top = len(curve_all), edges[-1]
    for i in range(len(first)):
        t = first[i]
        if t < 0:
            continue
        b = min(int(t * n / top), n) if top > 0 else 0  # the bin of evenly spaced edges, then moved onto the edges
        while b > 0 and edges[b] > t:
            b -= 1
        while b + 1 < len(edges) and edges[b + 1] <= t:
            b += 1
        b = min(b, n - 1)
        curve_all[b] += 1
        if L[i] > R:
            curve_long[b] += 1


def _i64(x):
    return np.ascontiguousarray(x, np.int64)


class Labels:
    """Label values (strings, ints or None) -> small ints, in order of first appearance."""

    def __init__(self):
        self.names, self._ids = [], {}

    def ids(self, values, n):
        if values is None:  # an unlabelled refill: one id, without a string per document
            return np.full(n, self._id(NO_LABEL), np.int64) if n else np.zeros(0, np.int64)
        uniq, inv = np.unique(np.asarray([NO_LABEL if v is None else str(v) for v in values], dtype=object),
                              return_inverse=True)
        lut = np.fromiter((self._id(u) for u in uniq), dtype=np.int64, count=len(uniq))
        return lut[inv.reshape(-1)]

    def _id(self, name):
        if name not in self._ids:
            self._ids[name] = len(self.names)
            self.names.append(name)
        return self._ids[name]


class Tally:
    """ref: a source length; the sources longer than it are also counted apart (arrived, started, their last
    tenth's tokens arrived and emitted), as the frontier compares configurations of other row capacities."""

    def __init__(self, R, targets, ref=None):
        self.R, self.targets, self.ref = R, targets, ref
        self.S = len(STRATA) + 1
        self.labels = Labels()
        self.live = {k: np.zeros(0, np.int64) for k in LIVE}
        self.on_fold = None  # called with each batch of retired sources (their LIVE columns): the fate table
        self.overdrawn = 0  # sources that gave more tokens than they have (a traced packer that emits one twice)
        z = lambda *shape: np.zeros(shape, np.int64)  # noqa: E731
        self._bs = z(len(STRATUM_COLS), self.S)
        self.by_stratum = {k: self._bs[i] for i, k in enumerate(STRATUM_COLS)}  # views of _bs
        self.by_label = z(0, len(LABEL_COLS))  # LABEL_COLS by label id (grown on demand; docs 0: no such source)
        # position exposure: arrived sources, and events that emit a whole source, are counted by length
        # and spread over the tenths once, at the end; only the other events' spans are cut into tenths
        self.arrived_lengths = LengthCounts()
        self.whole_emitted = z(HIST_LENGTHS)  # events that emit their whole source, by its length (below HIST_LENGTHS)
        self.dec_emitted = z(self.S, DECILES)  # the spans of the other events, by stratum and tenth
        self.crop_hist = z(R + 1)
        self.sums = z(N_COUNTERS)  # the N_* counters of the events
        self.sums[N_STARTUP] = -1
        self.folded = z(F_COUNTERS)  # the F_* counters of the retired sources
        self.curve_edges = np.linspace(0, max(targets, 1), CURVE_BINS + 1)
        self.curve_all, self.curve_long = z(CURVE_BINS), z(CURVE_BINS)
        self._zeros = z(0)

    # ---- arrivals ------------------------------------------------------------------
    def arrive(self, first, lengths, labels=None, label_ids=None):
        """Sources first.. with these lengths; labels (values) or label_ids (ids of self.labels already)."""
        L = np.asarray(lengths, dtype=np.int64)
        ids = first + np.arange(len(L), dtype=np.int64)
        lab = self.labels.ids(labels, len(L)) if label_ids is None else np.asarray(label_ids, np.int64)
        for k, v in (("id", ids), ("len", L), ("label", lab)):
            self.live[k] = np.concatenate([self.live[k], v])
        for k, v in (("own", 0), ("disc", 0), ("nev", 0), ("t0", NONE), ("pmin", NONE), ("pmax", -1)):
            self.live[k] = np.concatenate([self.live[k], np.full(len(L), v, np.int64)])
        self.arrived_lengths.add(L)

    # ---- events --------------------------------------------------------------------
    def add_events(self, rec, added, stands_in, idx=None):
        """One chunk of event records (in emission order) with their added / stands-in flags; idx: where
        each event's source is in self.live, when the caller has looked it up already."""
        if not len(rec):
            return
        added, stands_in = _i64(added), _i64(stands_in)
        idx = np.searchsorted(self.live["id"], rec["source_id"]) if idx is None else idx
        if np.any(idx >= len(self.live["id"])) or np.any(self.live["id"][np.minimum(idx, len(self.live["id"]) - 1)]
                                                         != rec["source_id"]):
            raise ValueError("an event names a source that has not arrived or was already retired")
        own = rec["emitted"] - added
        self._first_events(rec, idx)
        self._positions(idx, rec["span_start"], rec["span_start"] + rec["emitted"] - rec["lead_bos"], stands_in,
                        rec["target_offset"])
        np.add.at(self.live["own"], idx, own)
        np.add.at(self.live["disc"], idx, rec["discarded"].astype(np.int64))  # contiguous: ufunc.at's fast path
        np.add.at(self.live["nev"], idx, 1)
        self._sums(*(rec[f] for f in ("source_len", "span_start", "emitted", "discarded", "kind", "lead_bos", "row",
                                      "row_offset")), added, stands_in)

    def add_columns(self, ev, added=None, stands_in=None):
        """One chunk of the compiled core's event columns ([loaders.kernel.N_EVENT_COLS, n]), with the added /
        stands-in flags (None: none); the sources' own numbers come with their records (fold)."""
        n = ev.shape[1]
        if len(self._zeros) < n:
            self._zeros = np.zeros(n, np.int64)
        added, stands_in = (self._zeros[:n] if x is None else _i64(x) for x in (added, stands_in))
        self._sums(*(ev[k] for k in (K.E_LEN, K.E_START, K.E_EMIT, K.E_DISC, K.E_KIND, K.E_LEAD, K.E_ROW, K.E_OFF)),
                   added, stands_in)

    def _sums(self, L, a, em, disc, kind, lead, row, off, added, stands_in):
        _event_sums(_i64(L), _i64(a), _i64(em), _i64(disc), _i64(kind), _i64(lead), _i64(row), _i64(off), added,
                    stands_in, self.R, -1 if self.ref is None else self.ref, _STRATA, self.dec_emitted,
                    self.whole_emitted, self.crop_hist, self.sums)

    def _positions(self, idx, a, b, stands_in, t):
        """Each live source's first emission (target offset t) and first and last exposed position ([a, b), and
        position 0 where the lead stands in for the source's own BOS)."""
        a, b, t = _i64(a), _i64(b), _i64(t)
        np.minimum.at(self.live["t0"], idx, t)
        some = b > a
        np.minimum.at(self.live["pmin"], idx, np.where(stands_in > 0, 0, np.where(some, a, NONE)))
        np.maximum.at(self.live["pmax"], idx, np.where(some, b - 1, np.where(stands_in > 0, 0, -1)))

    def _first_events(self, rec, idx):
        """The start curves: each source's first event, by target offset."""
        n = len(idx)
        first = np.full(len(self.live["id"]), n, np.int64)
        np.minimum.at(first, idx, np.arange(n))  # each live source's first event in this chunk (n: none)
        u = np.flatnonzero(first < n)
        new = self.live["nev"][u] == 0
        t = rec["target_offset"][first[u][new]]
        b = np.clip(np.searchsorted(self.curve_edges, t, side="right") - 1, 0, CURVE_BINS - 1)
        np.add.at(self.curve_all, b, 1)
        np.add.at(self.curve_long, b[self.live["len"][u[new]] > self.R], 1)

    # ---- retiring ------------------------------------------------------------------
    def retire(self, keep_ids=None):
        """Fold the live sources not in keep_ids (sorted; None: every one, at the horizon)."""
        ids = self.live["id"]
        keep = np.zeros(len(ids), bool)
        if keep_ids is not None and len(keep_ids):  # both sorted: one binary search each, no sort (np.isin sorts)
            kept = np.asarray(keep_ids, np.int64)
            keep = kept[np.minimum(np.searchsorted(kept, ids), len(kept) - 1)] == ids
        out = {k: v[~keep] for k, v in self.live.items()}
        self.live = {k: v[keep] for k, v in self.live.items()}
        self._fold(out, fold_lengths=False)  # counted as they arrived

    def fold(self, ret):
        """The records of retired sources from the compiled core ([loaders.kernel.N_RETIRED_COLS, n]): their
        arrival, start and every number at once."""
        if not ret.shape[1]:
            return
        s = {"id": ret[K.T_SRC], "len": ret[K.T_LEN], "own": ret[K.T_OWN], "disc": ret[K.T_DISC], "nev": ret[K.T_NEV],
             "label": ret[K.T_LABEL], "t0": np.where(ret[K.T_FIRST] < 0, NONE, ret[K.T_FIRST]),
             "pmin": ret[K.T_PMIN], "pmax": ret[K.T_PMAX]}
        self.arrived_lengths.above.add(s["len"][s["len"] >= HIST_LENGTHS])  # those below: counted by _fold_sums
        _start_bins(ret[K.T_FIRST], s["len"], self.R, self.curve_edges, self.curve_all, self.curve_long)
        self._fold(s)

    def _fold(self, s, fold_lengths=True):
        if self.on_fold is not None and len(s["len"]):
            self.on_fold(s)
        self.overdrawn += int((s["own"] + s["disc"] > s["len"]).sum())
        label = _i64(s["label"])
        if len(label) and label.max() >= len(self.by_label):
            grown = np.zeros((int(label.max()) + 1, len(LABEL_COLS)), np.int64)
            grown[:len(self.by_label)] = self.by_label
            self.by_label = grown
        _fold_sums(_i64(s["len"]), _i64(s["own"]), _i64(s["disc"]), _i64(s["nev"]), label, self.R,
                   -1 if self.ref is None else self.ref, _STRATA, self._bs, self.folded, self.by_label,
                   self.arrived_lengths.hist if fold_lengths else _NONE)

    # ---- the tables ----------------------------------------------------------------
    def tables(self) -> dict:
        """Everything but the mass partition's buffered term and the Proposition (the caller's)."""
        if len(self.live["id"]):
            raise ValueError("retire() the live sources before reading the tables")
        bs, labels, n = self.by_stratum, stratum_labels(), self.sums.tolist()
        n_arr = int(bs["sources"].sum())
        crops = self.crop_hist
        return {
            "sources_arrived": n_arr, "tokens_arrived": int(bs["loaded"].sum()),
            "emitted": n[N_EMITTED], "discarded": n[N_DISCARDED],
            "selection_events": n[N_EVENTS], "crop_events": int(crops.sum()),
            "crop_median_emitted": median_of_counts(crops), "crops_emitting_only_bos": int(crops[1]),
            "sources_started": int(bs["started"].sum()), "sources_fully_emitted": int(bs["fully"].sum()),
            "sources_never_started": n_arr - int(bs["started"].sum()),
            "sources_longer_than_R_arrived": int(self.folded[F_LONG_ARRIVED]),
            "sources_longer_than_R_started": int(self.folded[F_LONG_STARTED]),
            # the first and last tenth of the positions of the sources longer than R: tokens arrived and emitted
            "longer_than_R_tenths": {"first_arrived": int(self.folded[F_LONG_FIRST]), "first_emitted": n[N_LONG_FIRST],
                                     "last_arrived": int(self.folded[F_LONG_LAST]), "last_emitted": n[N_LONG_LAST]},
            "retention_by_stratum": [
                {"stratum": labels[k], "sources": int(bs["sources"][k]), "started": int(bs["started"][k]),
                 "loaded_tokens": int(bs["loaded"][k]), "emitted_tokens": int(bs["emitted"][k]),
                 "retained": (float(bs["emitted"][k] / bs["loaded"][k]) if bs["loaded"][k] else None)}
                for k in range(self.S)],
            "startup_delay_targets": n[N_STARTUP] if n[N_STARTUP] >= 0 else None,
            "share_emitted_from_long_sources": (n[N_EMITTED_LONG] / n[N_EMITTED]) if n[N_EMITTED] else 0.0,
            "by_label": self.label_table(),
            "position_exposure": self.exposure_table(),
            "continuation_rows": n[N_CONT_ROWS], "continuation_events": n[N_CONT_EVENTS],
            **({} if self.ref is None else {"longer_than_ref": {
                "length": self.ref, "arrived": int(self.folded[F_REF_ARRIVED]),
                "started": int(self.folded[F_REF_STARTED]), "last_tenth_arrived": int(self.folded[F_REF_LAST]),
                "last_tenth_emitted": n[N_REF_LAST]}}),
        }

    def label_table(self) -> list:
        present = np.flatnonzero(self.by_label[:, 0])  # the labels some source had
        return label_rows({self.labels.names[lab]: dict(zip(LABEL_COLS, self.by_label[lab].tolist()))
                           for lab in present.tolist()})

    def exposure_table(self) -> list:
        arrived = self.arrived_lengths.multiset().by_decile(self.S)
        whole = Multiset()
        whole.values = np.flatnonzero(self.whole_emitted)
        whole.counts = self.whole_emitted[whole.values]
        return exposure_rows(arrived, self.dec_emitted + whole.by_decile(self.S))

    def plot_data(self) -> dict:
        """Bounded data for the figures: start curves, arrived length counts."""
        m = self.arrived_lengths.multiset()
        return {"curve_edges": self.curve_edges.tolist(), "started": np.cumsum(self.curve_all).tolist(),
                "started_long": np.cumsum(self.curve_long).tolist(),
                "length_counts": list(zip(m.values.tolist(), m.counts.tolist()))}


# ---- the label and exposure tables: one definition, for a packer's tally and a topology's merge (audit/topology.py)
def label_rows(counts) -> list:
    """The per-label coverage table from each label's counts ({label: LABEL_COLS}), in label order: its documents
    never started, its shares of the arrived and of the emitted tokens, its representation (the emitted share over
    the arrived share), and its longest document never started (None for none)."""
    tok = sum(d["tokens"] for d in counts.values())
    em = sum(d["emitted"] for d in counts.values())
    out = []
    for name in sorted(counts):
        d = counts[name]
        arr_share = d["tokens"] / tok if tok else 0.0
        em_share = d["emitted"] / em if em else 0.0
        out.append({"label": name, **d, "never_started": d["docs"] - d["started"],
                    "share_of_arrived": arr_share, "share_of_emitted": em_share,
                    "representation": (em_share / arr_share) if arr_share else None,
                    "longest_never_started": d["longest_never_started"] or None})
    return out


def exposure_rows(arrived, emitted) -> list:
    """The position-exposure table from each length stratum's arrived and emitted tokens per tenth of a source's
    positions (row k of each: stratum k), with the emitted share of each tenth; a stratum where nothing arrived is
    left out."""
    labels, out = stratum_labels(), []
    for k, (arr, emt) in enumerate(zip(arrived, emitted)):
        arr, emt = np.asarray(arr).tolist(), np.asarray(emt).tolist()
        if not sum(arr):
            continue
        out.append({"stratum": labels[k], "arrived_tokens": arr, "emitted_tokens": emt,
                    "emitted_share": [float(e / a) if a else None for e, a in zip(emt, arr)]})
    return out
