"""The event schema the replay and the trace share, and its writers.

One record per emission, the fields of loaders/packers.py: source_id (global arrival index),
source_len, span_start, emitted (tokens in the row, a leading BOS included), discarded
(tokens of the span dropped by this selection), row, row_offset, target_offset, kind (fit:
the whole current span; crop: cut), lead_bos (a BOS the packer put before the span). A
traced packer's rows are decoded into exactly these records, so every table and checker
reads both alike.

Events go to parquet in row groups of ROW_GROUP_EVENTS (zstd), so memory holds one row group
whatever the stream's size; a CSV in the standard-library checker's format only on request.
"""
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from loaders.core import KIND_NAMES
from loaders.packers import EVENT_DTYPE, EVENT_FIELDS, events_to_records

# dictionary pages for the labels only: the other columns are mostly distinct integers, where pyarrow's dictionary
# attempt is wasted work (the paper-scale replay's events: 2.6x faster to write, the file a third smaller); those
# integers delta-encoded before zstd (mostly small steps: row, offsets, ids): 1.7x faster again, the file 3% larger
PARQUET = {"compression": "zstd", "use_dictionary": ["label"],
           "column_encoding": {f: "DELTA_BINARY_PACKED" for f in EVENT_FIELDS}}

__all__ = ["EVENT_DTYPE", "EVENT_FIELDS", "EventSink", "events_to_records", "records_from_columns", "write_csv"]


def records_from_columns(source_id, source_len, span_start, emitted, discarded, row, row_offset, kind, lead_bos, R):
    """Records from per-event columns; target_offset is derived as the replay derives it."""
    out = np.zeros(len(source_id), dtype=EVENT_DTYPE)
    for name, col in (("source_id", source_id), ("source_len", source_len), ("span_start", span_start),
                      ("emitted", emitted), ("discarded", discarded), ("row", row), ("row_offset", row_offset),
                      ("kind", kind), ("lead_bos", lead_bos)):
        out[name] = col
    # targets are row positions 1..R-1: an emission at offset o has max(o-1, 0) targets before it in its row
    out["target_offset"] = out["row"] * (R - 1) + np.maximum(out["row_offset"] - 1, 0)
    return out


# each column's meaning in the parquet file's own schema (field metadata), so that a file read without this code says
# what its integers are (a new user's probe: kind 0/1 and an arrival index named source_id read as a document id)
DESCRIPTIONS = {
    "source_id": "the source's arrival index in the stream (from 0; a document that arrives again in a later pass is "
                 "a new source; fates_<packer>.parquet names each document's arrivals)",
    "source_len": "the source's tokens, a BOS included",
    "span_start": "where in its source the emitted span starts (token position)",
    "emitted": "tokens this event put in the row, a leading BOS included",
    "discarded": "tokens of the span this selection dropped (a crop's rest)",
    "row": "the row (from 0)", "row_offset": "where in its row the event starts",
    "target_offset": "the targets of all rows before this event's first (row * (R - 1) + its offset's)",
    "kind": f"{', '.join(f'{i} {n}' for i, n in enumerate(KIND_NAMES))} (fit: the whole current span; crop: cut)",
    "lead_bos": "1 where the packer put a BOS before the span",
    "label": "the source's label (--label-column), where the corpus has one"}


def _table(cols, labels=None):
    arrays = {f: pa.array(cols[f].astype(EVENT_DTYPE[f], copy=False)) for f in EVENT_FIELDS}
    if labels is not None:
        arrays["label"] = pa.array(labels, type=pa.string())
    return pa.table(arrays, schema=pa.schema([pa.field(f, a.type, metadata={"description": DESCRIPTIONS[f]})
                                              for f, a in arrays.items()]))


def _csv_table(cols):
    out = {f: cols[f].astype(np.int64, copy=False) for f in EVENT_FIELDS if f != "kind"}
    out["kind"] = pa.array(np.asarray(KIND_NAMES)[cols["kind"]])
    return pa.table({f: out[f] for f in EVENT_FIELDS})


def _csv_options():
    return pcsv.WriteOptions(include_header=False, quoting_style="none")


ROW_GROUP_EVENTS = 1 << 18  # events gathered into one row group: the writer keeps ~9 KB of metadata per row group
# until the file is closed, so chunk-sized row groups (one per 4,096 rows) made memory grow with the stream, and
# so did row groups of 2^16 events at 10^9 documents (14,000 of them: 371 MB peak at 10^8, 526 MB at 10^9)


class EventSink:
    """events_<name>.parquet (and .csv) written a row group at a time; bytes counted.

    Chunks are gathered until a row group holds ROW_GROUP_EVENTS, which is then encoded and
    compressed on a writer thread (pyarrow lets go of the GIL) while the replay goes on; one row
    group at most waits. A write's error is raised by a later write or by close()."""

    def __init__(self, folder, name, csv=False):
        self.parquet_path = Path(folder) / f"events_{name}.parquet"
        self.csv_path = Path(folder) / f"events_{name}.csv" if csv else None
        self._pq = self._csv = None
        self._pool = self._pending = None
        self._parts, self._gathered = [], 0
        self.events = 0

    def write(self, records, labels=None):
        """Add one chunk: records (EVENT_DTYPE), or a dict of their columns, each an array of the chunk's events
        (records, columns and labels are not to be changed afterwards)."""
        cols = records if isinstance(records, dict) else {f: records[f] for f in EVENT_FIELDS}
        n = len(cols["source_id"])
        if not n:
            return
        self._parts.append((cols, labels))
        self._gathered += n
        self.events += n
        if self._gathered >= ROW_GROUP_EVENTS:
            self._flush()

    def _flush(self):
        """Hand the gathered chunks to the writer thread as one row group."""
        if not self._parts:
            return
        if len(self._parts) == 1:  # a whole row group written at once (the replay's chunks): no copy
            records, labels = self._parts[0]
        else:
            records = {f: np.concatenate([c[f] for c, _ in self._parts]) for f in EVENT_FIELDS}
            labels = None if self._parts[0][1] is None else np.concatenate([lab for _, lab in self._parts])
        self._parts, self._gathered = [], 0
        self._wait()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="events")
        # the tables are built here (pyarrow holds the GIL for that): the writer thread only encodes and compresses
        t = _table(records, labels)
        self._pending = self._pool.submit(self._write, t, _csv_table(records) if self.csv_path is not None else None)

    def _wait(self):
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()

    def _write(self, t, c):
        if self._pq is None:
            self._pq = pq.ParquetWriter(self.parquet_path, t.schema, **PARQUET)
        self._pq.write_table(t)
        if c is not None:
            if self._csv is None:
                self._csv_file = open(self.csv_path, "wb")
                self._csv_file.write((",".join(c.schema.names) + "\n").encode())  # a plain header line
                self._csv = pcsv.CSVWriter(self._csv_file, c.schema, write_options=_csv_options())
            self._csv.write_table(c)

    def close(self):
        """Close the writers; an audit with no events still leaves an (empty) parquet file."""
        try:
            self._flush()
            self._wait()
        finally:
            if self._pool is not None:
                self._pool.shutdown()
                self._pool = None
        if self._pq is None:
            empty = np.zeros(0, dtype=EVENT_DTYPE)
            pq.write_table(_table({f: empty[f] for f in EVENT_FIELDS}), self.parquet_path, **PARQUET)
        else:
            self._pq.close()
        if self._csv is not None:
            self._csv.close()
            self._csv_file.close()
        return [p for p in (self.parquet_path, self.csv_path) if p is not None]


def write_csv(records, path):
    """All records as one CSV in the checker's format (tests, small exports)."""
    sink = EventSink(Path(path).parent, "", csv=True)
    sink.csv_path = Path(path)
    sink.parquet_path = Path(path).with_suffix(".parquet.tmp")
    sink.write(records)
    sink.close()
    sink.parquet_path.unlink()


def read_events(path) -> np.ndarray:
    """An events parquet file back as records (the columns the schema names)."""
    t = pq.read_table(path, columns=list(EVENT_FIELDS))
    out = np.zeros(t.num_rows, dtype=EVENT_DTYPE)
    for f in EVENT_FIELDS:
        out[f] = t.column(f).to_numpy()
    return out
