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


def update_batches(x, y, micro_rows, accum):
    """Split rows into optimizer updates: a list of updates, each a list of (x, y) microbatches.

    Every update but the last has accum microbatches of micro_rows rows; the last takes
    what is left (fewer rows), so no row is repeated and none is dropped.
    """
    per = micro_rows * accum
    out = []
    for a in range(0, len(x), per):
        xs, ys = x[a:a + per], y[a:a + per]
        out.append([(xs[b:b + micro_rows], ys[b:b + micro_rows]) for b in range(0, len(xs), micro_rows)])
    return out
