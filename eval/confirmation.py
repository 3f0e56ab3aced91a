"""The confirmation population: validation rows a:b without exact text duplicates.

A row is excluded when its UTF-8 text equals a document of any eligible training shard or
of an earlier validation row (rows before it, inside the range or not). The remaining rows
keep their 128-document refill slices (a slice loses the removed rows), and the original
packer scores the stream like the official metric.
"""
import hashlib

from corpus.layout import Layout
from corpus.shards import iter_row_group_texts


def _key(text):
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def confirmation_stream(data_dir, source, rows):
    """(stream, duplicates): validation rows a:b less their exact duplicates."""
    from loaders.stream import open_split

    dups = find_duplicates(data_dir, source, tuple(rows))
    return open_split(data_dir, source, "val", row_range=tuple(rows), exclude=[r for r, _ in dups]), dups


def confirmation_fingerprint(data_dir, source, plan, eval_rows):
    """SHA256 of the confirmation stream's input/target rows, as the CPU replay materializes them:
    frozen into the protocol, checked before every confirmation pass."""
    from eval.stream_checks import audit_stream

    stream, _ = confirmation_stream(data_dir, source, plan["populations"]["conf"]["rows"])
    R = plan["context"] + 1
    rec = audit_stream(stream, plan["confirmation_batches"] * eval_rows, R, plan["buffer"], R)
    return rec["fingerprint"]


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
