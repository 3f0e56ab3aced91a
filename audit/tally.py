"""Every table of one packer's audit, accumulated chunk by chunk (memory: the live sources).

A source is live from its arrival until none of its spans is buffered any more; then its
numbers are folded into the tables and it is forgotten, so memory follows the buffer, not
the stream. Fed alike by the replay (events as the core selects them) and by the trace
(events decoded from a packer's rows).

Per event, `added` says whether its leading BOS is a marker the packer added (segment-first
chunks after the first: not the source's own token) and `stands_in` whether it stands for
the source's own BOS moved in front of a later span (random spans). A source's own emitted
tokens are emitted - added; its exposed positions are [span_start, span_start + own) for
an event without a lead BOS, else [span_start, span_start + emitted - 1), plus position 0
when the lead stands in.
"""
import numpy as np

from audit.strata import STRATA, stratum_labels, stratum_of
from loaders.core import CROP

DECILES = 10
NO_LABEL = "(no label)"
CURVE_BINS = 400
NONE = np.iinfo(np.int64).max  # first target / first position of a source not yet emitted
# what the tally keeps of each live source: its arrival id, length, label id; own tokens emitted, tokens discarded,
# events; its first emission's target offset, and its first and last exposed position (the per-document fates)
LIVE = ("id", "len", "label", "own", "disc", "nev", "t0", "pmin", "pmax")


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
    def __init__(self, R, targets):
        self.R, self.targets = R, targets
        self.S = len(STRATA) + 1
        self.labels = Labels()
        self.live = {k: np.zeros(0, np.int64) for k in LIVE}
        z = lambda *shape: np.zeros(shape, np.int64)  # noqa: E731
        self.by_stratum = {k: z(self.S) for k in ("sources", "started", "loaded", "emitted", "fully")}
        self.by_label = {}  # label id -> per-label counters (grown on demand)
        # position exposure: arrived sources, and events that emit a whole source, are counted by length
        # and spread over the tenths once, at the end; only the other events' spans are cut into tenths
        self.arrived_lengths, self.whole_emitted = Multiset(), Multiset()
        self.dec_emitted = z(self.S, DECILES)  # the spans of events that do not emit their whole source
        self.crop_hist = z(R + 1)
        self.n = {k: 0 for k in ("events", "emitted", "discarded", "added", "long_arrived", "long_started",
                                 "emitted_long", "continuation_rows", "continuation_events", "rows", "overdrawn")}
        self.startup = None
        self.on_fold = None  # called with each batch of retired sources (their LIVE columns): the fate table
        self.curve_edges = np.linspace(0, max(targets, 1), CURVE_BINS + 1)
        self.curve_all, self.curve_long = z(CURVE_BINS), z(CURVE_BINS)

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
        added, stands_in = np.asarray(added, np.int64), np.asarray(stands_in, np.int64)
        idx = np.searchsorted(self.live["id"], rec["source_id"]) if idx is None else idx
        if np.any(idx >= len(self.live["id"])) or np.any(self.live["id"][np.minimum(idx, len(self.live["id"]) - 1)]
                                                         != rec["source_id"]):
            raise ValueError("an event names a source that has not arrived or was already retired")
        own = rec["emitted"] - added
        self._first_events(rec, idx)
        np.add.at(self.live["own"], idx, own)
        np.add.at(self.live["disc"], idx, rec["discarded"].astype(np.int64))  # contiguous: ufunc.at's fast path
        np.add.at(self.live["nev"], idx, 1)
        lead = rec["lead_bos"].astype(np.int64)
        a, L = rec["span_start"], rec["source_len"]
        b = a + rec["emitted"] - lead  # the source's positions [a, b), plus position 0 where the lead stands in
        whole = (a == 0) & (b == L)
        self._positions(idx, a, b, stands_in, rec["target_offset"].astype(np.int64))
        self.whole_emitted.add(L[whole])
        st = stratum_of(L)
        part = np.flatnonzero(~whole)
        _add_rows(self.dec_emitted, st[part], spans_by_decile(L[part], a[part], b[part]))
        np.add.at(self.dec_emitted[:, 0], st[stands_in > 0], 1)
        self.crop_hist += np.bincount(rec["emitted"][rec["kind"] == CROP], minlength=self.R + 1)[: self.R + 1]
        long_ = rec["source_len"] > self.R
        cont = (a > 0) & (lead == 0)
        self.n["events"] += len(rec)
        self.n["emitted"] += int(rec["emitted"].sum())
        self.n["discarded"] += int(rec["discarded"].sum())
        self.n["added"] += int(added.sum())
        self.n["emitted_long"] += int(rec["emitted"][long_].sum())
        self.n["continuation_events"] += int(cont.sum())
        self.n["continuation_rows"] += int((cont & (rec["row_offset"] == 0)).sum())
        if long_.any():
            t = int(rec["target_offset"][long_].min())
            self.startup = t if self.startup is None else min(self.startup, t)

    def _positions(self, idx, a, b, stands_in, t):
        """Each live source's first emission (target offset t) and first and last exposed position."""
        np.minimum.at(self.live["t0"], idx, t)
        some = b > a
        first = np.where(stands_in > 0, 0, np.where(some, a, NONE))
        np.minimum.at(self.live["pmin"], idx, first)
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
        self._fold(out)

    def _fold(self, s):
        if self.on_fold is not None and len(s["id"]):
            self.on_fold(s)
        L, own, disc, started = s["len"], s["own"], s["disc"], s["nev"] > 0
        st = stratum_of(L)
        for k, w in (("sources", None), ("started", started), ("loaded", L), ("emitted", own), ("fully", own == L)):
            self.by_stratum[k] += np.bincount(st, weights=w, minlength=self.S).astype(np.int64)
        long_ = L > self.R
        self.n["overdrawn"] += int((own + disc > L).sum())  # more of a source emitted or discarded than it holds
        self.n["long_arrived"] += int(long_.sum())
        self.n["long_started"] += int((long_ & started).sum())
        for lab in np.unique(s["label"]).tolist():
            m = s["label"] == lab
            d = self.by_label.setdefault(lab, {k: 0 for k in ("docs", "tokens", "emitted", "discarded", "buffered",
                                                              "started", "longest_never_started")})
            d["docs"] += int(m.sum())
            d["tokens"] += int(L[m].sum())
            d["emitted"] += int(own[m].sum())
            d["discarded"] += int(disc[m].sum())
            d["buffered"] += int((L[m] - own[m] - disc[m]).sum())
            d["started"] += int(started[m].sum())
            never = L[m & ~started]
            if len(never):
                d["longest_never_started"] = max(d["longest_never_started"], int(never.max()))

    # ---- the tables ----------------------------------------------------------------
    def tables(self) -> dict:
        """Everything but the mass partition's buffered term and the Proposition (the caller's)."""
        if len(self.live["id"]):
            raise ValueError("retire() the live sources before reading the tables")
        bs, labels = self.by_stratum, stratum_labels()
        n_arr = int(bs["sources"].sum())
        crops = self.crop_hist
        return {
            "sources_arrived": n_arr, "tokens_arrived": int(bs["loaded"].sum()),
            "emitted": self.n["emitted"], "discarded": self.n["discarded"],
            "selection_events": self.n["events"], "crop_events": int(crops.sum()),
            "crop_median_emitted": median_of_counts(crops), "crops_emitting_only_bos": int(crops[1]),
            "sources_started": int(bs["started"].sum()), "sources_fully_emitted": int(bs["fully"].sum()),
            "sources_never_started": n_arr - int(bs["started"].sum()),
            "sources_longer_than_R_arrived": self.n["long_arrived"],
            "sources_longer_than_R_started": self.n["long_started"],
            "retention_by_stratum": [
                {"stratum": labels[k], "sources": int(bs["sources"][k]), "started": int(bs["started"][k]),
                 "loaded_tokens": int(bs["loaded"][k]), "emitted_tokens": int(bs["emitted"][k]),
                 "retained": (float(bs["emitted"][k] / bs["loaded"][k]) if bs["loaded"][k] else None)}
                for k in range(self.S)],
            "startup_delay_targets": self.startup,
            "share_emitted_from_long_sources": (self.n["emitted_long"] / self.n["emitted"]) if self.n["emitted"] else 0.0,
            "by_label": self.label_table(),
            "position_exposure": self.exposure_table(),
            "continuation_rows": self.n["continuation_rows"], "continuation_events": self.n["continuation_events"],
        }

    def label_table(self) -> list:
        tok = sum(d["tokens"] for d in self.by_label.values())
        em = sum(d["emitted"] for d in self.by_label.values())
        out = []
        for lab, d in sorted(self.by_label.items(), key=lambda kv: self.labels.names[kv[0]]):
            arr_share = d["tokens"] / tok if tok else 0.0
            em_share = d["emitted"] / em if em else 0.0
            out.append({"label": self.labels.names[lab], **d, "never_started": d["docs"] - d["started"],
                        "share_of_arrived": arr_share, "share_of_emitted": em_share,
                        "representation": (em_share / arr_share) if arr_share else None,
                        "longest_never_started": d["longest_never_started"] or None})
        return out

    def exposure_table(self) -> list:
        labels = stratum_labels()
        arrived = self.arrived_lengths.by_decile(self.S)
        emitted = self.dec_emitted + self.whole_emitted.by_decile(self.S)
        out = []
        for k in range(self.S):
            arr = arrived[k]
            if not arr.sum():
                continue
            share = [float(e / a) if a else None for e, a in zip(emitted[k].tolist(), arr.tolist())]
            out.append({"stratum": labels[k], "arrived_tokens": arr.tolist(), "emitted_tokens": emitted[k].tolist(),
                        "emitted_share": share})
        return out

    def plot_data(self) -> dict:
        """Bounded data for the figures: start curves, arrived length counts."""
        return {"curve_edges": self.curve_edges.tolist(), "started": np.cumsum(self.curve_all).tolist(),
                "started_long": np.cumsum(self.curve_long).tolist(),
                "length_counts": list(zip(self.arrived_lengths.values.tolist(), self.arrived_lengths.counts.tolist()))}
