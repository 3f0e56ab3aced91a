"""One unit counted: its documents' lengths (tokenized, or read from token offsets), the BOS policy applied, and
its labels as codes into the unit's own list of names (no Python object per document). The same steps serve
the local workers (count_unit) and Ray Data's two stages (read_unit, then measure).

The BOS policy: `none` counts no BOS; `add` one per document; `auto` one per text document and, for token data,
one per document whose first token is not the BOS id (an empty token list gets one). The count is the document's
length as a packer that adds the BOS sees it.
"""
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from corpus.readers import flat, jsonl, megatron, tables
from corpus.readers.encoders import cached_encoder
from errors import DataError

READERS = {"parquet": tables, "arrow": tables, "datasets": tables, "jsonl": jsonl, "megatron": megatron,
           "tokens": flat}


@dataclass
class UnitResult:
    lengths: np.ndarray  # int64, BOS included per the policy
    codes: np.ndarray = None  # int32 per document into names; None: every document is the unit's label_const
    names: list = field(default_factory=list)
    trailing: int = 0
    seconds: float = 0.0
    bos_first: int | None = 0  # token data under BOS auto: documents whose first token is the BOS id (None: not counted)

    @property
    def tokens(self) -> int:
        return int(self.lengths.sum())


def plan(source, index, settings, label_const):
    return READERS[source.fmt].plan(source, index, settings, label_const)


def read_unit(unit, settings):
    """The unit's Batches, as its format's reader yields them."""
    return READERS[unit.fmt].read(unit, settings)


def measure(batch, unit, settings, encode=None):
    """Token counts of a batch, BOS per the policy: texts through the tokenizer, token data as read."""
    if batch.texts is not None:
        try:
            counted = encode(batch.texts)
        except (TypeError, ValueError, UnicodeError) as e:  # a str the tokenizer cannot take (a lone surrogate)
            raise DataError(f"{unit.path}: text not valid Unicode in a batch of {len(batch.texts)} documents "
                            f"({type(e).__name__}: {str(e)[:60]})") from None
        return counted + (0 if settings.bos == "none" else 1)
    if settings.bos == "none":
        return batch.lengths
    if settings.bos == "add":
        return batch.lengths + 1
    return batch.lengths + (batch.first != settings.bos_id)


def joined(parts, dtype):
    """np.concatenate without the copy of a single part (a whole Arrow file's lengths arrive as one)."""
    if len(parts) == 1:
        return np.asarray(parts[0], dtype)
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)


class LabelCodes:
    """Labels as int32 codes into a list of names, built a batch at a time."""

    def __init__(self):
        self.names, self.index, self.codes = [], {}, []

    def code(self, name):
        if name not in self.index:
            self.index[name] = len(self.names)
            self.names.append(name)
        return self.index[name]

    def add(self, labels):
        if isinstance(labels, (pa.Array, pa.ChunkedArray)):
            chunks = labels.chunks if isinstance(labels, pa.ChunkedArray) else [labels]
            for c in chunks:
                d = c.dictionary_encode(null_encoding="encode")
                lut = np.array([self.code(v) for v in d.dictionary.to_pylist()] or [0], np.int32)
                self.codes.append(lut[d.indices.to_numpy(zero_copy_only=False)])
        else:
            self.codes.append(np.fromiter((self.code(v) for v in labels), np.int32, len(labels)))

    def result(self):
        return joined(self.codes, np.int32)


class Stopped(Exception):
    """A unit counted on a thread was told to stop (its caller was interrupted)."""


def count_unit(unit, settings, stop=None) -> UnitResult:
    """Read and count one unit (in a worker process, or in this one). `stop`, an Event, is checked between
    batches: a thread cannot be interrupted, only asked."""
    t = time.perf_counter()
    encode = cached_encoder(settings.tokenizer) if unit.role == "text" else None
    parts, labels, trailing, bos_first = [], LabelCodes() if unit.label_column else None, 0, 0
    for b in read_unit(unit, settings):
        if stop is not None and stop.is_set():
            raise Stopped(unit.path)
        parts.append(np.asarray(measure(b, unit, settings, encode), np.int64))
        if labels is not None:
            labels.add(b.labels)
        trailing += b.trailing
        if b.texts is None and settings.bos == "auto":
            bos_first += int((b.first == settings.bos_id).sum())
    lengths = joined(parts, np.int64)
    return UnitResult(lengths, labels.result() if labels else None, labels.names if labels else [], trailing,
                      time.perf_counter() - t, bos_first)
