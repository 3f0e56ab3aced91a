"""Pool shards with realistic, unplanted damage at natural doses (damage.py), for the queue study.

The proposal "Can a model help choose its next training data?" asks whether domain losses
tell individual shards apart. A pool of clean shards plus one cipher shard is an easy,
planted case; real pools carry several kinds of damage, each at any share of a shard.
Here each damaged shard is built from fresh training documents (never used elsewhere in
the pool): documents are added in a seeded order until the shard holds `shard_tokens`
tokens, and a document is damaged (its text through DAMAGES[kind], then tokenized by the
corpus tokenizer, BOS first) while the damaged tokens are below dose x shard_tokens. The
realised share of damaged tokens is recorded per shard. Damaged documents are appended to
the stream with the kind as their source label, so every shard's source mix (and the
decision dataset) names the kind. Kinds cycle over the shards; doses are drawn uniformly
from [0.05, 1] by a seeded RNG. Everything is rebuilt from pool.json's record and checked.
"""
import random

import numpy as np
import pyarrow.parquet as pq

from errors import DataError
from loaders.stream import DocumentStream
from shardqueue.world.damage import DAMAGES
from shardqueue.world.rotation import shard_record


def append_documents(stream, arrays, name):
    """The stream with the token arrays appended as new documents; (stream, new indices)."""
    if not arrays:
        return stream, []
    arr = np.concatenate(arrays)
    lens = np.array([len(a) for a in arrays], dtype=np.int64)
    old, which, starts = stream.tokens
    new = DocumentStream(np.concatenate([stream.lengths, lens]), np.append(stream.refills, stream.n + len(arrays)),
                         (list(old) + [arr], np.concatenate([which, np.full(len(arrays), len(old))]),
                          np.concatenate([starts, np.concatenate([[0], np.cumsum(lens)[:-1]])])),
                         bos=stream.bos, name=name)
    return new, list(range(stream.n, stream.n + len(arrays)))


def damaged_tokens(text, kind, seed, doc, enc, bos, cap):
    """One document's damaged token ids (BOS first), cut to `cap` tokens like an over-long capture."""
    rng = random.Random(f"{seed}/{kind}/{doc}")
    ids = [bos] + enc.encode_ordinary(DAMAGES[kind](text, rng))
    return np.asarray(ids[:cap], dtype=np.int64)


def plan_damage(source_docs, lengths, texts, n_shards, shard_tokens, seed, enc, bos):
    """Choose each damaged shard's documents, kind and dose. Returns (spec, token arrays of the copies)."""
    kinds = sorted(DAMAGES)
    rng = np.random.default_rng(seed)
    doses = rng.uniform(0.05, 1.0, size=n_shards).round(3).tolist()
    docs = list(source_docs)
    shards, arrays, k = [], [], 0
    for j in range(n_shards):
        kind, dose = kinds[j % len(kinds)], doses[j]
        clean, dmg, total, bad = [], [], 0, 0
        while total < shard_tokens:
            if k >= len(docs):
                raise DataError(f"too few documents for {n_shards} damaged shards")
            i = docs[k]
            k += 1
            if bad < dose * shard_tokens:
                t = damaged_tokens(texts[i], kind, seed, i, enc, bos, shard_tokens // 2)
                if len(t) < 2:
                    continue
                dmg.append(i)
                arrays.append(t)
                bad += len(t)
                total += len(t)
            else:
                clean.append(i)
                total += int(lengths[i])
        shards.append({"kind": kind, "dose": dose, "clean": clean, "damaged": dmg, "damaged_tokens": bad,
                       "tokens": total, "share": bad / total})
    return {"seed": seed, "kinds": kinds, "shards": shards}, arrays


def rebuild(stream, labels, spec, texts, enc, bos, shard_tokens):
    """Append the damaged copies of spec to the stream; (stream, labels, copies per shard)."""
    arrays, lab, per = [], list(labels), []
    for s in spec["shards"]:
        got = [damaged_tokens(texts[i], s["kind"], spec["seed"], i, enc, bos, shard_tokens // 2) for i in s["damaged"]]
        per.append(len(got))
        arrays += got
    new, idx = append_documents(stream, arrays, f"{stream.name}+damaged{len(arrays)}")
    kinds = [s["kind"] for s, n in zip(spec["shards"], per) for _ in range(n)]
    lab += kinds
    out, a = [], 0
    for n in per:
        out.append(idx[a:a + n])
        a += n
    return new, lab, out


def train_texts(world):
    """Texts of the training documents in stream order."""
    out = []
    for n in world.rec["train_shards"]:
        out += pq.read_table(world.lay.raw / n, columns=["text"]).column("text").to_pylist()
    return out


def add_damaged_shards(world, stream, labels, source_docs, n_shards, shard_tokens, seed):
    """(stream, labels, spec, shard manifests) with n_shards damaged shards (ids d0000...)."""
    texts = train_texts(world)
    spec, _ = plan_damage(source_docs, world.train.lengths, texts, n_shards, shard_tokens, seed, world.enc, world.bos)
    stream, labels, copies = rebuild(stream, labels, spec, texts, world.enc, world.bos, shard_tokens)
    manifests = []
    for j, (s, c) in enumerate(zip(spec["shards"], copies)):
        s["copies"] = c
        sh = shard_record(stream, labels, sorted(s["clean"]) + c, f"d{j:04d}")
        s["id"] = sh["id"]
        manifests.append(sh)
    return stream, labels, spec, manifests


def reopen(world, pool):
    """Rebuild the damaged copies recorded in pool.json onto world.stream; checked against the record."""
    spec = pool.get("damage")
    if not spec or not spec.get("shards"):
        return
    texts = train_texts(world)
    stream, labels, copies = rebuild(world.stream, world.labels_all, spec, texts, world.enc, world.bos,
                                     pool["shard_tokens"])
    if [list(c) for c in copies] != [s["copies"] for s in spec["shards"]]:
        raise DataError("pool.json: the damaged shards do not rebuild identically")
    world.stream, world.labels_all = stream, labels
