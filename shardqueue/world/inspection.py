"""Inspection of a quarantined shard: how far from clean it is, on each of the proposal's causes.

The proposal names the causes to examine: source mix, language, register, duplicates,
benchmark overlap and boilerplate. Each is measured (MEASURES, with the token distribution
and token order beside them) on the quarantined shard and on every clean reference shard,
and judged as a z-score against the clean shards' spread: a measure is a cause when the
shard sits more than Z_LIMIT standard deviations above the clean mean. No measure has a
fixed limit of its own: what counts as far is learnt from clean shards of the same pool, so
a measure with no natural scale (a KL divergence, a share of unseen bigrams on a small
pool) is judged like every other, and the report shows each value beside the clean mean
and spread it was judged against.

Clean reference shards: the pool's candidate shards other than this one, without the
planted harmful source, the planted damaged shards (known bad by construction) and any
shard this run has rejected (the queue's own evidence against it). Measures that compare a
shard with "the others" (duplicates, unigram KL, rare tokens, unseen bigrams, source and
register distance) compare each reference shard with the other reference shards and the
quarantined one with all of them, so both sides of the z-score are measured alike. A
share's spread is taken as at least one unit of what it counts in the quarantined shard's
sample (a document, a line, a character, a token...; UNITS): a single duplicated document
is not a cause merely because no clean shard had one.

Every statistic reads at most SAMPLE_TOKENS tokens per shard (a seeded sample of its
documents), so an inspection's memory does not grow with the shard size.
"""
import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np

from corpus.atomic import atomic_write_json, atomic_write_text
from shardqueue.world.domains import ngram_hashes, register_of
from shardqueue.world.domains import sample_docs as _sample_docs
from shardqueue.world.rotation import shard_docs

Z_LIMIT = 4.0
SAMPLE_TOKENS = 2_000_000
# (measure, the proposal's cause it speaks to, what it is); every one is "worse when higher"
MEASURES = (
    ("source_mix_distance", "source mix", "total-variation distance of the shard's source mix from the other "
                                          "shards' mix together"),
    ("non_latin_documents", "language", "share of documents in a non-Latin script"),
    ("non_ascii_characters", "language", "share of characters outside ASCII (another language, or a broken "
                                         "encoding)"),
    ("register_distance", "register", "total-variation distance of the register mix (code, qa, non_latin, prose) "
                                      "from the other shards' mix together"),
    ("exact_duplicates", "duplicates", "share of documents repeated within the shard or found in another shard"),
    ("near_duplicates", "duplicates", "share of documents sharing over half their 13-grams with other shards"),
    ("benchmark_overlap", "benchmark overlap", "largest share of a control or selection set's 13-grams found in "
                                               "the shard"),
    ("boilerplate", "boilerplate", "share of lines (over 8 characters) occurring in more than one document of "
                                   "the shard"),
    ("unigram_kl", "token distribution", "KL divergence (nats) of the shard's token distribution from the other "
                                         "shards'"),
    ("rare_tokens", "token distribution", "share of tokens seen fewer than 3 times in the other shards"),
    ("unseen_bigrams", "token order", "share of token bigrams found in no other shard (text in a normal order "
                                      "reuses known bigrams; shuffled or corrupted text does not)"),
)
# what each share counts: its spread is taken as at least one of these in the inspected shard's sample
UNITS = {"source_mix_distance": "documents", "non_latin_documents": "documents", "non_ascii_characters": "characters",
         "register_distance": "documents", "exact_duplicates": "documents", "near_duplicates": "documents",
         "benchmark_overlap": "set 13-grams", "boilerplate": "lines", "rare_tokens": "tokens",
         "unseen_bigrams": "bigrams"}


def sample_docs(stream, docs, max_tokens=SAMPLE_TOKENS, seed=0):
    return _sample_docs(stream, docs, max_tokens, seed)


def _bigrams(t):
    t = np.asarray(t, dtype=np.int64)
    return t[:-1] * 65536 + t[1:]


def in_other_references(per_list):
    """per_list[0]: the inspected shard's items, per_list[1:]: each reference shard's (arrays of integer
    keys, with repeats). For each list, a boolean array over its items: found in a reference list other
    than its own (for the inspected shard: in any reference list)."""
    uniq = [np.unique(a) for a in per_list[1:]]
    if not uniq:
        return [np.zeros(len(a), dtype=bool) for a in per_list]
    vals, counts = np.unique(np.concatenate(uniq), return_counts=True)
    out = []
    for j, a in enumerate(per_list):
        pos = np.clip(np.searchsorted(vals, a), 0, max(len(vals) - 1, 0))
        found = counts[pos] * (vals[pos] == a) if len(vals) else np.zeros(len(a), dtype=np.int64)
        out.append(found - (1 if j else 0) > 0)  # a reference list's own copy is among the counts
    return out


def _tv(mix, other):
    """Total-variation distance between two count mixes (dicts)."""
    a, b = sum(mix.values()) or 1, sum(other.values()) or 1
    return 0.5 * sum(abs(mix.get(k, 0) / a - other.get(k, 0) / b) for k in set(mix) | set(other))


def _leave_one_out(mixes):
    """For each mix (the inspected shard's first), the distance from the reference mixes other than its own."""
    total = Counter()
    for m in mixes[1:]:
        total.update(m)
    return [_tv(m, total if j == 0 else total - Counter(m)) for j, m in enumerate(mixes)]


def _token_measures(toks):
    """unigram KL and rare-token share of each list against the reference lists other than its own."""
    V = int(max(int(t.max()) for t in toks if len(t))) + 1
    counts = [np.bincount(t, minlength=V) for t in toks]
    ref = np.sum(counts[1:], axis=0) if len(counts) > 1 else np.zeros(V, dtype=np.int64)
    kl, rare = [], []
    for j, (t, c) in enumerate(zip(toks, counts)):
        q_counts = ref - (c if j else 0)
        p, q = c + 0.5, q_counts + 0.5
        p, q = p / p.sum(), q / q.sum()
        kl.append(float(np.sum(p * np.log(p / q))))
        rare.append(float(np.mean(q_counts[t] < 3)) if len(t) else 0.0)
    return kl, rare


def _doc_hash(tokens):
    return int.from_bytes(hashlib.sha256(np.asarray(tokens, dtype=np.int64).tobytes()).digest()[:8], "little")


def measure_lists(stream, enc, doc_lists, labels, set_grams):
    """({measure: [value of each list]}, the inspected shard's register mix, {unit: how many its sample
    holds}) for doc_lists: the inspected shard's documents first, then each reference shard's."""
    docs_tokens = [[np.asarray(stream.doc_tokens(i)) for i in docs] for docs in doc_lists]
    texts = [[enc.decode([int(x) for x in t[1:]]) for t in dl] for dl in docs_tokens]
    regs = [Counter(register_of(x) for x in tl) for tl in texts]
    m = {"source_mix_distance": _leave_one_out([Counter(labels[i] for i in docs) for docs in doc_lists]),
         "register_distance": _leave_one_out(regs),
         "non_latin_documents": [r.get("non_latin", 0) / max(1, sum(r.values())) for r in regs],
         "non_ascii_characters": [sum(sum(ord(c) > 127 for c in x) for x in tl) / max(1, sum(len(x) for x in tl))
                                  for tl in texts]}
    # exact duplicates: a document's tokens repeated inside its shard or found in another shard
    hashes = [np.array([_doc_hash(t) for t in dl], dtype=np.uint64) for dl in docs_tokens]
    elsewhere = in_other_references(hashes)
    m["exact_duplicates"] = [float(np.mean(e | _repeated(h))) if len(h) else 0.0 for h, e in zip(hashes, elsewhere)]
    # near duplicates: over half of a document's distinct 13-grams found in other shards
    grams = [[np.unique(ngram_hashes(t)) for t in dl] for dl in docs_tokens]
    shard_grams = [np.concatenate(g) if g else np.zeros(0, np.uint64) for g in grams]
    found = in_other_references(shard_grams)
    near = []
    for g, f in zip(grams, found):
        cuts = np.cumsum([len(x) for x in g])[:-1]
        near.append(float(np.mean([len(x) > 0 and x.mean() > 0.5 for x in np.split(f, cuts)])) if g else 0.0)
    m["near_duplicates"] = near
    m["benchmark_overlap"] = [max((float(np.isin(sg, g).mean()) for sg in set_grams.values() if len(sg)), default=0.0)
                              for g in shard_grams]
    m["boilerplate"] = [_boilerplate(tl) for tl in texts]
    toks = [np.concatenate(dl).astype(np.int64) if dl else np.zeros(0, np.int64) for dl in docs_tokens]
    m["unigram_kl"], m["rare_tokens"] = _token_measures(toks)
    bigram_found = in_other_references([np.concatenate([_bigrams(t) for t in dl]) if dl else np.zeros(0, np.int64)
                                        for dl in docs_tokens])
    m["unseen_bigrams"] = [float(np.mean(~f)) if len(f) else 0.0 for f in bigram_found]
    counts = {"documents": len(doc_lists[0]), "characters": sum(len(x) for x in texts[0]), "tokens": len(toks[0]),
              "bigrams": len(bigram_found[0]), "lines": sum(len(x.splitlines()) for x in texts[0]),
              "set 13-grams": max((len(g) for g in set_grams.values()), default=0)}
    return m, regs[0], counts


def _repeated(h):
    """Per item: whether it occurs more than once in h."""
    _, inv, cnt = np.unique(h, return_inverse=True, return_counts=True)
    return cnt[inv] > 1


def _boilerplate(texts):
    lines = [Counter({ln.strip() for ln in t.splitlines() if len(ln.strip()) > 8}) for t in texts]
    tot = Counter()
    for c in lines:
        tot.update(c)
    n_lines = sum(sum(c.values()) for c in lines)
    return sum(v for c in lines for ln, v in c.items() if tot[ln] > 1) / max(n_lines, 1)


def judged(values, counts):
    """{measure: value, clean mean, clean sd (ddof 1), z, cause?} from values[m] = [shard, ref, ref, ...];
    counts[unit]: how many of each unit the shard's sample holds (the floor of a share's spread)."""
    out = {}
    for name, cause, what in MEASURES:
        x, ref = values[name][0], values[name][1:]
        mean = float(np.mean(ref)) if ref else 0.0
        sd = float(np.std(ref, ddof=1)) if len(ref) > 1 else 0.0
        floor = 1.0 / max(1, counts[UNITS[name]]) if name in UNITS else 1e-9
        z = (x - mean) / max(sd, floor) if len(ref) > 1 else 0.0
        out[name] = {"cause": cause, "what": what, "value": x, "clean_mean": mean, "clean_sd": sd,
                     "sd_floor": floor, "z": z, "over_limit": bool(z > Z_LIMIT)}
    return out


def clean_reference(pool, rejections, sid):
    """The pool's candidate shards taken as clean (see the module's docstring); rejections: the run's, per shard."""
    shards = {s["id"]: s for s in pool["shards"]}
    harm = pool["harmful"]["label"]
    damaged = {s["id"] for s in (pool.get("damage") or {}).get("shards", [])}
    return [s for s in pool["order"] if s != sid and not shards[s]["sources"].get(harm) and s not in damaged
            and not rejections.get(s)]


def inspect_shard(world, pool, rejections, out, sid):
    """Write the report of shard sid of the pool into out/inspection/ (rejections: the run's, per shard);
    returns (relative path of the .md, cause_found)."""
    stream, shards = world.stream, {s["id"]: s for s in pool["shards"]}
    sh = shards[sid]
    n_docs = sh["documents"] if "documents" in sh else len(shard_docs(sh))
    refs = clean_reference(pool, rejections, sid)
    doc_lists = [sample_docs(stream, shard_docs(sh))] + [sample_docs(stream, shard_docs(shards[s]), seed=k + 1)
                                                        for k, s in enumerate(refs)]
    set_grams = {d: np.unique(np.concatenate([ngram_hashes(r[r >= 0]) for r in s["y"]]))
                 for part in world.sets.values() for d, s in part.items()}
    labels = getattr(world, "labels_all", None) or world.labels
    values, regs, counts = measure_lists(stream, world.enc, doc_lists, labels, set_grams)
    measures = judged(values, counts)
    causes = [f"{m['cause']}: {name.replace('_', ' ')} {m['value']:.3g} against clean {m['clean_mean']:.3g} "
              f"± {m['clean_sd']:.2g} (z = {m['z']:.1f} over {len(refs)} clean shards)"
              for name, m in measures.items() if m["over_limit"]]
    rep = {"shard": sid, "sha256": sh["sha256"], "documents": n_docs, "documents_read": len(doc_lists[0]),
           "tokens": sh["tokens"], "source_mix": sh["sources"], "register_mix": dict(regs),
           "script_mix": {"non_latin": regs.get("non_latin", 0), "latin": sum(regs.values()) - regs.get("non_latin", 0)},
           "measures": measures, "z_limit": Z_LIMIT, "clean_reference": refs,
           "clean_reference_values": {name: values[name][1:] for name, _, _ in MEASURES},
           "sampled_tokens_per_shard": SAMPLE_TOKENS, "causes": causes, "cause_found": bool(causes),
           "rejections": rejections.get(sid, 0)}
    d = Path(out) / "inspection"
    atomic_write_json(d / f"{sid}.json", rep)
    md = [f"# Inspection of quarantined shard {sid}", "", f"SHA256 `{sh['sha256']}`, {n_docs} documents "
          f"({len(doc_lists[0])} read), {sh['tokens']} tokens. Each measure is judged against {len(refs)} clean "
          f"shards of the pool: a cause when z > {Z_LIMIT:g} (z divides by the clean sd, or by one unit of what "
          f"the measure counts in this shard's sample when that is larger).", "",
          f"Source mix {json.dumps(sh['sources'])}; register mix {json.dumps(dict(regs))}.", "",
          "| cause | measure | shard | clean mean | clean sd | z | a cause? |", "|---|---|---|---|---|---|---|"]
    for name, m in measures.items():
        md.append(f"| {m['cause']} | {name.replace('_', ' ')} | {m['value']:.4f} | {m['clean_mean']:.4f} | "
                  f"{m['clean_sd']:.4f} | {m['z']:.1f} | {'yes' if m['over_limit'] else 'no'} |")
    md += ["", "**Cause found:** " + ("; ".join(causes) if causes else "no cause found (one return is allowed)"), "",
           "Measures: " + "; ".join(f"*{name.replace('_', ' ')}*: {what}" for name, _, what in MEASURES) + ".", ""]
    atomic_write_text(d / f"{sid}.md", "\n".join(md))
    return f"inspection/{sid}.md", bool(causes)
