"""fates_<packer>.parquet: one row per input document, what the packer had done with it at the horizon.

The tally folds a source (one arrival of a document) once none of its spans is buffered any
more, or at the horizon. `FateTable.add` keeps what a fate needs of each folded arrival on
disk, keyed by document (a document arrives again in each pass the stream wraps into);
`write` reads them back a range of documents at a time, adds each document's arrivals up and
writes one row per document in input order, the documents that never arrived included, and
counts the documents by fate, label and length. Memory: a spill chunk and one range of
documents, whatever the corpus's size.

A document's fate, over its arrivals before the horizon:
    whole        some arrival had every one of its tokens emitted
    partial      started (an event took a span of it), but no arrival was emitted whole
    waiting      arrived, never started, and its tokens are still buffered
    dropped      arrived, never started, nothing buffered: the packer threw it away unseen
    not_arrived  the horizon came before it did
Token counts are the document's own (summed over arrivals); markers a packer adds (segment-first's
BOS before each later chunk) are counted beside them, in the summary's bos_added.
"""
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from audit.spill import KeyedSpill
from audit.strata import stratum_labels, stratum_of
from audit.tally import NO_LABEL, NONE

FATES = ("whole", "partial", "waiting", "dropped", "not_arrived")
NEVER_STARTED = ("waiting", "dropped")  # arrived and never started
RANGE_DOCS = 1 << 16  # documents aggregated and written together (a parquet row group)
ARRIVAL = np.dtype([("doc", np.int64), ("arrival", np.int64), ("own", np.int64), ("disc", np.int64),
                    ("buf", np.int64), ("started", np.int8), ("whole", np.int8), ("t0", np.int64),
                    ("pmin", np.int64), ("pmax", np.int64)])
SCHEMA = pa.schema([("doc", pa.int64()), ("file", pa.dictionary(pa.int32(), pa.string())), ("row", pa.int64()),
                    ("label", pa.string()), ("length", pa.int64()), ("fate", pa.dictionary(pa.int8(), pa.string())),
                    ("arrivals", pa.int32()), ("first_arrival", pa.int64()), ("last_arrival", pa.int64()),
                    ("emitted", pa.int64()), ("discarded", pa.int64()), ("buffered", pa.int64()),
                    ("first_target", pa.int64()), ("first_position", pa.int64()), ("last_position", pa.int64())])


@dataclass
class DocumentIndex:
    """Where each of the stream's n documents comes from: files[file_of[d]], row row_of[d] in it; doc: its number
    in the whole corpus (a worker stream's share holds every W-th document), None for 0..n-1."""
    files: list
    file_of: np.ndarray  # int32, one per document
    row_of: np.ndarray  # int64, one per document
    lengths: np.ndarray
    labels: object = None  # one label per document (object array), or None
    doc: np.ndarray = None

    def subset(self, idx):
        """The documents idx (sorted), numbered as in this index."""
        return DocumentIndex(self.files, self.file_of[idx], self.row_of[idx], np.asarray(self.lengths)[idx],
                             None if self.labels is None else np.asarray(self.labels, dtype=object)[idx],
                             idx if self.doc is None else self.doc[idx])

    def numbers(self, lo, hi):
        return np.arange(lo, hi, dtype=np.int64) if self.doc is None else np.asarray(self.doc[lo:hi], np.int64)

    @classmethod
    def one_file(cls, name, lengths, labels=None):
        """Every document from one file (a length file, a synthetic stream), in its order."""
        n = len(lengths)
        return cls([str(name)], np.zeros(n, np.int32), np.arange(n, dtype=np.int64), np.asarray(lengths), labels)

    @property
    def n(self):
        return len(self.lengths)


class FateTable:
    """Folded arrivals kept on disk by document; document d's arrivals are d, n + d, 2n + d, ..."""

    def __init__(self, folder, n):
        self.n = n
        self.spill = KeyedSpill(folder, "fates", ARRIVAL, "doc")

    def add(self, s):
        """A batch of the tally's retired sources (its LIVE columns)."""
        rec = np.zeros(len(s["id"]), ARRIVAL)
        rec["doc"], rec["arrival"] = s["id"] % self.n, s["id"]
        rec["own"], rec["disc"], rec["buf"] = s["own"], s["disc"], s["len"] - s["own"] - s["disc"]
        rec["started"], rec["whole"] = s["nev"] > 0, s["own"] == s["len"]
        rec["t0"], rec["pmin"], rec["pmax"] = s["t0"], s["pmin"], s["pmax"]
        self.spill.add(rec)

    def write(self, path, index, R):
        """fates.parquet at `path`, one row per document of `index`; returns the documents' counts."""
        counts = DocumentCounts(R)
        with pq.ParquetWriter(path, SCHEMA, compression="zstd") as w:
            for lo in range(0, index.n, RANGE_DOCS):
                hi = min(lo + RANGE_DOCS, index.n)
                cols = per_document(self.spill.read(lo, hi), lo, hi)
                counts.add(cols, index, lo, hi)
                w.write_table(_table(cols, index, lo, hi), row_group_size=hi - lo)
        return counts.summary()


def per_document(rec, lo, hi):
    """Each document lo..hi-1's arrivals added up (a document without one: no arrival, not_arrived)."""
    m = hi - lo
    out = {"arrivals": np.zeros(m, np.int64), "first_arrival": np.full(m, NONE, np.int64),
           "last_arrival": np.full(m, -1, np.int64), "emitted": np.zeros(m, np.int64),
           "discarded": np.zeros(m, np.int64), "buffered": np.zeros(m, np.int64), "started": np.zeros(m, bool),
           "whole": np.zeros(m, bool), "t0": np.full(m, NONE, np.int64), "pmin": np.full(m, NONE, np.int64),
           "pmax": np.full(m, -1, np.int64)}
    if len(rec):
        d = rec["doc"] - lo
        np.add.at(out["arrivals"], d, 1)
        np.minimum.at(out["first_arrival"], d, rec["arrival"])
        np.maximum.at(out["last_arrival"], d, rec["arrival"])
        for k, src in (("emitted", "own"), ("discarded", "disc"), ("buffered", "buf")):
            np.add.at(out[k], d, rec[src])
        np.logical_or.at(out["started"], d, rec["started"] > 0)
        np.logical_or.at(out["whole"], d, rec["whole"] > 0)
        np.minimum.at(out["t0"], d, rec["t0"])
        np.minimum.at(out["pmin"], d, rec["pmin"])
        np.maximum.at(out["pmax"], d, rec["pmax"])
    out["first_arrival"][out["arrivals"] == 0] = -1
    out["fate"] = fate_codes(out)
    return out


def fate_codes(c):
    """Index into FATES of each document's fate."""
    arrived = c["arrivals"] > 0
    return np.select([~arrived, c["whole"], c["started"], c["buffered"] > 0],
                     [FATES.index("not_arrived"), FATES.index("whole"), FATES.index("partial"), FATES.index("waiting")],
                     FATES.index("dropped")).astype(np.int8)


def _table(c, index, lo, hi):
    def nullable(v, none):
        return pa.array(v, pa.int64(), mask=v == none)

    labels = None if index.labels is None else pa.array(
        [None if x is None else str(x) for x in index.labels[lo:hi]], pa.string())
    return pa.table({
        "doc": index.numbers(lo, hi),
        "file": pa.DictionaryArray.from_arrays(pa.array(index.file_of[lo:hi], pa.int32()), pa.array(index.files)),
        "row": index.row_of[lo:hi], "label": labels if labels is not None else pa.nulls(hi - lo, pa.string()),
        "length": np.asarray(index.lengths[lo:hi], np.int64),
        "fate": pa.DictionaryArray.from_arrays(pa.array(c["fate"], pa.int8()), pa.array(FATES)),
        "arrivals": c["arrivals"].astype(np.int32), "first_arrival": nullable(c["first_arrival"], -1),
        "last_arrival": nullable(c["last_arrival"], -1), "emitted": c["emitted"], "discarded": c["discarded"],
        "buffered": c["buffered"], "first_target": nullable(c["t0"], NONE),
        "first_position": nullable(c["pmin"], NONE), "last_position": nullable(c["pmax"], -1),
    }, schema=SCHEMA)


class DocumentCounts:
    """Documents (not arrivals) by fate: in all, by label, by length stratum and for those longer than R."""

    def __init__(self, R):
        self.R = R
        self.by_fate = np.zeros(len(FATES), np.int64)
        self.tokens_by_fate = np.zeros(len(FATES), np.int64)
        self.long_by_fate = np.zeros(len(FATES), np.int64)
        self.by_stratum = {}
        self.by_label = {}
        self.arrivals = self.emitted = self.discarded = self.buffered = 0

    def add(self, c, index, lo, hi):
        f = c["fate"].astype(np.int64)
        L = np.asarray(index.lengths[lo:hi], np.int64)
        k = len(FATES)
        self.by_fate += np.bincount(f, minlength=k)
        self.tokens_by_fate += np.bincount(f, weights=L, minlength=k).astype(np.int64)
        self.long_by_fate += np.bincount(f[L > self.R], minlength=k)
        st_of = stratum_of(L)
        for st in np.unique(st_of).tolist():
            m = st_of == st
            self.by_stratum.setdefault(st, np.zeros(k, np.int64))
            self.by_stratum[st] += np.bincount(f[m], minlength=k)
        labels = (np.full(hi - lo, NO_LABEL, object) if index.labels is None else
                  np.asarray([NO_LABEL if x is None else str(x) for x in index.labels[lo:hi]], object))
        names, inv = np.unique(labels, return_inverse=True)
        for j, name in enumerate(names.tolist()):
            self.by_label.setdefault(name, np.zeros(k, np.int64))
            self.by_label[name] += np.bincount(f[inv.reshape(-1) == j], minlength=k)
        self.arrivals += int(c["arrivals"].sum())
        self.emitted += int(c["emitted"].sum())
        self.discarded += int(c["discarded"].sum())
        self.buffered += int(c["buffered"].sum())

    def summary(self):
        def row(v):
            return {name: int(x) for name, x in zip(FATES, v.tolist())}

        strata = stratum_labels()
        return {"documents": int(self.by_fate.sum()), "arrivals": self.arrivals, "by_fate": row(self.by_fate),
                "tokens_by_fate": row(self.tokens_by_fate), "longer_than_R": row(self.long_by_fate),
                "by_stratum": [{"stratum": strata[s], **row(v)} for s, v in sorted(self.by_stratum.items())],
                "by_label": [{"label": name, **row(v)} for name, v in sorted(self.by_label.items())],
                "own_tokens": {"emitted": self.emitted, "discarded": self.discarded, "buffered": self.buffered}}
