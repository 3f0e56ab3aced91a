"""The candidate pool a calibration freezes (pool.json): shards of whole documents by role, drawn once.

The manifest states each shard's role (ROLES: what the pool made it for), so that no reader tells a harmful
shard from its id. The pool excludes, by exact text hash, every training document identical to a validation
document that a control or selection window came from, and the documents used for
calibration. Documents longer than half a shard are left out so shards have ordinary,
comparable sizes. A reserve of further calibration-source shards, never trained in
calibration, is what recovery checks and clean branch checks train on. The harmful
source (harmful.py) is built from training documents that are then never used as
ordinary pool documents.
"""
from collections import Counter

import numpy as np

from errors import DataError
from shardqueue.world.corpus_view import sha_key
from shardqueue.world.damaged_pool import add_damaged_shards
from shardqueue.world.domains import OVERLAP_SAMPLE_TOKENS, sampled_overlap
from shardqueue.world.harmful import LABEL, with_harmful_copies
from shardqueue.world.rotation import build_rotation, shard_docs

# what the pool made a shard for: stage A's training, the reserve that recovery checks and clean branches
# train, an ordinary candidate, the final decay, a planted harmful, damaged or prose candidate, and a late
# (or added) source's calibration and candidate shards
ROLES = ("calibration", "reserve", "candidate", "decay", "harmful", "damaged", "prose", "late_calibration", "late")


# the calibration draw: whole documents of the calibration source until they hold this many times its shards' nominal
# tokens (a shard of whole documents runs past its nominal size); stage A's plan checks a source against it
CALIBRATION_DRAW = 1.25


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
    ok, n_excluded = eligible(world, shard_tokens)
    src = calibration_source or Counter(world.labels).most_common(1)[0][0]
    cal = calibration_documents(world, ok, src, seed, n_calibration, n_calibration * shard_tokens * CALIBRATION_DRAW)
    draw = DocumentDraw(world.train, ok, set(cal), seed + 1)
    docs = draw_documents(draw, world.labels, src, shard_tokens, n_harmful, n_prose, n_candidates + n_decay, n_late,
                          n_reserve)
    # fresh documents for the damaged shards (damaged_pool.py): mixed kinds and doses of realistic damage
    dmg_src = draw.rest() if n_damaged else []
    stream, lab, harm = with_harmful_copies(world.train, world.labels, docs["harmful"], seed + 7, world.vocab)
    damage, dshards = None, []
    if n_damaged:
        stream, lab, damage, dshards = add_damaged_shards(world, stream, lab, dmg_src, n_damaged, shard_tokens,
                                                          seed + 13)
    world.stream, world.labels_all = stream, lab

    def cut(name, docs_of, prefix, labels=lab):  # shards of whole documents, in a seeded order
        return build_rotation(stream, labels, shard_tokens, seed, name, docs=docs_of, prefix=prefix)

    p = base_shards(cut, src, sorted(cal), docs, n_calibration, n_reserve, n_candidates, n_decay)
    late = late_source(cut, lab, docs["late"], n_late, late_rotation, p["shards"])
    roles = {**dict.fromkeys(p["calibration"], "calibration"), **dict.fromkeys(p["reserve"], "reserve"),
             **dict.fromkeys(p["order"], "candidate"), **dict.fromkeys(p["decay"], "decay"), **late_roles(late)}
    if docs["prose"]:
        pm = cut("prose", docs["prose"], "r")
        p["shards"] += pm["shards"]
        p["order"].insert(min(len(p["order"]), 2), pm["shards"][0]["id"])
        roles.update(dict.fromkeys((s["id"] for s in pm["shards"]), "prose"))
    if n_harmful:
        hm = cut("harmful", harm, "h")
        p["shards"] += hm["shards"][:n_harmful]
        p["order"] = with_harmful(p["order"], [s["id"] for s in hm["shards"][:n_harmful]], seed + 11)
        roles.update(dict.fromkeys((s["id"] for s in hm["shards"][:n_harmful]), "harmful"))
    if dshards:
        p["shards"] += dshards
        p["order"] = spread(p["order"], [s["id"] for s in dshards], seed + 17)
        roles.update(dict.fromkeys((s["id"] for s in dshards), "damaged"))
    overlap, read, total = sampled_overlap(world.sets, stream, [shard_docs(s) for s in p["shards"]])
    return {"name": "pool", "version": 1, "seed": seed, "shard_tokens": shard_tokens, "stream": stream.name,
            "calibration_source": src, "calibration": p["calibration"], "order": p["order"], "decay": p["decay"],
            "reserve": p["reserve"], "late_sources": late, "shards": p["shards"],
            "roles": {sh["id"]: roles[sh["id"]] for sh in p["shards"]},
            "harmful": {"label": LABEL, "source_documents": docs["harmful"], "copies": harm},
            "damage": damage or {},
            "excluded_by_text_hash": n_excluded, "sets_sha256": world.set_hashes(),
            "overlap_13gram": overlap, "overlap_13gram_sample": {"tokens_read": read, "tokens": total,
                                                                 "per_shard_cap": OVERLAP_SAMPLE_TOKENS}}


def pool_roles(pool) -> dict:
    """{shard id: role} (ROLES) of every shard of a pool manifest, the sources added to a run included; a pool
    frozen before the manifest stated roles has them derived from its lists and the harmful source's label."""
    if "roles" in pool:
        return {**pool["roles"], **late_roles(pool.get("late_sources", []))}
    damaged = {s["id"] for s in (pool.get("damage") or {}).get("shards", [])}
    harm = pool["harmful"]["label"]
    roles = {s["id"]: "harmful" if s["sources"].get(harm) else "damaged" if s["id"] in damaged else "candidate"
             for s in pool["shards"]}
    roles.update({**dict.fromkeys(pool["calibration"], "calibration"), **dict.fromkeys(pool.get("reserve", []), "reserve"),
                  **dict.fromkeys(pool["decay"], "decay"), **late_roles(pool.get("late_sources", []))})
    return roles


def late_roles(late_sources) -> dict:
    """The roles of late (or added) sources' shards: their calibration shards and their candidates."""
    return {sid: role for src in late_sources for role, key in (("late_calibration", "calibration"), ("late", "shards"))
            for sid in src[key]}


def eligible(world, shard_tokens):
    """(per training document: may it enter the pool, how many are excluded by text hash): not identical to a
    validation text a control or selection window touches, and at most half a shard long."""
    sha = world.train_text_sha()
    hit = np.isin(sha, np.array(sorted(sha_key(h) for h in world.excluded_sha), dtype=np.uint64))
    return ~hit & (np.asarray(world.train.lengths) <= shard_tokens // 2), len(np.flatnonzero(hit))


def calibration_documents(world, ok, src, seed, n_calibration, need):
    """Documents of source src, in a seeded order, until they hold `need` tokens: the calibration's."""
    train, labels = world.train, world.labels
    perm = np.random.default_rng(seed).permutation(train.n)
    cal, tok = [], 0
    for i in perm.tolist():
        if ok[i] and labels[i] == src and tok < need:
            cal.append(i)
            tok += int(train.lengths[i])
    if tok < need:
        raise DataError(f"source {src!r} has too few documents for {n_calibration} calibration shards")
    return cal


class DocumentDraw:
    """Eligible documents not used yet, in one seeded order of their own: walking the calibration's would
    start where calibration took its source's documents and give the pool only the other sources."""

    def __init__(self, train, ok, used, seed):
        self.train, self.ok, self.used = train, ok, used
        self.perm = np.random.default_rng(seed).permutation(train.n)

    def take(self, n_tokens, pred=lambda i: True):
        """The next documents (that pred accepts) until they hold n_tokens, sorted; they count as used."""
        got, t = [], 0
        for i in self.perm.tolist():
            if t >= n_tokens:
                break
            if self.ok[i] and i not in self.used and pred(i):
                got.append(i)
                self.used.add(i)
                t += int(self.train.lengths[i])
        return sorted(got)

    def rest(self):
        """Every eligible document not used yet, in the draw's order."""
        return [int(i) for i in self.perm if self.ok[i] and i not in self.used]


def draw_documents(draw, labels, src, shard_tokens, n_harmful, n_prose, n_candidates, n_late, n_reserve):
    """{"harmful", "prose", "candidates", "late", "reserve"}: each role's documents, drawn in this order."""
    return {
        "harmful": draw.take(n_harmful * shard_tokens * 1.25) if n_harmful else [],
        # a source in another register: a shard of reference prose only (a "new domain" for a model fed
        # mostly code; the proposal warns that such a shard may raise control losses before it helps)
        "prose": draw.take(n_prose * shard_tokens, lambda i: labels[i] == "prose") if n_prose else [],
        "candidates": draw.take(n_candidates * shard_tokens * 1.25),
        # a new source that may enter only at rotation `late_rotation` (after its input checks and its
        # own calibration shards): documents of the pool's kind, labelled `late` so they stay traceable
        "late": draw.take(2 * n_late * shard_tokens * 1.25) if n_late else [],
        # the reserve, taken after everything above so that it changes none of their documents; a shard
        # holds under 1.5 x shard_tokens (documents are at most half a shard), so 1.5 x n makes n shards
        "reserve": draw.take(n_reserve * shard_tokens * 1.5, lambda i: labels[i] == src) if n_reserve else []}


def base_shards(cut, src, cal, docs, n_calibration, n_reserve, n_candidates, n_decay):
    """The calibration, reserve, candidate and decay shards: {"shards", "calibration", "reserve", "order",
    "decay"} (the candidates' order seeded; the first n_decay of it are the decay shards)."""
    calm = cut("calibration", cal, "c")
    calm["order"] = [s["id"] for s in calm["shards"]]  # stream order: calibration is one fixed sequence
    if len(calm["shards"]) < n_calibration:
        raise DataError(f"source {src!r}: only {len(calm['shards'])} calibration shards, {n_calibration} needed")
    resm = cut("reserve", docs["reserve"], "cr")
    if len(resm["shards"]) < n_reserve:
        raise DataError(f"source {src!r}: only {len(resm['shards'])} reserve shards, {n_reserve} needed")
    poolm = cut("pool", docs["candidates"], "s")
    if len(poolm["shards"]) < n_candidates + n_decay:
        raise DataError(f"only {len(poolm['shards'])} pool shards, {n_candidates + n_decay} needed")
    keep = set(poolm["order"][: n_candidates + n_decay])
    order = [s for s in poolm["order"] if s in keep]
    return {"shards": calm["shards"][:n_calibration] + resm["shards"][:n_reserve]
            + [s for s in poolm["shards"] if s["id"] in keep],
            "calibration": calm["order"][:n_calibration], "reserve": [x["id"] for x in resm["shards"][:n_reserve]],
            "order": order[n_decay:], "decay": order[:n_decay]}


def late_source(cut, lab, late, n_late, late_rotation, shards):
    """The late source's pool entries ([] without one); its shards are appended to `shards`."""
    if not late:
        return []
    llab = list(lab)
    for i in late:
        llab[i] = "late"
    lm = cut("late", late, "n", labels=llab)
    ids = [x["id"] for x in lm["shards"]]
    if len(ids) < 2 * n_late:
        raise DataError(f"only {len(ids)} shards for the late source, {2 * n_late} needed")
    shards += lm["shards"][: 2 * n_late]
    return [{"label": "late", "enter_rotation": late_rotation, "calibration": ids[:n_late],
             "shards": ids[n_late: 2 * n_late]}]


def with_harmful(order, hids, seed):
    """The order with the harmful shards at seeded positions inside the first rotation's reach."""
    order = list(order)
    pos = sorted(np.random.default_rng(seed).choice(range(1, max(2, min(len(order), 6))), size=len(hids),
                                                    replace=len(hids) > 4).tolist())
    for p, h in zip(pos[::-1], hids[::-1]):
        order.insert(p, h)
    return order


def spread(order, ids, seed):
    """The order with these shards spread evenly over it (seeded), so plain training meets them at one density
    throughout."""
    pos = sorted(np.random.default_rng(seed).choice(len(order) + len(ids), size=len(ids), replace=False).tolist())
    rest, new = iter(order), iter(ids)
    return [next(new) if i in set(pos) else next(rest) for i in range(len(order) + len(ids))]
