"""Trace any packer: run it on tracer documents and decode its rows into the replay's events.

A packer is a callable `packer(docs) -> rows`: docs an iterator of 1-D int64 token arrays,
rows an iterable of rows (lists, numpy arrays, tensors, or dicts / tuples holding one under
"input_ids", "tokens" or "input"). The tracer's documents have the researcher's lengths and
token ids first_id + (global token index), so every token says which source and position
it came from; ids below first_id are what the packer inserted itself (BOS, EOS, padding,
separators). The trace counts the documents the packer pulls (arrived), decodes the first
`rows` rows (the budget), then keeps pulling rows until the packer stops or `drain_rows`
more rows, so each arrived token not emitted by the horizon is either emitted later or
never: a never-emitted run of a source is discarded by the emission that ends where the run
begins (the crop that cut it), and counts as discarded at the horizon if that emission came
by then, else as buffered. A source that never emits anything is discarded.

Decoding rules, beyond "a run of consecutive positions of one source is one emission":
- a BOS (`bos_id`) right before a run is that emission's leading BOS, a marker the packer added;
- a negative id -t is a BOS the packer added before the token t, even with nothing after it
  (our segment-first adapter writes its BOS markers so; a library's BOS stays anonymous);
- a source's own first token right before a later span of that source is its BOS moved in
  front of the span (random spans): one emission, the lead standing in for the source's BOS.
"""
import numpy as np

from audit.spill import DocTable
from audit.tally import Labels

ROW_KEYS = ("input_ids", "tokens", "input")


def row_tokens(row) -> np.ndarray:
    """The token ids of one yielded row, whatever container the packer uses."""
    if isinstance(row, dict):
        for k in ROW_KEYS:
            if k in row:
                return row_tokens(row[k])
        raise ValueError(f"a row dict without any of {', '.join(ROW_KEYS)} (keys: {', '.join(map(str, row))})")
    if isinstance(row, tuple):
        return row_tokens(row[0])
    if hasattr(row, "detach"):  # a torch tensor, without importing torch here
        row = row.detach().cpu().numpy()
    a = np.asarray(row)
    if a.ndim > 1 and sum(n > 1 for n in a.shape) > 1:  # (1, n) is one row; (2, n) is two, read as one long row before
        raise ValueError(f"the packer yielded a batch of shape {a.shape}, not a row: yield one row (1-D) at a time")
    if a.size and a.dtype.kind not in "iub":  # a float row's ids are cast, and above 2^24 (float32) not exact
        raise ValueError(f"the packer yielded a row of {a.dtype} values: yield integer token ids")
    return a.astype(np.int64, copy=False).reshape(-1)


class TracerDocs:
    """The documents of a refill source as tracer token arrays, counting what is pulled.

    Where each pulled document's tokens start, its length and its label id go to a DocTable
    (audit/spill.py): the newest documents in memory, the older on disk, so a long stream's
    table does not grow this process's memory."""

    def __init__(self, refills, first_id, folder=None):
        self.refills, self.first_id = refills, int(first_id)
        self.table = DocTable(folder)
        self.labels = Labels()  # label values -> ids, in order of first appearance
        self.labelled = False  # some refill carried labels
        self.pulled = 0
        self.stream = None  # the one iterator over the documents, made at the first iter()
        self.exhausted = False  # the packer read its input to the end

    @property
    def tokens(self):
        return self.table.tokens

    def __iter__(self):
        """The documents as one stream, as a loader's iterator is: every iter() continues where the last left off,
        so a packer that reads them through two names (zip(docs, docs)) gets consecutive documents. A fresh stream
        per iter() read the refills again from where the other had left them: documents counted twice, or none."""
        if self.stream is None:
            self.stream = self._documents()
        return self.stream

    def __next__(self):
        return next(iter(self))

    def _documents(self):
        for batch in self._batches():
            for d in batch:
                self.pulled += 1  # counted as each document is handed out
                yield d
        self.exhausted = True

    def refill_batches(self):
        """The same documents a refill at a time (lists), for a packer that refills as the stream is cut
        (ours: the refill slices of the stream's row groups); a refill counts as pulled when handed out."""
        for batch in self._batches():
            self.pulled += len(batch)
            yield batch
        self.exhausted = True

    def _batches(self):
        for lengths, labels in self.refills:
            L = np.asarray(lengths, dtype=np.int64)
            self.labelled |= labels is not None
            starts = self.table.append(L, self.labels.ids(labels, len(L)))
            yield [np.arange(self.first_id + s, self.first_id + s + n, dtype=np.int64)
                   for s, n in zip(starts.tolist(), L.tolist())]

    def locate(self, ids):
        """(source, position, source length) of tracer ids."""
        g = np.asarray(ids, np.int64) - self.first_id
        if len(g) and (g.min() < 0 or g.max() >= self.tokens):
            bad = int(ids[np.argmax((g < 0) | (g >= self.tokens))])
            raise ValueError(f"a row holds the marker {-bad}, naming token id {bad}, which no document pulled so far "
                             f"contains (ids from {self.first_id} on are the tracer's)")
        src = self.table.find(g)
        if not len(src):
            return src, src, src
        lo = int(src.min())
        starts = self.table.starts(lo, int(src.max()) + 2)
        return src, g - starts[src - lo], starts[src - lo + 1] - starts[src - lo]


def decode_rows(rows, docs, bos_id=None, pad_id=None):
    """Emission runs of a batch of rows: dict of per-run arrays, plus inserted-token counts.

    A few vectorized passes over the tokens find the segments of consecutive tracer ids; only
    the segments are then located among the documents (and split where one crosses from a
    document into the next, as concatenating packers do)."""
    lens = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    flat = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    row_start = np.cumsum(lens) - lens
    tracer = flat >= docs.first_id
    cont = np.zeros(len(flat), bool)  # continues the consecutive-id segment of the token before it
    cont[1:] = (np.diff(flat) == 1) & tracer[:-1]
    cont[row_start[lens > 0]] = False
    seg = np.flatnonzero(tracer & ~cont)
    stop = np.flatnonzero(~cont)
    seg_len = np.append(stop, len(flat))[np.searchsorted(stop, seg, side="right")] - seg
    g0 = flat[seg] - docs.first_id
    end = g0 + seg_len - 1
    if len(g0) and end.max() >= docs.tokens:
        raise ValueError(f"a row holds token id {int(flat[seg][np.argmax(end)])}, which no document pulled so "
                         f"far contains (ids from {docs.first_id} on are the tracer's)")
    # the documents from the one holding the batch's lowest id to the one holding its highest: at most
    # what the packer holds, so only their starts are read (the whole table may be on disk)
    lo, hi = docs.table.find(np.array([g0.min(), end.max()])).tolist() if len(g0) else (0, -1)
    starts = docs.table.starts(lo, hi + 2)
    d0 = np.searchsorted(starts, g0, side="right") - 1
    k = np.searchsorted(starts, end, side="right") - d0  # documents each segment spans
    piece_seg = np.repeat(np.arange(len(seg)), k)
    doc = d0[piece_seg] + np.arange(len(piece_seg)) - np.repeat(np.cumsum(k) - k, k)
    gs = np.maximum(g0[piece_seg], starts[doc])
    ge = np.minimum(g0[piece_seg] + seg_len[piece_seg], starts[doc + 1])
    at = seg[piece_seg] + (gs - g0[piece_seg])  # flat index of each run's first token
    row = np.searchsorted(row_start, at, side="right") - 1
    runs = {"src": doc + lo, "a": gs - starts[doc], "b": ge - starts[doc], "row": row, "off": at - row_start[row],
            "lead": np.zeros(len(at), np.int64), "kind_of_lead": np.zeros(len(at), np.int64),
            "len": starts[doc + 1] - starts[doc]}
    _leads(runs, flat, at, bos_id)
    inserted = np.flatnonzero(~tracer)
    used = np.zeros(len(flat), bool)
    used[at[runs["lead"] > 0] - 1] = True
    markers = _lone_markers(flat, inserted, used, row_start, docs)
    free = inserted[~used[inserted]]
    counts = {"pad": int((flat[free] == pad_id).sum()) if pad_id is not None else 0}
    counts["other_inserted"] = len(free) - counts["pad"]
    return _merge_moved_bos(runs), markers, counts


def _leads(runs, flat, at, bos_id):
    """A BOS (or a marker naming the run's first token) right before a run, in its row, leads it."""
    has_prev = runs["off"] > 0
    p = np.maximum(at - 1, 0)
    is_bos = has_prev & (flat[p] == bos_id) if bos_id is not None else np.zeros(len(at), bool)
    lead = is_bos | (has_prev & (flat[p] == -flat[at]))
    runs["lead"] = lead.astype(np.int64)
    runs["kind_of_lead"] = lead.astype(np.int64)  # 1: an added marker; 2 (set later): the source's own BOS, moved
    runs["off"] = runs["off"] - lead


def _lone_markers(flat, inserted, used, row_start, docs):
    """Negative-id markers not leading the token they name: an emission of the BOS alone."""
    lone = inserted[(flat[inserted] < 0) & ~used[inserted]]
    s, p, L = docs.locate(-flat[lone]) if len(lone) else (lone, lone, lone)
    row = np.searchsorted(row_start, lone, side="right") - 1
    used[lone] = True
    return {"at": lone, "src": s, "a": p, "row": row, "off": lone - row_start[row] if len(lone) else lone, "len": L}


def _merge_moved_bos(runs):
    """A run of only position 0 followed, in the same row, by a later span of that source: one emission."""
    n = len(runs["src"])
    if n < 2:
        return runs
    head = (runs["a"][:-1] == 0) & (runs["b"][:-1] == 1) & (runs["lead"][:-1] == 0)
    follow = (runs["src"][1:] == runs["src"][:-1]) & (runs["row"][1:] == runs["row"][:-1]) & \
             (runs["off"][1:] == runs["off"][:-1] + 1) & (runs["lead"][1:] == 0) & (runs["a"][1:] > 1)
    m = np.flatnonzero(head & follow)
    if not len(m):
        return runs
    keep = np.ones(n, bool)
    keep[m] = False
    runs["lead"][m + 1] = 1
    runs["kind_of_lead"][m + 1] = 2
    runs["off"][m + 1] -= 1
    return {k: v[keep] for k, v in runs.items()}


class Trace:
    """The result of tracing one packer: horizon events and everything the tables need."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


BATCH_TOKENS = 1 << 17  # rows decoded together: about a megabyte per array, so the passes stay in cache
RUN_KEYS = ("src", "a", "b", "row", "off", "lead", "kind_of_lead", "len")


class RowDecoder:
    """A packer's rows pulled and decoded a batch at a time: `rows` rows of capacity R (the budget),
    then the drain; once the batches are done, what resolving them needs (ended, arrived, counts)."""

    def __init__(self, packer, refills, R, rows, first_id, bos_id=None, pad_id=None, drain_rows=None,
                 batch_rows=None, progress=None, folder=None):
        self.packer, self.R, self.rows, self.bos_id, self.pad_id = packer, R, rows, bos_id, pad_id
        self.drain_rows, self.progress = drain_rows, progress
        self.batch_rows = batch_rows or max(1, BATCH_TOKENS // R)
        self.docs = TracerDocs(refills, first_id, folder)
        self.counts = {"pad": 0, "other_inserted": 0, "row_tokens": 0}
        self.n, self.ended, self.arrived = 0, False, 0  # rows yielded; the packer stopped; pulled by the horizon
        self.out_of_order = {"rows": 0, "first": None}  # budget rows holding a document's tokens out of its order

    def batches(self):
        """(runs in emission order, first row, documents pulled as each of the batch's budget rows came out);
        a batch ends at the horizon, so each is wholly inside the budget or wholly after it."""
        it = iter(self.packer(self.docs))
        buf, pulled = [], []
        while self.drain_rows is None or self.n < self.rows + self.drain_rows:
            try:
                row = next(it)
            except StopIteration:
                self.ended = True
                if self.n < self.rows:  # the input ended before the budget: all the packer pulled arrived by then
                    self.arrived = self.docs.pulled
                break
            tok = row_tokens(row)
            if len(tok) > self.R:
                raise ValueError(f"the packer yielded a row of {len(tok):,} tokens, more than its capacity {self.R:,}")
            buf.append(tok)
            self.n += 1
            if self.n <= self.rows:
                pulled.append(self.docs.pulled)
                self.arrived = self.docs.pulled
                self.counts["row_tokens"] += len(tok)
            if len(buf) == self.batch_rows or self.n == self.rows:
                yield self._decode(buf), self.n - len(buf), np.asarray(pulled, np.int64)
                buf, pulled = [], []
            if self.progress is not None:
                self.progress(self.n)
        if buf:
            yield self._decode(buf), self.n - len(buf), np.asarray(pulled, np.int64)

    def _decode(self, rows_):
        ev = _decode_batch(rows_, self.n - len(rows_), self.rows, self.docs, self.bos_id, self.pad_id, self.counts)
        rows, first = out_of_order(ev, self.rows)
        self.out_of_order["rows"] += rows
        self.out_of_order["first"] = self.out_of_order["first"] or first
        order = np.lexsort((ev["off"], ev["row"]))
        return {k: v[order] for k, v in ev.items()}


def out_of_order(ev, horizon):
    """(budget rows in which a document's tokens are out of its order, the first such place or None). The decoder
    reads a row as in-order spans of documents, so a reversed or shuffled row would read as many one-token
    emissions that still cover the document: counted here, to be said. A piece of a document that begins a sequence
    (its position 0, or led by a BOS) may come anywhere (segment-first puts a tail, BOS-led, before the head). A
    piece that continues without one is out of order where the same row holds, before it, a token of that document
    at or after its start, or, after it, one before its start (a rotated row: d[3:] then d[:3]). Pieces in different
    rows may come in any order (a packer that splits a document), and a gap (a head, then a later span) is in order."""
    m = (ev["b"] > ev["a"]) & (ev["row"] < horizon)  # tokens of a document (a lone BOS marker holds none)
    row, src, off, a, b, lead = (ev[k][m] for k in ("row", "src", "off", "a", "b", "lead"))
    o = np.lexsort((off, src, row))
    row, src, off, a, b, lead = row[o], src[o], off[o], a[o], b[o], lead[o]
    if not len(row):
        return 0, None
    # each (row, document) a group, contiguous: within it, the largest end before each piece and the smallest start
    # after it, by running max / min over values lifted by group (a group's values exceed every earlier group's)
    new = np.r_[True, (row[1:] != row[:-1]) | (src[1:] != src[:-1])]
    lift = (np.cumsum(new) - 1) * (int(b.max()) + 1)
    before = np.maximum.accumulate(b + lift) - lift  # the largest end up to and including each piece
    before = np.where(new, -1, np.r_[-1, before[:-1]])
    after = np.minimum.accumulate((a + lift)[::-1])[::-1] - lift  # the smallest start from each piece on
    last = np.r_[new[1:], True]
    after = np.where(last, np.iinfo(np.int64).max, np.r_[after[1:], 0])
    continues = (lead == 0) & (a > 0)
    early, late = continues & (before > a), continues & (after < a)
    bad = np.flatnonzero(early | late)
    if not len(bad):
        return 0, None
    in_first = bad[row[bad] == row[bad[0]]]
    i = int(in_first[np.argmin(off[in_first])])  # the first place in the first such row
    other, came_before = (int(before[i] - 1), True) if early[i] else (int(after[i]), False)
    first = {"row": int(row[i]), "source": int(src[i]), "position": int(a[i]), "other_position": other,
             "other_before": came_before}
    return len(np.unique(row[bad])), first


def run_trace(packer, refills, R, rows, first_id, bos_id=None, pad_id=None, drain_rows=None, batch_rows=None,
              progress=None):
    """Run `packer` on the tracer documents of `refills` and resolve every emission at once, in memory:
    the reference the audit's chunked resolution (audit/fates.py) must equal, and small traces."""
    dec = RowDecoder(packer, refills, R, rows, first_id, bos_id, pad_id, drain_rows, batch_rows, progress)
    decoded, pulled = [], []
    for ev, _, p in dec.batches():
        decoded.append(ev)
        pulled.append(p)
    lengths = dec.docs.table.column("len", 0, dec.arrived)
    labels = None
    if dec.docs.labelled:
        labels = np.asarray(dec.docs.labels.names, dtype=object)[dec.docs.table.column("label", 0, dec.arrived)]
    ev = resolve(_concat(decoded), lengths, rows, dec.ended)
    dec.docs.table.close()
    return Trace(events=ev, rows=min(dec.n, rows), rows_yielded=dec.n, ended=dec.ended, arrived=dec.arrived,
                 lengths=lengths, labels=labels, pulled_at_row=np.concatenate(pulled) if pulled else np.zeros(0, np.int64),
                 counts=dec.counts, R=R, input_ended=dec.docs.exhausted)


def _decode_batch(rows_, first_row, horizon, docs, bos_id, pad_id, counts):
    runs, markers, c = decode_rows(rows_, docs, bos_id, pad_id)
    if first_row < horizon:  # inserted tokens are counted in the budget's rows only
        in_h = min(len(rows_), horizon - first_row)
        if in_h < len(rows_):
            _, _, c = decode_rows(rows_[:in_h], docs, bos_id, pad_id)
        counts["pad"] += c["pad"]
        counts["other_inserted"] += c["other_inserted"]
    runs["row"] = runs["row"] + first_row
    lone = {"src": markers["src"], "a": markers["a"], "b": markers["a"], "row": markers["row"] + first_row,
            "off": markers["off"], "lead": np.ones(len(markers["src"]), np.int64),
            "kind_of_lead": np.ones(len(markers["src"]), np.int64), "len": markers["len"]}
    return {k: np.concatenate([runs[k], lone[k]]).astype(np.int64) for k in RUN_KEYS}


def _concat(parts):
    if not parts:
        return {k: np.zeros(0, np.int64) for k in RUN_KEYS}
    return {k: np.concatenate([p[k] for p in parts]).astype(np.int64) for k in RUN_KEYS}


def resolve(ev, lengths, horizon, ended):
    """Discards and kinds of the arrived sources' emissions, from what was and was never emitted.

    Returns the events of arrived sources in emission order with `disc` and `crop` added, and
    `never` (the arrived sources that emitted nothing; discarded if the stream ended)."""
    keep = ev["src"] < len(lengths)
    ev = {k: v[keep] for k, v in ev.items()}
    order = np.lexsort((ev["off"], ev["row"]))
    ev = {k: v[order] for k, v in ev.items()}
    n = len(ev["src"])
    disc = np.zeros(n, np.int64)
    crop = np.zeros(n, bool)
    by_src = np.lexsort((ev["b"], ev["a"], ev["src"]))
    sorted_src = ev["src"][by_src]
    first = np.flatnonzero(np.r_[True, sorted_src[1:] != sorted_src[:-1]]) if n else np.zeros(0, np.int64)
    count = np.diff(np.append(first, n))
    # a source with one emission and no moved BOS: what it did not emit, before and after its span, is its discard
    one = by_src[first[count == 1]]
    one = one[ev["kind_of_lead"][one] != 2]
    disc[one] = ev["a"][one] + lengths[ev["src"][one]] - ev["b"][one]
    src, a, b, kol = (ev[k].tolist() for k in ("src", "a", "b", "kind_of_lead"))
    order_ = by_src.tolist()
    for i, c in zip(first[count > 1].tolist(), count[count > 1].tolist()):
        _resolve_source(order_[i:i + c], a, b, kol, int(lengths[src[order_[i]]]), disc, crop)
    for i in first[(count == 1)].tolist():  # one emission with a moved BOS: the general rule
        e = order_[i]
        if kol[e] == 2:
            _resolve_source([e], a, b, kol, int(lengths[src[e]]), disc, crop)
    ev["disc"], ev["crop"] = disc, crop | (disc > 0)
    ev["emitted"] = ev["b"] - ev["a"] + ev["lead"]
    started = np.zeros(len(lengths), bool)
    started[ev["src"]] = True
    ev["never"] = np.flatnonzero(~started)
    ev["ended"] = ended
    return ev


def _resolve_source(idx, a, b, kol, L, disc, crop):
    """One source's emissions (idx sorted by span start): date each never-emitted run to the
    emission that ends where it begins (the innermost one on a tie), mark cut spans as crops."""
    first_emitted = min(idx)  # the earliest emission (emission order is the index order)
    stand = next((e for e in idx if kol[e] == 2), None)
    end, owner = (1, stand) if stand is not None else (0, None)
    no_lead_starts = {}
    for e in idx:
        if kol[e] == 0:
            no_lead_starts.setdefault(a[e], e)
    for e in idx:
        if a[e] > end:
            who = owner if owner is not None else first_emitted
            disc[who] += a[e] - end
        if b[e] >= end:
            end, owner = b[e], e
    if end < L:
        disc[owner if owner is not None else first_emitted] += L - end
    for e in idx:
        f = no_lead_starts.get(b[e])
        if f is not None and f != e and b[e] < L:
            crop[e] = True  # cut, and continued later without a new BOS (lossless)
