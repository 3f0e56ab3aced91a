"""A harmful source built from real documents run through a corrupted token mapping.

Every token id except BOS is replaced by its image under one fixed, seeded permutation of
the vocabulary (a substitution cipher on tokens: what a broken byte-to-text mapping or a
mismatched tokenizer produces). The documents keep their real structure, lengths and
repetitions, every token is distinct training material, and a shard of it is an
ordinary-size shard; but its token statistics contradict every real text, so training on
it at the stable learning rate raises every control loss. (A tiny model that has learned
little beyond unigram statistics barely notices tokens shuffled within a document, which
we tried first; the cipher moves the unigram distribution itself.)
"""
import numpy as np

from loaders.stream import DocumentStream

LABEL = "remapped"


def remapped(tokens, perm, bos):
    t = np.array(tokens, dtype=np.int64)
    body = perm[t[1:]]
    body[body == bos] = perm[bos]  # BOS never appears inside a document
    t[1:] = body
    return t


def with_harmful_copies(stream, labels, docs, seed, vocab, label=LABEL):
    """The stream plus a remapped copy of each document in `docs` (appended; label `label`).

    Returns (stream, labels, indices of the copies)."""
    perm = np.random.default_rng(seed).permutation(vocab)
    copies = [remapped(stream.doc_tokens(i), perm, stream.bos) for i in docs]
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
