"""What a queue run works on: the training stream with its source labels, the control and
selection sets, and the candidate pool cut into document-aligned shards.

The pool excludes, by exact text hash, every training document identical to a validation
document that a control or selection window came from, and the documents used for
calibration. Documents longer than half a shard are left out so shards have ordinary,
comparable sizes. A reserve of further calibration-source shards, never trained in
calibration, is what recovery checks and clean branch checks train on. The harmful
source (harmful.py) is built from training documents that are then never used as
ordinary pool documents.
"""
import copy
import functools
import hashlib
import json
from collections import Counter

import numpy as np
import pyarrow.parquet as pq

from corpus.errors import DataError
from corpus.layout import Layout, default_data_dir
from corpus.shards import iter_row_group_texts
from corpus.tokenizer import bos_id, load_encoding, load_token_bytes
from loaders.stream import open_split
from shardqueue.world.damaged_pool import add_damaged_shards
from shardqueue.world.domains import (
    OVERLAP_SAMPLE_TOKENS,
    build_sets,
    sampled_overlap,
    text_sha256,
    used_documents,
)
from shardqueue.world.harmful import LABEL, with_harmful_copies
from shardqueue.world.rotation import build_rotation, shard_docs, source_labels


def sha_key(hex_digest):
    """A SHA256 hex digest's first 8 bytes as an integer: the key for exact-text exclusion
    (a chance collision between two of a few million texts has probability about 1e-7)."""
    return int(hex_digest[:16], 16)


class World:
    """stream (train [+ harmful]), labels, sets {"control", "selection"}, token_bytes, val, bos, device."""

    def __init__(self, cfg, device="cpu", per_domain=16, domains=None):
        self.cfg, self.device = cfg, device
        self.data_dir = cfg.data_dir or str(default_data_dir())
        lay = Layout(self.data_dir, cfg.source)
        rec = lay.prepared()
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


def candidates_for_budget(budget_targets, shard_tokens, spare=3):
    """Candidate pool shards for a run whose budget is `budget_targets` accepted targets.

    A shard holds at least shard_tokens tokens, so ceil(budget / shard_tokens) accepted shards
    reach the budget; `spare` more cover the ordinary shards a run may lose to quarantine (two
    false rejections each, at a calibrated rate under 5%) or leave deferred at its end. Recovery
    shards come from the calibration source's reserve, not from the candidates. Planted
    (harmful, prose) and late shards come on top of the candidates.
    """
    return -(-int(budget_targets) // int(shard_tokens)) + spare


def build_pool(world, shard_tokens, seed, n_calibration, n_candidates, n_decay, n_harmful, n_prose=0,
               calibration_source=None, n_late=0, late_rotation=2, n_damaged=0, n_reserve=0):
    """Calibration shards (one homogeneous source), candidate pool shards, decay reserve, harmful shards.

    Returns the pool manifest dict (not yet frozen). Harmful shards (prefix h) are made of
    remapped copies (harmful.py) of training documents that are removed from the ordinary pool.
    `n_reserve` more shards of the calibration source (pool "reserve") are never trained in stage
    A: the clean shards that test a flagged shard's recovery and run the clean branch check.
    """
    train, labels = world.train, world.labels
    sha = world.train_text_sha()
    hit = np.isin(sha, np.array(sorted(sha_key(h) for h in world.excluded_sha), dtype=np.uint64))
    excluded = np.flatnonzero(hit)
    ok = ~hit & (np.asarray(train.lengths) <= shard_tokens // 2)
    src = calibration_source or Counter(labels).most_common(1)[0][0]
    rng = np.random.default_rng(seed)
    perm = rng.permutation(train.n)
    need_cal = n_calibration * shard_tokens * 1.25
    cal, tok = [], 0
    for i in perm.tolist():
        if ok[i] and labels[i] == src and tok < need_cal:
            cal.append(i)
            tok += int(train.lengths[i])
    if tok < need_cal:
        raise DataError(f"source {src!r} has too few documents for {n_calibration} calibration shards")
    used = set(cal)

    # a permutation of its own: walking the calibration's would start where calibration took
    # its source's documents and give the pool only the other sources
    perm2 = np.random.default_rng(seed + 1).permutation(train.n)

    def take(n_tokens, pred=lambda i: True):
        got, t = [], 0
        for i in perm2.tolist():
            if t >= n_tokens:
                break
            if ok[i] and i not in used and pred(i):
                got.append(i)
                used.add(i)
                t += int(train.lengths[i])
        return sorted(got)

    harm_src = take(n_harmful * shard_tokens * 1.25) if n_harmful else []
    # a source in another register: a shard of reference prose only (a "new domain" for a model fed
    # mostly code; the proposal warns that such a shard may raise control losses before it helps)
    prose = take(n_prose * shard_tokens, lambda i: labels[i] == "prose") if n_prose else []
    cand = take((n_candidates + n_decay) * shard_tokens * 1.25)
    # a new source that may enter only at rotation `late_rotation` (after its input checks and its
    # own calibration shards): documents of the pool's kind, labelled `late` so they stay traceable
    late = take(2 * n_late * shard_tokens * 1.25) if n_late else []
    # the reserve, taken after everything above so that it changes none of their documents; a shard
    # holds under 1.5 x shard_tokens (documents are at most half a shard), so 1.5 x n makes n shards
    reserve = take(n_reserve * shard_tokens * 1.5, lambda i: labels[i] == src) if n_reserve else []
    # fresh documents for the damaged shards (damaged_pool.py): mixed kinds and doses of realistic damage
    dmg_src = [int(i) for i in perm2 if ok[i] and i not in used] if n_damaged else []
    stream, lab, harm = with_harmful_copies(train, labels, harm_src, seed + 7, world.cfg.vocab)
    damage, dshards = None, []
    if n_damaged:
        stream, lab, damage, dshards = add_damaged_shards(world, stream, lab, dmg_src, n_damaged, shard_tokens,
                                                          seed + 13)
        used.update(i for s in damage["shards"] for i in s["clean"] + s["damaged"])
    world.stream, world.labels_all = stream, lab
    calm = build_rotation(stream, lab, shard_tokens, seed, "calibration", docs=sorted(cal), prefix="c")
    calm["order"] = [s["id"] for s in calm["shards"]]  # stream order: calibration is one fixed sequence
    if len(calm["shards"]) < n_calibration:
        raise DataError(f"source {src!r}: only {len(calm['shards'])} calibration shards, {n_calibration} needed")
    resm = build_rotation(stream, lab, shard_tokens, seed, "reserve", docs=reserve, prefix="cr")
    if len(resm["shards"]) < n_reserve:
        raise DataError(f"source {src!r}: only {len(resm['shards'])} reserve shards, {n_reserve} needed")
    poolm = build_rotation(stream, lab, shard_tokens, seed, "pool", docs=cand, prefix="s")
    if len(poolm["shards"]) < n_candidates + n_decay:
        raise DataError(f"only {len(poolm['shards'])} pool shards, {n_candidates + n_decay} needed")
    keep = set(poolm["order"][: n_candidates + n_decay])
    poolm["shards"] = [s for s in poolm["shards"] if s["id"] in keep]
    order = [s for s in poolm["order"] if s in keep]
    decay, order = order[:n_decay], order[n_decay:]
    shards = calm["shards"][:n_calibration] + resm["shards"][:n_reserve] + poolm["shards"]
    late_rec = None
    if late:
        llab = list(lab)
        for i in late:
            llab[i] = "late"
        lm = build_rotation(stream, llab, shard_tokens, seed, "late", docs=late, prefix="n")
        ids = [x["id"] for x in lm["shards"]]
        if len(ids) < 2 * n_late:
            raise DataError(f"only {len(ids)} shards for the late source, {2 * n_late} needed")
        shards += lm["shards"][: 2 * n_late]
        late_rec = [{"label": "late", "enter_rotation": late_rotation, "calibration": ids[:n_late],
                     "shards": ids[n_late: 2 * n_late]}]
    if prose:
        pm = build_rotation(stream, lab, shard_tokens, seed, "prose", docs=prose, prefix="r")
        shards += pm["shards"]
        order.insert(min(len(order), 2), pm["shards"][0]["id"])
    if n_harmful:
        hm = build_rotation(stream, lab, shard_tokens, seed, "harmful", docs=harm, prefix="h")
        shards += hm["shards"][:n_harmful]
        hids = [s["id"] for s in hm["shards"][:n_harmful]]
        # harmful shards join the pool order at seeded positions inside the first rotation's reach
        pos = sorted(np.random.default_rng(seed + 11).choice(range(1, max(2, min(len(order), 6))), size=len(hids),
                                                            replace=len(hids) > 4).tolist())
        for p, h in zip(pos[::-1], hids[::-1]):
            order.insert(p, h)
    if dshards:
        shards += dshards
        # spread evenly over the whole order (seeded), so plain training meets them at one density throughout
        pos = sorted(np.random.default_rng(seed + 17).choice(len(order) + len(dshards), size=len(dshards),
                                                             replace=False).tolist())
        rest = iter(order)
        dids = iter(s["id"] for s in dshards)
        order = [next(dids) if i in set(pos) else next(rest) for i in range(len(order) + len(dshards))]
    overlap, read, total = sampled_overlap(world.sets, stream, [shard_docs(s) for s in shards])
    return {"name": "pool", "version": 1, "seed": seed, "shard_tokens": shard_tokens, "stream": stream.name,
            "calibration_source": src, "calibration": calm["order"][:n_calibration], "order": order, "decay": decay,
            "reserve": [x["id"] for x in resm["shards"][:n_reserve]],
            "late_sources": late_rec or [],
            "shards": shards, "harmful": {"label": LABEL, "source_documents": harm_src, "copies": harm},
            "damage": damage or {},
            "excluded_by_text_hash": len(excluded), "sets_sha256": world.set_hashes(),
            "overlap_13gram": overlap, "overlap_13gram_sample": {"tokens_read": read, "tokens": total,
                                                                 "per_shard_cap": OVERLAP_SAMPLE_TOKENS}}
