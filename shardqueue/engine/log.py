"""The decision log: one JSON line per record, appended and fsynced, never rewritten.

A record is written only after the checkpoint that holds its outcome, and that checkpoint
carries the records it owes the log, so a crash between the two is repaired on resume by
appending exactly the missing records: an interrupted run resumes to the same log as an
uninterrupted one (plus a `resumed` record). A torn last line (a crash inside a write, no
newline) is reported, saved beside the log (`decisions.jsonl.torn`) and cut off; complete
lines are never changed.

Records are chained: each carries `prev_sha256`, the SHA256 of the previous record's line,
so an edit of any earlier record (a loss, a target count) breaks the chain at the record
after it; resume and `reconstruct` check the whole chain.

`reconstruct` replays the queue from the rotation manifests and the records alone and
checks every field of every record against the replay.
"""
import hashlib
import json
import os
from pathlib import Path

from errors import DataError


def read_log(path, repair=False, log=print):
    """Records of the log; a torn last line is reported (and with repair=True saved aside and cut off)."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no decision log")
    data = path.read_bytes()
    if not data:
        raise DataError(f"{path}: the decision log is empty")
    end = data.rfind(b"\n") + 1
    if end < len(data):
        log(f"warning: {path}: torn last line ({len(data) - end} bytes without a newline) dropped")
        if repair:
            with open(path.with_name(path.name + ".torn"), "ab") as f:
                f.write(data[end:] + b"\n")
                f.flush()
                os.fsync(f.fileno())
            os.truncate(path, end)
    out = []
    for n, line in enumerate(data[:end].decode("utf-8", "replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            raise DataError(f"{path}: line {n} is not a JSON record") from None
        if not isinstance(rec, dict) or rec.get("seq") != len(out) + 1:
            raise DataError(f"{path}: line {n}: expected record seq {len(out) + 1}, found {rec.get('seq') if isinstance(rec, dict) else rec!r}")
        out.append(rec)
    if not out:
        raise DataError(f"{path}: the decision log holds no records")
    return out


def line_of(rec) -> str:
    """A record's line in the log (without its newline): what the next record's prev_sha256 hashes."""
    return json.dumps(rec, sort_keys=True, allow_nan=False)


def record_sha256(rec) -> str:
    return hashlib.sha256(line_of(rec).encode()).hexdigest()


def verify_chain(recs, path):
    """Every record after the first names the SHA256 of the one before it."""
    for prev, rec in zip(recs, recs[1:]):
        if rec.get("prev_sha256") != record_sha256(prev):
            raise DataError(f"{path}: record {rec.get('seq')} does not chain to record {prev.get('seq')} "
                            f"(an earlier record was edited, or the log was written by an older version)")


class DecisionLog:
    """Append-only writer; `seq` is the number of records in the file."""

    def __init__(self, path, seq=0):
        self.path, self.seq = Path(path), seq

    def write(self, rec: dict):
        if rec.get("seq") != self.seq + 1:
            raise RuntimeError(f"record seq {rec.get('seq')} written after {self.seq}")
        with open(self.path, "a") as f:
            f.write(line_of(rec) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.seq = rec["seq"]
        return rec


def describe(rec) -> str:
    """A record in one line, as a run prints it."""
    bits = [f"[{rec['seq']:>4}] {rec['event']:<12} {rec.get('shard', '')}"]
    for k in ("role", "outcome", "flagged", "unrecovered", "note", "rotation", "verdict"):
        if rec.get(k) not in (None, [], ""):
            bits.append(f"{k}={rec[k]}")
    if "deltas" in rec:
        bits.append("change (BPB) " + " ".join(f"{d}={rec['deltas'][d]:+.4f}" for d in sorted(rec["deltas"])))
    return " ".join(bits)
