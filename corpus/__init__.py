"""Corpus preparation: the offline corpus, ClimbMix download, your own parquet, tokenizer, token files,
census. prepare.py is the command line; each step lives in its own module so tests and later stages
import one thing at a time.

    layout.py          where prepared data lives: DATA_DIR/SOURCE/{raw,tokenizer,tokens,census}/ + prepared.json
    atomic.py          atomic writes: temp file in the same folder, fsync, rename
    runlock.py         one process per output folder (an advisory lock)
    shards.py          reading parquet shards with the ClimbMix schema, one-line errors on bad input
    stdlib_corpus.py   the offline corpus: this Python's standard library, written with the ClimbMix schema
    download.py        the ClimbMix download: streamed, verified, renamed into place
    parquet_corpus.py  a researcher's own parquet documents as a corpus
    tokenizer.py       the BPE tokenizer as the supplied baseline trains it
    pretokenize.py     each shard tokenized once into token files the loaders memory-map
    census.py          every document's length, and the corpus histogram
    disjoint.py        train/validation disjointness by exact text
    verify.py          prepared files verified before use (sizes always, SHA256 once per process)
    bench.py           pre-tokenization throughput, threaded against single-threaded
    readers/           a corpus where it lives (datasets, parquet, arrow, jsonl, Megatron, flat tokens): every
                       document's length, tokenized your way, cached (its own map in readers/__init__.py)
"""
