"""Frozen protocols: what was fixed before confirmation, and the checks that enforce it.

A protocol file is canonical JSON (sorted keys) with a `<file>.sha256` sidecar in
sha256sum format. Before any confirmation forward pass, `python -m eval --protocol`
verifies the hash, that the runs are exactly the protocol's (same configs up to machine
settings), that every checkpoint's official check finished on that very checkpoint, and
that the corpus and tokenizer are the protocol's. Code that changed since the freeze is
reported, not refused: a fix must stay possible, and visible: the pass that follows is
labelled, in every file it writes, as not a clean confirmation, and names the files.
The code hashed is the code that trains and scores (code_sha256, as every checkpoint
records it) and the rest of the README's fixed judge (judge_sha256: the checkers, the
paper's values, the queue's and the study's rules).
"""
import hashlib
import json
from pathlib import Path

import pyarrow.parquet as pq

from corpus.atomic import atomic_write_text, sha256_file
from corpus.verify import verify_prepared
from errors import DataError
from training.checkpoint import ROOT, code_sha256
from training.config import TrainConfig

# the README's fixed judge beyond code_sha256's folders (which a checkpoint records, so a resume is not refused
# over a checker's edit): the numpy checkers, the paper's values, the queue's and the study's pre-registered rules
JUDGE_FILES = ("checkers/*.py", "findings/paper_values.json", "shardqueue/policy/rule.py", "shardqueue/study/adoption.py")
MACHINE_KEYS = {"data_dir", "device", "compile", "prefetch", "checkpoint_every", "keep_checkpoints"}


def judge_sha256() -> dict:
    return {str(p.relative_to(ROOT)): sha256_file(p) for g in JUDGE_FILES for p in sorted(ROOT.glob(g))}


def changed_since_freeze(proto) -> list:
    """The hashed files (code and judge) that differ from the protocol's, or are new or gone since it was frozen.
    A protocol frozen before judge_sha256 was recorded is compared on its code alone."""
    changed = []
    for key, now in (("code_sha256", code_sha256()), ("judge_sha256", judge_sha256())):
        if key in proto:
            changed += [f for f in set(now) | set(proto[key]) if now.get(f) != proto[key].get(f)]
    return sorted(changed)


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
    try:
        fields = side.read_text().split()
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{side}: unreadable protocol hash ({type(e).__name__})") from None
    if not fields or len(fields[0]) != 64 or any(ch not in "0123456789abcdef" for ch in fields[0]):
        raise DataError(f"{side}: {'empty' if not fields else 'not a SHA256 line'}; a protocol without its hash is not frozen")
    want = fields[0]
    data = path.read_bytes()
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        raise DataError(f"{path}: SHA256 {got[:16]}… does not match the frozen {want[:16]}… in {side.name}")
    try:
        proto = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{path}: not a JSON protocol ({str(e).splitlines()[0]})") from None
    if not isinstance(proto, dict):
        raise DataError(f"{path}: a protocol must be a JSON object, not {type(proto).__name__}")
    proto["_sha256"] = got
    return proto


REQUIRED = {"name": str, "frozen_at_utc": str, "runs": dict, "evaluation": dict, "corpus": dict, "code_sha256": dict}


def require_keys(proto, path):
    """An evaluation protocol has every section the checks read; name the first one missing."""
    for key, typ in REQUIRED.items():
        if not isinstance(proto.get(key), typ):
            raise DataError(f"{path}: protocol key '{key}' missing or not a {typ.__name__}")
    for key in ("populations", "per_stratum", "context", "replicates", "alpha", "bootstrap_seed", "contrast_strata",
                "confirmation_batches", "ranking_seed", "ranking_subsets"):
        if key not in proto["evaluation"]:
            raise DataError(f"{path}: protocol key 'evaluation.{key}' missing")
    for key in ("shards_sha256", "tokenizer_sha256"):
        if key not in proto["corpus"]:
            raise DataError(f"{path}: protocol key 'corpus.{key}' missing")


def _comparable(cfg, where="") -> dict:
    try:
        full = TrainConfig(**cfg).to_dict()  # keys added since a run was made take their defaults
    except (TypeError, ValueError) as e:
        raise DataError(f"{where}: not a training config ({str(e).splitlines()[0]})") from None
    return {k: v for k, v in full.items() if k not in MACHINE_KEYS}


def check_before_confirmation(proto, runs, layout, log=print):
    """runs: [(run_dir, FinishedRun, final_ckpt)] (eval/runs.py). Raises DataError on the first broken condition;
    returns the hashed files changed since the freeze."""
    have = {r[0].name: r for r in runs}
    want = proto["runs"]
    if set(have) != set(want):
        missing, extra = sorted(set(want) - set(have)), sorted(set(have) - set(want))
        raise DataError(f"runs {sorted(have)} are not the protocol's {sorted(want)}"
                        + (f"; missing or unfinished: {', '.join(missing)}" if missing else "")
                        + (f"; not in the protocol: {', '.join(extra)}" if extra else ""))
    for name, (run_dir, summary, ckpt) in sorted(have.items()):
        got, exp = _comparable(summary.config, run_dir / "summary.json"), _comparable(want[name], f"protocol run {name}")
        if got != exp:
            diff = sorted(k for k in exp if got.get(k) != exp.get(k))
            raise DataError(f"{run_dir}: config differs from the protocol in {', '.join(diff)}")
        rows = run_dir / "official_rows.parquet"
        if summary.bpb is None or not rows.exists():
            raise DataError(f"{run_dir}: its official checkpoint check has not finished")
        meta = pq.read_schema(rows).metadata or {}
        if meta.get(b"checkpoint_sha256", b"").decode() != sha256_file(ckpt):
            raise DataError(f"{run_dir}: the official check was not made on {ckpt.name} (checkpoint SHA256 differs)")

    rec = layout.prepared()
    if rec["shards_sha256"] != proto["corpus"]["shards_sha256"] or rec["tokenizer_sha256"] != proto["corpus"]["tokenizer_sha256"]:
        raise DataError(f"{layout.root}: corpus or tokenizer differ from the protocol's")
    if "files" in proto["corpus"] and rec["files"] != proto["corpus"]["files"]:
        diff = sorted(f for f in set(rec["files"]) | set(proto["corpus"]["files"])
                      if rec["files"].get(f) != proto["corpus"]["files"].get(f))
        raise DataError(f"{layout.root}: token or tokenizer files differ from the protocol's: {', '.join(diff[:3])}")
    verify_prepared(layout.root, full=True)  # every token, offsets, refill and tokenizer file, hashed now
    changed = changed_since_freeze(proto)
    log(f"protocol {proto['name']} ({proto['_sha256'][:16]}…, frozen {proto['frozen_at_utc']}): "
        f"{len(have)} runs checked, official checks complete, corpus matches")
    if changed:
        log(f"note: {len(changed)} code files changed since the freeze: {', '.join(changed)}")
    return changed
