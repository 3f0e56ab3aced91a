"""CorpusLengths: one length per document in corpus order, where each came from, and how it was counted."""
from dataclasses import dataclass, field

import numpy as np

from corpus.readers.units import joined


@dataclass
class CorpusLengths:
    lengths: np.ndarray  # int64, one per document in corpus order, BOS counted per provenance["bos"]
    label_codes: np.ndarray  # int32 per document into label_names
    label_names: list  # the distinct labels (str, or None for a null label), in order of first appearance
    doc_file: np.ndarray  # int32: index into files
    doc_row: np.ndarray  # int64: the document's row in its file (its index in a datasets folder or Megatron prefix)
    files: list  # the sources as the caller named them resolved: files, datasets folders, Megatron prefixes
    provenance: dict  # inputs (paths, sizes, SHA256s), format, columns, tokenizer, BOS, separator, counts
    cached: bool = False  # True: read from the cache, nothing recomputed
    resumed: int = 0  # units taken from an interrupted pass's cache
    message: str = ""  # one line saying what was done (or not done)
    cache_dir: str = None  # the folder holding this result, when a cache folder was given
    _labels: np.ndarray = field(default=None, repr=False)

    def __len__(self):
        return len(self.lengths)

    @property
    def labels(self) -> np.ndarray:
        """object: each document's label (str, or None for a null label); made at the first use (an object per
        document costs more than the pass's own arrays; label_codes and label_names hold the same)."""
        if self._labels is None:
            table = np.empty(len(self.label_names), object)
            table[:] = self.label_names
            self._labels = table[self.label_codes]
        return self._labels

    @property
    def tokens(self) -> int:
        return int(self.lengths.sum())


def assemble(units, results, sources, provenance):
    """The corpus's arrays from its units' results, in unit (= corpus) order: rows count on across a source's
    units, labels merge into one list of names."""
    names, index = [], {}
    lengths, codes, doc_file, doc_row = [], [], [], []
    row_of = {}
    for u, r in zip(units, results):
        n = len(r.lengths)
        lut = np.array([_code(names, index, x) for x in (r.names if r.codes is not None else [u.label_const])],
                       np.int32)
        codes.append(lut[r.codes] if r.codes is not None else np.full(n, lut[0], np.int32))
        lengths.append(r.lengths)
        doc_file.append(np.full(n, u.source, np.int32))
        start = row_of.get(u.source, 0)
        doc_row.append(np.arange(start, start + n, dtype=np.int64))
        row_of[u.source] = start + n
    return CorpusLengths(joined(lengths, np.int64), joined(codes, np.int32), names, joined(doc_file, np.int32),
                         joined(doc_row, np.int64), [s.path for s in sources], provenance)


def _code(names, index, name):
    if name not in index:
        index[name] = len(names)
        names.append(name)
    return index[name]
