#!/usr/bin/env python3
"""Benchmark: pre-tokenization throughput, threaded batch encoding vs single-threaded.

Encodes the texts of a prepared corpus's shards (BOS prepended, as prepare.py does) with
tiktoken's batch encoder at --threads and one document at a time on one thread, and
prints tokens/s of both and their ratio.

  python corpus/bench.py [--data-dir DIR] [--threads 2] [--shards 2]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from corpus.layout import Layout, default_data_dir  # noqa: E402
from corpus.shards import iter_row_group_texts  # noqa: E402
from corpus.tokenizer import load_encoding  # noqa: E402
from errors import DataError  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--source", default="stdlib")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--shards", type=int, default=2, help="training shards to encode")
    a = ap.parse_args(argv)
    try:
        for flag, v in (("--threads", a.threads), ("--shards", a.shards)):
            if v < 1:
                raise DataError(f"{flag} {v}: must be at least 1")
        lay = Layout(a.data_dir or default_data_dir(), a.source)
        enc = load_encoding(lay.tokenizer)
        names = lay.shard_names("train")[: a.shards]
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    texts = [t for n in names for _, b in iter_row_group_texts(lay.raw / f"{n}.parquet") for t in b]
    t = time.perf_counter()
    n_fast = sum(len(x) + 1 for x in enc.encode_ordinary_batch(texts, num_threads=a.threads))
    fast = time.perf_counter() - t
    t = time.perf_counter()
    n_slow = sum(len(enc.encode_ordinary(x)) + 1 for x in texts)
    slow = time.perf_counter() - t
    assert n_fast == n_slow
    print(f"{len(texts):,} documents, {n_fast:,} tokens")
    print(f"batch, {a.threads} threads : {n_fast / fast:>12,.0f} tokens/s")
    print(f"one by one, 1 thread: {n_slow / slow:>12,.0f} tokens/s")
    print(f"ratio: {slow / fast:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
