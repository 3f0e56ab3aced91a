"""A researcher's own length stream for the audit: document lengths in arrival order.

Three forms: a text file with one integer per line (blank lines and lines starting with '#'
are skipped), a .npy 1-D integer array, or a .parquet column (--column, or a column named
'length'/'lengths'/'num_tokens', or the table's only integer column). A length is the
document's token count as the packer sees it, any BOS/EOS marker included, so at least 1.
"""
from pathlib import Path

import numpy as np

from corpus.errors import DataError

LENGTH_COLUMNS = ("length", "lengths", "num_tokens", "n_tokens")


def read_lengths(path, column=None) -> np.ndarray:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"--lengths {path}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        arr = _npy(path)
    elif suffix == ".parquet":
        arr = _parquet(path, column)
    else:
        arr = _text(path)
    if arr.size == 0:
        raise DataError(f"--lengths {path}: no lengths")
    bad = np.flatnonzero(arr < 1)
    if bad.size:
        raise DataError(f"--lengths {path}: entry {bad[0] + 1} is {arr[bad[0]]}; every length must be at least 1")
    return arr.astype(np.int64)


def _text(path):
    out = []
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"--lengths {path}: cannot read it as text ({type(e).__name__})") from None
    for i, line in enumerate(lines, 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        try:
            out.append(int(s))
        except ValueError:
            raise DataError(f"--lengths {path}: line {i}: {s[:40]!r} is not an integer") from None
    return np.asarray(out, dtype=np.int64)


def _npy(path):
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise DataError(f"--lengths {path}: not a readable .npy array ({type(e).__name__})") from None
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise DataError(f"--lengths {path}: expected a 1-D integer array, got {arr.ndim}-D {arr.dtype}")
    return arr


def _parquet(path, column):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as e:
        raise DataError(f"--lengths {path}: not a readable parquet file ({type(e).__name__})") from None
    ints = [f.name for f in schema if pa.types.is_integer(f.type)]
    if column is None:
        named = [c for c in LENGTH_COLUMNS if c in ints]
        if named:
            column = named[0]
        elif len(ints) == 1:
            column = ints[0]
        else:
            raise DataError(f"--lengths {path}: name the length column with --column (integer columns: "
                            f"{', '.join(ints) or 'none'})")
    elif column not in ints:
        raise DataError(f"--column {column!r}: not an integer column of {path} (integer columns: {', '.join(ints) or 'none'})")
    col = pq.read_table(path, columns=[column]).column(0)
    if col.null_count:
        raise DataError(f"--lengths {path}: column {column!r} has {col.null_count} missing values")
    return col.to_numpy()
