"""A researcher's own length stream for the audit: document lengths in arrival order.

Three forms: a text file with one integer per line (blank lines and lines starting with '#'
are skipped; a line with several integers is one refill, as the audit's own
stream_lengths.txt writes them), a .npy 1-D integer array, or a .parquet column (--column,
or a column named 'length'/'lengths'/'num_tokens'/'n_tokens', never a guess among other columns; labels
from --label-column or a column named 'label'/'source'). A length is the document's token
count as the packer sees it, any BOS/EOS marker included, so at least 1.

read_stream returns (lengths, refill boundaries or None, labels or None).
"""
import locale
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from corpus.atomic import atomic_write_text
from errors import DataError

LENGTH_COLUMNS = ("length", "lengths", "num_tokens", "n_tokens")
LABEL_COLUMNS = ("label", "source")


def read_lengths(path, column=None) -> np.ndarray:
    return read_stream(path, column)[0]


def read_stream(path, column=None, label_column=None):
    path = Path(path)
    if path.is_dir():
        raise DataError(f"--lengths {path}: is a folder; give a file of lengths (a corpus folder: --corpus)")
    if not path.is_file():
        raise DataError(f"--lengths {path}: no such file")
    suffix = path.suffix.lower()
    refills = labels = None
    if label_column is not None and suffix != ".parquet":
        raise DataError(f"--label-column {label_column!r}: applies to a .parquet length file; {path.name} has no "
                        "columns (label a corpus with --corpus and --label-column)")
    if suffix == ".npy":
        arr = _npy(path)
    elif suffix == ".parquet":
        arr = _parquet(path, column)
        labels = _labels(path, label_column)
    else:
        arr, refills = _text(path)
    if arr.size == 0:
        raise DataError(f"--lengths {path}: no lengths")
    bad = np.flatnonzero(arr < 1)
    if bad.size:
        raise DataError(f"--lengths {path}: entry {bad[0] + 1} is {arr[bad[0]]}; every length must be at least 1")
    return arr.astype(np.int64), refills, labels


PLAIN = b"0123456789\r\n"  # a plain file's bytes: one length a line
HUGE = 10**18  # from here on _lines reads the file: numpy's parse saturates at int64's largest, silently


def _text(path):
    """Lengths, and refill boundaries when some line holds several (every line is then one refill)."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DataError(f"--lengths {path}: cannot read it as text ({type(e).__name__})") from None
    plain = _plain(raw)
    return (plain, None) if plain is not None else _lines(raw, path)


def _plain(raw):
    """A file's bytes of one length a line and nothing else, read at numpy's speed (0.02 s a million lines, against
    0.7 s for _lines); None for any other file, which _lines reads (the audit's own stream_lengths.txt, several lengths
    a line, among them). Blank lines are skipped in both."""
    if raw.translate(None, PLAIN):
        return None
    if not raw or raw.isspace():
        return np.zeros(0, np.int64)  # numpy's parse gives [0] for line ends alone
    lengths = np.fromstring(raw.decode("ascii"), dtype=np.int64, sep=" ")  # text mode: any whitespace separates
    return None if lengths.size and lengths.max() >= HUGE else lengths


def _lines(raw, path):
    """_text, line by line: comments, several lengths a line, and every error named with its line."""
    out, sizes = [], []
    try:
        lines = raw.decode(locale.getpreferredencoding(False)).splitlines()  # as Path.read_text decodes
    except UnicodeDecodeError as e:
        raise DataError(f"--lengths {path}: cannot read it as text ({type(e).__name__})") from None
    for i, line in enumerate(lines, 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        parts = s.split()
        try:
            out.extend(int(x) for x in parts)
        except ValueError:
            bad = next((x for x in parts if not x.lstrip("+-").isdigit()), None)
            if bad is None:  # digits only, more than int() reads (4,300)
                raise DataError(f"--lengths {path}: line {i}: a length does not fit in 64 bits") from None
            raise DataError(f"--lengths {path}: line {i}: {bad[:40]!r} is not an integer") from None
        sizes.append(len(parts))
    try:
        arr = np.asarray(out, dtype=np.int64)
    except OverflowError:
        raise DataError(f"--lengths {path}: a length does not fit in 64 bits") from None
    refills = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64) if any(k > 1 for k in sizes) else None
    return arr, refills


def _npy(path):
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise DataError(f"--lengths {path}: not a readable .npy array ({type(e).__name__})") from None
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise DataError(f"--lengths {path}: expected a 1-D integer array, got {arr.ndim}-D {arr.dtype}")
    return arr


def _parquet(path, column):
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as e:
        raise DataError(f"--lengths {path}: not a readable parquet file ({type(e).__name__})") from None
    ints = [f.name for f in schema if pa.types.is_integer(f.type)]
    if column is None:
        named = [c for c in LENGTH_COLUMNS if c in ints]
        if not named:  # an integer column of another name may be anything (an id, a count): never guessed
            raise DataError(f"--lengths {path}: no column named {' or '.join(LENGTH_COLUMNS)}; name the length "
                            f"column with --column (integer columns: {', '.join(ints) or 'none'})")
        column = named[0]
    elif column not in ints:
        raise DataError(f"--column {column!r}: not an integer column of {path} (integer columns: {', '.join(ints) or 'none'})")
    col = pq.read_table(path, columns=[column]).column(0)
    if col.null_count:
        raise DataError(f"--lengths {path}: column {column!r} has {col.null_count} missing values")
    return col.to_numpy()


def _labels(path, label_column):
    """The label column of a --lengths parquet file: --label-column, or one named label/source."""
    names = pq.read_schema(path).names
    col = label_column or next((c for c in LABEL_COLUMNS if c in names), None)
    if col is None:
        return None
    if col not in names:
        raise DataError(f"--label-column {col!r}: not a column of {path} (columns: {', '.join(names)})")
    return np.asarray(pq.read_table(path, columns=[col]).column(0).to_pylist(), dtype=object)


def prepared_labels(layout, names, counts):
    """The `source` label of each document of a prepared corpus's shards (None when a shard has none)."""
    out = []
    for n, k in zip(names, counts):
        pf = pq.ParquetFile(layout.raw / f"{n}.parquet")
        if "source" not in pf.schema_arrow.names:
            return None
        lab = pf.read(columns=["source"]).column("source").to_pylist()
        if len(lab) != k:
            raise DataError(f"{layout.raw / n}.parquet: {len(lab)} labels for {k} tokenized documents; prepare the corpus again")
        out.extend(lab)
    return np.asarray(out, dtype=object)


def write_stream_lengths(stream, path):
    """One refill per line (space-separated lengths): what checkers/packing_checker.py and --lengths read."""
    L, r = stream.lengths.tolist(), stream.refills.tolist()
    atomic_write_text(path, "".join(" ".join(map(str, L[a:b])) + "\n" for a, b in zip(r[:-1], r[1:])))
