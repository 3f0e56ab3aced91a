"""Frozen protocols: what was fixed before confirmation, and the checks that enforce it.

A protocol file is canonical JSON (sorted keys) with a `<file>.sha256` sidecar in
sha256sum format. Before any confirmation forward pass, `python -m eval --protocol`
verifies the hash, that the runs are exactly the protocol's (same configs up to machine
settings), that every checkpoint's official check finished on that very checkpoint, and
that the corpus and tokenizer are the protocol's. Code that changed since the freeze is
reported, not refused: a fix must stay possible, and visible.
"""
import hashlib
import json
from pathlib import Path

from corpus.atomic import atomic_write_text, sha256_file
from corpus.errors import DataError

MACHINE_KEYS = {"data_dir", "device", "compile", "prefetch", "checkpoint_every", "keep_checkpoints"}


def canonical(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def write_protocol(path, proto: dict) -> str:
    path = Path(path)
    text = canonical(proto)
    atomic_write_text(path, text)
    digest = hashlib.sha256(text.encode()).hexdigest()
    atomic_write_text(path.with_name(path.name + ".sha256"), f"{digest}  {path.name}\n")
    return digest


def load_protocol(path) -> dict:
    path = Path(path)
    side = path.with_name(path.name + ".sha256")
    if not path.exists():
        raise DataError(f"{path}: protocol not found")
    if not side.exists():
        raise DataError(f"{path}: no {side.name} beside it; a protocol without its hash is not frozen")
    want = side.read_text().split()[0]
    data = path.read_bytes()
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        raise DataError(f"{path}: SHA256 {got[:16]}… does not match the frozen {want[:16]}… in {side.name}")
    proto = json.loads(data)
    proto["_sha256"] = got
    return proto


def _comparable(cfg: dict) -> dict:
    from training.config import TrainConfig

    full = TrainConfig(**cfg).to_dict()  # keys added since a run was made take their defaults
    return {k: v for k, v in full.items() if k not in MACHINE_KEYS}


def check_before_confirmation(proto, runs, layout, log=print):
    """runs: [(run_dir, summary, final_ckpt)]. Raises DataError on the first broken condition."""
    import pyarrow.parquet as pq

    from training.checkpoint import code_sha256

    have = {r[0].name: r for r in runs}
    want = proto["runs"]
    if set(have) != set(want):
        raise DataError(f"runs {sorted(have)} are not the protocol's {sorted(want)}")
    for name, (run_dir, summary, ckpt) in sorted(have.items()):
        got, exp = _comparable(summary["config"]), _comparable(want[name])
        if got != exp:
            diff = sorted(k for k in exp if got.get(k) != exp.get(k))
            raise DataError(f"{run_dir}: config differs from the protocol in {', '.join(diff)}")
        rows = run_dir / "official_rows.parquet"
        if "official" not in summary or not rows.exists():
            raise DataError(f"{run_dir}: its official checkpoint check has not finished")
        meta = pq.read_schema(rows).metadata or {}
        if meta.get(b"checkpoint_sha256", b"").decode() != sha256_file(ckpt):
            raise DataError(f"{run_dir}: the official check was not made on {ckpt.name} (checkpoint SHA256 differs)")
    from corpus.verify import verify_prepared

    rec = layout.prepared()
    if rec["shards_sha256"] != proto["corpus"]["shards_sha256"] or rec["tokenizer_sha256"] != proto["corpus"]["tokenizer_sha256"]:
        raise DataError(f"{layout.root}: corpus or tokenizer differ from the protocol's")
    if "files" in proto["corpus"] and rec["files"] != proto["corpus"]["files"]:
        diff = sorted(f for f in set(rec["files"]) | set(proto["corpus"]["files"])
                      if rec["files"].get(f) != proto["corpus"]["files"].get(f))
        raise DataError(f"{layout.root}: token or tokenizer files differ from the protocol's: {', '.join(diff[:3])}")
    verify_prepared(layout.root, full=True)  # every token, offsets, refill and tokenizer file, hashed now
    now = code_sha256()
    changed = sorted(f for f in set(now) | set(proto["code_sha256"]) if now.get(f) != proto["code_sha256"].get(f))
    log(f"protocol {proto['name']} ({proto['_sha256'][:16]}…, frozen {proto['frozen_at_utc']}): "
        f"{len(have)} runs checked, official checks complete, corpus matches")
    if changed:
        log(f"note: {len(changed)} code files changed since the freeze: {', '.join(changed)}")
