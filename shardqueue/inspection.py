"""Inspection of a quarantined shard: what might explain two rejections.

Writes inspection/<shard>.md and .json with: source mix, script/language mix and register
mix (domains.register_of per document), exact duplicates within the shard and
against the rest of the pool, near duplicates (documents sharing over half their 13-token
grams with another), overlap with the control and selection sets, boilerplate (share of
lines that occur in more than one document of the shard), and token statistics against
the pool: unigram KL divergence, share of rare tokens, and the share of token bigrams
occurring in no other pool shard (text in a normal order reuses known bigrams; shuffled or
corrupted text does not). A cause is "found" when a statistic is far outside what
ordinary pool shards show (thresholds below, fixed in code before any inspection). The
token-order statistic has no fixed scale (on a small pool most bigrams are unseen anyway),
so it is judged as a z-score against the same statistic over the pool's ordinary shards.
Pool-wide statistics read at most SAMPLE_TOKENS tokens per shard (a seeded sample of its
documents), so an inspection's memory does not grow with the shard size.
"""
import json
from collections import Counter
from pathlib import Path

import numpy as np

from corpus.atomic import atomic_write_json, atomic_write_text
from shardqueue.domains import ngram_hashes, register_of
from shardqueue.domains import sample_docs as _sample_docs
from shardqueue.rotation import shard_docs

LIMITS = {"exact_duplicate_share": 0.2, "near_duplicate_share": 0.3, "set_overlap_13gram": 0.2, "boilerplate": 0.5,
          "unseen_bigram_z": 4.0, "unigram_kl": 1.0}
SAMPLE_TOKENS = 2_000_000


def _bigrams(t):
    t = np.asarray(t, dtype=np.int64)
    return t[:-1] * 65536 + t[1:]


def sample_docs(stream, docs, max_tokens=SAMPLE_TOKENS, seed=0):
    return _sample_docs(stream, docs, max_tokens, seed)


def unseen_bigram_shares(stream, doc_lists):
    """Per document list: the share of its token bigrams (with multiplicity) that occur in no other list."""
    grams = [np.concatenate([_bigrams(stream.doc_tokens(i)) for i in docs]) for docs in doc_lists]
    uniq = [np.unique(g) for g in grams]
    vals, counts = np.unique(np.concatenate(uniq), return_counts=True)
    only_one = vals[counts == 1]  # a bigram of exactly one list
    return [float(np.mean(np.isin(g, only_one))) if len(g) else 0.0 for g in grams]


def token_order_z(stream, sid_docs, ref_doc_lists):
    """(the shard's unseen-bigram share, the reference shards' shares, z-score of the shard against them)."""
    shares = unseen_bigram_shares(stream, [sid_docs] + list(ref_doc_lists))
    x, ref = shares[0], shares[1:]
    sd = float(np.std(ref, ddof=1)) if len(ref) > 1 else 0.0
    z = (x - float(np.mean(ref))) / sd if sd > 0 else 0.0
    return x, ref, z


def token_stats(stream, docs, pool_docs):
    toks = np.concatenate([stream.doc_tokens(i) for i in docs]).astype(np.int64)
    pool = np.concatenate([stream.doc_tokens(i) for i in pool_docs]).astype(np.int64)
    V = int(max(toks.max(), pool.max())) + 1
    p = np.bincount(toks, minlength=V) + 0.5
    q = np.bincount(pool, minlength=V) + 0.5
    p, q = p / p.sum(), q / q.sum()
    pool_counts = np.bincount(pool, minlength=V)
    rare = float(np.mean(pool_counts[toks] < 3))
    return {"unigram_kl": float(np.sum(p * np.log(p / q))), "rare_token_share": rare}


def inspect_shard(runner, sid):
    """Write the report; returns (relative path of the .md, cause_found)."""
    stream, shards = runner.world.stream, runner.shards
    sh = shards[sid]
    n_docs = sh["documents"] if "documents" in sh else len(shard_docs(sh))
    others = [s for s in runner.pool["order"] if s != sid and not shards[s]["sources"].get(runner.pool["harmful"]["label"])]
    docs = sample_docs(stream, shard_docs(sh))
    other_docs = [sample_docs(stream, shard_docs(shards[s]), seed=k + 1) for k, s in enumerate(others)]
    pool_docs = [i for d in other_docs for i in d]
    import hashlib

    def h(i):
        return hashlib.sha256(np.asarray(stream.doc_tokens(i), dtype=np.int64).tobytes()).hexdigest()

    hs = [h(i) for i in docs]
    pool_h = {h(i) for i in pool_docs}
    exact_in = 1 - len(set(hs)) / len(hs)
    exact_pool = float(np.mean([x in pool_h for x in hs]))
    # sorted uint64 arrays, not Python sets: a set of a million hashes costs about 100 MB
    grams = [np.unique(ngram_hashes(stream.doc_tokens(i))) for i in docs]
    pool_grams = np.unique(np.concatenate([ngram_hashes(stream.doc_tokens(i)) for i in pool_docs] or [np.zeros(0, np.uint64)]))
    near = float(np.mean([np.isin(g, pool_grams).mean() > 0.5 if len(g) else False for g in grams]))
    set_grams = {d: np.unique(np.concatenate([ngram_hashes(r[r >= 0]) for r in s["y"]]))
                 for part in runner.world.sets.values() for d, s in part.items()}
    allg = np.unique(np.concatenate(grams)) if grams else np.zeros(0, np.uint64)
    overlap = {d: (float(np.isin(g, allg).mean()) if len(g) else 0.0) for d, g in set_grams.items()}
    texts = [runner.world.enc.decode(list(stream.doc_tokens(i)[1:])) for i in docs]
    lines = [Counter({ln.strip() for ln in t.splitlines() if len(ln.strip()) > 8}) for t in texts]
    tot = Counter()
    for c in lines:
        tot.update(c)
    n_lines = sum(sum(c.values()) for c in lines)
    boiler = sum(v for c in lines for ln, v in c.items() if tot[ln] > 1) / max(n_lines, 1)
    ts = token_stats(stream, docs, pool_docs)
    unseen, ref_unseen, z = token_order_z(stream, docs, other_docs)
    ts.update(unseen_bigrams=unseen, unseen_bigram_z=z)
    causes = []
    if exact_in + exact_pool > LIMITS["exact_duplicate_share"]:
        causes.append(f"exact duplicates: {exact_in:.0%} within the shard, {exact_pool:.0%} of documents also in the pool")
    if near > LIMITS["near_duplicate_share"]:
        causes.append(f"near duplicates: {near:.0%} of documents share over half their 13-grams with the pool")
    if max(overlap.values(), default=0) > LIMITS["set_overlap_13gram"]:
        causes.append(f"benchmark overlap: {max(overlap, key=overlap.get)} shares {max(overlap.values()):.0%} of its 13-grams")
    if boiler > LIMITS["boilerplate"]:
        causes.append(f"boilerplate: {boiler:.0%} of lines repeat across documents")
    if len(ref_unseen) > 1 and z > LIMITS["unseen_bigram_z"]:
        causes.append(f"token order: {unseen:.0%} of bigrams occur in no other pool shard, z = {z:.1f} against the "
                      f"pool's {len(ref_unseen)} ordinary shards (mean {np.mean(ref_unseen):.0%}, "
                      f"sd {np.std(ref_unseen, ddof=1):.1%})")
    if ts["unigram_kl"] > LIMITS["unigram_kl"]:
        causes.append(f"token distribution: unigram KL to the pool {ts['unigram_kl']:.2f} nats")
    rep = {"shard": sid, "sha256": sh["sha256"], "documents": n_docs, "documents_read": len(docs), "tokens": sh["tokens"],
           "source_mix": sh["sources"], "register_mix": dict(Counter(register_of(t) for t in texts)),
           "script_mix": dict(Counter("non_latin" if register_of(t) == "non_latin" else "latin" for t in texts)),
           "exact_duplicates_within": exact_in, "exact_duplicates_in_pool": exact_pool, "near_duplicates_in_pool": near,
           "set_overlap_13gram": overlap, "boilerplate_line_share": boiler, **ts,
           "pool_reference_unseen_bigrams": float(np.mean(ref_unseen)) if ref_unseen else 0.0,
           "pool_unseen_bigrams_per_shard": ref_unseen,
           "sampled_tokens_per_shard": SAMPLE_TOKENS, "limits": LIMITS, "causes": causes,
           "cause_found": bool(causes), "rejections": runner.state["rejections"].get(sid, 0)}
    d = Path(runner.out) / "inspection"
    atomic_write_json(d / f"{sid}.json", rep)
    md = [f"# Inspection of quarantined shard {sid}", "", f"SHA256 `{sh['sha256']}`, {n_docs} documents ({len(docs)} read), "
          f"{sh['tokens']} tokens.", "", "| check | value |", "|---|---|"]
    for k in ("source_mix", "register_mix", "script_mix"):
        md.append(f"| {k.replace('_', ' ')} | {json.dumps(rep[k])} |")
    for k in ("exact_duplicates_within", "exact_duplicates_in_pool", "near_duplicates_in_pool", "boilerplate_line_share",
              "unigram_kl", "rare_token_share", "unseen_bigrams", "unseen_bigram_z"):
        md.append(f"| {k.replace('_', ' ')} | {rep[k]:.4f} |")
    md.append(f"| overlap with control/selection (13-grams) | max {max(overlap.values(), default=0):.4f} |")
    md += ["", "**Cause found:** " + ("; ".join(causes) if causes else "no cause found (one return is allowed)"), ""]
    atomic_write_text(d / f"{sid}.md", "\n".join(md))
    return f"inspection/{sid}.md", bool(causes)
