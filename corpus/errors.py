"""One exception type for bad input; command lines print it as a single line."""
import errno


class DataError(Exception):
    """Bad or missing input, described in one line that names the file."""


def os_error_line(e: OSError, where=None) -> str:
    """One line for a failed read or write (full disk, read-only folder, no permission), naming
    the path and what is needed."""
    path = e.filename or where or "a file"
    need = {errno.ENOSPC: "free disk space", errno.EDQUOT: "free disk quota", errno.EROFS: "a writable file system",
            errno.EACCES: "write permission", errno.EPERM: "write permission"}.get(e.errno, "a working file system")
    return f"{path}: {e.strerror or type(e).__name__}; needs {need}"
