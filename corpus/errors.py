"""One exception type for bad input; command lines print it as a single line."""


class DataError(Exception):
    """Bad or missing input, described in one line that names the file."""
