"""The offline corpus: real text every machine has, written with the ClimbMix schema.

Documents come from the running Python's standard-library sources and its pydoc topic
texts. Whole files make too few, too long documents, so each module is cut at its
top-level statements: a class or function (decorators, leading comments and docstring
included) is one document, and consecutive small statements are grouped until the group
reaches GROUP_CHARS. Each pydoc topic stays whole. Every document carries a source label
(library | test | prose) and its origin (file:line) so a run can say what it saw. Exact
duplicate texts are kept once, so training and validation share no document.
"""
import ast
import functools
import hashlib
import os
import random
import sys
import sysconfig
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from corpus.atomic import atomic_write_bytes, atomic_write_json
from corpus.disjoint import first_of_each_text
from errors import DataError

try:
    from pydoc_data.topics import topics as PYDOC_TOPICS
except ImportError:  # some distributions strip pydoc_data; the code alone still works
    PYDOC_TOPICS = {}

GROUP_CHARS = 400  # small statements are merged until a group reaches this many characters
TEST_DIRS = {"test", "tests", "idle_test"}
SCHEMA = pa.schema([("text", pa.string()), ("source", pa.string()), ("origin", pa.string())])


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


INSTALLED = ("site-packages", "dist-packages")  # the library's top-level folders of installed packages: not walked


@functools.lru_cache(maxsize=2)  # per process: a walk of the library, and it does not change
def stdlib_files(root: Path):
    """Sorted .py files of the standard library (site-packages excluded), as a tuple. The folders of installed
    packages are never entered: a Python with packages installed beside its library (pyenv's) holds several times
    its files there (11,563 of 13,353 here): walking them took 0.6 s, the rest 0.04 s. A folder named *.py (none in
    the library) is not listed, where Path.rglob's would have been."""
    out = []
    for folder, subfolders, names in os.walk(root):  # symlinked folders are not entered, as Path.rglob's walk
        rel = Path(folder).relative_to(root)
        if folder == str(root):
            subfolders[:] = [d for d in subfolders if d not in INSTALLED]
        # pydoc_data/topics.py left out: its topics are added whole, as prose
        out += [rel / n for n in names if n.endswith(".py") and (rel / n).as_posix() != "pydoc_data/topics.py"]
    return tuple(sorted(out, key=lambda p: p.as_posix()))


def split_module(src: str):
    """Cut module source into (first_line, text) documents at top-level statements.

    Lines between two statements (comments, blank lines) go with the statement after
    them, so a function keeps the comment block that introduces it.
    """
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError):
        return [(1, src)] if src.strip() else []
    lines = src.splitlines(keepends=True)
    if not tree.body:
        return [(1, src)] if src.strip() else []
    pieces = []  # (start_line0, end_line0_exclusive, is_def)
    start = 0
    for i, node in enumerate(tree.body):
        end = node.end_lineno if i + 1 < len(tree.body) else len(lines)
        is_def = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        pieces.append((start, end, is_def))
        start = end
    docs, group, group_chars, group_start = [], [], 0, 0

    def flush():
        nonlocal group, group_chars
        text = "".join(group).strip("\n")
        if text.strip():
            docs.append((group_start + 1, text + "\n"))
        group, group_chars = [], 0

    for s, e, is_def in pieces:
        chunk = lines[s:e]
        if is_def:
            flush()
            text = "".join(chunk).strip("\n")
            if text.strip():
                docs.append((s + 1, text + "\n"))
            continue
        if not group:
            group_start = s
        group.extend(chunk)
        group_chars += sum(len(x) for x in chunk)
        if group_chars >= GROUP_CHARS:
            flush()
    flush()
    return docs


def collect_documents(root: Path = None, max_files: int = None):
    """All documents (text, source, origin) plus the manifest of every source read."""
    root = root or stdlib_root()
    docs, manifest, skipped = [], [], []
    files = stdlib_files(root)
    if max_files is not None:
        files = files[:max_files]
    for rel in files:
        raw = (root / rel).read_bytes()
        try:
            src = raw.decode("utf-8")
        except UnicodeDecodeError:
            skipped.append({"path": rel.as_posix(), "reason": "not UTF-8"})
            continue
        manifest.append({"path": rel.as_posix(), "bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()})
        kind = "test" if TEST_DIRS & set(rel.parts[:-1]) or rel.name.startswith("test_") else "library"
        for line, text in split_module(src):
            docs.append((text, kind, f"{rel.as_posix()}:{line}"))
    for name in sorted(PYDOC_TOPICS):
        text = PYDOC_TOPICS[name]
        raw = text.encode("utf-8")
        manifest.append({"path": f"pydoc_data/topics.py#{name}", "bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()})
        docs.append((text, "prose", f"pydoc_data/topics.py#{name}"))
    return docs, manifest, skipped


def write_parquet_shard(path, rows, row_group_size: int) -> None:
    table = pa.table(
        {"text": [r[0] for r in rows], "source": [r[1] for r in rows], "origin": [r[2] for r in rows]},
        schema=SCHEMA,
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=row_group_size, compression="zstd")
    atomic_write_bytes(path, sink.getvalue().to_pybytes())


def clear_for_build(out_dir, before_write=None) -> Path:
    """out_dir made and emptied of an earlier build's shards, which are never mixed with this one's, after
    before_write (prepare's: the earlier build's records removed); called once a build's documents are read and good."""
    if before_write is not None:
        before_write()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for f in out_dir.glob("shard_*.parquet"):
        f.unlink()
    return out_dir


def build_stdlib_corpus(out_dir, n_shards=8, seed=20261008, row_group_size=1000, max_files=None, log=print,
                        before_write=None):
    """Write shard_00000..shard_{n-1}.parquet (the last one is validation) and manifest.json.

    Same seed and same Python give byte-identical shards. Returns the manifest dict. The documents are collected
    and counted first: too few for n_shards is refused before out_dir is touched (an earlier build's shards stay),
    and before_write (prepare's: the earlier build's records removed) runs only once they are enough.
    """
    if n_shards < 2:
        raise ValueError("need at least 2 shards: one training and one validation")
    docs, sources, skipped = collect_documents(max_files=max_files)
    # exact duplicate texts (identical small functions, license headers) would sit on both
    # sides of the train/validation split; keep each text once, at its first occurrence
    unique = first_of_each_text(docs)
    n_dup, docs = len(docs) - len(unique), unique
    if len(docs) < n_shards:
        raise DataError(f"{len(docs)} non-empty distinct documents in the corpus; at least --shards {n_shards} needed")
    out_dir = clear_for_build(out_dir, before_write)
    random.Random(seed).shuffle(docs)
    per = -(-len(docs) // n_shards)
    shards = []
    for k in range(n_shards):
        rows = docs[k * per:(k + 1) * per]
        name = f"shard_{k:05d}.parquet"
        write_parquet_shard(out_dir / name, rows, row_group_size)
        shards.append(name)
    manifest = {
        "source": "stdlib",
        "python": sys.version,
        "stdlib_root": str(stdlib_root()),
        "seed": seed,
        "group_chars": GROUP_CHARS,
        "row_group_size": row_group_size,
        "documents": len(docs),
        "duplicate_texts_dropped": n_dup,
        "train_shards": shards[:-1],
        "val_shard": shards[-1],
        "inputs": sources,
        "skipped_inputs": skipped,
    }
    atomic_write_json(out_dir / "manifest.json", manifest)
    log(f"offline corpus: {len(docs):,} documents from {len(sources):,} inputs -> {n_shards} shards in {out_dir}")
    return manifest
