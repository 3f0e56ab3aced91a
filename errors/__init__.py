"""The project's one error type, at the bottom of the house: bad or missing input (DataError), said in one line
that names the file, which every command line prints as `error: ...` with exit status 2; the line for a failed
read or write (os_error_line); and the output-path checks made before any work (check_out_folder, check_out_file).
Imports nothing of the project, so every part may raise it (fanout's TaskFailed is one)."""
import errno
import os
from pathlib import Path


class DataError(Exception):
    """Bad or missing input, described in one line that names the file."""


def os_error_line(e: OSError, where=None) -> str:
    """One line for a failed read or write (full disk, read-only folder, no permission), naming
    the path and what is needed; a lost connection (ConnectionError is an OSError) as one, and a closed output
    (BrokenPipeError, a ConnectionError) as what it is."""
    if isinstance(e, BrokenPipeError) and not e.filename:  # a pipe's reader ended: `command | head`, or a worker
        return ("a pipe it wrote to was closed (BrokenPipeError): its reader ended, as `| head` does to the output, or "
                "a process it fed stopped; it stopped here (send the output to a file, or read it with `less`)")
    if isinstance(e, ConnectionError) and not e.filename:
        text = str(e).strip()
        said = e.strerror or (text.splitlines()[0] if text else "no reason given")
        return f"a connection failed ({type(e).__name__}: {said}); check that what it connects to is up and reachable"
    path = e.filename or where or "a file"
    need = {errno.ENOSPC: "free disk space", errno.EDQUOT: "free disk quota", errno.EROFS: "a writable file system",
            errno.EACCES: "write permission", errno.EPERM: "write permission",
            errno.EEXIST: "a folder there, not a file", errno.ENOTDIR: "a folder there, not a file"}.get(
        e.errno, "a working file system")
    return f"{path}: {e.strerror or type(e).__name__}; needs {need}"


def check_out_folder(path, flag="--out") -> None:
    """Refuse, before any work, an output folder that cannot be (or be made) a writable folder: one line
    naming the path and why. Checked without creating anything."""
    _check_makeable(path, path, flag)


def check_out_file(path, flag="--out") -> None:
    """As check_out_folder, for an output file: its folder can be made and the path is no folder itself."""
    if Path(path).is_dir():
        raise DataError(f"{flag} {path}: is a folder, not a file")
    _check_makeable(Path(path).absolute().parent, path, flag)


def _check_makeable(folder, named, flag):
    """The nearest existing folder on the way to FOLDER must be a writable folder (then mkdir -p succeeds)."""
    whole = Path(named).absolute()
    for a in (Path(folder).absolute(), *Path(folder).absolute().parents):
        if a.is_symlink() and not a.exists():
            raise DataError(f"{flag} {named}: cannot be made: {a} is a broken link")
        if a.exists():
            if not a.is_dir():
                raise DataError(f"{flag} {named}: {'is' if a == whole else f'cannot be made: {a} is'} not a folder")
            if not os.access(a, os.W_OK | os.X_OK):
                raise DataError(f"{flag} {named}: cannot be written: no write permission in {a}")
            return
