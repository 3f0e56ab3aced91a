"""Megatron-Core indexed datasets (PREFIX.bin/.idx), read from the index alone.

The .idx layout, as megatron/core/datasets/indexed_dataset.py (_IndexWriter.write, _IndexReader) writes and reads
it (megatron-core 0.16): the 9 bytes b"MMIDIDX\\x00\\x00", version 1 (<Q), the token dtype's code (<B: 1 uint8,
2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16), the sequence count S and the document count D
(<Q each, D = documents + 1), then S int32 sequence lengths, S int64 byte pointers into the .bin, D int64 document
indices (the sequence index where each document starts, from 0 to S), and for a multimodal dataset S int8 modes.

A document's length is the sum of its sequences' lengths (one sequence per document as preprocess_data.py writes
them; several where sentences were split). The .bin is only stat-ed (its size must be what the index says), unless
BOS auto needs each document's first token: then those tokens, and nothing else, are read from it.
"""
import struct
from pathlib import Path

import numpy as np

from corpus.readers.settings import Batch, Unit
from errors import DataError

HEADER = b"MMIDIDX\x00\x00"
DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16}
FIXED = len(HEADER) + 8 + 1 + 8 + 8  # 34 bytes before the arrays


def read_index(idx, bin_):
    """(document lengths int64, the token dtype, the documents' first token offsets in the .bin, in tokens)."""
    size = Path(idx).stat().st_size
    with open(idx, "rb") as f:
        head = f.read(FIXED)
    if len(head) < FIXED or head[:9] != HEADER:
        raise DataError(f"{idx}: not a Megatron index (no MMIDIDX header)")
    version, code, seqs, docs = struct.unpack("<QBQQ", head[9:])
    if version != 1 or code not in DTYPES:
        raise DataError(f"{idx}: Megatron index version {version}, dtype code {code}: not one this reader knows")
    body = FIXED + 4 * seqs + 8 * seqs + 8 * docs
    if size not in (body, body + seqs):  # with or without the multimodal modes
        raise DataError(f"{idx}: {size:,} bytes, its header needs {body:,} ({seqs:,} sequences, {docs:,} document "
                        f"indices): truncated or corrupt")
    m = np.memmap(idx, mode="r", dtype=np.uint8)
    seq_len = np.frombuffer(m, np.int32, seqs, FIXED)
    doc_idx = np.frombuffer(m, np.int64, docs, FIXED + 12 * seqs)
    if docs < 1 or doc_idx[0] != 0 or doc_idx[-1] != seqs or np.any(np.diff(doc_idx) < 0) or np.any(seq_len < 0):
        raise DataError(f"{idx}: document indices do not run from 0 to the {seqs:,} sequences: corrupt")
    starts = np.zeros(seqs + 1, np.int64)
    np.cumsum(seq_len, out=starts[1:])
    dtype = np.dtype(DTYPES[code])
    want = int(starts[-1]) * dtype.itemsize
    got = Path(bin_).stat().st_size
    if got != want:
        raise DataError(f"{bin_}: {got:,} bytes, its index {idx} says {want:,}: truncated or not this index's data")
    return starts[doc_idx[1:]] - starts[doc_idx[:-1]], dtype, starts[doc_idx[:-1]]


def plan(source, index, settings, label_const):
    idx, bin_ = source.files
    return [Unit(source=index, part=0, fmt="megatron", path=idx, role="tokens", label_const=label_const,
                 first_row=0, nbytes=Path(idx).stat().st_size, extra={"bin": bin_})]


def read(unit, settings):
    bin_ = unit.extra["bin"]
    lengths, dtype, offsets = read_index(unit.path, bin_)
    first = None
    if settings.bos == "auto":
        first = np.full(len(lengths), -1, np.int64)
        nonempty = lengths > 0
        if nonempty.any():
            first[nonempty] = np.memmap(bin_, mode="r", dtype=dtype)[offsets[nonempty]]
    yield Batch(lengths=lengths, first=first, n=len(lengths))
