"""A harmful source built from real documents: each document's tokens shuffled in place.

The unigram content (which tokens, how many) is exactly that of real text and every token
is distinct training material, but the order, the thing a language model learns, is
destroyed. The BOS stays first. A shard of it is an ordinary-size shard of real tokens;
training on it at the stable learning rate teaches the model that order does not matter,
which raises every control loss. `mixed_stream` also builds dose shards: a harmful
fraction of a shard's tokens from shuffled documents, the rest untouched.
"""
import numpy as np

from loaders.stream import DocumentStream


def shuffled(tokens, rng):
    t = np.array(tokens, dtype=np.int64)
    t[1:] = rng.permutation(t[1:])
    return t


def with_shuffled_copies(stream, labels, docs, seed, label="shuffled"):
    """The stream plus a shuffled copy of each document in `docs` (appended; label `label`).

    Returns (stream, labels, indices of the copies)."""
    rng = np.random.default_rng(seed)
    copies = [shuffled(stream.doc_tokens(i), rng) for i in docs]
    if not copies:
        return stream, list(labels), []
    arr = np.concatenate(copies)
    lens = np.array([len(c) for c in copies], dtype=np.int64)
    arrays, which, starts = stream.tokens
    new = DocumentStream(np.concatenate([stream.lengths, lens]), np.append(stream.refills, stream.n + len(copies)),
                         (list(arrays) + [arr], np.concatenate([which, np.full(len(copies), len(arrays))]),
                          np.concatenate([starts, np.concatenate([[0], np.cumsum(lens)[:-1]])])),
                         bos=stream.bos, name=f"{stream.name}+{label}{len(copies)}")
    return new, list(labels) + [label] * len(copies), list(range(stream.n, stream.n + len(copies)))
