"""The four packers as token loaders: the core's events turned into rows and records.

Packer(stream, "original" | "lossless" | "segment_first" | "random_span") produces rows of
R tokens (inputs row[:-1], targets row[1:]) and one event record per selection, one schema
for all four: source_id, source_len, span_start, emitted, discarded, row,
row_offset, target_offset, kind (+ lead_bos, see loaders/core.py).
"""
import numpy as np
from numba import njit

from loaders.core import PACKERS, RANDOM_SPAN_SEED, RAW_DTYPE, PackerCore

EVENT_FIELDS = ("source_id", "source_len", "span_start", "emitted", "discarded", "row", "row_offset",
                "target_offset", "kind", "lead_bos")
EVENT_DTYPE = np.dtype([("source_id", np.int64), ("source_len", np.int64), ("span_start", np.int64),
                        ("emitted", np.int64), ("discarded", np.int64), ("row", np.int64),
                        ("row_offset", np.int64), ("target_offset", np.int64), ("kind", np.int8),
                        ("lead_bos", np.int8)])


def events_to_records(raw, stream, R, first_row=0) -> np.ndarray:
    """The core's raw events (RAW_DTYPE) of whole rows starting at row `first_row` -> event records."""
    out = np.zeros(len(raw), dtype=EVENT_DTYPE)
    if not len(raw):
        return out
    for f in RAW_DTYPE.names:
        out[f] = raw[f]
    out["source_len"] = stream.lengths[raw["source_id"] % stream.n]
    pos = first_row * R + np.cumsum(raw["emitted"]) - raw["emitted"]
    out["row"], out["row_offset"] = pos // R, pos % R
    # targets are row positions 1..R-1: an emission at offset o has max(o-1, 0) targets before it in its row
    out["target_offset"] = out["row"] * (R - 1) + np.maximum(out["row_offset"] - 1, 0)
    return out


def materialize(raw, stream, R, bos=None) -> np.ndarray:
    """Token rows (int64 [n, R]) for the raw events (RAW_DTYPE) of whole rows: each event's tokens copied by a
    compiled loop, one call per token array the events read from."""
    em = raw["emitted"].astype(np.int64)
    total = int(em.sum())
    if total % R:
        raise ValueError("events do not fill whole rows")
    if stream.tokens is None:
        raise ValueError(f"{stream.name}: a length-only stream has no tokens")
    arrays, which, starts = stream.tokens
    bos = stream.bos if bos is None else bos
    out = np.empty(total, dtype=np.int64)
    d = raw["source_id"] % stream.n
    dst = np.cumsum(em) - em
    src = np.asarray(starts, np.int64)[d] + raw["span_start"]
    lead = raw["lead_bos"].astype(np.int64)
    if bos is None and lead.any():
        raise ValueError(f"{stream.name}: no BOS id to put before a span")
    w = np.asarray(which)[d]
    for j in np.unique(w).tolist():
        sel = w == j
        _copy_spans(out, arrays[j], dst[sel], src[sel], em[sel], lead[sel], -1 if bos is None else int(bos))
    return out.reshape(-1, R)


@njit(cache=True, _nrt=False)  # only reads and writes the arrays it is given (see loaders/kernel.py)
def _copy_spans(out, tokens, dst, src, n, lead, bos):
    """out[dst[i]:dst[i] + n[i]] = [bos] * lead[i] + tokens[src[i]:src[i] + n[i] - lead[i]], for every i."""
    for i in range(len(dst)):
        d, s, k = dst[i], src[i], n[i]
        if lead[i]:
            out[d] = bos
            d += 1
            k -= 1
        o, t = out[d:d + k], tokens[s:s + k]  # a loop over two views: vectorized (a tenth of indexing out and tokens)
        for j in range(k):
            o[j] = t[j]


class Packer:
    """A packer over a stream: next_rows(n) -> (rows int64 [n, R], event records)."""

    def __init__(self, stream, packer="original", row_capacity=2049, buffer_size=1000, seed=RANDOM_SPAN_SEED):
        if packer not in PACKERS:
            raise ValueError(f"unknown packer {packer!r}; choose one of {', '.join(PACKERS)}")
        self.stream = stream
        self.R = row_capacity
        self.core = PackerCore(stream, packer, row_capacity, buffer_size, seed)

    def next_raw(self, n_rows):
        return self.core.pack_rows(n_rows)

    def next_rows(self, n_rows):
        first = self.core.rows_done
        raw = self.next_raw(n_rows)
        rows = materialize(raw, self.stream, self.R)
        return rows, events_to_records(raw, self.stream, self.R, first)

    def state_dict(self):
        return self.core.state_dict()

    def load_state_dict(self, st):
        self.core.load_state_dict(st)
