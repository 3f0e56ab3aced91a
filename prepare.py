#!/usr/bin/env python3
"""Prepare a corpus: shards -> tokenizer -> pre-tokenized shards -> length census.

  python prepare.py --source stdlib            # offline corpus from this Python's stdlib
  python prepare.py --source climbmix -n 10    # ClimbMix shards 0-9 + the pinned val shard
  python prepare.py --source parquet --input A.parquet B.parquet [--text-column text] [--source-column S]
                                               # your own documents: shuffled, split, last shard validation

Everything lands under DATA_DIR/SOURCE/ (DATA_DIR: --data-dir, else $PACKAUDIT_DATA,
else ~/.cache/packing-audit). Each step is skipped when its outputs already verify, so a
second run on a complete data root does no work and says so.
"""
import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

from console.shutdown import skip_final_collections
from console.usage import interrupted_line
from corpus.atomic import atomic_write_json, sha256_file
from corpus.layout import ENV_VAR, Layout, default_data_dir
from corpus.runlock import FolderLocked, folder_lock
from errors import DataError, os_error_line

# Late imports: each step's modules (numpy, pyarrow, the tokenizer, tqdm) load inside the functions that run
# them: `--help` and a refused argument answer without them

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", choices=["stdlib", "climbmix", "parquet"], default="stdlib",
                    help="stdlib: offline corpus from the running Python (default); climbmix: download the real corpus; "
                         "parquet: your own documents (--input)")
    ap.add_argument("--input", nargs="+", default=None, metavar="PATH", help="parquet: the input parquet file(s)")
    ap.add_argument("--text-column", default="text", help="parquet: the column holding the document text (default text)")
    ap.add_argument("--source-column", default=None,
                    help="parquet: a column with each document's source label (default: the input file's name)")
    ap.add_argument("--data-dir", default=None, help=f"data root (default: ${ENV_VAR} or ~/.cache/packing-audit)")
    ap.add_argument("-n", "--train-shards", type=int, default=10,
                    help="climbmix: number of training shards to fetch, from shard 0 (default 10, the paper's corpus)")
    ap.add_argument("--base-url", default=None, help="climbmix: alternative base URL (mirror, or a local test server)")
    ap.add_argument("--workers", type=int, default=4, help="climbmix: parallel downloads (default 4)")
    ap.add_argument("--shards", type=int, default=8,
                    help="stdlib, parquet: number of parquet shards to write, the last one is validation (default 8)")
    ap.add_argument("--seed", type=int, default=20261008, help="stdlib, parquet: shuffle seed (default 20261008)")
    ap.add_argument("--row-group-size", type=int, default=1000,
                    help="stdlib, parquet: documents per parquet row group (default 1000; not a multiple of 128 on purpose)")
    ap.add_argument("--max-files", type=int, default=None, help="stdlib: use only the first N source files (tests)")
    ap.add_argument("--vocab-size", type=int, default=8192, help="tokenizer vocabulary incl. 4 special tokens (default 8192)")
    ap.add_argument("--threads", type=int, default=2, help="tiktoken encoding threads (default 2)")
    return ap.parse_args(argv)


def _log(msg):
    print(msg, flush=True)


def check_args(args):
    """Every bad value refused in one line before any work."""
    for name, v, lo in (("--shards", args.shards, 2), ("--train-shards", args.train_shards, 1),
                        ("--workers", args.workers, 1), ("--threads", args.threads, 1),
                        ("--row-group-size", args.row_group_size, 1), ("--max-files", args.max_files, 1)):
        if v is not None and v < lo:
            extra = " (one training and one validation shard)" if name == "--shards" else ""
            raise DataError(f"{name} {v}: must be at least {lo}{extra}")
    if args.source == "parquet" and not args.input:
        raise DataError("--source parquet needs --input PATH (one or more parquet files)")
    if args.source != "parquet" and (args.input or args.source_column):
        raise DataError(f"--input and --source-column apply to --source parquet, not {args.source}")
    if not 256 + 4 <= args.vocab_size <= 65536:
        raise DataError(f"--vocab-size {args.vocab_size}: must be 260..65536 (256 bytes + 4 special tokens; "
                        f"token files are uint16)")


def _make_root(lay):
    for parent in [lay.root, *lay.root.parents]:
        if parent.exists() and not parent.is_dir():
            raise DataError(f"{parent}: is a file, not a folder; choose another --data-dir")
    try:
        lay.root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(f"{lay.root}: cannot create the data folder ({e.strerror})") from None
    probe = Path(lay.root) / f".write-probe-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise DataError(f"{lay.root}: data folder is not writable ({e.strerror})") from None


def remove_stale_temporaries(root, log=_log) -> int:
    """Temporaries a killed prepare left (atomic writes' .NAME.*.tmp, downloads' .NAME.part).

    Called under the data root's lock, so no live writer owns them.
    """
    n = 0
    for pat in (".*.tmp", ".*.part"):
        for f in root.rglob(pat):
            if f.is_file():
                f.unlink()
                n += 1
    if n:
        log(f"removed {n} stale temporary file(s) left by an interrupted run")
    return n


def _identity(args, sys_version):
    """The build's arguments: what the completion record is valid for."""
    a = {"source": args.source, "vocab_size": args.vocab_size}
    if args.source == "stdlib":
        a.update(seed=args.seed, shards=args.shards, row_group_size=args.row_group_size,
                 max_files=args.max_files, python=sys_version)
    elif args.source == "parquet":
        for p in args.input:
            if not Path(p).is_file():
                raise DataError(f"{p}: input file not found")
        a.update(seed=args.seed, shards=args.shards, row_group_size=args.row_group_size, text_column=args.text_column,
                 source_column=args.source_column, inputs=[sha256_file(p) for p in args.input])
    else:
        a.update(train_shards=args.train_shards)
    return a


def _read_json(path):
    try:
        return json.loads(path.read_text()) if path.exists() else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None  # a damaged record is no record: the step is redone


def prepare(args) -> dict:
    check_args(args)
    data_dir = args.data_dir or default_data_dir()
    lay = Layout(data_dir, args.source)
    made = [p for p in (lay.root, *lay.root.parents) if not p.exists()]  # deepest first: the folders this run makes
    _make_root(lay)
    try:
        with folder_lock(lay.root, "prepare"):
            return _prepare(args, lay)
    except BaseException:
        remove_empty(made)  # a first prepare that failed (a typo'd --input or column) leaves no empty folder behind
        raise


def remove_empty(folders):
    """Each folder removed while it is empty, deepest first; the first one that is not empty (or gone) stops it."""
    for p in folders:
        try:
            p.rmdir()
        except OSError:
            return


def _prepare(args, lay) -> dict:
    _log(f"data root: {lay.root}")
    remove_stale_temporaries(lay.root)
    did = []  # the steps that did work: a step after one of them is redone too
    ident = _identity(args, sys.version)
    old = _read_json(lay.record)

    def invalidate():
        # another build starts here: no completion record may survive until it is complete
        if old is not None and old.get("arguments") != ident and lay.record.exists():
            lay.record.unlink()
            _log("arguments differ from the previous build: rebuilding what depends on them")

    if args.source == "climbmix":
        invalidate()
    # stdlib, parquet: only once the documents are read and enough (a typo'd --text-column or --shards keeps the
    # corpus prepared before)
    train_names, val_name = _step_shards(args, lay, ident, did, invalidate)
    shard_sha = {n: sha256_file(lay.raw / n) for n in train_names + [val_name]}
    # the tokenizer is trained before the earlier build's record goes (a --vocab-size the corpus cannot fill keeps it)
    enc, tok_sha = _step_tokenizer(args, lay, train_names, shard_sha, did, invalidate)
    invalidate()
    names = train_names + [val_name]
    _step_tokens(args, lay, names, enc, tok_sha, shard_sha, did)
    shards, summary = _step_census(lay, [n[:-8] for n in names], did)
    record = _step_record(args, lay, ident, train_names, val_name, tok_sha, shard_sha, shards, did)
    if not did:
        _log(f"nothing to do: {lay.root} is complete and verified")
    return {"layout": lay, "census": summary, "did": did, "record": record}


def _step_shards(args, lay, ident, did, invalidate):
    """1. the parquet shards: built (stdlib, parquet) or downloaded (climbmix); (training names, validation name)."""
    if args.source not in ("stdlib", "parquet"):
        from corpus.download import BASE_URL, climbmix_files, download_all

        files = climbmix_files(args.train_shards)
        before = set(p.name for p in lay.raw.glob("*.parquet")) if lay.raw.exists() else set()
        download_all(files, lay.raw, base_url=args.base_url or BASE_URL, workers=args.workers, log=_log)
        if set(files) - before:
            did.append("download")
        return files[:-1], files[-1]
    from corpus.parquet_corpus import build_parquet_corpus
    from corpus.stdlib_corpus import build_stdlib_corpus

    want = {k: v for k, v in ident.items() if k not in ("source", "vocab_size")}
    man_path = lay.raw / "manifest.json"
    cfg_path = lay.raw / "build.json"
    have, man = _read_json(cfg_path), _read_json(man_path)
    # a shard is reused only when build.json (written last) names these arguments and its SHA256
    shards_ok = (have is not None and have.get("arguments") == want and man is not None
                 and all((lay.raw / n).exists() and sha256_file(lay.raw / n) == have["shards_sha256"].get(n)
                         for n in man["train_shards"] + [man["val_shard"]]))
    if not shards_ok:
        def before_write():  # the earlier build's records go only once the new documents are read and enough
            invalidate()
            cfg_path.unlink(missing_ok=True)

        if args.source == "stdlib":
            man = build_stdlib_corpus(lay.raw, args.shards, args.seed, args.row_group_size, args.max_files, log=_log,
                                      before_write=before_write)
        else:
            man = build_parquet_corpus(lay.raw, args.input, args.text_column, args.source_column, args.shards,
                                       args.seed, args.row_group_size, log=_log, before_write=before_write)
        if man.get("duplicate_texts_dropped"):
            _log(f"dropped {man['duplicate_texts_dropped']:,} exact duplicate texts (each kept once)")
        names = man["train_shards"] + [man["val_shard"]]
        atomic_write_json(cfg_path, {"arguments": want,
                                     "shards_sha256": {n: sha256_file(lay.raw / n) for n in names}})
        did.append("shards")
    return man["train_shards"], man["val_shard"]


def _step_tokenizer(args, lay, train_names, shard_sha, did, invalidate):
    """2. the tokenizer, trained on the training shards only; reused only when its recorded SHA256 verifies.
    (encoding, SHA256 of its file)."""
    from corpus.shards import iter_row_group_texts
    from corpus.tokenizer import TOKENIZER_FILE, load_encoding, save_encoding, train_encoding, verify_tokenizer

    tok_cfg = {"vocab_size": args.vocab_size, "train_shards_sha256": [shard_sha[n] for n in train_names]}
    tok_cfg_path = lay.tokenizer / "trained_on.json"
    reuse = _read_json(tok_cfg_path) == tok_cfg and (lay.tokenizer / TOKENIZER_FILE).exists()
    if reuse:
        try:
            verify_tokenizer(lay.tokenizer, full=True, prepared=False)
        except DataError as e:
            _log(f"retraining the tokenizer: {e}")
            reuse = False
    if not reuse:
        t0 = time.time()

        def texts():
            for n in train_names:
                for _, batch in iter_row_group_texts(lay.raw / n):
                    yield from batch

        enc = train_encoding(texts(), args.vocab_size)  # refuses a vocabulary the corpus cannot fill, before any write
        invalidate()
        tok_cfg_path.unlink(missing_ok=True)
        save_encoding(enc, lay.tokenizer)
        atomic_write_json(tok_cfg_path, tok_cfg)
        _log(f"tokenizer: vocab {enc.n_vocab} trained in {time.time() - t0:.1f}s -> {lay.tokenizer}")
        did.append("tokenizer")
    enc = load_encoding(lay.tokenizer, prepared=False)  # prepared.json is written from it below
    return enc, sha256_file(lay.tokenizer / TOKENIZER_FILE)


def _step_tokens(args, lay, names, enc, tok_sha, shard_sha, did):
    """3. the pre-tokenized shards (a shard's json names its parquet and tokenizer SHA256s)."""
    from console.progress import bar as tqdm
    from corpus.pretokenize import tokenize_shard, verify_shard

    todo = [n for n in names if not verify_shard(lay.raw / n, lay.tokens, tok_sha, shard_sha[n])]
    if todo:
        t0, ntok = time.time(), 0
        for n in tqdm(todo, desc="tokenize", unit="shard"):
            ntok += tokenize_shard(lay.raw / n, lay.tokens, enc, tok_sha, threads=args.threads)
        dt = time.time() - t0
        _log(f"pre-tokenized {len(todo)} shards: {ntok:,} tokens in {dt:.1f}s ({ntok / max(dt, 1e-9):,.0f} tokens/s, {args.threads} threads)")
        did.append("tokens")


def _step_census(lay, stems, did):
    """4. the length census (cheap, derived from the offsets; rewritten only when something changed);
    ({stem: its token shard}, the census summary)."""
    import numpy as np

    from corpus.census import write_census
    from corpus.pretokenize import TokenShard

    shards = {s: TokenShard(lay.tokens, s, verify=False) for s in stems}  # checks offsets/refills
    census_path = lay.census / "census.json"
    summary = _read_json(census_path)
    if did or summary is None or not lay.record.exists():
        train_len = np.concatenate([shards[s].lengths for s in stems[:-1]])
        summary = write_census(lay.census, {"train": train_len, "val": shards[stems[-1]].lengths})
        did.append("census")
    return shards, summary


def _step_record(args, lay, ident, train_names, val_name, tok_sha, shard_sha, shards, did):
    """5. the final verification, then the completion record (prepared.json), written last."""
    from corpus.pretokenize import shard_paths
    from corpus.tokenizer import FILES as TOKENIZER_FILES
    from corpus.verify import file_record

    files = {}
    for s in shards:
        for k, path in shard_paths(lay.tokens, s).items():
            if k != "meta":
                files[f"tokens/{path.name}"] = file_record(path)
    for n in TOKENIZER_FILES:
        files[f"tokenizer/{n}"] = file_record(lay.tokenizer / n)
    old = _read_json(lay.record)
    overlap = old.get("val_rows_in_train") if old else None
    if overlap is None or did:
        overlap = _disjointness(lay, train_names, val_name, args.source)
    record = {"source": args.source, "arguments": ident, "train_shards": train_names, "val_shard": val_name,
              "vocab_size": args.vocab_size, "tokenizer_sha256": tok_sha, "shards_sha256": shard_sha,
              "files": files, "val_rows_in_train": overlap,
              "shards": {s: {"documents": int(len(sh.offsets) - 1), "tokens": int(sh.offsets[-1])}
                         for s, sh in shards.items()}}
    ident_keys = {k: record[k] for k in ("arguments", "shards_sha256", "tokenizer_sha256", "files")}
    record["build_id"] = hashlib.sha256(json.dumps(ident_keys, sort_keys=True).encode()).hexdigest()
    if old != record:
        atomic_write_json(lay.record, record)
    return record


def _disjointness(lay, train_names, val_name, source):
    """Validation rows whose exact text occurs in training. The offline corpus keeps each
    text once, so any overlap there means mixed builds; ClimbMix has a few natural
    duplicates, which are recorded (the confirmation population excludes them)."""
    from corpus.disjoint import val_rows_in_train

    rows = val_rows_in_train([lay.raw / n for n in train_names], lay.raw / val_name)
    if rows and source in ("stdlib", "parquet"):
        raise DataError(f"{lay.raw / val_name}: {len(rows)} validation documents also occur in the training "
                        f"shards (first at row {rows[0]}): mixed builds; delete {lay.raw} and rerun prepare.py")
    if rows:
        _log(f"note: {len(rows)} validation documents have an exact duplicate in the training shards")
    return rows


def print_summary(summary):
    print("\ncorpus summary (lengths include BOS)")
    print(f"{'split':<6} {'documents':>10} {'tokens':>12} {'longest':>8} {'median':>7} {'> 2049':>7} {'share':>7}")
    for split in ("train", "val"):
        s = summary[split]
        print(f"{split:<6} {s['documents']:>10,} {s['tokens']:>12,} {s['longest']:>8,} {s['median']:>7.0f} "
              f"{s['over_row_capacity']:>7,} {100 * s['share_over_row_capacity']:>6.2f}%")


def main(argv=None):
    skip_final_collections()  # the interpreter's last scans of every object skipped at exit
    args = parse_args(argv)

    try:
        out = prepare(args)
    except (DataError, FolderLocked, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: {os_error_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # its files are written whole, and a rerun skips what is finished
        print(interrupted_line("python prepare.py", argv, "what was finished is kept"), file=sys.stderr)
        return 130
    print_summary(out["census"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
