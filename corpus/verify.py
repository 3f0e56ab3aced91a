"""Verify prepared files before use: sizes and structure always, SHA256 once per process.

prepare.py records the size and SHA256 of every token, offsets and refill file and of the
tokenizer files in prepared.json. Every reader goes through `verified_file`: a size that
differs is refused at once; the SHA256 is computed the first time a process opens a file
and remembered (keyed by path, size, mtime and inode, so a file changed behind a running
process is hashed again). Setting PACKAUDIT_SKIP_HASH=1 skips the SHA256 (sizes and
structure are still checked) and says so once; `comparison.freeze` and the protocol check
always hash (`full=True`).
"""
import os
import sys
from pathlib import Path

import numpy as np

from corpus.atomic import sha256_file
from corpus.layout import prepared_record
from errors import DataError

SKIP_ENV = "PACKAUDIT_SKIP_HASH"
_hashed = {}  # (path, size, mtime_ns, inode) -> sha256
_warned = []


def _stat_key(path: Path):
    st = path.stat()
    return (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)


def file_sha256(path) -> str:
    """SHA256 of a file, computed once per process for an unchanged file."""
    path = Path(path)
    key = _stat_key(path)
    if key not in _hashed:
        _hashed[key] = sha256_file(path)
    return _hashed[key]


def file_record(path) -> dict:
    path = Path(path)
    return {"bytes": path.stat().st_size, "sha256": file_sha256(path)}


def hashing_skipped() -> bool:
    return os.environ.get(SKIP_ENV, "") not in ("", "0")


def verified_file(path, record, full=False) -> Path:
    """Refuse PATH unless its size (always) and SHA256 (once per process) match RECORD."""
    path = Path(path)
    if record is None:
        raise DataError(f"{path}: no recorded SHA256 (prepared by an older version: rerun prepare.py)")
    if not path.exists():
        raise DataError(f"{path}: file missing (rerun prepare.py)")
    size = path.stat().st_size
    if size != record["bytes"]:
        raise DataError(f"{path}: {size:,} bytes, prepared.json records {record['bytes']:,} "
                        f"(truncated or altered: rerun prepare.py)")
    if hashing_skipped() and not full:
        if not _warned:
            _warned.append(1)
            print(f"warning: {SKIP_ENV} is set: prepared files are checked by size and structure only, "
                  f"not by SHA256", file=sys.stderr)
        return path
    if full:
        got = sha256_file(path)
    else:
        got = file_sha256(path)
    if got != record["sha256"]:
        raise DataError(f"{path}: SHA256 {got[:12]}… differs from the recorded {record['sha256'][:12]}… "
                        f"(altered since prepare.py wrote it: rerun prepare.py)")
    return path


def check_index(offsets, refills, n_tokens, documents, where) -> None:
    """Offsets and refill boundaries are usable: monotone, inside the token file, as the census says."""
    o, r = np.asarray(offsets), np.asarray(refills)
    if o.ndim != 1 or len(o) < 2 or o[0] != 0:
        raise DataError(f"{where}: offsets must start at 0 and hold at least one document")
    if np.any(np.diff(o) < 1):
        raise DataError(f"{where}: offsets are not strictly increasing (a document of length < 1)")
    if int(o[-1]) != n_tokens:
        raise DataError(f"{where}: offsets end at {int(o[-1]):,} but the token file holds {n_tokens:,} tokens")
    if len(o) - 1 != documents:
        raise DataError(f"{where}: {len(o) - 1:,} documents in the offsets, the census records {documents:,}")
    if r.ndim != 1 or len(r) < 2 or r[0] != 0 or np.any(np.diff(r) < 1) or int(r[-1]) != documents:
        raise DataError(f"{where}: refill boundaries must increase from 0 to the {documents:,} documents")


def verify_prepared(root, full=True) -> int:
    """Check every file prepared.json records (freeze and the protocol check); returns the count."""
    rec = prepared_record(root)
    for rel, r in sorted(rec["files"].items()):
        verified_file(Path(root) / rel, r, full=full)
    return len(rec["files"])
