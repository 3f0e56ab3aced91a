"""Parquet files, Arrow files and `datasets` folders (save_to_disk: Arrow stream shards).

The column: the one named, else 'text' or a token-list column (input_ids, token_ids, tokens); a table with neither,
or with both, is refused in one line asking for the column (never "its only integer column"). A token-list column
gives each document's length from the list offsets (pyarrow's list_value_length: no token is decoded; from a
memory-mapped Arrow file not even read); a string column is tokenized. Labels: the column named, else a
'source' or 'label' column, else the source's name.

Units: a parquet file's row groups, in runs of about PART_BYTES; an Arrow file (or a datasets shard) whole.
"""
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from corpus.readers.settings import LABEL_COLUMNS, TEXT_COLUMNS, TOKEN_COLUMNS, Batch, Unit
from errors import DataError

PART_BYTES = 64 << 20  # a parquet unit: row groups up to this many uncompressed bytes (at least one)
TOKEN_BATCH = 1 << 16  # rows per parquet read of a token column (only offsets are kept)


def schema_of(fmt, path):
    try:
        if fmt == "parquet":
            return pq.read_schema(path)
        with pa.memory_map(path) as m:
            return _ipc_reader(m).schema
    except (OSError, pa.ArrowException) as e:
        raise DataError(f"{path}: not a readable {fmt} file ({_why(e)})") from None


def _why(e):
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:100]}" if text else type(e).__name__


def _ipc_reader(m):
    """An Arrow IPC file (random access) or stream (what datasets writes) reader."""
    try:
        return pa.ipc.open_file(m)
    except pa.ArrowInvalid:
        m.seek(0)
        return pa.ipc.open_stream(m)


def choose_column(schema, column, where):
    """(role, name): role 'tokens' for a list of integers, 'text' for a string column."""
    names = schema.names
    if column is not None:
        if column not in names:
            raise DataError(f"{where}: no column {column!r} (columns: {', '.join(names)})")
        role = _role(schema.field(column).type)
        if role is None:
            raise DataError(f"{where}: column {column!r} is {schema.field(column).type}, neither text (string) "
                            f"nor a token list (list of integers)")
        return role, column
    text = [c for c in TEXT_COLUMNS if c in names and _role(schema.field(c).type) == "text"]
    toks = [c for c in TOKEN_COLUMNS if c in names and _role(schema.field(c).type) == "tokens"]
    if text and toks:
        raise DataError(f"{where}: has both text {text[0]!r} and tokens {toks[0]!r}: name the column to count")
    if not text and not toks:
        raise DataError(f"{where}: no text column ({', '.join(TEXT_COLUMNS)}) and no token column "
                        f"({', '.join(TOKEN_COLUMNS)}): name the column (columns: {', '.join(names)})")
    return ("text", text[0]) if text else ("tokens", toks[0])


def _role(t):
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "text"
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_integer(t.value_type):
        return "tokens"
    return None


def label_column(schema, label, where):
    """The label column: the one named (a dotted name, meta.lang, a field of a struct column, as a JSON file's nested
    field is named), else the first of LABEL_COLUMNS the table has, else None."""
    if label is not None:
        if label not in schema.names and not _nested(schema, label):
            raise DataError(f"{where}: no label column {label!r} (columns: {', '.join(schema.names)}; a dotted name "
                            "is a struct column's field)")
        return label
    return next((c for c in LABEL_COLUMNS if c in schema.names), None)


def _nested(schema, name):
    """Whether the dotted name is a path of struct fields from one of the table's columns."""
    head, *rest = name.split(".")
    if not rest or head not in schema.names:
        return False
    t = schema.field(head).type
    for f in rest:
        if not pa.types.is_struct(t) or t.get_field_index(f) < 0:
            return False
        t = t.field(f).type
    return True


def _top(schema_names, label):
    """The table column that holds the label: itself, or the struct column a dotted name starts in."""
    return label if label in schema_names else label.split(".")[0]


def _label_values(table, label):
    """The label column's values, a struct column's field taken out where the name is dotted."""
    if label in table.column_names:
        return table.column(label)
    head, *rest = label.split(".")
    col = table.column(head)
    for f in rest:
        col = pc.struct_field(col, f)
    return col


def plan(source, index, settings, label_const):
    """The units of one table source (a parquet or Arrow file, or a datasets folder)."""
    fmt = "arrow" if source.fmt == "datasets" else source.fmt
    if not source.files:  # a datasets folder saved from an empty dataset: no shard, no document
        return []
    schema = schema_of(fmt, source.files[0])
    role, col = choose_column(schema, settings.column, source.path)
    lab = label_column(schema, settings.label, source.path)
    # the table column that holds the label (a dotted name's struct column), named once here for every unit
    common = dict(source=index, fmt=fmt, role=role, column=col, label_column=lab, label_const=label_const,
                  extra={"label_top": None if lab is None else _top(schema.names, lab)})
    if fmt == "arrow":
        for f in source.files[1:]:  # every shard of a datasets folder has the first one's columns
            other = schema_of(fmt, f)
            if col not in other.names or (lab is not None and (_top(other.names, lab) != common["extra"]["label_top"]
                                                             or lab not in other.names and not _nested(other, lab))):
                raise DataError(f"{f}: lacks column {col if col not in other.names else lab!r}, which "
                                f"{source.files[0]} has")
        return [Unit(part=i, path=f, nbytes=Path(f).stat().st_size, **common) for i, f in enumerate(source.files)]
    try:
        meta = pq.ParquetFile(source.files[0]).metadata
    except (OSError, pa.ArrowException) as e:
        raise DataError(f"{source.path}: not a readable parquet file ({_why(e)})") from None
    units, run, size, first, row = [], [], 0, 0, 0
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        if run and size + rg.total_byte_size > PART_BYTES:
            units.append(Unit(part=len(units), path=source.path, where=tuple(run), first_row=first, nbytes=size,
                              **common))
            run, size, first = [], 0, row
        run.append(g)
        size += rg.total_byte_size
        row += rg.num_rows
    if run:
        units.append(Unit(part=len(units), path=source.path, where=tuple(run), first_row=first, nbytes=size, **common))
    return units


def read(unit, settings):
    """The unit's Batches in row order."""
    lab = unit.extra.get("label_top")
    cols = [unit.column] + ([lab] if lab and lab != unit.column else [])
    row = unit.first_row or 0
    for table in _tables(unit, cols, settings):
        yield _batch(table, unit, row, settings.bos == "auto")
        row += table.num_rows


def _tables(unit, cols, settings):
    """Pieces of the unit as tables (a record batch, or a whole memory-mapped Arrow file's token column)."""
    size = TOKEN_BATCH if unit.role == "tokens" else settings.text_batch
    try:
        if unit.fmt == "parquet":
            pf = pq.ParquetFile(unit.path)
            for rb in pf.iter_batches(batch_size=size, row_groups=list(unit.where), columns=cols):
                yield pa.Table.from_batches([rb])
            return
        with pa.memory_map(unit.path) as m:
            reader = _ipc_reader(m)
            if unit.role == "tokens":  # zero-copy from the map, and one compute call over all its batches
                yield reader.read_all().select(cols)
                return
            batches = (reader.get_batch(i) for i in range(reader.num_record_batches)) \
                if isinstance(reader, pa.ipc.RecordBatchFileReader) else reader
            for rb in batches:
                for k in range(0, rb.num_rows, size):
                    yield pa.Table.from_batches([rb.slice(k, size).select(cols)])
    except (OSError, pa.ArrowException) as e:
        raise DataError(f"{unit.path}: cannot be read ({_why(e)})") from None


def _batch(table, unit, row, want_first):
    col = table.column(unit.column)
    if col.null_count:
        bad = row + int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
        raise DataError(f"{unit.path}: row {bad}: no {'text' if unit.role == 'text' else 'tokens'} (null "
                        f"{unit.column!r})")
    labels = None
    if unit.label_column:
        labels = _label_values(table, unit.label_column)  # encoded to codes by the caller: no Python object per row
        if not (pa.types.is_string(labels.type) or pa.types.is_large_string(labels.type)):
            try:
                labels = labels.cast(pa.string())
            except pa.ArrowException:
                raise DataError(f"{unit.path}: label column {unit.label_column!r} is {labels.type}, which has "
                                f"no text form") from None
    if unit.role == "tokens":
        _no_null_token(col, unit, row)
        lengths = pc.list_value_length(col).to_numpy().astype(np.int64)
        first = None
        if want_first:
            first = np.full(len(lengths), -1, np.int64)
            if col.num_chunks:
                first[lengths > 0] = np.concatenate([_first_tokens(c) for c in col.chunks])
        return Batch(lengths=lengths, first=first, labels=labels, n=len(lengths))
    try:
        texts = col.to_pylist()
    except UnicodeDecodeError:
        raise DataError(f"{unit.path}: rows {row}-{row + len(col) - 1}: text is not valid UTF-8") from None
    return Batch(texts=texts, labels=labels, n=len(texts))


def _no_null_token(col, unit, row):
    """A null inside a token list would count as a token: refused, naming the first (its row and index)."""
    for chunk in col.chunks:
        values = chunk.flatten()  # this chunk's tokens, its slice of the list values
        if values.null_count:
            j = int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0])
            k = int(pc.list_parent_indices(chunk).to_numpy()[j])
            index = j - int(np.asarray(chunk.offsets)[k] - np.asarray(chunk.offsets)[0])
            raise DataError(f"{unit.path}: row {row + k}: {unit.column!r} holds a null at index {index}, not a "
                            "token id")
        row += len(chunk)


def _first_tokens(arr):
    """The first token of each non-empty list, read at the list offsets: one value per document, nothing else."""
    offsets = np.asarray(arr.offsets)
    values = arr.values
    if values.null_count:
        values = values.fill_null(-1)
    return values.to_numpy(zero_copy_only=False)[offsets[:-1][offsets[1:] > offsets[:-1]]]
