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
checks every field of every record against the replay. compare_records compares logged records with
re-executed ones (`reconstruct --execute`, and a resume that re-executes the records after an older
checkpoint when the newest is damaged).
"""
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from errors import DataError
from records.reexecution import Difference


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
    """Append-only writer; `seq` is the number of records written or passed over. held: the records the file
    already holds past `seq` (a resume re-executing them from an older checkpoint): written again, each is passed
    over, never appended twice; the caller has checked it equals the file's."""

    def __init__(self, path, seq=0, held=0):
        self.path, self.seq, self.held = Path(path), seq, held

    def write(self, rec: dict):
        if rec.get("seq") != self.seq + 1:
            raise RuntimeError(f"record seq {rec.get('seq')} written after {self.seq}")
        if rec["seq"] <= self.held:
            self.seq = rec["seq"]
            return rec
        with open(self.path, "a") as f:
            f.write(line_of(rec) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.seq = rec["seq"]
        return rec


# fields that legitimately differ between two executions of one run, at any depth of a record
NOT_COMPARED = (
    "time",  # the wall clock when a record was made
    "seconds",  # wall seconds of training (a train record's, inside spent and the decay's trained list)
    "prev_sha256",  # the SHA256 of the previous record's line, which holds its time
    "machine",  # where a run (or its re-execution) ran; decides the mode, not a result
)
PARAMETER_HASHES = ("params_sha256",)  # bitwise only on the machine that made the run
ABSENT = "<absent>"


def difference(seq, event, field, logged, made) -> Difference:
    """The first record that re-executed differently, as the re-execution record keeps it, with its one line."""
    return Difference(seq, event, field, logged, made,
                      f"record {seq} ({event}): {field}: logged {logged!r}, re-executed {made!r}")


@dataclass
class Comparison:
    difference: Difference | None  # the first, in log order
    largest: tuple  # (absolute difference, seq, field) of the floats compared: how close the numbers came


def _walk(a, b, path, tol, hashes, note):
    """The first differing field under path, as (field, logged, made), or None; note(gap, field) sees
    every float difference."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k in NOT_COMPARED or (not hashes and k in PARAMETER_HASHES):
                continue
            d = _walk(a.get(k, ABSENT), b.get(k, ABSENT), f"{path}.{k}" if path else k, tol, hashes, note)
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path} (length)", len(a), len(b)
        for i, (x, y) in enumerate(zip(a, b)):
            d = _walk(x, y, f"{path}[{i}]", tol, hashes, note)
            if d:
                return d
        return None
    if isinstance(a, float) and isinstance(b, float):
        note(abs(a - b), path)
        return None if abs(a - b) <= tol else (path, a, b)
    return None if type(a) is type(b) and a == b else (path, a, b)


def compare_records(logged, made, tolerance=0.0, hashes=True) -> Comparison:
    """Logged records against re-executed ones, pairwise in order: the first difference (a record the
    other side lacks included) and the largest float difference. tolerance: absolute, on floats (0:
    bitwise); hashes: compare parameter SHA256s."""
    largest = (0.0, None, None)
    for a, b in zip(logged, made):
        def note(gap, field, seq=a.get("seq")):
            nonlocal largest
            if gap > largest[0]:
                largest = (gap, seq, field)

        d = _walk(a, b, "", tolerance, hashes, note)
        if d:
            return Comparison(difference(a.get("seq"), a.get("event"), *d), largest)
    n = min(len(logged), len(made))
    if len(logged) > n:
        a = logged[n]
        return Comparison(difference(a.get("seq"), a.get("event"), "(the whole record)", a.get("event"),
                                     "none: the re-execution ended before it"), largest)
    if len(made) > n:
        b = made[n]
        return Comparison(difference(b.get("seq"), b.get("event"), "(the whole record)",
                                     "none: the log ends before it", b.get("event")), largest)
    return Comparison(None, largest)


def describe(rec) -> str:
    """A record in one line, as a run prints it."""
    bits = [f"[{rec['seq']:>4}] {rec['event']:<12} {rec.get('shard', '')}"]
    for k in ("role", "outcome", "flagged", "unrecovered", "note", "rotation", "verdict"):
        if rec.get(k) not in (None, [], ""):
            bits.append(f"{k}={rec[k]}")
    if "deltas" in rec:
        bits.append("change (BPB) " + " ".join(f"{d}={rec['deltas'][d]:+.4f}" for d in sorted(rec["deltas"])))
    return " ".join(bits)
