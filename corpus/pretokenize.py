"""Tokenize each shard once into a compact token file the loaders memory-map.

Per shard NAME (the parquet stem) in the tokens folder:
  NAME.tokens.bin   uint16 token ids, each document = BOS + encode_ordinary(text)
  NAME.offsets.npy  int64, n_docs + 1 document start offsets into the token file
  NAME.refills.npy  int64 document-index boundaries of the refill batches: the texts of a
                    row group are cut into consecutive 128-document slices (the last one
                    of a row group may be shorter), exactly as the baseline refills
  NAME.json         SHA256 of the three files, of the parquet and of the tokenizer
A shard whose json matches its inputs and whose files verify is skipped.
"""
import io
import json
from pathlib import Path

import numpy as np

from corpus.atomic import atomic_write_bytes, atomic_write_json, sha256_file
from corpus.layout import prepared_record
from corpus.shards import iter_row_group_texts
from corpus.tokenizer import bos_id
from corpus.verify import check_index, verified_file
from errors import DataError

REFILL_DOCS = 128


def refill_boundaries(row_group_sizes, refill_docs=REFILL_DOCS):
    bounds, start = [0], 0
    for n in row_group_sizes:
        for s in range(0, n, refill_docs):
            bounds.append(start + min(s + refill_docs, n))
        start += n
    return np.asarray(bounds, dtype=np.int64)


def _npy_bytes(a) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def shard_paths(tokens_dir, name):
    tokens_dir = Path(tokens_dir)
    return {
        "tokens": tokens_dir / f"{name}.tokens.bin",
        "offsets": tokens_dir / f"{name}.offsets.npy",
        "refills": tokens_dir / f"{name}.refills.npy",
        "meta": tokens_dir / f"{name}.json",
    }


def verify_shard(parquet_path, tokens_dir, tokenizer_sha, parquet_sha=None) -> bool:
    """True when the token files exist, match their recorded checksums and inputs."""
    p = shard_paths(tokens_dir, Path(parquet_path).stem)
    if not p["meta"].exists():
        return False
    try:
        meta = json.loads(p["meta"].read_text())
    except json.JSONDecodeError:
        return False
    parquet_sha = parquet_sha or sha256_file(parquet_path)
    if meta.get("parquet_sha256") != parquet_sha or meta.get("tokenizer_sha256") != tokenizer_sha:
        return False
    for key in ("tokens", "offsets", "refills"):
        if not p[key].exists() or sha256_file(p[key]) != meta["sha256"][key]:
            return False
    return True


def tokenize_shard(parquet_path, tokens_dir, enc, tokenizer_sha, threads=2, batch_docs=1024):
    """Encode one shard; returns the number of tokens written."""
    parquet_path = Path(parquet_path)
    bos = bos_id(enc)
    if enc.n_vocab > 65536:
        raise DataError(f"vocabulary of {enc.n_vocab} does not fit uint16 token files")
    chunks, lengths, rg_sizes = [], [], []
    for _, texts in iter_row_group_texts(parquet_path):
        rg_sizes.append(len(texts))
        for s in range(0, len(texts), batch_docs):
            for ids in enc.encode_ordinary_batch(texts[s:s + batch_docs], num_threads=threads):
                arr = np.empty(len(ids) + 1, dtype=np.uint16)
                arr[0] = bos
                arr[1:] = ids
                chunks.append(arr)
                lengths.append(len(arr))
    tokens = np.concatenate(chunks) if chunks else np.zeros(0, np.uint16)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    refills = refill_boundaries(rg_sizes)
    p = shard_paths(tokens_dir, parquet_path.stem)
    atomic_write_bytes(p["tokens"], tokens.tobytes())
    atomic_write_bytes(p["offsets"], _npy_bytes(offsets))
    atomic_write_bytes(p["refills"], _npy_bytes(refills))
    meta = {
        "parquet": parquet_path.name,
        "parquet_sha256": sha256_file(parquet_path),
        "tokenizer_sha256": tokenizer_sha,
        "documents": int(len(lengths)),
        "tokens": int(len(tokens)),
        "row_group_sizes": rg_sizes,
        "sha256": {k: sha256_file(p[k]) for k in ("tokens", "offsets", "refills")},
    }
    atomic_write_json(p["meta"], meta)  # written last: its presence marks a complete shard
    return len(tokens)


class TokenShard:
    """Read-only view of one pre-tokenized shard (memory-mapped tokens).

    verify=True (every reader): the three files must match the sizes and SHA256s in
    prepared.json (corpus/verify.py) and the offsets/refills must be consistent with the
    token file and the recorded document count, before anything is read from them.
    prepare.py itself opens with verify=False before it writes that record.
    """

    def __init__(self, tokens_dir, name, verify=True):
        p = shard_paths(tokens_dir, name)
        if not p["meta"].exists():
            raise DataError(f"{p['meta']}: pre-tokenized shard missing (run prepare.py)")
        self.name = name
        if verify:
            rec = prepared_record(Path(tokens_dir).parent)
            for k in ("tokens", "offsets", "refills"):
                verified_file(p[k], rec["files"].get(f"tokens/{p[k].name}"))
            census = rec.get("shards", {}).get(name)
            if census is None:
                raise DataError(f"{Path(tokens_dir).parent / 'prepared.json'}: shard {name} is not part of this build")
        size = p["tokens"].stat().st_size if p["tokens"].exists() else -1
        if size < 0 or size % 2:
            raise DataError(f"{p['tokens']}: missing or not a whole number of uint16 tokens")
        try:
            self.offsets = np.load(p["offsets"])
            self.refills = np.load(p["refills"])
        except (OSError, ValueError) as e:
            raise DataError(f"{p['offsets'].with_suffix('')}: offsets or refills unreadable ({type(e).__name__})") from None
        n_docs = census["documents"] if verify else len(self.offsets) - 1
        check_index(self.offsets, self.refills, size // 2, n_docs, p["offsets"])
        n = int(self.offsets[-1])
        # a plain ndarray view of the map: memmap slices carry per-slice Python overhead
        self.tokens = np.memmap(p["tokens"], dtype=np.uint16, mode="r", shape=(n,)).view(np.ndarray)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def doc(self, i) -> np.ndarray:
        return self.tokens[self.offsets[i]:self.offsets[i + 1]]
