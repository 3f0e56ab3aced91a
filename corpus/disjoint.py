"""Train/validation disjointness by exact text: SHA256 of each document's UTF-8 text."""
import hashlib

from console.progress import bar as tqdm
from corpus.shards import iter_row_group_texts


def first_of_each_text(docs):
    """docs (tuples whose first field is the text) with each exact text kept once, at its first
    occurrence: a repeated text (identical small functions, license headers) would otherwise
    sit on both sides of the train/validation split."""
    seen, unique = set(), []
    for d in docs:
        h = hashlib.sha256(d[0].encode("utf-8")).digest()
        if h not in seen:
            seen.add(h)
            unique.append(d)
    return unique


def _digests(path):
    for _, texts in iter_row_group_texts(path):
        for t in texts:
            yield hashlib.sha256(t.encode("utf-8")).digest()


def val_rows_in_train(train_paths, val_path) -> list:
    """Row indices of the validation shard whose exact text also occurs in a training shard."""
    seen = set()
    for p in tqdm(train_paths, desc="disjointness", unit="shard", leave=False):
        seen.update(_digests(p))
    return [i for i, h in enumerate(_digests(val_path)) if h in seen]
