"""Reading parquet shards with the ClimbMix schema, with one-line errors on bad input."""
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from errors import DataError


def open_shard(path) -> pq.ParquetFile:
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: file not found")
    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises several types for a damaged footer
        raise DataError(f"{path}: not a readable parquet file ({type(e).__name__})") from None
    if "text" not in pf.schema_arrow.names:
        raise DataError(f"{path}: no 'text' column (columns: {', '.join(pf.schema_arrow.names)})")
    if pf.metadata.num_rows == 0:
        raise DataError(f"{path}: empty shard (0 documents)")
    return pf


def iter_row_group_texts(path):
    """Yield (row_group_index, list[str]) in file order."""
    pf = open_shard(path)
    for rg in range(pf.num_row_groups):
        try:
            col = pf.read_row_group(rg, columns=["text"]).column("text")
        except Exception as e:
            raise DataError(f"{path}: row group {rg} cannot be read ({type(e).__name__})") from None
        if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
            texts = []
            for i, b in enumerate(col.to_pylist()):
                try:
                    texts.append(b.decode("utf-8"))
                except UnicodeDecodeError:
                    raise DataError(f"{path}: row group {rg}, row {i}: text is not valid UTF-8") from None
        else:
            try:
                texts = col.to_pylist()
            except UnicodeDecodeError:
                raise DataError(f"{path}: row group {rg}: text contains a non-UTF-8 byte sequence") from None
        if any(t is None for t in texts):
            raise DataError(f"{path}: row group {rg}: null text")
        yield rg, texts


def row_group_sizes(path):
    pf = open_shard(path)
    return [pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)]
