"""A corpus read where it lives: every document's token length, counted once, with its label, file and row.

    from corpus.readers import corpus_lengths
    res = corpus_lengths(["data/*.parquet"], tokenizer="tok.json", cache_dir="runs/x/.lengths")
    res.lengths, res.labels, res.doc_file, res.doc_row, res.files, res.provenance, res.cached, res.message

    api.py        corpus_lengths(): sources -> units -> cache or count -> one CorpusLengths
    sources.py    paths, folders and globs in order, each a Source with its format (detected or named)
    settings.py   Settings (tokenizer, BOS, columns, separator), Unit (one piece of work), Batch (a reader's output)
    encoders.py   the tokenizer: a tokenizers JSON, a tiktoken encoding, or this project's; its identity
    tables.py     parquet, Arrow and datasets folders: token lists from their offsets, or text
    jsonl.py      JSON lines, plain, .gz or .zst (the Dolma layout)
    megatron.py   Megatron-Core .bin/.idx, from the index alone
    flat.py       flat token files (nanoGPT's .bin, OLMo-core's .npy) cut at a separator
    units.py      one unit counted: the BOS policy, labels as codes
    parallel.py   the local runner (this process or a pool of spawned ones) and the progress bar
    cache.py      the cache folder: SHA256s, per-unit results for resuming, the whole result
    result.py     CorpusLengths, assembled from the units' results

Ray Data runs the same units in fanout/corpus_data.py (nothing here imports Ray).
"""
from corpus.readers.api import corpus_lengths
from corpus.readers.encoders import TokenizerSpec, tokenizer_spec
from corpus.readers.result import CorpusLengths
from corpus.readers.settings import BOS_POLICIES
from corpus.readers.sources import FORMATS

__all__ = ["BOS_POLICIES", "FORMATS", "CorpusLengths", "TokenizerSpec", "corpus_lengths", "tokenizer_spec"]
