"""JSON lines, plain or compressed (.gz, .zst): one document per line, the Dolma layout.

The field: the one named (a dotted path reaches into nested objects: metadata.subset), else 'text', else a
token-list field (input_ids, token_ids, tokens); the first record of each file decides which, and every record must
then have it. Labels: the field named, else a 'source' field when the file's first record has one (Dolma's), else
the file's name. Blank lines are no documents; a document's row is its place among the file's records.

Units: a compressed file whole (a gzip or zstd stream has no place to start in the middle); a plain file in byte
ranges of PART_BYTES, each starting at the first line that begins inside it.
"""
import gzip
import io
import json
import zlib
from pathlib import Path

import numpy as np
import zstandard

from corpus.readers.settings import LABEL_COLUMNS, TEXT_COLUMNS, TOKEN_COLUMNS, Batch, Unit
from errors import DataError

PART_BYTES = 64 << 20
DAMAGED = (OSError, EOFError, zlib.error, zstandard.ZstdError)  # a truncated or corrupt stream


def open_binary(path):
    """The file's decompressed bytes, read line by line."""
    name = str(path).lower()
    raw = open(path, "rb")
    if name.endswith(".gz") or _starts(raw, b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if name.endswith(".zst") or _starts(raw, b"\x28\xb5\x2f\xfd"):
        return io.BufferedReader(_Zstd(raw), 1 << 20)
    return raw


class _Zstd(io.RawIOBase):
    """A zstd stream of one or more frames, decompressed; one that ends inside a frame is an error (zstandard's
    stream_reader returns the bytes it has and stops, which would count a truncated file as a shorter corpus)."""

    def __init__(self, raw):
        self.raw, self.d, self.buf, self.at = raw, zstandard.ZstdDecompressor().decompressobj(), b"", 0

    def readable(self):
        return True

    def readinto(self, b):
        while self.at == len(self.buf):
            chunk = self.raw.read(1 << 20)
            if not chunk:
                if not self.d.eof:
                    raise EOFError("the zstd stream ends inside a frame (truncated)")
                return 0
            if self.d.eof:  # the last chunk ended where a frame did: this one starts the next
                self.d = zstandard.ZstdDecompressor().decompressobj()
            out = self.d.decompress(chunk)
            while self.d.eof and self.d.unused_data:  # the next frame
                rest, self.d = self.d.unused_data, zstandard.ZstdDecompressor().decompressobj()
                out += self.d.decompress(rest)
            self.buf, self.at = out, 0
        n = min(len(b), len(self.buf) - self.at)
        b[:n] = self.buf[self.at:self.at + n]
        self.at += n
        return n

    def close(self):
        self.raw.close()
        super().close()


def _starts(f, magic):
    head = f.read(len(magic))
    f.seek(0)
    return head == magic


def compressed(path):
    with open(path, "rb") as f:
        head = f.read(4)
    return head[:2] == b"\x1f\x8b" or head == b"\x28\xb5\x2f\xfd"


def lookup(record, dotted):
    """record[a][b] for 'a.b' (record['a.b'] where the record has that key itself), or a KeyError."""
    if dotted in record:
        return record[dotted]
    v = record
    for k in dotted.split("."):
        if not isinstance(v, dict) or k not in v:
            raise KeyError(dotted)
        v = v[k]
    return v


def plan(source, index, settings, label_const):
    path = source.path
    first, first_line = _first_record(path)
    role, field = _choose_field(first, settings.column, path, first_line)
    label = settings.label
    if label is None and first is not None:
        label = next((c for c in LABEL_COLUMNS if isinstance(first.get(c), (str, int)) and not isinstance(
            first.get(c), bool)), None)
    common = dict(source=index, fmt="jsonl", path=path, role=role, column=field, label_column=label,
                  label_const=label_const)
    size = Path(path).stat().st_size
    if compressed(path) or size <= PART_BYTES:
        return [Unit(part=0, first_row=0, nbytes=size, **common)]
    cuts = list(range(0, size, PART_BYTES)) + [size]
    return [Unit(part=i, where=(a, b), first_row=0 if i == 0 else None, nbytes=b - a, **common)
            for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:]))]


def _first_record(path):
    """(the file's first record, its line number), or (None, 0) for a file of blank lines."""
    try:
        with open_binary(path) as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    return _parse(line, path, n), n
    except DAMAGED as e:
        raise DataError(f"{path}: cannot be read ({type(e).__name__}: {str(e)[:80]})") from None
    return None, 0


def _choose_field(first, column, path, line):
    if first is None:  # an empty file: no documents, whatever the field
        return "text", column or TEXT_COLUMNS[0]
    names = [column] if column else list(TEXT_COLUMNS) + list(TOKEN_COLUMNS)
    for name in names:
        try:
            v = lookup(first, name)
        except KeyError:
            continue
        if isinstance(v, str):
            return "text", name
        # a null among the ids is still a token list: refused as such when the record is read, naming its index
        if isinstance(v, list) and all(x is None or (isinstance(x, int) and not isinstance(x, bool)) for x in v[:100]):
            return "tokens", name
        if column:
            raise DataError(f"{path}: line {line}: field {column!r} is {type(v).__name__}, neither text nor a token "
                            "list")
    if column:
        raise DataError(f"{path}: line {line}: no field {column!r} (fields: {', '.join(first)})")
    raise DataError(f"{path}: line {line}: no text field ({', '.join(TEXT_COLUMNS)}) and no token field "
                    f"({', '.join(TOKEN_COLUMNS)}): name the field (fields: {', '.join(first)})")


def _parse(line, path, n):
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: line {n}: not UTF-8 (byte {e.start} of the line)") from None
    try:
        rec = json.loads(text.removeprefix("\ufeff"))  # a byte order mark, as Windows tools write (at any line: cat)
    except ValueError as e:
        raise DataError(f"{path}: line {n}: not JSON ({str(e)[:60]})") from None
    if not isinstance(rec, dict):
        raise DataError(f"{path}: line {n}: not a JSON object")
    return rec


def read(unit, settings):
    """The unit's Batches in record order."""
    texts, labels = [], []
    try:
        for n, at, line in _lines(unit):
            rec = _parse(line, unit.path, n) if _numbered(unit) else _renumbered(_parse, line, unit, at)
            v = _value(rec, unit, n, at)
            if (b"\\ud" in line or b"\\uD" in line) and unit.role == "text":
                _check_unicode(v, unit, n, at)  # JSON can escape half a surrogate pair; UTF-8 cannot hold it
            texts.append(v)
            if unit.label_column:
                labels.append(_label(rec, unit, n, at))
            else:
                _no_label_field(rec, unit, n, at)
            if len(texts) == settings.text_batch:
                yield _batch(texts, labels, unit)
                texts, labels = [], []
    except DAMAGED as e:
        raise DataError(f"{unit.path}: cannot be read ({type(e).__name__}: {str(e)[:80]})") from None
    if texts:
        yield _batch(texts, labels, unit)


def _lines(unit):
    """(line number within the unit, byte offset, line) of each non-blank line that starts inside the unit."""
    start, end = unit.where or (0, None)
    with open_binary(unit.path) as f:
        pos = 0
        if start > 0:  # the line that began before `start` belongs to the unit before this one
            f.seek(start - 1)
            pos = start - 1 + len(f.readline())
        n = 0
        for line in f:
            if end is not None and pos >= end:
                return
            n += 1
            at, pos = pos, pos + len(line)
            if line.strip():
                yield n, at, line


def _numbered(unit):
    """A unit from the file's start counts its lines itself; a later byte range counts them on an error only."""
    return not unit.where or unit.where[0] == 0


def _line(unit, n, at):
    return n if _numbered(unit) else _line_of(unit.path, at)


def _renumbered(parse, line, unit, at):
    try:
        return parse(line, unit.path, 0)
    except DataError:
        return parse(line, unit.path, _line_of(unit.path, at))  # raises again, naming its line


def _line_of(path, offset):
    """The line number of the line starting at byte `offset` of a plain file (errors only: it reads the file)."""
    with open(path, "rb") as f:
        return f.read(offset).count(b"\n") + 1


def _value(rec, unit, n, at):
    try:
        v = lookup(rec, unit.column)
    except KeyError:
        raise DataError(f"{unit.path}: line {_line(unit, n, at)}: no field {unit.column!r}") from None
    if unit.role == "text" and not isinstance(v, str):
        raise DataError(f"{unit.path}: line {_line(unit, n, at)}: field {unit.column!r} is {type(v).__name__}, "
                        f"not text")
    if unit.role == "tokens" and not isinstance(v, list):
        raise DataError(f"{unit.path}: line {_line(unit, n, at)}: field {unit.column!r} is {type(v).__name__}, "
                        f"not a token list")
    if unit.role == "tokens" and None in v:  # it would count as a token
        raise DataError(f"{unit.path}: line {_line(unit, n, at)}: field {unit.column!r} holds a null at index "
                        f"{v.index(None)}, not a token id")
    return v


def _check_unicode(text, unit, n, at):
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise DataError(f"{unit.path}: line {_line(unit, n, at)}: text is not valid Unicode (an unpaired "
                        f"surrogate escape)") from None


def _label(rec, unit, n, at):
    try:
        v = lookup(rec, unit.label_column)
    except KeyError:
        raise DataError(f"{unit.path}: line {_line(unit, n, at)}: no label field {unit.label_column!r}") from None
    return None if v is None else str(v)


def _no_label_field(rec, unit, n, at):
    """A file whose first record had no label field (source, label), so that its documents are labelled by its name,
    has none later either: a label found from line 21 on was dropped without a word (a new user's probe), where a
    labelled file's record without one is refused (_label)."""
    name = next((c for c in LABEL_COLUMNS if isinstance(rec.get(c), (str, int)) and not isinstance(rec.get(c), bool)),
                None)
    if name is not None:
        raise DataError(f"{unit.path}: line {_line(unit, n, at)}: a label field {name!r}, which the file's first record "
                        f"has not, so its documents were labelled by the file's name; give --label-column {name} to "
                        "label them by it (every record then needs it)")


def _batch(values, labels, unit):
    labels = labels if unit.label_column else None
    if unit.role == "text":
        return Batch(texts=values, labels=labels, n=len(values))
    lengths = np.fromiter((len(v) for v in values), np.int64, len(values))
    first = np.fromiter((v[0] if v and isinstance(v[0], int) else -1 for v in values), np.int64, len(values))
    return Batch(lengths=lengths, first=first, labels=labels, n=len(values))
