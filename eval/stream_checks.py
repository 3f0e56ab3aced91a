"""Audit each evaluation stream with the CPU replay before any scoring (sections 5.4 and 5.6).

The confirmation stream must emit no source longer than R (so its score is about the
original population, which the window diagnostic is not); the official development stream
must emit none longer than 4096 at its full length (scaled with the context), which is why
its rankings cannot contain the window effects on longer sources. The replay is the
audit's (`audit.replay.Replay`, the packer code that trains); the fingerprint of its
materialized rows must equal the one every checkpoint's scoring records.
"""
import hashlib

import numpy as np

from audit.replay import Replay
from errors import DataError
from loaders.packers import materialize


def _fingerprint(raw, stream, R, rows_per_chunk=64):
    """SHA256 of the int64 input/target rows, hashed in whole-row chunks (same bytes as the scorer hashes)."""
    h = hashlib.sha256()
    ends = np.cumsum(raw["emitted"])  # tokens up to each event's end: a chunk ends where a multiple of the rows does
    cuts = np.searchsorted(ends, np.arange(rows_per_chunk * R, int(ends[-1]) if len(ends) else 0, rows_per_chunk * R),
                           side="right")
    for chunk in np.split(raw, cuts):
        if len(chunk):
            h.update(materialize(chunk, stream, R).astype(np.int64).tobytes())
    return h.hexdigest()


def audit_stream(stream, rows, R, B, limit):
    """Replay `rows` rows of the original packer; record the longest emitted source against `limit`."""
    rep = Replay(stream, "original", rows, R, B)
    ev = rep.events[rep.events["emitted"] > 0]
    over = ev[ev["source_len"] > limit]
    return {
        "stream": stream.name, "rows": int(rows), "targets": int(rows * (R - 1)), "R": int(R), "buffer": int(B),
        "max_source_len": int(limit), "longest_emitted": int(ev["source_len"].max()) if len(ev) else 0,
        "emissions_over": int(len(over)), "sources_over": int(len(np.unique(over["source_id"]))),
        "first_over_target_offset": int(over["target_offset"][0]) if len(over) else None,
        "fingerprint": _fingerprint(rep.raw, stream, R),
        "holds": len(over) == 0,
    }


def audit_streams(plan, streams, eval_rows, log=print):
    """streams: {"dev": official development stream, "conf": confirmation stream}. Returns the records."""
    R, B = plan["context"] + 1, plan["buffer"]
    checks = plan["stream_checks"]
    out = {}
    for p, rows in (("dev", checks["dev"]["rows"]), ("conf", plan["confirmation_batches"] * eval_rows)):
        rec = audit_stream(streams[p], rows, R, B, checks[p]["max_source_len"])
        out[p] = {**rec, "section": checks[p]["section"], "claim": checks[p]["claim"]}
        log(f"stream check ({checks[p]['section']}) {p}: {rec['targets']:,} targets, longest emitted source "
            f"{rec['longest_emitted']} (limit {rec['max_source_len']}): {'holds' if rec['holds'] else 'FAILS'}")
    return out


def require(records):
    """One line naming the first failed check; nothing is scored after it."""
    for p, r in records.items():
        if not r["holds"]:
            raise DataError(
                f"{r['stream']}: section {r['section']} check fails before scoring: {r['sources_over']} source(s) longer "
                f"than {r['max_source_len']} emitted in the first {r['targets']:,} targets (first at target "
                f"{r['first_over_target_offset']:,}, longest {r['longest_emitted']}); {r['claim']} does not hold "
                f"at R={r['R']}, B={r['buffer']}")
