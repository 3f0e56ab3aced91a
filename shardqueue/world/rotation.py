"""Document-aligned shards and a frozen, seeded rotation manifest.

The eligible pool (a document stream) is cut, in stream order, into shards of whole
documents holding at least `shard_tokens` tokens each. Documents left over after the last
full shard (fewer than `shard_tokens` tokens) form no shard: joined to the last one they
would make it up to twice the others' size, and the queue compares shards with each other
(the manifest counts them as `left_over_documents`). Each shard records its documents (as
index ranges), token count, source-label mix and the SHA256 of its token ids; the rotation
order is a seeded permutation. The manifest is canonical JSON with a SHA256 sidecar, so an
active rotation cannot change silently.

A queue rotation (next_rotation) is the shards carried from the last one plus fresh pool shards, in an
order seeded by (seed, rotation): the runner composes each boundary with it, and the study's arm A looks
ahead with it (upcoming) to the shards its plain order trains next.
"""
import hashlib
import sys

import numpy as np
import pyarrow.parquet as pq

from errors import DataError
from protocols.protocol import load_protocol, write_protocol
from shardqueue.world.domains import register_of


def _ranges(idx):
    """Sorted-or-not index list -> [[start, end), ...] runs in the given order."""
    out = []
    for i in idx:
        if out and out[-1][1] == i:
            out[-1][1] = i + 1
        else:
            out.append([i, i + 1])
    return out


def shard_docs(shard):
    return [i for a, b in shard["docs"] for i in range(a, b)]


def shard_sha256(stream, docs):
    h = hashlib.sha256()
    for i in docs:
        h.update(np.asarray(stream.doc_tokens(i), dtype=np.uint32).tobytes())
    return h.hexdigest()


def shard_record(stream, labels, docs, sid):
    """One shard of exactly these documents: id, index ranges, documents, tokens, source mix, SHA256."""
    mix = {}
    for i in docs:
        mix[labels[i]] = mix.get(labels[i], 0) + 1
    return {"id": sid, "docs": _ranges(docs), "documents": len(docs), "tokens": int(stream.lengths[docs].sum()),
            "sources": dict(sorted(mix.items())), "sha256": shard_sha256(stream, docs)}


def build_rotation(stream, labels, shard_tokens, seed, name="rotation", docs=None, prefix="s"):
    """Manifest dict for the documents `docs` (default: all) of `stream`; labels[i] is doc i's source.
    Documents after the last full shard are left out (counted as left_over_documents)."""
    docs = list(range(stream.n)) if docs is None else list(docs)
    shards, cur, tok = [], [], 0
    for i in docs:
        cur.append(i)
        tok += int(stream.lengths[i])
        if tok >= shard_tokens:
            shards.append(cur)
            cur, tok = [], 0
    out = [shard_record(stream, labels, d, f"{prefix}{k:04d}") for k, d in enumerate(shards)]
    order = [out[j]["id"] for j in np.random.default_rng(seed).permutation(len(out))]
    return {"name": name, "version": 1, "seed": seed, "shard_tokens": shard_tokens, "stream": stream.name,
            "stream_documents": stream.n, "shards": out, "order": order, "left_over_documents": len(cur)}


def next_rotation(carried, fresh, rotation_shards, seed, rotation):
    """(order, fresh shards taken) of queue rotation `rotation`: the carried shards plus as many fresh ones as
    fill it to rotation_shards, in an order seeded by (seed, rotation)."""
    n_fresh = min(len(fresh), max(0, rotation_shards - len(carried)))
    members = list(carried) + list(fresh[:n_fresh])
    rng = np.random.default_rng([seed, rotation])
    return [members[j] for j in rng.permutation(len(members))], n_fresh


def upcoming(state, rotation_shards, seed):
    """The shards a queue that accepts everything trains next, from this state: the current rotation's rest,
    then the rotations after it as next_rotation composes them."""
    yield from list(state["pending"])
    carried, fresh, r = list(state["next_rotation"]), list(state["fresh"]), state["rotation"]
    while True:
        order, n_fresh = next_rotation(carried, fresh, rotation_shards, seed, r + 1)
        if not order:
            return
        r, carried, fresh = r + 1, [], fresh[n_fresh:]
        yield from order


def main_source(shard):
    """The source that holds most of a shard's documents (a shard can mix sources); a tie goes to the first listed."""
    return max(shard["sources"].items(), key=lambda kv: kv[1])[0]


def merge_rotations(name, seed, *manifests):
    """One rotation from several (e.g. the pool and a known-bad source), re-ordered with `seed`."""
    shards = [s for m in manifests for s in m["shards"]]
    order = [shards[j]["id"] for j in np.random.default_rng(seed).permutation(len(shards))]
    return {**manifests[0], "name": name, "seed": seed, "shards": shards, "order": order}


def save_rotation(path, manifest):
    return write_protocol(path, manifest)


def load_rotation(path, stream=None):
    """Load a frozen rotation; with a stream, re-hash every shard against it."""
    m = load_protocol(path)
    if stream is not None:
        for s in m["shards"]:
            if shard_sha256(stream, shard_docs(s)) != s["sha256"]:
                raise DataError(f"{path}: shard {s['id']} does not match the stream's tokens (SHA256 differs)")
    return m


LABEL_COLUMNS = ("source", "cluster_id", "topic", "domain")  # a corpus's own per-document label, first found


def source_labels(layout, split="train"):
    """Per-document source labels of a prepared corpus in stream order.

    The corpus's own label column when it has one (the offline and parquet corpora write
    `source`; a ClimbMix file with a cluster or topic column keeps it, as `climbmix:<value>`).
    A file without any gets each document's register (domains.register_of: code, qa,
    non_latin, prose) as `<source>:<register>`, so the pool's source mix and the calibration's
    homogeneous source are real properties of the documents, not one label for everything."""
    rec = layout.prepared()
    names = rec["train_shards"] if split == "train" else [rec["val_shard"]]
    out = []
    for n in names:
        pf = pq.ParquetFile(layout.raw / n)
        col = next((c for c in LABEL_COLUMNS if c in pf.schema_arrow.names), None)
        if col == "source":
            out.extend(pf.read(columns=["source"]).column("source").to_pylist())
        elif col is not None:
            out.extend(f"{rec['source']}:{v}" for v in pf.read(columns=[col]).column(col).to_pylist())
        else:
            for rg in range(pf.num_row_groups):
                texts = pf.read_row_group(rg, columns=["text"]).column("text").to_pylist()
                out.extend(sys.intern(f"{rec['source']}:{register_of(t)}") for t in texts)
    return out
