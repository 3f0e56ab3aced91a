"""The tokenizer a text corpus is counted with: a `tokenizers` JSON file, a tiktoken encoding, or this project's
own (corpus/tokenizer.py), named by one string:

    PATH.json             a `tokenizers` file (Tokenizer.save); this project's tokenizer.json is told by its contents
    DIR                   this project's tokenizer folder (tokenizer.json beside tokenizer.sha256.json)
    NAME                  a tiktoken encoding by name (cl100k_base, o200k_base, ...): tiktoken loads its rank file
                          from its cache (TIKTOKEN_CACHE_DIR); this machine has no internet to download it
    NAME:PATH, PATH       a tiktoken rank file, with the split pattern and special tokens of encoding NAME (a file
                          named NAME.tiktoken needs no NAME: prefix)

A TokenizerSpec is what travels to the workers: kind, reference and the SHA256 that identifies it (of the file for a
`tokenizers` or project tokenizer; of the ranks, pattern and special tokens for tiktoken, so a named encoding and its
rank file given as a path are one tokenizer). Each worker loads the tokenizer once and checks that SHA256 again.

Counting never adds special tokens (`add_special_tokens=False`, tiktoken's encode_ordinary): whether a BOS is
counted is the BOS policy's business, and a tokenizer whose post-processor adds one would count it twice.
"""
import functools
import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tiktoken
import tiktoken.load
import tiktoken_ext.openai_public as openai_public
import tokenizers

from corpus.atomic import sha256_file
from corpus.tokenizer import RECORD, TOKENIZER_FILE, bos_id, load_encoding
from errors import DataError

KINDS = ("tokenizers", "tiktoken", "packaudit")


@dataclass(frozen=True)
class TokenizerSpec:
    kind: str  # one of KINDS
    ref: str  # the absolute path of the file or folder, or the tiktoken encoding's name
    encoding: str  # tiktoken: the encoding whose pattern and special tokens apply; "" otherwise
    sha256: str
    bos_id: int = None  # the tokenizer's own BOS where it has one (this project's: <|reserved_0|>)

    def identity(self) -> dict:
        return {"kind": self.kind, "ref": self.ref, "encoding": self.encoding, "sha256": self.sha256}


def tokenizer_spec(text) -> TokenizerSpec:
    """The spec of a tokenizer named by `text` (see the module's docstring), or one line saying what is wrong."""
    text = str(text)
    name, sep, rest = text.partition(":")
    if sep and name in tiktoken.list_encoding_names() and not Path(text).exists():
        return _tiktoken_file(Path(rest), name)
    path = Path(text)
    if path.is_dir():
        if (path / RECORD).is_file() and (path / TOKENIZER_FILE).is_file():
            return _project(path)
        raise DataError(f"tokenizer {text}: is a folder, not a tokenizer file (a folder must be this project's "
                        f"tokenizer folder, with {TOKENIZER_FILE} and {RECORD})")
    if path.is_file():
        if path.suffix == ".json":
            return _project(path.parent) if _is_project_file(path) else _tokenizers_file(path)
        stem = path.name.split(".")[0]
        if stem in tiktoken.list_encoding_names():
            return _tiktoken_file(path, stem)
        raise DataError(f"tokenizer {text}: not a .json tokenizers file; a tiktoken rank file needs its encoding's "
                        f"name, as NAME:{text} (NAME one of {', '.join(tiktoken.list_encoding_names())})")
    if text in tiktoken.list_encoding_names():
        return _tiktoken_named(text)
    raise DataError(f"tokenizer {text}: no such file, folder or tiktoken encoding")


def _is_project_file(path):
    try:
        with open(path, "rb") as f:
            head = f.read(200)
    except OSError as e:
        raise DataError(f"tokenizer {path}: cannot be read ({e.strerror or type(e).__name__})") from None
    return b'"format": "packaudit-bpe-1"' in head


def _project(folder) -> TokenizerSpec:
    enc = _load_project(str(Path(folder).absolute()))
    return TokenizerSpec("packaudit", str(Path(folder).absolute()), "",
                         sha256_file(Path(folder) / TOKENIZER_FILE), bos_id(enc))


def _tokenizers_file(path) -> TokenizerSpec:
    path = Path(path).absolute()
    _load_tokenizers(str(path))  # refused here, in one line, before any worker starts
    return TokenizerSpec("tokenizers", str(path), "", sha256_file(path))


def _tiktoken_file(path, name) -> TokenizerSpec:
    if path.is_dir():
        raise DataError(f"tokenizer {name}:{path}: is a folder, not a tiktoken rank file")
    if not path.is_file():
        raise DataError(f"tokenizer {name}:{path}: no such rank file")
    enc = _tiktoken_from_file(str(path.absolute()), name)
    return TokenizerSpec("tiktoken", str(path.absolute()), name, _encoding_sha256(enc))


def _tiktoken_named(name) -> TokenizerSpec:
    enc = _tiktoken_by_name(name)
    return TokenizerSpec("tiktoken", name, name, _encoding_sha256(enc))


def _encoding_sha256(enc) -> str:
    """One tokenizer, one hash: the ranks in rank order, the pattern and the special tokens."""
    h = hashlib.sha256()
    h.update(json.dumps({"pattern": enc._pat_str, "special": sorted(enc._special_tokens.items())}).encode())
    for token, rank in sorted(enc._mergeable_ranks.items(), key=lambda kv: kv[1]):
        h.update(b"%d %s\n" % (rank, token.hex().encode()))
    return h.hexdigest()


# tiktoken_ext's constructors hold each encoding's pattern and special tokens, but also download its ranks;
# they are run with the download swapped for the ranks read from the user's file (one thread at a time)
_SWAP = threading.Lock()


def _definition(name, ranks) -> dict:
    if name not in openai_public.ENCODING_CONSTRUCTORS:
        raise DataError(f"tokenizer {name}: not an encoding tiktoken defines "
                        f"({', '.join(tiktoken.list_encoding_names())})")
    with _SWAP:
        saved = openai_public.load_tiktoken_bpe, openai_public.data_gym_to_mergeable_bpe_ranks
        openai_public.load_tiktoken_bpe = openai_public.data_gym_to_mergeable_bpe_ranks = lambda *a, **k: ranks
        try:
            return openai_public.ENCODING_CONSTRUCTORS[name]()
        finally:
            openai_public.load_tiktoken_bpe, openai_public.data_gym_to_mergeable_bpe_ranks = saved


# Loaders: once per process (each worker of a pool, each Ray worker) for one tokenizer
@functools.lru_cache(maxsize=4)
def _load_tokenizers(path):
    try:
        return tokenizers.Tokenizer.from_file(path)
    except Exception as e:  # tokenizers raises a bare Exception for a file it cannot parse
        raise DataError(f"tokenizer {path}: not a tokenizers JSON file ({str(e).splitlines()[0][:80]})") from None


@functools.lru_cache(maxsize=4)
def _load_project(folder):
    return load_encoding(folder, prepared=False)


@functools.lru_cache(maxsize=4)
def _tiktoken_from_file(path, name):
    try:
        ranks = tiktoken.load.load_tiktoken_bpe(path)
    except (ValueError, OSError) as e:
        raise DataError(f"tokenizer {name}:{path}: not a tiktoken rank file ({type(e).__name__})") from None
    d = _definition(name, ranks)
    try:
        return tiktoken.Encoding(**d)
    except (ValueError, AssertionError) as e:
        raise DataError(f"tokenizer {name}:{path}: these ranks do not make encoding {name} ({e})") from None


@functools.lru_cache(maxsize=4)
def _tiktoken_by_name(name):
    try:
        return tiktoken.get_encoding(name)
    except Exception as e:  # a failed download surfaces as requests', blobfile's or tiktoken's own error
        raise DataError(f"tokenizer {name}: tiktoken could not load its rank file ({type(e).__name__}): offline, "
                        f"put it in TIKTOKEN_CACHE_DIR or give it as {name}:PATH") from None


def encoder(spec):
    """lengths(texts) -> int64 token counts, for the spec's tokenizer, checked against the spec's SHA256."""
    if spec.kind == "tokenizers":
        if sha256_file(spec.ref) != spec.sha256:
            raise DataError(f"tokenizer {spec.ref}: changed while the corpus was counted")
        tok = _load_tokenizers(spec.ref)

        def lengths(texts):
            return np.fromiter((len(e) for e in tok.encode_batch(texts, add_special_tokens=False)),
                               np.int64, len(texts))
        return lengths
    if spec.kind == "packaudit":
        enc = _load_project(spec.ref)
        if sha256_file(Path(spec.ref) / TOKENIZER_FILE) != spec.sha256:
            raise DataError(f"tokenizer {spec.ref}: changed while the corpus was counted")
    else:
        enc = _tiktoken_by_name(spec.ref) if spec.ref == spec.encoding else _tiktoken_from_file(spec.ref, spec.encoding)
        if _encoding_sha256(enc) != spec.sha256:
            raise DataError(f"tokenizer {spec.ref}: changed while the corpus was counted")

    def lengths(texts):
        return np.fromiter((len(enc.encode_ordinary(t)) for t in texts), np.int64, len(texts))
    return lengths


@functools.lru_cache(maxsize=4)
def cached_encoder(spec):
    """encoder(spec), made once per process: a worker counts many batches with one tokenizer."""
    return encoder(spec)


def single_threaded():
    """Turn off the `tokenizers` thread pool in this process: the pass's parallelism is its workers, so that
    workers=1 is one core and N workers are N (each worker's own pool would oversubscribe the cores).
    Returns the previous setting, for restore()."""
    old = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # tokenizers reads it at every batch call
    return old


def restore(old):
    if old is None:
        os.environ.pop("TOKENIZERS_PARALLELISM", None)
    else:
        os.environ["TOKENIZERS_PARALLELISM"] = old
