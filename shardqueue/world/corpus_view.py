"""The prepared corpus as a queue run sees it (World): the training stream with its source labels, the
control and selection sets (domains.py) built from the validation split, and the SHA256 keys of the
validation texts they touch, which the pool (pool.py) excludes by exact text hash."""
import copy
import functools
import hashlib
import json

import numpy as np
import pyarrow.parquet as pq

from corpus.layout import Layout, default_data_dir
from corpus.shards import iter_row_group_texts
from corpus.tokenizer import bos_id, load_encoding, load_token_bytes
from errors import DataError
from loaders.stream import open_split
from shardqueue.world.domains import build_sets, text_sha256, used_documents
from shardqueue.world.rotation import source_labels


def sha_key(hex_digest):
    """A SHA256 hex digest's first 8 bytes as an integer: the key for exact-text exclusion
    (a chance collision between two of a few million texts has probability about 1e-7)."""
    return int(hex_digest[:16], 16)


def check_vocab(cfg) -> int:
    """The prepared corpus's vocabulary size, which the model's must equal (as train.py requires): a smaller
    model cannot embed the corpus's tokens, and the harmful source's cipher permutes the corpus's vocabulary,
    whose ids a model or a byte table of another size would not hold. DataError naming both otherwise."""
    lay = Layout(cfg.data_dir or str(default_data_dir()), cfg.source)
    have = lay.prepared()["vocab_size"]
    if cfg.vocab != have:
        raise DataError(f"{lay.record}: the corpus's tokenizer has a vocabulary of {have:,}, the model's config "
                        f"{cfg.vocab:,}: give the config vocab={have} (calibrate: --set vocab={have}), or prepare the "
                        f"corpus with --vocab-size {cfg.vocab}")
    return have


class World:
    """stream (train [+ harmful]), labels, sets {"control", "selection"}, token_bytes, val, bos, device; vocab:
    the prepared tokenizer's vocabulary size (the model's, check_vocab)."""

    def __init__(self, cfg, device="cpu", per_domain=16, domains=None):
        self.cfg, self.device = cfg, device
        self.data_dir = cfg.data_dir or str(default_data_dir())
        lay = Layout(self.data_dir, cfg.source)
        rec = lay.prepared()
        self.vocab = check_vocab(cfg)
        self.enc = load_encoding(lay.tokenizer)
        self.bos = bos_id(self.enc)
        self.token_bytes = load_token_bytes(lay.tokenizer)
        self.train = open_split(self.data_dir, cfg.source, "train")
        self.val = open_split(self.data_dir, cfg.source, "val")
        self.labels = list(_train_labels(self.data_dir, cfg.source, rec["build_id"]))
        # domains: a domains file's rules (domains.load_domains); None: the built-in domains
        sets, excluded = _held_out_sets(self.data_dir, cfg.source, rec["build_id"], cfg.context, per_domain,
                                        json.dumps(domains, sort_keys=True))
        self.sets, self.excluded_sha = copy.deepcopy(sets), set(excluded)
        self._train_sha = None
        self.lay, self.rec = lay, rec
        self.stream = self.train

    def train_text_sha(self):
        """Per training document, the first 8 bytes of its text SHA256 as uint64 (8 bytes a document
        instead of a 64-character string), read a row group at a time."""
        if self._train_sha is None:
            out = []
            for n in self.rec["train_shards"]:
                for _, texts in iter_row_group_texts(self.lay.raw / n):
                    out.append(np.array([sha_key(text_sha256(t)) for t in texts], dtype=np.uint64))
            self._train_sha = np.concatenate(out) if out else np.zeros(0, np.uint64)
        return self._train_sha

    def set_hashes(self):
        """SHA256 of every control and selection window text, per domain (for the manifest)."""
        return {part: {d: hashlib.sha256("".join(s["sha256"]).encode()).hexdigest() for d, s in sets.items()}
                for part, sets in self.sets.items()}


# Per process, by the prepared corpus's build id: a queue run, its re-execution and a study's arms open the same
# world many times, and the held-out sets parse every control document for its docstrings and comments.
@functools.lru_cache(maxsize=4)
def _held_out_sets(data_dir, source, build_id, context, per_domain, domains_json):
    """(control and selection sets, SHA256s of the validation texts they touch) of one prepared corpus."""
    lay = Layout(data_dir, source)
    rec = lay.prepared()
    enc = load_encoding(lay.tokenizer)
    val_texts = pq.read_table(lay.raw / rec["val_shard"], columns=["text"]).column("text").to_pylist()
    sets = build_sets(val_texts, source_labels(lay, "val"), enc, bos_id(enc), context, per_domain,
                      spec=json.loads(domains_json))
    excluded = {text_sha256(val_texts[i]) for i in used_documents(sets)}
    excluded |= {h for part in sets.values() for s in part.values() for h in s["sha256"]}
    return sets, frozenset(excluded)


@functools.lru_cache(maxsize=4)
def _train_labels(data_dir, source, build_id):
    """The training documents' source labels (a corpus without a label column: each document's register)."""
    return tuple(source_labels(Layout(data_dir, source), "train"))
