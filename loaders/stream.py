"""The document stream in the supplied baseline's order.

Shards in sorted file order; inside a shard, row groups in order; each row group cut into
consecutive 128-document refill slices (the last of a row group may be shorter). The
stream repeats forever (passes) with no reset. A stream can also be a row range of one
shard with some rows excluded (the evaluation streams), or a bare list of lengths (the
audit, tests, synthetic census streams): packers only ever need `lengths` and `refills`,
and `doc_tokens` when they materialize rows.
"""

import numpy as np

from corpus.layout import Layout
from corpus.pretokenize import TokenShard
from corpus.tokenizer import bos_id, load_encoding
from errors import DataError


class DocumentStream:
    """One pass of documents: lengths (BOS included), refill boundaries, optional tokens.

    lengths[i] is the i-th document of a pass; refill k holds documents
    refills[k]:refills[k+1]. Global arrival index of pass p, document i is p * n + i.
    """

    def __init__(self, lengths, refills, tokens=None, bos=None, name="stream"):
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.refills = np.asarray(refills, dtype=np.int64)
        self.n = len(self.lengths)
        self.name = name
        # tokens: (list of 1-D token arrays, doc_array int[n], doc_offset int64[n]) where
        # document i is arrays[doc_array[i]][doc_offset[i] : doc_offset[i] + lengths[i]]
        self.tokens = tokens
        self.bos = bos
        if self.n == 0:
            raise DataError(f"{name}: no documents")
        if self.refills[0] != 0 or self.refills[-1] != self.n or np.any(np.diff(self.refills) <= 0):
            raise DataError(f"{name}: refill boundaries must increase from 0 to {self.n}")
        if self.lengths.min() < 1:
            raise DataError(f"{name}: every document needs at least its BOS token")

    @classmethod
    def from_lengths(cls, lengths, refill_docs=128, name="lengths"):
        n = len(lengths)
        refills = np.append(np.arange(0, n, refill_docs), n)
        return cls(lengths, refills, name=name)

    @classmethod
    def from_token_lists(cls, docs, refill_docs=128, name="tokens"):
        """Small in-memory streams for tests: docs are token lists that start with BOS."""
        lengths = [len(d) for d in docs]
        s = cls.from_lengths(lengths, refill_docs, name)
        flat = np.asarray([t for d in docs for t in d], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        s.tokens = ([flat], np.zeros(len(docs), dtype=np.int64), offsets)
        s.bos = int(docs[0][0])
        return s

    @classmethod
    def from_shards(cls, tokens_dir, names, row_range=None, exclude=(), bos=None):
        """Documents of pre-tokenized shards in order.

        row_range=(a, b) keeps rows a:b of a single shard; exclude drops row indices (of that
        shard) from their refill slices, which then hold fewer documents.
        """
        shards = [TokenShard(tokens_dir, n) for n in names]
        if row_range is not None and len(shards) != 1:
            raise DataError("a row range applies to exactly one shard")
        lengths, refills, which, local = [], [0], [], []
        exclude = set(int(x) for x in exclude)
        for si, sh in enumerate(shards):
            n_docs = len(sh.offsets) - 1
            a, b = row_range if row_range is not None else (0, n_docs)
            if not (0 <= a < b <= n_docs):
                raise DataError(f"{sh.name}: row range {a}:{b} outside its {n_docs} documents")
            sl = sh.lengths
            for k in range(len(sh.refills) - 1):
                lo, hi = max(int(sh.refills[k]), a), min(int(sh.refills[k + 1]), b)
                rows = [r for r in range(lo, hi) if r not in exclude]
                if not rows:
                    continue
                lengths.extend(sl[rows].tolist())
                which.extend([si] * len(rows))
                local.extend(rows)
                refills.append(refills[-1] + len(rows))
        which, local = np.asarray(which, dtype=np.int64), np.asarray(local, dtype=np.int64)
        starts = np.zeros(len(which), dtype=np.int64)
        for si, sh in enumerate(shards):
            m = which == si
            starts[m] = sh.offsets[local[m]]
        name = ",".join(names) + (f"[{row_range[0]}:{row_range[1]}]" if row_range else "")
        s = cls(lengths, refills, ([sh.tokens for sh in shards], which, starts), bos=bos, name=name)
        s.shard_row = local  # row index inside its shard, for evaluation records
        return s

    def locations(self):
        """(array index, start offset) of every document as Python lists (fast per-event lookups)."""
        if getattr(self, "_loc", None) is None:
            self._loc = (self.tokens[1].tolist(), self.tokens[2].tolist())
        return self._loc

    def doc_tokens(self, i) -> np.ndarray:
        if self.tokens is None:
            raise DataError(f"{self.name}: a length-only stream has no tokens")
        arrays, which, starts = self.tokens
        return np.asarray(arrays[which[i]][starts[i]:starts[i] + self.lengths[i]])

    def subset(self, indices, refill_docs=128):
        """These documents only, in the given order, refilled in slices of refill_docs."""
        idx = np.asarray(indices, dtype=np.int64)
        if len(idx) == 0 or idx.min() < 0 or idx.max() >= self.n:
            raise DataError(f"{self.name}: document indices must lie in 0..{self.n - 1}")
        refills = np.append(np.arange(0, len(idx), refill_docs), len(idx))
        tokens = None
        if self.tokens is not None:
            arrays, which, starts = self.tokens
            tokens = (arrays, which[idx], starts[idx])
        return DocumentStream(self.lengths[idx], refills, tokens, bos=self.bos, name=f"{self.name}[subset of {len(idx)}]")

    def capped(self, max_len):
        """The demo-only source-length filter: the documents of at most max_len tokens; longer ones are dropped
        whole, not cropped (0 keeps every one)."""
        return self.subset(np.flatnonzero(self.lengths <= max_len)) if max_len else self

    def permuted(self, seed):
        """The same multiset of lengths in a seeded random arrival order (same refill sizes)."""
        perm = np.random.default_rng(seed).permutation(self.n)
        return DocumentStream(self.lengths[perm], self.refills, name=f"{self.name}~perm{seed}")


def open_split(data_dir, source, split, row_range=None, exclude=()):
    """The train or val stream of a prepared corpus."""
    lay = Layout(data_dir, source)
    bos = bos_id(load_encoding(lay.tokenizer))
    return DocumentStream.from_shards(lay.tokens, lay.shard_names(split), row_range, exclude, bos)
