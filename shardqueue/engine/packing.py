"""A shard trained once, whole: lossless rows over one shard's documents only.

The shard's documents are concatenated in manifest order (each starts with its BOS) and
a BOS is put in front as the first input, so the targets are exactly the shard's tokens,
each once, in order. Rows hold `context` targets; the last row is padded with input 0
and target -1 (masked: the model's cross-entropy ignores it). Padding, not carrying the
remainder into the next shard, because the next shard is not known in advance: a
rollback, a deferral or a recovery test changes it, and a carried row would tie two
shards' fates together. The cost is at most context-1 masked positions per shard.
"""
import numpy as np


def shard_tokens(stream, docs):
    """The shard's token ids in order (documents concatenated)."""
    return np.concatenate([np.asarray(stream.doc_tokens(i), dtype=np.int64) for i in docs])


def shard_rows(tokens, context, bos):
    """(x, y) int64 [rows, context]: y holds every token of `tokens` once, -1 after the end."""
    n = len(tokens)
    rows = -(-n // context)
    y = np.full(rows * context, -1, dtype=np.int64)
    y[:n] = tokens
    x = np.zeros(rows * context, dtype=np.int64)
    x[0] = bos
    x[1:n] = tokens[:-1]
    # a row's first input is the previous row's last target, so no token loses its context
    return x.reshape(rows, context), y.reshape(rows, context)


def update_batches(x, y, micro_rows, accum, pad=False):
    """Split rows into optimizer updates: a sequence of updates, each a list of (x, y) microbatches.

    Every update but the last has accum microbatches of micro_rows rows; the last takes
    what is left (fewer rows), so no row is repeated and none is dropped. The sequence has
    a length and reads an update's rows only when it is reached (streamed shards).

    pad: the last update's last microbatch is filled up to micro_rows rows with input 0 and
    target -1, so a compiled forward sees one shape whatever a shard's length. A masked target
    has no loss and no gradient: the update's loss and gradients are those of its real rows
    (the last update keeps its fewer microbatches).
    """
    return _Updates(x, y, micro_rows, accum, pad)


class _Updates:
    def __init__(self, x, y, micro_rows, accum, pad=False):
        self.x, self.y, self.micro_rows, self.per, self.pad = x, y, micro_rows, micro_rows * accum, pad

    def __len__(self):
        return -(-len(self.x) // self.per)

    def __getitem__(self, i):
        if not 0 <= i < len(self):
            raise IndexError(i)
        a, m = i * self.per, self.micro_rows
        xs, ys = np.asarray(self.x[a:a + self.per]), np.asarray(self.y[a:a + self.per])  # reads a streamed shard's rows
        short = -len(xs) % m
        if self.pad and short:
            xs = np.concatenate([xs, np.zeros((short, xs.shape[1]), dtype=xs.dtype)])
            ys = np.concatenate([ys, np.full((short, ys.shape[1]), -1, dtype=ys.dtype)])
        return [(xs[b:b + m], ys[b:b + m]) for b in range(0, len(xs), m)]

    def __iter__(self):
        return (self[i] for i in range(len(self)))


class _Rows:
    """One side (inputs or targets) of a shard's rows, read from the token files on demand.

    Behaves like the int64 [rows, context] array shard_rows returns for len(), .shape, row
    indexing and contiguous slices; a slice is another lazy window, and np.asarray(window)
    reads only its rows. A shard never sits in memory as int64 rows (about 10 GB at the 64M
    proxy's shard size)."""

    def __init__(self, src, targets, start=0, stop=None):
        self.src, self.targets = src, targets
        self.start, self.stop = start, src.n_rows if stop is None else stop
        self.shape = (self.stop - self.start, src.context)

    def __len__(self):
        return self.stop - self.start

    def __array__(self, dtype=None, copy=None):
        out = self.src.block(self.start, self.stop, self.targets)
        return out if dtype is None else out.astype(dtype)

    def __getitem__(self, key):
        if isinstance(key, slice):
            a, b, step = key.indices(len(self))
            if step != 1:
                raise IndexError("shard rows support contiguous slices only")
            return _Rows(self.src, self.targets, self.start + a, self.start + max(a, b))
        if isinstance(key, (int, np.integer)):
            k = int(key) + (len(self) if key < 0 else 0)
            if not 0 <= k < len(self):
                raise IndexError(key)
            return self.src.block(self.start + k, self.start + k + 1, self.targets)[0]
        return np.stack([self[int(k)] for k in np.asarray(key).ravel()])


class StreamedShard:
    """The rows of shard_rows(shard_tokens(stream, docs), context, bos), computed from the
    documents' token arrays (uint16 memory maps) a block of rows at a time."""

    def __init__(self, stream, docs, context, bos):
        self.stream, self.docs, self.context, self.bos = stream, np.asarray(docs, dtype=np.int64), context, bos
        lens = np.asarray(stream.lengths[self.docs], dtype=np.int64)
        self.ends = np.cumsum(lens)  # token position where each document ends
        self.n = int(self.ends[-1]) if len(lens) else 0
        self.n_rows = -(-self.n // context)

    def tokens(self, p, q):
        """Tokens at shard positions p..q-1 (clipped to the shard), int64."""
        p, q = max(0, p), min(self.n, q)
        if q <= p:
            return np.zeros(0, dtype=np.int64)
        first = int(np.searchsorted(self.ends, p, side="right"))
        out, pos = [], p
        for j in range(first, len(self.docs)):
            start = int(self.ends[j - 1]) if j else 0
            t = self.stream.doc_tokens(int(self.docs[j]))
            out.append(np.asarray(t[pos - start: min(q, int(self.ends[j])) - start], dtype=np.int64))
            pos = min(q, int(self.ends[j]))
            if pos >= q:
                break
        return np.concatenate(out)

    def block(self, a, b, targets):
        """Rows a..b-1 of y (targets=True) or x, as int64 [b - a, context]."""
        c = self.context
        p, q = a * c, b * c
        if targets:
            out = np.full(q - p, -1, dtype=np.int64)
            t = self.tokens(p, q)
            out[: len(t)] = t
        else:
            out = np.zeros(q - p, dtype=np.int64)
            lo = max(p, 1)  # x at position i is the token at i - 1; x at 0 is BOS
            t = self.tokens(lo - 1, min(q, self.n) - 1) if min(q, self.n) > lo else np.zeros(0, np.int64)
            out[lo - p: lo - p + len(t)] = t
            if p == 0 and q > 0:
                out[0] = self.bos
        return out.reshape(b - a, c)

    def rows(self):
        """(x, y) views like shard_rows's arrays."""
        return _Rows(self, False), _Rows(self, True)


def updates_of(n_tokens, context, micro_rows, accum):
    """How many optimizer updates a shard of n_tokens makes (update_batches's count, without its rows)."""
    rows = -(-n_tokens // context)
    return -(-rows // (micro_rows * accum))
