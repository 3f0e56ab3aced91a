"""BPE tokenizer as the supplied baseline trains it.

rustbpe learns the merges on the training shards only (each document cut to its first
10,000 characters, 1e9 characters in all); the result is a tiktoken.Encoding with 4
special tokens after the merged ones, BOS = <|reserved_0|>. It is stored as data, never
as a pickle (loading a pickle runs whatever code it names): tokenizer.json holds the split
pattern, the special tokens and the merged tokens in rank order as base64 text.
token_bytes[id] is the UTF-8 length of the token's decoded string (0 for specials): the
positive-byte mask of every BPB figure. Both files' sizes and SHA256s are recorded when
the tokenizer is trained (tokenizer.sha256.json) and again in the prepared corpus's
prepared.json; every load checks both, so a tokenizer folder copied from another build is
refused.
"""
import base64
import functools
import io
import json
from pathlib import Path

import numpy as np
import rustbpe
import tiktoken

from corpus.atomic import atomic_write_bytes, atomic_write_json
from corpus.layout import prepared_record
from corpus.verify import file_record, verified_file
from errors import DataError

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
    n_merged = vocab_size - len(SPECIAL_TOKENS)
    if n_merged < 256:
        raise ValueError(f"vocab_size {vocab_size} too small: need at least {256 + len(SPECIAL_TOKENS)}")
    tok = rustbpe.Tokenizer()
    tok.train_from_iterator(training_texts(text_iter), n_merged, pattern=SPLIT_PATTERN)
    ranks = {bytes(k): v for k, v in tok.get_mergeable_ranks()}
    if len(ranks) != n_merged:
        raise DataError(f"tokenizer training produced {len(ranks)} tokens, expected {n_merged}: corpus too small "
                        f"for a vocabulary of {vocab_size}; prepare it with --vocab-size "
                        f"{len(ranks) + len(SPECIAL_TOKENS)} or less")
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
TOKENIZER_FILE = "tokenizer.json"
FILES = (TOKENIZER_FILE, "token_bytes.npy")
FORMAT = "packaudit-bpe-1"


def encoding_to_json(enc) -> str:
    """The encoding as data: pattern, special tokens, merged tokens in rank order (base64)."""
    ranks = sorted(enc._mergeable_ranks.items(), key=lambda kv: kv[1])
    if [r for _, r in ranks] != list(range(len(ranks))):
        raise DataError("tokenizer ranks are not 0..n-1; cannot store them in rank order")
    return json.dumps({"format": FORMAT, "name": enc.name, "pattern": enc._pat_str,
                       "special_tokens": dict(sorted(enc._special_tokens.items(), key=lambda kv: kv[1])),
                       "tokens_base64": [base64.b64encode(t).decode("ascii") for t, _ in ranks]}, indent=0) + "\n"


# per process, by the file's bytes (verified against the records first): the stream, the queue's world and the
# scorers each load the encoding, and building one costs tens of milliseconds; an Encoding is never changed
@functools.lru_cache(maxsize=4)
def encoding_from_json(text, where):
    try:
        d = json.loads(text)
        if d.get("format") != FORMAT:
            raise ValueError("format")
        ranks = {base64.b64decode(t, validate=True): i for i, t in enumerate(d["tokens_base64"])}
        specials = {str(k): int(v) for k, v in d["special_tokens"].items()}
        if len(ranks) != len(d["tokens_base64"]):
            raise ValueError("duplicate tokens")
        return tiktoken.Encoding(name=str(d["name"]), pat_str=str(d["pattern"]), mergeable_ranks=ranks,
                                 special_tokens=specials)
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
        raise DataError(f"{where}: not a valid tokenizer file (rerun prepare.py)") from None


def save_encoding(enc, directory) -> None:
    """tokenizer.json, token_bytes.npy derived from it, and their sizes + SHA256s (written last)."""
    directory = Path(directory)
    (directory / RECORD).unlink(missing_ok=True)  # no record describes half-written files
    (directory / "tokenizer.pkl").unlink(missing_ok=True)  # the old pickled form is never read again
    atomic_write_bytes(directory / TOKENIZER_FILE, encoding_to_json(enc).encode("utf-8"))
    buf = io.BytesIO()
    np.save(buf, token_bytes_table(enc))
    atomic_write_bytes(directory / "token_bytes.npy", buf.getvalue())
    atomic_write_json(directory / RECORD, {n: file_record(directory / n) for n in FILES})


def tokenizer_record(directory) -> dict:
    path = Path(directory) / RECORD
    if not path.exists():
        raise DataError(f"{path}: no recorded tokenizer SHA256 (rerun prepare.py)")
    try:
        rec = json.loads(path.read_text())
        if not all(isinstance(rec.get(n), dict) for n in FILES):
            raise ValueError
        return rec
    except (ValueError, UnicodeDecodeError):
        raise DataError(f"{path}: not a valid tokenizer record (rerun prepare.py)") from None


def verify_tokenizer(directory, full=False, prepared=True) -> None:
    """Both tokenizer files match the SHA256s recorded when the tokenizer was trained and, with
    `prepared` (every load outside prepare.py), the prepared corpus's record in prepared.json:
    the sidecar sits beside the files it describes, so it catches damage, not a swapped folder."""
    directory = Path(directory)
    rec = tokenizer_record(directory)
    for n in FILES:
        verified_file(directory / n, rec[n], full=full)
    if prepared:
        files = prepared_record(directory.parent)["files"]
        for n in FILES:
            want = files.get(f"{directory.name}/{n}")
            if want is None or want.get("sha256") != rec[n].get("sha256"):
                raise DataError(f"{directory / n}: not the tokenizer prepared.json records for this corpus "
                                f"(copied from another build? rerun prepare.py)")
            verified_file(directory / n, want, full=full)


def load_encoding(directory, prepared=True):
    """The verified encoding (prepare.py passes prepared=False while it builds the record)."""
    path = Path(directory) / TOKENIZER_FILE
    if not path.exists():
        raise DataError(f"{path}: tokenizer not found (run prepare.py first)")
    verify_tokenizer(directory, prepared=prepared)
    return encoding_from_json(path.read_bytes(), str(path))


def load_token_bytes(directory) -> np.ndarray:
    path = Path(directory) / "token_bytes.npy"
    if not path.exists():
        raise DataError(f"{path}: token_bytes table not found (run prepare.py first)")
    verify_tokenizer(directory)
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError):
        raise DataError(f"{path}: not a readable token_bytes table (rerun prepare.py)") from None


def bos_id(enc) -> int:
    return enc.encode_single_token(BOS)
