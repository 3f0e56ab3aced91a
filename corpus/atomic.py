"""Atomic writes: temp file in the same folder, fsync, rename.

An interrupted run leaves the previous good file (or none) in place, never half a file.
"""
import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path


def atomic_write_bytes(path, data: bytes) -> None:
    with atomic_file(path) as f:
        f.write(data)


@contextlib.contextmanager
def atomic_file(path):
    """A binary file to write `path` through: written beside it, fsynced and renamed over it when the block ends,
    removed if the block fails (a writer that streams, np.save of a large array, needs no copy in memory)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
        try:
            with os.fdopen(fd, "wb") as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    except OSError as e:
        if e.filename:
            raise
        # a failed write (e.g. a full disk) names no file by itself: name the one being written
        raise OSError(e.errno, e.strerror, str(path)) from None


def atomic_write_text(path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path, obj) -> None:
    # allow_nan=False: NaN/Infinity are not JSON; a non-finite value must be caught, not written
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n")


def sha256_file(path, chunk=1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()
