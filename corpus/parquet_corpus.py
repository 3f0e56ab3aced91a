"""A researcher's own parquet documents as a corpus (prepare.py --source parquet).

The input files' text column (and optionally a source-label column) are read, empty texts
dropped, exact duplicate texts kept once (so no text sits on both sides of the split),
shuffled with a seed and written as shard_00000..shard_{n-1}.parquet in the offline
corpus's schema (text, source, origin), the last shard being validation. Without a
source column a document's label is its input file's name (without .parquet), so two
input files are two sources. Every bad input is one DataError line.
"""
import json
import random
import shlex
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from corpus.atomic import atomic_write_json, sha256_file
from corpus.disjoint import first_of_each_text
from corpus.stdlib_corpus import clear_for_build, write_parquet_shard
from errors import DataError


def read_documents(path, text_column="text", source_column=None):
    """[(text, source label, origin)] of one input file, empty texts dropped; (rows, dropped)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: input file not found")
    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises several types for a damaged footer
        raise DataError(f"{path}: not a readable parquet file ({type(e).__name__}); {not_parquet_hint(path)}") from None
    names = pf.schema_arrow.names
    for col, what in ((text_column, "--text-column"), (source_column, "--source-column")):
        if col is not None and col not in names:
            raise DataError(f"{path}: no column {col!r} ({what}; columns: {', '.join(names)})")
    cols = [text_column] + ([source_column] if source_column else [])
    out, dropped = [], 0
    for rg in range(pf.num_row_groups):
        try:
            t = pf.read_row_group(rg, columns=cols)
        except Exception as e:
            raise DataError(f"{path}: row group {rg} cannot be read ({type(e).__name__})") from None
        if not (pa.types.is_string(t.column(0).type) or pa.types.is_large_string(t.column(0).type)):
            raise DataError(f"{path}: column {text_column!r} holds {t.column(0).type}, not text")
        texts = t.column(0).to_pylist()
        labels = t.column(1).to_pylist() if source_column else [path.name.removesuffix(".parquet")] * len(texts)
        for i, (x, lab) in enumerate(zip(texts, labels)):
            if x is None or not x.strip():
                dropped += 1
                continue
            out.append((x, "unlabeled" if lab is None else str(lab), f"{path.name}#{rg}:{i}"))
    return out, dropped


# files a user may give for parquet: JSON lines, which pyarrow converts in one call
JSON_LINES = (".jsonl", ".ndjson", ".json")


def not_parquet_hint(path) -> str:
    """What the input must be, and for a JSON-lines file the command that converts it (pyarrow reads one JSON
    object a line, its keys the columns)."""
    hint = "the documents are read from parquet files (a table with a column of texts)"
    if Path(path).suffix.lower() not in JSON_LINES:
        return hint
    code = (f"import pyarrow.json as j, pyarrow.parquet as q; q.write_table(j.read_json({json.dumps(str(path))}), "
            f"{json.dumps(str(Path(path).with_suffix('.parquet')))})")
    return f"{hint}; convert JSON lines first: python -c {shlex.quote(code)}"


def build_parquet_corpus(out_dir, inputs, text_column="text", source_column=None, n_shards=8, seed=20261008,
                         row_group_size=1000, log=print, before_write=None):
    """Write the shards and manifest.json into out_dir; returns the manifest dict. Every input is read and checked
    first: a bad input is refused before out_dir is touched (an earlier build's shards stay), and before_write
    (prepare's: the earlier build's records removed) runs only once the inputs are good."""
    if not inputs:
        raise DataError("--source parquet needs --input PATH (one or more parquet files)")
    docs, record, dropped = [], [], 0
    for p in inputs:
        rows, d = read_documents(p, text_column, source_column)
        docs += rows
        dropped += d
        record.append({"path": str(Path(p).resolve()), "sha256": sha256_file(p), "documents": len(rows)})
    unique = first_of_each_text(docs)
    n_dup, docs = len(docs) - len(unique), unique
    if len(docs) < n_shards:
        raise DataError(f"{len(docs)} non-empty distinct documents in the input; at least --shards {n_shards} needed")
    out_dir = clear_for_build(out_dir, before_write)
    random.Random(seed).shuffle(docs)
    per = -(-len(docs) // n_shards)
    shards = []
    for k in range(n_shards):
        name = f"shard_{k:05d}.parquet"
        write_parquet_shard(out_dir / name, docs[k * per:(k + 1) * per], row_group_size)
        shards.append(name)
    manifest = {"source": "parquet", "seed": seed, "row_group_size": row_group_size, "text_column": text_column,
                "source_column": source_column, "documents": len(docs), "duplicate_texts_dropped": n_dup,
                "empty_texts_dropped": dropped, "train_shards": shards[:-1], "val_shard": shards[-1], "inputs": record}
    atomic_write_json(out_dir / "manifest.json", manifest)
    labels = sorted({d[1] for d in docs})
    log(f"parquet corpus: {len(docs):,} documents ({len(labels)} source labels) from {len(inputs)} input file(s) -> "
        f"{n_shards} shards in {out_dir}")
    return manifest
