"""A new source brought into a queue run: `run --add-source NAME=PATH`.

The proposal requires that a new source enter only at a rotation boundary, after its input
checks and its own calibration. PATH is a parquet file of documents (a `text` column);
they are tokenized with the corpus's tokenizer, documents identical to a control or
selection window's validation document (text SHA256) and documents longer than half a
shard are left out (as in the pool), and the rest are cut into shards of whole documents,
each of the pool's size; the documents left over after the last full shard form no shard
(rotation.build_rotation; recorded as left_over_documents).
The first CALIBRATION_SHARDS shards are the source's calibration shards, the others its
candidate shards. The source becomes a late source (pool "late_sources", see
engine/admission.py): at the next rotation boundary its shards are re-hashed, checked
(token ids, BOS, 13-gram overlap with the control and selection sets) and its calibration
shards trained on a branch; only then may its shards join the rotation being composed.

The run folder keeps added_sources.json (canonical JSON with a SHA256 sidecar): the input
file's SHA256, the boundary it enters at, and its shard records. A resumed run rebuilds the
same shards and checks them against that file; `reconstruct` reads the shard records
from it without tokenizing anything.
"""
import hashlib
import re
from pathlib import Path

import numpy as np

from corpus.atomic import sha256_file
from corpus.parquet_corpus import read_documents
from errors import DataError
from protocols.protocol import load_protocol, write_protocol
from shardqueue.world.damaged_pool import append_documents
from shardqueue.world.domains import text_sha256
from shardqueue.world.rotation import build_rotation, shard_docs

FILE = "added_sources.json"
CALIBRATION_SHARDS = 1


def input_checks(world, shard, vocab):
    """A new source's shard against its record, read document by document from the token files (a shard is
    never held whole): {"sha256": equal, "token_ids_in_vocab", "bos_only_at_starts"}."""
    h, in_vocab, bos_ok = hashlib.sha256(), True, True
    for i in shard_docs(shard):
        t = np.asarray(world.stream.doc_tokens(i))
        h.update(t.astype(np.uint32).tobytes())
        in_vocab &= bool(len(t) == 0 or int(t.max()) < vocab)
        bos_ok &= bool(len(t) and t[0] == world.bos and int((t == world.bos).sum()) == 1)
    return {"sha256": h.hexdigest() == shard["sha256"], "token_ids_in_vocab": in_vocab, "bos_only_at_starts": bos_ok}


def parse(spec):
    """NAME=PATH -> (name, path); a name is letters, digits, _ and - (it prefixes shard ids)."""
    name, sep, path = spec.partition("=")
    if not sep or not path:
        raise DataError(f"--add-source {spec!r}: give it as NAME=PATH (a parquet file of documents)")
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,31}", name):
        raise DataError(f"--add-source {spec!r}: NAME must start with a letter and hold only letters, digits, _ or -")
    if not Path(path).is_file():
        raise DataError(f"--add-source {name}: {path}: file not found")
    return name, path


def _documents(world, path, shard_tokens):
    """(token arrays, excluded by text hash, too long) of the file's documents, in file order."""
    rows, _ = read_documents(path)
    docs, excluded, long_ = [], 0, 0
    vocab = world.enc.n_vocab
    for text, _, _ in rows:
        if text_sha256(text) in world.excluded_sha:
            excluded += 1
            continue
        ids = [world.bos] + world.enc.encode_ordinary(text)
        if len(ids) > shard_tokens // 2:
            long_ += 1
            continue
        if max(ids) >= vocab:
            raise DataError(f"{path}: token id {max(ids)} outside the vocabulary of {vocab}")
        docs.append(np.asarray(ids, dtype=np.uint16))
    return docs, excluded, long_


def attach(world, pool, name, path, enter_rotation, known=None):
    """Append the source's documents to world.stream; (pool with the source as a late source, record).

    known: the record a resumed run wrote; the rebuilt shards must equal its shards."""
    if known is not None and sha256_file(path) != known["input_sha256"]:
        raise DataError(f"{path}: changed since source {name!r} was added (SHA256 differs)")
    if name in {s["label"] for s in pool.get("late_sources", [])} or name in set(world.labels_all):
        raise DataError(f"--add-source {name}: the pool already has a source of that name")
    docs, excluded, long_ = _documents(world, path, pool["shard_tokens"])
    world.stream, idx = append_documents(world.stream, docs, f"{world.stream.name}+{name}")
    world.labels_all = list(world.labels_all) + [name] * len(idx)
    man = build_rotation(world.stream, world.labels_all, pool["shard_tokens"], pool["seed"], name, docs=idx,
                         prefix=f"{name}_")
    shards = man["shards"]
    if len(shards) < CALIBRATION_SHARDS + 1:
        raise DataError(f"--add-source {name}: {path} makes {len(shards)} shard(s) of {pool['shard_tokens']} tokens; "
                        f"{CALIBRATION_SHARDS + 1} needed (its calibration shard and at least one candidate)")
    ids = [s["id"] for s in shards]
    rec = {"label": name, "input": str(Path(path).resolve()), "input_sha256": sha256_file(path),
           "enter_rotation": enter_rotation, "documents": len(docs), "excluded_by_text_hash": excluded,
           "longer_than_half_a_shard": long_, "left_over_documents": man["left_over_documents"],
           "calibration": ids[:CALIBRATION_SHARDS],
           "shards": ids[CALIBRATION_SHARDS:], "shard_records": shards}
    if known is not None and [s["sha256"] for s in shards] != [s["sha256"] for s in known["shard_records"]]:
        raise DataError(f"--add-source {name}: its shards do not rebuild identically (another corpus or pool?)")
    return with_records(pool, [rec]), rec


def with_records(pool, records):
    """The pool with these added sources' shards and late-source entries (its _sha256 unchanged:
    the run still names the calibration's pool)."""
    out = dict(pool)
    out["shards"] = list(pool["shards"]) + [s for r in records for s in r["shard_records"]]
    out["late_sources"] = list(pool.get("late_sources", [])) + [
        {"label": r["label"], "enter_rotation": r["enter_rotation"], "calibration": r["calibration"],
         "shards": r["shards"]} for r in records]
    return out


def read(folder):
    """The records of added_sources.json in a run folder ([] when none), checked against its sidecar."""
    p = Path(folder) / FILE
    return load_protocol(p)["sources"] if p.exists() else []


def check_new(world, pool, specs):
    """Every new source (NAME=PATH) read and checked as attach() would, the world left as it was: a --fresh run asks
    this before it moves an earlier run aside, then prepare() attaches them for real. attach() replaces
    world.stream and world.labels_all (never changes them in place), so putting the two back undoes it."""
    stream, labels = world.stream, world.labels_all
    try:
        for spec in specs or ():
            pool, _ = attach(world, pool, *parse(spec), 1)
    finally:
        world.stream, world.labels_all = stream, labels


def prepare(out, world, pool, specs, rotation, log=print):
    """Attach every earlier added source of the run folder, then the new ones (`specs`: NAME=PATH)
    entering at rotation `rotation`; write added_sources.json when something was added."""
    records = read(out)
    for r in records:
        pool, _ = attach(world, pool, r["label"], r["input"], r["enter_rotation"], known=r)
    for spec in specs or ():
        name, path = parse(spec)
        pool, rec = attach(world, pool, name, path, rotation)
        records.append(rec)
        log(f"source {name}: {rec['documents']} documents in {len(rec['shard_records'])} shards from {path} "
            f"({rec['left_over_documents']} left over after the last full shard); enters at the boundary of rotation {rotation} after its input checks and calibration")
    if specs:
        write_protocol(Path(out) / FILE, {"name": "added_sources", "version": 1, "sources": records})
    return pool
