"""The corpus as the user names it: files, folders and globs, in the order given (a glob's and a folder's
files sorted), each resolved to a Source with its format, detected from the file's name or, failing that, its
first bytes; `fmt` overrides the detection.

A Source is what a document's (file, row) refers to: one parquet, arrow or jsonl file, one flat token file,
one `datasets` folder from save_to_disk (its rows numbered across its arrow shards, as dataset[i] numbers
them), or one Megatron prefix (PREFIX.bin/.idx, its documents numbered as the index numbers them)."""
import glob
import json
import os
from dataclasses import dataclass
from pathlib import Path

from errors import DataError

FORMATS = ("datasets", "parquet", "arrow", "jsonl", "megatron", "tokens")
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz", ".json.gz", ".jsonl.zst", ".ndjson.zst", ".json.zst")
# first bytes of each format, for a file whose name says nothing (a gzip or zstd stream is taken as JSON lines)
MAGIC = ((b"PAR1", "parquet"), (b"ARROW1", "arrow"), (b"\xff\xff\xff\xff", "arrow"), (b"\x93NUMPY", "tokens"),
         (b"MMIDIDX", "megatron"), (b"\x1f\x8b", "jsonl"), (b"\x28\xb5\x2f\xfd", "jsonl"), (b"{", "jsonl"),
         (b"\xef\xbb\xbf{", "jsonl"))  # the last: JSON lines after a UTF-8 byte order mark


@dataclass(frozen=True)
class Source:
    path: str  # as shown and labelled: the file, the datasets folder, or the Megatron prefix
    fmt: str
    files: tuple  # the files it holds, in reading order (a Megatron prefix: .idx then .bin)


def sources(paths, fmt=None) -> list:
    """Every Source of `paths`, in order; one line naming the path for one that is missing or unknown."""
    if fmt is not None and fmt not in FORMATS:
        raise DataError(f"format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out, named = [], {}  # named: each source's path -> what the user named that gave it
    for p in map(str, paths):
        matches = [p]
        if glob.has_magic(p) and not os.path.lexists(p):
            matches = sorted(glob.glob(p, recursive=True))
            if not matches:
                raise DataError(f"{p}: no file matches this pattern")
        for m in (str(Path(x)) for x in matches):  # ./a.bin as a.bin: the pair below is found by name
            for s in _of_path(m, fmt):
                if s.path not in named:
                    named[s.path] = m
                    out.append(s)
                elif not (s.fmt == "megatron" and {named[s.path], m} == {s.path + ".bin", s.path + ".idx"}):
                    raise DataError(f"{s.path}: named twice in the corpus")  # its documents would be audited twice
                # else: PREFIX.bin and PREFIX.idx both named (a glob matches both): one Megatron source
    return out


def _of_path(p, fmt):
    path = Path(p)
    if path.is_dir():
        return _of_folder(path, fmt)
    if not path.exists():
        if os.path.lexists(p):
            raise DataError(f"{p}: a broken link")
        if Path(p + ".idx").is_file() or Path(p + ".bin").is_file():
            if fmt not in (None, "megatron"):  # a prefix names no file whose format a named one could override
                raise DataError(f"{p}: format {fmt} given, but this is a Megatron .bin/.idx prefix ({Path(p).name}"
                                f".bin and .idx); name the format megatron, or leave it out")
            return [megatron_source(p)]
        raise DataError(f"{p}: no such file or folder")
    if not path.is_file():  # a named pipe would be waited on for ever; it cannot be read twice either
        raise DataError(f"{p}: not a regular file (a pipe or a device): give a file")
    return [_of_file(path, fmt)]


def _of_file(path, fmt, in_folder=False):
    kind = detect(path)
    if in_folder and (kind is None or kind != (fmt or kind) or (path.suffix == ".json" and fmt != "jsonl")):
        # in a folder, only the files of a corpus format are read, and of the format named if one is: not a README
        # or a dataset card; nor a *.json (a dataset_info.json, a tokenizer.json), though it starts as JSON lines do,
        # unless the format named is jsonl
        return None
    kind = fmt or kind
    if kind is None:
        raise DataError(f"{path}: unknown format (expected a datasets folder, parquet, arrow, jsonl[.gz|.zst], "
                        f"a Megatron .bin/.idx pair, or a .bin/.npy token file; or name the format)")
    if kind == "megatron":
        return megatron_source(str(path)[: -len(path.suffix)] if path.suffix in (".bin", ".idx") else str(path))
    if kind == "datasets":
        raise DataError(f"{path}: a file; the datasets format is a folder written by save_to_disk")
    return Source(str(path), kind, (str(path),))


def detect(path):
    """The format a file's name says, else its first bytes say; None when neither does."""
    name = path.name.lower()
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith(".arrow"):
        return "arrow"
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(".idx"):
        return "megatron"
    if name.endswith(".bin"):
        return "megatron" if path.with_suffix(".idx").exists() else "tokens"
    if name.endswith(".npy"):
        return "tokens"
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e.strerror or type(e).__name__})") from None
    return next((kind for magic, kind in MAGIC if head.startswith(magic)), None)


def _of_folder(path, fmt):
    if (path / "dataset_dict.json").is_file():
        raise DataError(f"{path}: a DatasetDict of splits ({', '.join(_splits(path))}): give one split's folder")
    if (path / "state.json").is_file():
        if fmt in (None, "datasets"):
            return [datasets_source(path)]
        if fmt != "arrow":  # its shards read one by one is its only other reading; jsonl would read its metadata
            raise DataError(f"{path}: a Hugging Face datasets folder (save_to_disk: its rows in .arrow files), "
                            f"which format {fmt} cannot read; name the format datasets, or leave it out")
    if fmt == "datasets":
        raise DataError(f"{path}: no state.json: not a folder written by datasets' save_to_disk")
    out = _folder_sources(path, fmt)
    if not out:
        raise DataError(_no_corpus_file(path, fmt))
    return out


def _folder_sources(path, fmt):
    """The sources in a folder and its subfolders, sorted; with a format named, only that format's."""
    out, prefixes = [], set()
    for folder, subs, files in os.walk(path):
        subs[:] = sorted(d for d in subs if not d.startswith("."))
        if (Path(folder) / "state.json").is_file() and Path(folder) != path:
            if fmt in (None, "arrow"):
                out.append(datasets_source(Path(folder)))
            subs[:] = []  # a datasets folder is one source, or none of the format named
            continue
        for name in sorted(f for f in files if not f.startswith(".")):
            if not (Path(folder) / name).is_file():
                continue  # a named pipe (its first bytes would be waited for), a socket, a broken link
            s = _of_file(Path(folder) / name, fmt, in_folder=True)
            if s is None or (s.fmt == "megatron" and s.path in prefixes):
                continue  # a file of no corpus format (a README, metadata); a prefix's second file
            prefixes.add(s.path)
            out.append(s)
    return out


def _no_corpus_file(path, fmt):
    """Why a folder gave no source: none of the format named (then what it holds), or no corpus file at all."""
    held = sorted({s.fmt for s in _folder_sources(path, None)}) if fmt else []
    if held:
        return (f"{path}: no {fmt} file in this folder, which holds {', '.join(held)} data; name the format "
                f"{held[0] if len(held) == 1 else 'of the files to read'}, or leave it out")
    hint = " (its *.json files are read as JSON lines only with --format jsonl)" if any(path.rglob("*.json")) else ""
    return f"{path}: a folder with no corpus file in it (parquet, arrow, jsonl, .bin/.idx, .npy){hint}"


def _splits(path):
    try:
        return [str(s) for s in json.loads((path / "dataset_dict.json").read_text())["splits"]]
    except (OSError, ValueError, KeyError, TypeError):
        return ["?"]


def datasets_source(path) -> Source:
    """A save_to_disk folder: its arrow shards in state.json's order."""
    state = Path(path) / "state.json"
    try:
        names = [d["filename"] for d in json.loads(state.read_text())["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise DataError(f"{state}: not a datasets state file (no _data_files list)") from None
    files = []
    for n in names:
        f = Path(path) / n
        if not f.is_file():
            raise DataError(f"{f}: {'is a folder, not a file' if f.is_dir() else 'missing'} (state.json names it)")
        files.append(str(f))
    return Source(str(path), "datasets", tuple(files))


def megatron_source(prefix) -> Source:
    """PREFIX.idx and PREFIX.bin, both files (the .bin is stat-ed, not read, unless a BOS check needs it)."""
    idx, bin_ = Path(prefix + ".idx"), Path(prefix + ".bin")
    for f, role in ((idx, "index"), (bin_, "data")):
        if f.is_dir():
            raise DataError(f"{f}: is a folder, not the Megatron {role} file")
        if not f.is_file():
            raise DataError(f"{f}: missing: a Megatron dataset {prefix} needs both PREFIX.bin and PREFIX.idx")
    return Source(prefix, "megatron", (str(idx), str(bin_)))
