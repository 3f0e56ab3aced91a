"""Flat token files, as nanoGPT (train.bin: raw uint16) and OLMo-core / Dolma (.npy: raw uint16 or uint32 memmaps,
or numpy's own .npy with a header) write them, cut into documents at a separator id the caller gives.

The separator ends a document and belongs to it: both writers append their end-of-text id after every document
(nanoGPT's prepare.py: `ids.append(enc.eot_token)`; OLMo-core's numpy datasets: each document's EOS), so a document
is its tokens plus that id, which is what a packer reading the stream sees of it. Consecutive separators make a
document of one token.

A trailing piece after a file's last separator is a document too, with the file's other documents: its tokens are
in the stream a packer reads, and leaving it out would hide them from the audit. It is counted in
`trailing_pieces` of the provenance, because a writer that ends every document with the separator leaves none:
one there says the file was cut short (or the separator id is wrong). A file in which the separator never occurs
is refused: a wrong id or dtype, not a corpus of one document.

A file without a .npy header needs its dtype (uint16 or uint32) named: its bytes cannot tell them apart.
"""
from pathlib import Path

import numpy as np

from corpus.readers.settings import Batch, Unit
from errors import DataError

SCAN = 1 << 24  # tokens compared with the separator at a time: memory follows this, not the file
NPY_MAGIC = b"\x93NUMPY"


def token_array(path, dtype_name):
    """The file's tokens, memory-mapped (an empty file: an empty array)."""
    with open(path, "rb") as f:
        head = f.read(len(NPY_MAGIC))
    try:
        if head == NPY_MAGIC:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
            if arr.ndim != 1 or arr.dtype not in (np.uint16, np.uint32):
                raise DataError(f"{path}: a {arr.ndim}-D {arr.dtype} array; token files are 1-D uint16 or uint32")
            return arr
    except (ValueError, OSError) as e:
        raise DataError(f"{path}: not a readable .npy array ({type(e).__name__})") from None
    if dtype_name is None:
        raise DataError(f"{path}: a raw token file (no .npy header): name its dtype, uint16 or uint32")
    dtype = np.dtype(dtype_name)
    size = Path(path).stat().st_size
    if size % dtype.itemsize:
        raise DataError(f"{path}: {size:,} bytes is not a whole number of {dtype_name} tokens")
    return np.zeros(0, dtype) if size == 0 else np.memmap(path, mode="r", dtype=dtype)


def plan(source, index, settings, label_const):
    if settings.separator is None:
        raise DataError(f"{source.path}: a flat token file: give the separator id that ends each document")
    tokens = token_array(source.path, settings.token_dtype)  # refused here, before any worker starts
    top = np.iinfo(tokens.dtype).max
    if settings.separator > top:
        raise DataError(f"{source.path}: separator id {settings.separator} is out of range for {tokens.dtype} "
                        f"tokens (0..{top})")
    return [Unit(source=index, part=0, fmt="tokens", path=source.path, role="tokens", label_const=label_const,
                 first_row=0, nbytes=Path(source.path).stat().st_size)]


def cut(tokens, separator, path):
    """(start, length) of each document: each separator ends one; a trailing piece is one more."""
    ends = [np.flatnonzero(tokens[a:a + SCAN] == separator) + (a + 1) for a in range(0, len(tokens), SCAN)]
    ends = np.concatenate(ends).astype(np.int64) if ends else np.zeros(0, np.int64)
    if len(tokens) and not len(ends):
        raise DataError(f"{path}: separator id {separator} never occurs in its {len(tokens):,} tokens "
                        f"(a wrong id, or a wrong dtype?)")
    trailing = bool(len(tokens)) and int(ends[-1]) < len(tokens)
    if trailing:
        ends = np.append(ends, len(tokens))
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    return starts, ends - starts, int(trailing)


def read(unit, settings):
    tokens = token_array(unit.path, settings.token_dtype)
    starts, lengths, trailing = cut(tokens, settings.separator, unit.path)
    first = np.asarray(tokens[starts], np.int64) if settings.bos == "auto" and len(starts) else None
    yield Batch(lengths=lengths, first=first, n=len(lengths), trailing=trailing)
