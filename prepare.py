#!/usr/bin/env python3
"""Prepare a corpus: shards -> tokenizer -> pre-tokenized shards -> length census.

  python prepare.py --source stdlib            # offline corpus from this Python's stdlib
  python prepare.py --source climbmix -n 10    # ClimbMix shards 0-9 + the pinned val shard

Everything lands under DATA_DIR/SOURCE/ (DATA_DIR: --data-dir, else $PACKAUDIT_DATA,
else ~/.cache/packing-audit). Each step is skipped when its outputs already verify, so a
second run on a complete data root does no work and says so.
"""
import argparse
import json
import sys
import time

from corpus.atomic import atomic_write_json, sha256_file
from corpus.errors import DataError
from corpus.layout import ENV_VAR, Layout, default_data_dir


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", choices=["stdlib", "climbmix"], default="stdlib",
                    help="stdlib: offline corpus from the running Python (default); climbmix: download the real corpus")
    ap.add_argument("--data-dir", default=None, help=f"data root (default: ${ENV_VAR} or ~/.cache/packing-audit)")
    ap.add_argument("-n", "--train-shards", type=int, default=10,
                    help="climbmix: number of training shards to fetch, from shard 0 (default 10, the paper's corpus)")
    ap.add_argument("--base-url", default=None, help="climbmix: alternative base URL (mirror, or a local test server)")
    ap.add_argument("--workers", type=int, default=4, help="climbmix: parallel downloads (default 4)")
    ap.add_argument("--shards", type=int, default=8,
                    help="stdlib: number of parquet shards to write, the last one is validation (default 8)")
    ap.add_argument("--seed", type=int, default=20261008, help="stdlib: shuffle seed (default 20261008)")
    ap.add_argument("--row-group-size", type=int, default=1000,
                    help="stdlib: documents per parquet row group (default 1000; not a multiple of 128 on purpose)")
    ap.add_argument("--max-files", type=int, default=None, help="stdlib: use only the first N source files (tests)")
    ap.add_argument("--vocab-size", type=int, default=8192, help="tokenizer vocabulary incl. 4 special tokens (default 8192)")
    ap.add_argument("--threads", type=int, default=2, help="tiktoken encoding threads (default 2)")
    return ap.parse_args(argv)


def _log(msg):
    print(msg, flush=True)


def prepare(args) -> dict:
    from tqdm import tqdm

    from corpus.census import write_census
    from corpus.pretokenize import TokenShard, tokenize_shard, verify_shard
    from corpus.shards import iter_row_group_texts
    from corpus.tokenizer import load_encoding, save_encoding, train_encoding

    data_dir = args.data_dir or default_data_dir()
    lay = Layout(data_dir, args.source)
    _log(f"data root: {lay.root}")
    did = []

    # 1. shards
    if args.source == "stdlib":
        from corpus.stdlib_corpus import build_stdlib_corpus

        want = {"seed": args.seed, "shards": args.shards, "row_group_size": args.row_group_size,
                "max_files": args.max_files, "python": sys.version}
        man_path = lay.raw / "manifest.json"
        cfg_path = lay.raw / "build.json"
        have = json.loads(cfg_path.read_text()) if cfg_path.exists() else None
        shards_ok = have == want and man_path.exists() and all(
            (lay.raw / n).exists() for n in json.loads(man_path.read_text())["train_shards"])
        if not shards_ok:
            man = build_stdlib_corpus(lay.raw, args.shards, args.seed, args.row_group_size, args.max_files, log=_log)
            atomic_write_json(cfg_path, want)
            did.append("shards")
        else:
            man = json.loads(man_path.read_text())
        train_names, val_name = man["train_shards"], man["val_shard"]
    else:
        from corpus.download import BASE_URL, climbmix_files, download_all

        files = climbmix_files(args.train_shards)
        before = set(p.name for p in lay.raw.glob("*.parquet")) if lay.raw.exists() else set()
        download_all(files, lay.raw, base_url=args.base_url or BASE_URL, workers=args.workers, log=_log)
        if set(files) - before:
            did.append("download")
        train_names, val_name = files[:-1], files[-1]

    shard_sha = {n: sha256_file(lay.raw / n) for n in train_names + [val_name]}

    # 2. tokenizer, trained on the training shards only
    tok_cfg = {"vocab_size": args.vocab_size, "train_shards_sha256": [shard_sha[n] for n in train_names]}
    tok_cfg_path = lay.tokenizer / "trained_on.json"
    if not (tok_cfg_path.exists() and json.loads(tok_cfg_path.read_text()) == tok_cfg
            and (lay.tokenizer / "tokenizer.pkl").exists()):
        t0 = time.time()

        def texts():
            for n in train_names:
                for _, batch in iter_row_group_texts(lay.raw / n):
                    yield from batch

        enc = train_encoding(texts(), args.vocab_size)
        save_encoding(enc, lay.tokenizer)
        atomic_write_json(tok_cfg_path, tok_cfg)
        _log(f"tokenizer: vocab {enc.n_vocab} trained in {time.time() - t0:.1f}s -> {lay.tokenizer}")
        did.append("tokenizer")
    enc = load_encoding(lay.tokenizer)
    tok_sha = sha256_file(lay.tokenizer / "tokenizer.pkl")

    # 3. pre-tokenized shards
    names = train_names + [val_name]
    todo = [n for n in names if not verify_shard(lay.raw / n, lay.tokens, tok_sha, shard_sha[n])]
    if todo:
        t0, ntok = time.time(), 0
        for n in tqdm(todo, desc="tokenize", unit="shard"):
            ntok += tokenize_shard(lay.raw / n, lay.tokens, enc, tok_sha, threads=args.threads)
        dt = time.time() - t0
        _log(f"pre-tokenized {len(todo)} shards: {ntok:,} tokens in {dt:.1f}s ({ntok / max(dt, 1e-9):,.0f} tokens/s, {args.threads} threads)")
        did.append("tokens")

    # 4. census (cheap, derived from the offsets; rewritten only when something changed)
    import numpy as np

    census_path = lay.census / "census.json"
    if did or not census_path.exists():
        train_len = np.concatenate([TokenShard(lay.tokens, n[:-8]).lengths for n in train_names])
        val_len = TokenShard(lay.tokens, val_name[:-8]).lengths
        summary = write_census(lay.census, {"train": train_len, "val": val_len})
        did.append("census")
    else:
        summary = json.loads(census_path.read_text())

    record = {"source": args.source, "train_shards": train_names, "val_shard": val_name,
              "vocab_size": args.vocab_size, "tokenizer_sha256": tok_sha, "shards_sha256": shard_sha}
    if not lay.record.exists() or json.loads(lay.record.read_text()) != record:
        atomic_write_json(lay.record, record)
    if not did:
        _log(f"nothing to do: {lay.root} is complete and verified")
    return {"layout": lay, "census": summary, "did": did}


def print_summary(summary):
    print("\ncorpus summary (lengths include BOS)")
    print(f"{'split':<6} {'documents':>10} {'tokens':>12} {'longest':>8} {'median':>7} {'> 2049':>7} {'share':>7}")
    for split in ("train", "val"):
        s = summary[split]
        print(f"{split:<6} {s['documents']:>10,} {s['tokens']:>12,} {s['longest']:>8,} {s['median']:>7.0f} "
              f"{s['over_row_capacity']:>7,} {100 * s['share_over_row_capacity']:>6.2f}%")


def main(argv=None):
    args = parse_args(argv)
    try:
        out = prepare(args)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print_summary(out["census"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
