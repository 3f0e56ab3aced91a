"""One process per output folder: an exclusive, advisory fcntl lock on FOLDER/.lock.

Two trainings (or a training and an evaluation) writing the same folder would interleave
their logs and overwrite each other's checkpoints. The lock file records the holder's pid
and command so the refusal can name it; the kernel drops the lock when the holder exits,
so a killed run never leaves a stale lock behind. The holder removes the file when it is done,
so a run leaves no lock file; a process that opened the file just before it was removed finds
the path now names another file (or none) once it holds the lock, and tries again on the path.
"""
import fcntl
import os
import sys
from contextlib import contextmanager
from pathlib import Path


class FolderLocked(RuntimeError):
    """Another live process holds the folder's lock."""


@contextmanager
def lock_file(path, what: str = "this folder"):
    """Hold an exclusive lock on PATH (created if missing), or raise FolderLocked naming the holder.

    For outputs that are swapped in whole (the audit), the lock must live beside the folder,
    not inside it.
    """
    path = Path(path)
    fd = _locked(path, what)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}: {' '.join(sys.argv)[:200]}\n".encode(), 0)
        yield path
    finally:
        try:
            path.unlink()  # still holding the lock: a waiter that opened this file will see it is gone
        except FileNotFoundError:
            pass
        os.close(fd)  # closing the descriptor releases the flock


def _locked(path, what):
    """A descriptor of PATH holding its exclusive lock, PATH still naming that very file."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "unknown pid"
            os.close(fd)
            raise FolderLocked(f"{path.parent if path.name == '.lock' else path} is in use by another process "
                               f"({holder}); wait for it to finish or use another folder for {what}") from None
        except BaseException:
            os.close(fd)
            raise
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # the holder before us removed this file as we opened it: lock the path's new file


@contextmanager
def folder_lock(folder, what: str = "this folder"):
    """Hold FOLDER/.lock for the duration of the block, or raise FolderLocked naming the holder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with lock_file(folder / ".lock", what) as p:
        yield p
