"""The confirmation population: validation rows a:b without exact text duplicates.

A row is excluded when its UTF-8 text equals a document of any eligible training shard or
of an earlier validation row (rows before it, inside the range or not). The remaining rows
keep their 128-document refill slices (a slice loses the removed rows), and the original
packer scores the stream like the official metric.
"""
import hashlib

import numpy as np

from corpus.layout import Layout
from corpus.shards import iter_row_group_texts
from eval.stream_checks import audit_stream
from loaders.stream import open_split


def _key(text):
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def confirmation_stream(data_dir, source, rows):
    """(stream, duplicates): validation rows a:b less their exact duplicates."""
    dups = find_duplicates(data_dir, source, tuple(rows))
    return open_split(data_dir, source, "val", row_range=tuple(rows), exclude=[r for r, _ in dups]), dups


def stream_fingerprint(stream, rows_fingerprint) -> str:
    """SHA256 of a stream's documents (where each lies in its shard, its length, the refill
    slices) and of the rows scored from it: a stream that differs by one document differs,
    even where that document is never emitted into the scored rows."""
    h = hashlib.sha256(rows_fingerprint.encode())
    starts = stream.tokens[2] if stream.tokens is not None else np.zeros(0, dtype=np.int64)
    for a in (stream.lengths, stream.refills, starts):
        h.update(np.asarray(a, dtype=np.int64).tobytes())
    return h.hexdigest()


def confirmation_fingerprint(data_dir, source, plan, eval_rows):
    """The confirmation stream's fingerprint (documents and the CPU replay's scored rows):
    frozen into the protocol, checked before every confirmation pass."""
    stream, _ = confirmation_stream(data_dir, source, plan["populations"]["conf"]["rows"])
    R = plan["context"] + 1
    rec = audit_stream(stream, plan["confirmation_batches"] * eval_rows, R, plan["buffer"], R)
    return stream_fingerprint(stream, rec["fingerprint"])


def find_duplicates(data_dir, source, rows):
    """[(row, 'train:<shard>' | 'val:<earlier row>')] for validation rows in rows=(a, b)."""
    lay = Layout(data_dir, source)
    rec = lay.prepared()
    train = {}
    for name in rec["train_shards"]:
        for _, texts in iter_row_group_texts(lay.raw / name):
            for t in texts:
                train.setdefault(_key(t), name)
    a, b = rows
    seen, dups, r = {}, [], 0
    for _, texts in iter_row_group_texts(lay.raw / rec["val_shard"]):
        for t in texts:
            if r >= b:
                return dups
            k = _key(t)
            if a <= r:
                if k in train:
                    dups.append((r, f"train:{train[k]}"))
                elif k in seen:
                    dups.append((r, f"val:{seen[k]}"))
            seen.setdefault(k, r)
            r += 1
    return dups
