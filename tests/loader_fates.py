"""The audit's accounting, written again for the loader tests (tests/test_audit_loaders_*.py) from its documented
definitions (audit/trace.py and audit/fate_table.py docstrings), over rows a reference loader made.

A reference loader gives its rows as lists of spans (source, start, end): source = pass * n + document, the
tokens [start, end) of that arrival. From them, at a horizon of `horizon` rows with `arrived` sources pulled:
- emitted: an arrival's tokens in the budget's rows; buffered: its tokens in later rows;
- a never-emitted run of an arrival belongs to the emission ending where it begins (the earliest emission for a
  run at position 0): discarded if that emission is in the budget, else buffered; an arrival never emitted at
  all is discarded (every loader here ends);
- a document's fate over its arrivals: whole (some arrival emitted whole), partial (started), waiting (never
  started, something buffered), dropped (arrived, never started, nothing buffered), not_arrived.
Nothing here imports the audit.
"""
import json
from collections import defaultdict

import numpy as np
import pyarrow.parquet as pq


def account(lengths, rows, horizon, arrived, passes=1, sources=None):
    """Per document fates and the summary's partition counts. lengths: one pass; rows: the loader's rows as span
    lists; arrived: sources pulled when the budget's last row came out (or `sources`, the ids that arrived, where
    a loader's passes do not bring every document back)."""
    n = len(lengths)
    L = np.tile(np.asarray(lengths, np.int64), passes)
    spans = defaultdict(list)
    for r, row in enumerate(rows):
        for s, a, b in row:
            if b > a:
                spans[s].append((a, b, r))
    ids = np.arange(arrived) if sources is None else np.asarray(sources, np.int64)
    own, disc, buf = (np.zeros(len(ids), np.int64) for _ in range(3))
    for i, s in enumerate(ids.tolist()):
        own[i], disc[i], buf[i] = _arrival(sorted(spans.get(s, [])), int(L[s]), horizon)
    fate = np.full(n, "not_arrived", dtype=object)
    whole, started, buffered, seen = (np.zeros(n, bool) for _ in range(4))
    for i, s in enumerate(ids.tolist()):
        d = s % n
        seen[d] = True
        whole[d] |= own[i] == L[s]
        started[d] |= own[i] > 0
        buffered[d] |= buf[i] > 0
    fate[seen] = "dropped"
    fate[seen & buffered] = "waiting"
    fate[started] = "partial"
    fate[whole] = "whole"
    counts = {"sources_arrived": len(ids), "tokens_arrived": int(L[ids].sum()), "emitted": int(own.sum()),
              "discarded": int(disc.sum()), "buffered": int(buf.sum()), "sources_started": int((own > 0).sum()),
              "sources_never_started": int((own == 0).sum())}
    return fate, counts


def _arrival(sp, length, horizon):
    """(emitted, discarded, buffered) at the horizon of one arrival emitted as spans sp (sorted by start)."""
    if not sp:
        return 0, length, 0
    emitted = sum(b - a for a, b, r in sp if r < horizon)
    buffered = sum(b - a for a, b, r in sp if r >= horizon)
    discarded = 0
    first = min(r for _a, _b, r in sp)
    pos, owner = 0, None
    for a, b, r in sp + [(length, length, None)]:
        if a > pos:
            who = first if owner is None else owner
            if who < horizon:
                discarded += a - pos
            else:
                buffered += a - pos
        if b >= pos:
            pos, owner = b, r
    return emitted, discarded, buffered


def cut(pieces, size):
    """Concatenated pieces (source, start, end), or None for one inserted marker token, cut into rows of `size`
    tokens: each row a list of spans (markers left out). The last, shorter row is returned separately."""
    rows, row, room = [], [], size
    for p in pieces:
        s, a, b = (None, 0, 1) if p is None else p
        while b - a > 0:
            k = min(room, b - a)
            if s is not None:
                row.append((s, a, a + k))
            a, room = a + k, room - k
            if room == 0:
                rows.append(row)
                row, room = [], size
    return rows, (row, size - room)


def audit_run(audit_main, lengths_file, out, packer, R, targets, *extra):
    """python -m audit on a length file for one packer; (its summary, the fates table as {column: list})."""
    argv = ["--lengths", str(lengths_file), "--row-capacity", str(R), "--buffer", "8", "--targets", str(targets),
            "--packers", packer, "--permutations", "0", "--no-figures", "--out", str(out), *extra]
    assert audit_main(argv) == 0
    s = json.loads((out / "summary.json").read_text())["packers"][packer]
    assert "refused" not in s, s.get("refused")
    return s, pq.read_table(out / f"fates_{packer}.parquet").to_pydict()


def compare(s, fates, want_fates, want_counts):
    """The audit's partition counts, never-started set and every document's fate against the reference's."""
    got = {k: s[k] for k in want_counts}
    assert got == want_counts
    fate = np.asarray(fates["fate"], dtype=object)
    assert list(fates["doc"]) == list(range(len(want_fates)))
    never = set(np.flatnonzero(np.isin(fate, ("waiting", "dropped"))).tolist())
    assert never == set(np.flatnonzero(np.isin(want_fates, ("waiting", "dropped"))).tolist())
    bad = np.flatnonzero(fate != want_fates)
    assert not len(bad), [(int(d), fate[d], want_fates[d]) for d in bad[:5]]
    assert s["partition_holds"]
