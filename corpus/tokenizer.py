"""BPE tokenizer as the supplied baseline trains it.

rustbpe learns the merges on the training shards only (each document cut to its first
10,000 characters, 1e9 characters in all); the result is saved as a pickled
tiktoken.Encoding with 4 special tokens after the merged ones, BOS = <|reserved_0|>.
token_bytes[id] is the UTF-8 length of the token's decoded string (0 for specials): the
positive-byte mask of every BPB figure. Both files' sizes and SHA256s are recorded when
the tokenizer is trained (tokenizer.sha256.json) and verified on every load.
"""
import pickle
from pathlib import Path

import numpy as np

from corpus.atomic import atomic_write_bytes
from corpus.errors import DataError

SPLIT_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""
)
SPECIAL_TOKENS = [f"<|reserved_{i}|>" for i in range(4)]
BOS = SPECIAL_TOKENS[0]
DOC_CAP_CHARS = 10_000
TOTAL_CHARS = 1_000_000_000


def training_texts(text_iter, doc_cap=DOC_CAP_CHARS, total=TOTAL_CHARS):
    """Documents cut to doc_cap characters, stopping once total characters were given."""
    seen = 0
    for text in text_iter:
        text = text[:doc_cap]
        yield text
        seen += len(text)
        if seen >= total:
            return


def train_encoding(text_iter, vocab_size=8192, name="packaudit"):
    import rustbpe
    import tiktoken

    n_merged = vocab_size - len(SPECIAL_TOKENS)
    if n_merged < 256:
        raise ValueError(f"vocab_size {vocab_size} too small: need at least {256 + len(SPECIAL_TOKENS)}")
    tok = rustbpe.Tokenizer()
    tok.train_from_iterator(training_texts(text_iter), n_merged, pattern=SPLIT_PATTERN)
    ranks = {bytes(k): v for k, v in tok.get_mergeable_ranks()}
    if len(ranks) != n_merged:
        raise DataError(f"tokenizer training produced {len(ranks)} tokens, expected {n_merged}: corpus too small")
    specials = {s: n_merged + i for i, s in enumerate(SPECIAL_TOKENS)}
    return tiktoken.Encoding(name=name, pat_str=SPLIT_PATTERN, mergeable_ranks=ranks, special_tokens=specials)


def token_bytes_table(enc) -> np.ndarray:
    special = set(enc.special_tokens_set)
    out = np.zeros(enc.n_vocab, dtype=np.int32)
    for i in range(enc.n_vocab):
        s = enc.decode([i])
        out[i] = 0 if s in special else len(s.encode("utf-8"))
    return out


RECORD = "tokenizer.sha256.json"


def save_encoding(enc, directory) -> None:
    """tokenizer.pkl, token_bytes.npy derived from it, and their sizes + SHA256s (written last)."""
    import io

    from corpus.atomic import atomic_write_json
    from corpus.verify import file_record

    directory = Path(directory)
    (directory / RECORD).unlink(missing_ok=True)  # no record describes half-written files
    atomic_write_bytes(directory / "tokenizer.pkl", pickle.dumps(enc))
    buf = io.BytesIO()
    np.save(buf, token_bytes_table(enc))
    atomic_write_bytes(directory / "token_bytes.npy", buf.getvalue())
    atomic_write_json(directory / RECORD, {n: file_record(directory / n) for n in ("tokenizer.pkl", "token_bytes.npy")})


def tokenizer_record(directory) -> dict:
    import json

    path = Path(directory) / RECORD
    if not path.exists():
        raise DataError(f"{path}: no recorded tokenizer SHA256 (rerun prepare.py)")
    try:
        rec = json.loads(path.read_text())
        if not all(isinstance(rec.get(n), dict) for n in ("tokenizer.pkl", "token_bytes.npy")):
            raise ValueError
        return rec
    except (ValueError, UnicodeDecodeError):
        raise DataError(f"{path}: not a valid tokenizer record (rerun prepare.py)") from None


def verify_tokenizer(directory, full=False) -> None:
    """Both tokenizer files match the SHA256s recorded when the tokenizer was trained."""
    from corpus.verify import verified_file

    rec = tokenizer_record(directory)
    for n in ("tokenizer.pkl", "token_bytes.npy"):
        verified_file(Path(directory) / n, rec[n], full=full)


def load_encoding(directory):
    path = Path(directory) / "tokenizer.pkl"
    if not path.exists():
        raise DataError(f"{path}: tokenizer not found (run prepare.py first)")
    verify_tokenizer(directory)  # before unpickling: a damaged pickle is refused, never executed
    with open(path, "rb") as f:
        return pickle.load(f)


def load_token_bytes(directory) -> np.ndarray:
    path = Path(directory) / "token_bytes.npy"
    if not path.exists():
        raise DataError(f"{path}: token_bytes table not found (run prepare.py first)")
    verify_tokenizer(directory)
    return np.load(path)


def bos_id(enc) -> int:
    return enc.encode_single_token(BOS)
