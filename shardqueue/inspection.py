"""Inspection of a quarantined shard: what might explain two rejections.

Writes inspection/<shard>.md and .json with: source mix, script/language mix and register
mix (domains.register_of per document), exact duplicates within the shard and
against the rest of the pool, near duplicates (documents sharing over half their 13-token
grams with another), overlap with the control and selection sets, boilerplate (share of
lines that occur in more than one document of the shard), and token statistics against
the pool: unigram KL divergence, share of rare tokens, and the share of token bigrams
never seen in the pool (text in a normal order reuses known bigrams; shuffled or
corrupted text does not). A cause is "found" when a statistic is far outside what
ordinary pool shards show (thresholds below, fixed in code before any inspection).
"""
import json
from collections import Counter
from pathlib import Path

import numpy as np

from corpus.atomic import atomic_write_json, atomic_write_text
from shardqueue.domains import ngram_hashes, register_of
from shardqueue.rotation import shard_docs

LIMITS = {"exact_duplicate_share": 0.2, "near_duplicate_share": 0.3, "set_overlap_13gram": 0.2, "boilerplate": 0.5,
          "unseen_bigram_ratio": 3.0, "unigram_kl": 1.0}


def _bigrams(t):
    t = np.asarray(t, dtype=np.int64)
    return t[:-1] * 65536 + t[1:]


def token_stats(stream, docs, pool_docs):
    toks = np.concatenate([stream.doc_tokens(i) for i in docs])
    pool = np.concatenate([stream.doc_tokens(i) for i in pool_docs])
    V = int(max(toks.max(), pool.max())) + 1
    p = np.bincount(toks, minlength=V) + 0.5
    q = np.bincount(pool, minlength=V) + 0.5
    p, q = p / p.sum(), q / q.sum()
    pool_counts = np.bincount(pool, minlength=V)
    rare = float(np.mean(pool_counts[toks] < 3))
    seen = np.unique(np.concatenate([_bigrams(stream.doc_tokens(i)) for i in pool_docs]))
    unseen = float(np.mean(~np.isin(_bigrams(toks), seen)))
    return {"unigram_kl": float(np.sum(p * np.log(p / q))), "rare_token_share": rare, "unseen_bigrams": unseen}


def inspect_shard(runner, sid):
    """Write the report; returns (relative path of the .md, cause_found)."""
    stream, shards = runner.world.stream, runner.shards
    sh = shards[sid]
    docs = shard_docs(sh)
    others = [s for s in runner.pool["order"] if s != sid and not shards[s]["sources"].get(runner.pool["harmful"]["label"])]
    pool_docs = [i for s in others for i in shard_docs(shards[s])]
    import hashlib

    def h(i):
        return hashlib.sha256(np.asarray(stream.doc_tokens(i), dtype=np.int64).tobytes()).hexdigest()

    hs = [h(i) for i in docs]
    pool_h = {h(i) for i in pool_docs}
    exact_in = 1 - len(set(hs)) / len(hs)
    exact_pool = float(np.mean([x in pool_h for x in hs]))
    grams = [set(ngram_hashes(stream.doc_tokens(i)).tolist()) for i in docs]
    pool_grams = set(np.concatenate([ngram_hashes(stream.doc_tokens(i)) for i in pool_docs]).tolist())
    near = float(np.mean([len(g & pool_grams) > 0.5 * len(g) if g else False for g in grams]))
    set_grams = {d: set(np.concatenate([ngram_hashes(r[r >= 0]) for r in s["y"]]).tolist())
                 for part in runner.world.sets.values() for d, s in part.items()}
    allg = set().union(*grams) if grams else set()
    overlap = {d: (len(g & allg) / len(g) if g else 0.0) for d, g in set_grams.items()}
    texts = [runner.world.enc.decode(list(stream.doc_tokens(i)[1:])) for i in docs]
    lines = [Counter({ln.strip() for ln in t.splitlines() if len(ln.strip()) > 8}) for t in texts]
    tot = Counter()
    for c in lines:
        tot.update(c)
    n_lines = sum(sum(c.values()) for c in lines)
    boiler = sum(v for c in lines for ln, v in c.items() if tot[ln] > 1) / max(n_lines, 1)
    ts = token_stats(stream, docs, pool_docs)
    ref = [token_stats(stream, shard_docs(shards[s]), [i for o in others if o != s for i in shard_docs(shards[o])])
           for s in others[:3]]
    ref_unseen = float(np.median([r["unseen_bigrams"] for r in ref])) if ref else 0.0
    causes = []
    if exact_in + exact_pool > LIMITS["exact_duplicate_share"]:
        causes.append(f"exact duplicates: {exact_in:.0%} within the shard, {exact_pool:.0%} of documents also in the pool")
    if near > LIMITS["near_duplicate_share"]:
        causes.append(f"near duplicates: {near:.0%} of documents share over half their 13-grams with the pool")
    if max(overlap.values(), default=0) > LIMITS["set_overlap_13gram"]:
        causes.append(f"benchmark overlap: {max(overlap, key=overlap.get)} shares {max(overlap.values()):.0%} of its 13-grams")
    if boiler > LIMITS["boilerplate"]:
        causes.append(f"boilerplate: {boiler:.0%} of lines repeat across documents")
    if ref_unseen and ts["unseen_bigrams"] > LIMITS["unseen_bigram_ratio"] * ref_unseen:
        causes.append(f"token order: {ts['unseen_bigrams']:.0%} of bigrams never occur in the pool "
                      f"(ordinary shards: {ref_unseen:.0%})")
    if ts["unigram_kl"] > LIMITS["unigram_kl"]:
        causes.append(f"token distribution: unigram KL to the pool {ts['unigram_kl']:.2f} nats")
    rep = {"shard": sid, "sha256": sh["sha256"], "documents": len(docs), "tokens": sh["tokens"],
           "source_mix": sh["sources"], "register_mix": dict(Counter(register_of(t) for t in texts)),
           "script_mix": dict(Counter("non_latin" if register_of(t) == "non_latin" else "latin" for t in texts)),
           "exact_duplicates_within": exact_in, "exact_duplicates_in_pool": exact_pool, "near_duplicates_in_pool": near,
           "set_overlap_13gram": overlap, "boilerplate_line_share": boiler, **ts,
           "pool_reference_unseen_bigrams": ref_unseen, "limits": LIMITS, "causes": causes,
           "cause_found": bool(causes), "rejections": runner.state["rejections"].get(sid, 0)}
    d = Path(runner.out) / "inspection"
    atomic_write_json(d / f"{sid}.json", rep)
    md = [f"# Inspection of quarantined shard {sid}", "", f"SHA256 `{sh['sha256']}`, {len(docs)} documents, "
          f"{sh['tokens']} tokens.", "", "| check | value |", "|---|---|"]
    for k in ("source_mix", "register_mix", "script_mix"):
        md.append(f"| {k.replace('_', ' ')} | {json.dumps(rep[k])} |")
    for k in ("exact_duplicates_within", "exact_duplicates_in_pool", "near_duplicates_in_pool", "boilerplate_line_share",
              "unigram_kl", "rare_token_share", "unseen_bigrams", "pool_reference_unseen_bigrams"):
        md.append(f"| {k.replace('_', ' ')} | {rep[k]:.4f} |")
    md.append(f"| overlap with control/selection (13-grams) | max {max(overlap.values(), default=0):.4f} |")
    md += ["", "**Cause found:** " + ("; ".join(causes) if causes else "no cause found (one return is allowed)"), ""]
    atomic_write_text(d / f"{sid}.md", "\n".join(md))
    return f"inspection/{sid}.md", bool(causes)
