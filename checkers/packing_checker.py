#!/usr/bin/env python3
"""Independent packing checker, standard library only (runs as `python3 -I -S`).

Its own implementations of the four packers over length streams: a literal, unsorted one
(the buffer is a list scanned on every selection, exactly as the baseline's prose description
reads) that the self-test runs on hand-worked and random streams, and a bucketed one that
--events runs, whose time grows like the input (events + arrivals, times a logarithm); the
self-test checks that the two agree on random streams.

  python3 -I -S checkers/packing_checker.py --self-test
  python3 -I -S checkers/packing_checker.py --events runs/audit/events_original.csv \\
      --lengths runs/audit/stream_lengths.txt --packer original [--row-capacity 2049 --buffer 1000]

--lengths holds one refill batch per line (space-separated BOS-inclusive lengths, each >= 1),
one pass of the stream; the stream repeats. Every column of every event is compared (the
selection fields and the derived source_len, row, row_offset, target_offset); an empty or
torn export is refused, and with --rows N or --summary runs/audit/summary.json the export
must cover exactly the declared rows (a --summary also gives R and B, which a flag may only repeat).

What it will allocate is bounded before the replay starts: an event emits 1..R tokens (so
the rows replayed are at most the events in the file), B is at most MAX_BUFFER spans, a
refill line at most MAX_REFILL lengths, the file at most MAX_LENGTHS lengths, and
segment_first's segments per pass at most MAX_SEGMENTS; beyond these it refuses in one line
instead of running without end or exhausting memory. Before a check expected to take more
than a few seconds it says how long it expects. Files must be UTF-8 text.
"""
import argparse
import array
import bisect
import csv
import heapq
import json
import math
import random
import sys
import time

PACKERS = ("original", "lossless", "segment_first", "random_span")
RANDOM_SPAN_SEED = 314159265
FIELDS = ("source_id", "span_start", "emitted", "discarded", "kind", "lead_bos")
DERIVED = ("source_len", "row", "row_offset", "target_offset")
ALL_FIELDS = FIELDS + DERIVED
MAX_BUFFER = 1_000_000  # spans held as Python lists: about 100 MB; the paper's B is 1000
MAX_SEGMENTS = 10_000_000  # segment_first's buffered segments of one pass of the stream
MAX_REFILL = 1_000_000  # lengths on one refill line: the buffer holds at most B + one refill of spans
MAX_LENGTHS = 25_000_000  # lengths in the whole file (one pass): parsed in about 9 s at PARSE_S
# measured costs on one core (for the expected-time note): parsing a length (3.6e-7 s measured on a
# shared two-core machine, 1.5e-7 s on an idle one: the note takes the slower), replaying an arrival,
# reading and comparing an event
PARSE_S, ARRIVAL_S, EVENT_S = 3.6e-7, 1.5e-6, 6e-6


def replay_literal(refills, packer, R, B, n_rows, seed=RANDOM_SPAN_SEED):
    """The reference: events (source_id, span_start, emitted, discarded, kind, lead_bos) of n_rows rows,
    scanning the whole buffer list on every selection, and the arrivals as
    (event_index_before_which, source_id, length). Cost: selections x buffer.
    """
    n = sum(len(r) for r in refills)
    starts = _refill_starts(refills)
    rng = random.Random(seed)
    buf = []  # [source_id, span_start, lead_bos, current_length]
    events, arrivals = [], []
    k = passes = 0
    for _ in range(n_rows):
        pos = 0
        while pos < R:
            while len(buf) < B:
                first = passes * n + starts[k]
                for j, L in enumerate(refills[k]):
                    src = first + j
                    arrivals.append((len(events), src, L))
                    if packer == "segment_first" and L > R:
                        buf.append([src, 0, 0, R])
                        s = R
                        while s < L:
                            e = min(s + R - 1, L)
                            buf.append([src, s, 1, e - s + 1])
                            s = e
                    else:
                        buf.append([src, 0, 0, L])
                k += 1
                if k == len(refills):
                    k, passes = 0, passes + 1
            rem = R - pos
            best = None
            for i in range(len(buf)):
                if buf[i][3] <= rem and (best is None or buf[i][3] > buf[best][3]):
                    best = i
            if best is not None:
                src, start, lead, L = buf.pop(best)
                events.append((src, start, L, 0, "fit", lead))
                pos += L
                continue
            short = 0
            for i in range(1, len(buf)):
                if buf[i][3] < buf[short][3]:
                    short = i
            src, start, lead, L = buf[short]
            if packer == "lossless":
                buf[short] = [src, start + rem, 0, L - rem]
                events.append((src, start, rem, 0, "crop", lead))
            else:
                del buf[short]
                if packer == "random_span":
                    events.append((src, 1 + rng.randrange(L - rem + 1), rem, L - rem, "crop", 1))
                else:
                    events.append((src, start, rem, L - rem, "crop", lead))
            pos = R
    return events, arrivals


def _refill_starts(refills):
    """Index of each refill's first source within a pass (a running sum, computed once)."""
    out, t = [], 0
    for r in refills:
        out.append(t)
        t += len(r)
    return out


def replay(refills, packer, R, B, n_rows, seed=RANDOM_SPAN_SEED, with_arrivals=True):
    """The same events (and arrivals) as replay_literal, in time that grows like the input: the buffer is
    held by current length (_LengthBuffer), so "longest that fits, first in the list" is one bisect and one
    heap pop, "shortest, first in the list" the first length's heap. The self-test compares it with
    replay_literal.
    """
    n = sum(len(r) for r in refills)
    starts = _refill_starts(refills)
    rng = random.Random(seed)
    buf = _LengthBuffer()
    events, arrivals = [], []
    count = k = passes = 0  # count: spans buffered
    for _ in range(n_rows):
        fill = 0
        while fill < R:
            while count < B:
                count += buf.refill(refills[k], passes * n + starts[k], R, packer == "segment_first",
                                    arrivals if with_arrivals else None, len(events))
                k += 1
                if k == len(refills):
                    k, passes = 0, passes + 1
            rem = R - fill
            i = bisect.bisect_right(buf.present, rem)
            if i:
                L, pos = buf.take(i - 1)
                src, start, lead = buf.spans.pop(pos)
                count -= 1
                events.append((src, start, L, 0, "fit", lead))
                fill += L
                continue
            L, pos = buf.take(0)
            src, start, lead = buf.spans[pos]
            if packer == "lossless":
                buf.spans[pos] = (src, start + rem, 0)
                buf.put_back(L - rem, pos)
                events.append((src, start, rem, 0, "crop", lead))
            else:
                del buf.spans[pos]
                count -= 1
                if packer == "random_span":
                    events.append((src, 1 + rng.randrange(L - rem + 1), rem, L - rem, "crop", 1))
                else:
                    events.append((src, start, rem, L - rem, "crop", lead))
            fill = R
    return events, arrivals


class _LengthBuffer:
    """replay's buffer, by current length: `present` is the sorted list of lengths some span has, and each
    length keeps a min-heap of list positions (insertion numbers; a lossless suffix keeps its number, as it
    keeps its place in the literal list). A new arrival's number is larger than every buffered one, so it is
    appended to its heap without sifting."""

    def __init__(self):
        self.heaps, self.present, self.spans = {}, [], {}  # length -> [position], sorted lengths, position -> span
        self.nxt = 0

    def arrive(self, length, entry):
        """A new span (source, start, lead_bos) of this length, at the end of the list."""
        self.spans[self.nxt] = entry
        h = self.heaps.get(length)
        if h is None:
            self.heaps[length] = [self.nxt]
            bisect.insort(self.present, length)
        else:
            h.append(self.nxt)  # the largest number so far: still a heap
        self.nxt += 1

    def refill(self, refill, first, R, seg, arrivals, n_events):
        """One refill's sources (the first has id `first`) buffered, segment first in R-token chunks with seg;
        each arrival noted in `arrivals` (unless None) before event n_events. Returns the spans buffered."""
        added = 0
        for j, L in enumerate(refill):
            src = first + j
            if arrivals is not None:
                arrivals.append((n_events, src, L))
            if seg and L > R:
                self.arrive(R, (src, 0, 0))
                added, s = added + 1, R
                while s < L:
                    e = min(s + R - 1, L)
                    self.arrive(e - s + 1, (src, s, 1))
                    added, s = added + 1, e
            else:
                self.arrive(L, (src, 0, 0))
                added += 1
        return added

    def take(self, i):
        """(length, position) of the first-listed span of the i-th shortest length, removed from its heap."""
        length = self.present[i]
        h = self.heaps[length]
        pos = heapq.heappop(h)
        if not h:
            del self.heaps[length]
            del self.present[i]
        return length, pos

    def put_back(self, length, pos):
        """A cropped span's suffix, at its old place in the list order, under its new length."""
        h = self.heaps.get(length)
        if h is None:
            self.heaps[length] = [pos]
            bisect.insort(self.present, length)
        else:
            heapq.heappush(h, pos)  # keeps its place in the list order


def protected_violation(events, arrivals, R, B):
    """First event that selects a source among the largest B-1 long keys arrived so far."""
    arrived, a = [], 0
    for e, ev in enumerate(events):
        while a < len(arrivals) and arrivals[a][0] <= e:
            arrived.append(arrivals[a])
            a += 1
        long_keys = sorted((L, src) for _, src, L in arrived if L > R)
        protected = {src for _, src in long_keys[len(long_keys) - (B - 1):]} if B > 1 else set()
        if ev[0] in protected:
            return e
    return None


def pass_bounds(counts_at_least, B):
    return [math.ceil(B / r) if r else None for r in counts_at_least]


# ---- self-test ---------------------------------------------------------------------
# Hand-worked: R=4, B=2, one pass of lengths [3, 5 | 2, 6] in two refills of two.
HAND = {
    "original": [(0, 0, 3, 0, "fit", 0), (2, 0, 1, 1, "crop", 0), (1, 0, 4, 1, "crop", 0),
                 (4, 0, 3, 0, "fit", 0), (5, 0, 1, 4, "crop", 0)],
    "lossless": [(0, 0, 3, 0, "fit", 0), (2, 0, 1, 0, "crop", 0), (2, 1, 1, 0, "fit", 0),
                 (1, 0, 3, 0, "crop", 0), (1, 3, 2, 0, "fit", 0), (4, 0, 2, 0, "crop", 0)],
    "segment_first": [(1, 0, 4, 0, "fit", 0), (0, 0, 3, 0, "fit", 0), (1, 4, 1, 1, "crop", 1),
                      (3, 0, 4, 0, "fit", 0)],
}
HAND_ROWS = {"original": 3, "lossless": 3, "segment_first": 3}


def self_test():
    checks = []

    def check(name, ok):
        checks.append(ok)
        print(f"{'PASS' if ok else 'FAIL'}  {name}")

    refills = [[3, 5], [2, 6]]
    for packer, want in HAND.items():
        got, _ = replay_literal(refills, packer, 4, 2, HAND_ROWS[packer])
        check(f"hand-worked example, {packer}", got == want)
    rng = random.Random(11)
    for packer in PACKERS:
        same = True
        for _ in range(80):
            R, B = rng.randint(2, 20), rng.randint(1, 10)
            lengths = [rng.choice([1, 2, R // 2 + 1, R - 1, R, R + 1, 2 * R, 3 * R + 1]) for _ in range(rng.randint(1, 30))]
            size = rng.randint(1, 6)
            refs = [lengths[i:i + size] for i in range(0, len(lengths), size)]
            rows = rng.randint(1, 30)
            same &= replay(refs, packer, R, B, rows) == replay_literal(refs, packer, R, B, rows)
        check(f"fast replay == literal list scan on 80 seeded random streams, {packer}", same)
    o, _ = replay(refills, "original", 4, 2, 3)
    r, _ = replay(refills, "random_span", 4, 2, 3)
    same = all(a[0] == b[0] and a[2:5] == b[2:5] for a, b in zip(o, r)) and len(o) == len(r)
    valid = all(b[1] == 0 or 1 <= b[1] <= (refills[0] + refills[1])[b[0] % 4] - b[2] + 1 for b in r)
    check("random spans: same sources, lengths and rules as original; starts in range", same and valid)
    rng = random.Random(7)
    for packer in ("original", "lossless"):
        ok = True
        for _ in range(60):
            R, B = rng.randint(2, 24), rng.randint(1, 12)
            lengths = [rng.choice([1, R // 2 + 1, R, R + 1, 2 * R, 3 * R + 1]) for _ in range(rng.randint(1, 30))]
            size = rng.randint(1, 6)
            refs = [lengths[i:i + size] for i in range(0, len(lengths), size)]
            ev, arr = replay_literal(refs, packer, R, B, rng.randint(1, 25))
            ok &= protected_violation(ev, arr, R, B) is None
            # mass: everything emitted or discarded came from arrivals
            ok &= sum(e[2] + e[3] for e in ev) <= sum(a[2] for a in arr)
        check(f"Proposition on 60 seeded random streams, {packer}", ok)
    check("repeated-corpus bounds for the paper's census (2, 6, 26, 112, 1000)",
          pass_bounds([789, 196, 39, 9, 1], 1000) == [2, 6, 26, 112, 1000])
    # a small repeated corpus: one source longer than R among short ones, B = 5. Each pass
    # adds an occurrence with a larger key, so no occurrence can begin before the 5th arrival
    for packer in ("original", "lossless"):
        ev, arr = replay_literal([[20, 2, 3]], packer, 8, 5, 60)
        e_first = next((i for i, e in enumerate(ev) if e[0] % 3 == 0), None)
        long_before = sum(1 for a in arr if a[2] > 8 and (e_first is None or a[0] <= e_first))
        check(f"repeated small corpus, {packer}: the long source begins only after its B-th arrival "
              f"(first served after {long_before} arrivals)", e_first is not None and long_before >= 5)
    print(f"{sum(checks)} passed, {len(checks) - sum(checks)} failed")
    return 0 if all(checks) else 1


class InputError(Exception):
    """Bad input, described in one line naming the file."""


def read_refills(path, counted=None):
    """Refill batches of positive integer lengths; one line per batch.

    Bounded before anything is parsed: every line is first split into at most MAX_REFILL + 1
    fields (one more means the refill is too large to hold) and counted, and a file of more than
    MAX_LENGTHS lengths is refused before a single length is converted; counted(n), when given,
    hears the count before the parse (the expected-time note). Lengths are kept in int64 arrays
    (8 bytes each).
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise InputError(f"{path}: cannot read the lengths file ({e.strerror})")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text")
    total = 0
    for i, line in enumerate(lines, start=1):
        k = len(line.split(None, MAX_REFILL))
        if k > MAX_REFILL:
            raise InputError(f"{path}: line {i} holds more than {MAX_REFILL:,} lengths; one refill line is at most "
                             f"{MAX_REFILL:,} (the checker holds B + one refill of spans)")
        total += k
        if total > MAX_LENGTHS:
            raise InputError(f"{path}: more than {MAX_LENGTHS:,} lengths; the checker reads at most {MAX_LENGTHS:,} "
                             f"(about {MAX_LENGTHS * PARSE_S:.0f} s)")
    if counted:
        counted(total)
    refills = []
    for i, line in enumerate(lines, start=1):
        parts = line.split()
        if not parts:
            continue
        try:
            batch = array.array("q", map(int, parts))
        except ValueError:
            raise InputError(f"{path}: line {i}: lengths must be integers")
        except OverflowError:
            raise InputError(f"{path}: line {i}: a length does not fit in 64 bits")
        if min(batch) < 1:  # a zero-length source can never fill a row: the replay would loop forever
            raise InputError(f"{path}: line {i}: length {min(batch)} < 1 (every source holds at least its BOS)")
        refills.append(batch)
    if not refills:
        raise InputError(f"{path}: no lengths (empty file)")
    return refills


def expected_columns(events, R):
    """The derived columns of every event, as the audit exports them."""
    out, pos = [], 0
    for ev in events:
        row, off = divmod(pos, R)
        out.append({"row": row, "row_offset": off, "target_offset": row * (R - 1) + max(off - 1, 0)})
        pos += ev[2]
    return out


def read_events(path):
    try:
        with open(path, newline="", encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read the events file ({e.strerror})")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text")
    if text and not text.endswith("\n"):
        raise InputError(f"{path}: last line is torn (no final newline): the export was cut short")
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        raise InputError(f"{path}: empty export (no header)")
    header, body = rows[0], rows[1:]
    missing = [c for c in ALL_FIELDS if c not in header]
    if missing:
        raise InputError(f"{path}: missing columns {', '.join(missing)}")
    if not body:
        raise InputError(f"{path}: no events (an empty export matches nothing)")
    out = []
    for i, r in enumerate(body, start=2):
        if len(r) != len(header):
            raise InputError(f"{path}: line {i}: {len(r)} fields, the header has {len(header)}")
        rec = dict(zip(header, r))
        for c in ALL_FIELDS:
            if c == "kind":
                if rec[c] not in ("fit", "crop"):
                    raise InputError(f"{path}: line {i}: kind {rec[c]!r} is not fit or crop")
                continue
            try:
                rec[c] = int(rec[c])
            except ValueError:
                raise InputError(f"{path}: line {i}: {c} {rec[c]!r} is not an integer")
        out.append(rec)
    return out


def compare(events_csv, lengths_path, packer, R, B, rows=None):
    """Every column of every event against this replay; the export must cover `rows` rows."""
    events = read_events(events_csv)

    def expect(n_lengths):  # said before the lengths are parsed, so a long check says so at once
        t = n_lengths * PARSE_S + len(events) * EVENT_S + (B + len(events)) * ARRIVAL_S
        if t > 3:
            print(f"note: {n_lengths:,} lengths, {len(events):,} events at B={B:,}: expect about {t:.0f} s",
                  file=sys.stderr)

    refills = read_refills(lengths_path, expect)
    for i, r in enumerate(events):
        if not 1 <= r["emitted"] <= R:  # a span never emits more than one row: rows replayed <= events
            raise InputError(f"{events_csv}: event {i}: emitted {r['emitted']} is not between 1 and R={R}")
    if packer == "segment_first":
        segments = sum(1 if L <= R else 1 + -(-(L - R) // (R - 1)) for b in refills for L in b)
        if segments > MAX_SEGMENTS:
            raise InputError(f"{lengths_path}: {segments:,} segments per pass at R={R}, more than the checker "
                             f"holds ({MAX_SEGMENTS:,})")
    total = sum(r["emitted"] for r in events)
    if total % R:
        raise InputError(f"{events_csv}: events fill {total} tokens, not whole rows of {R}")
    if rows is not None and total // R != rows:
        print(f"MISMATCH: the export covers {total // R} rows, {rows} were declared")
        return 1
    n = sum(len(b) for b in refills)
    flat = array.array("q")
    for b in refills:
        flat.extend(b)
    want, _ = replay(refills, packer, R, B, total // R, with_arrivals=False)
    derived = expected_columns(want, R)
    for i, (r, w) in enumerate(zip(events, want)):
        exp = dict(zip(FIELDS, w))
        exp.update(derived[i], source_len=flat[w[0] % n])
        diff = [c for c in ALL_FIELDS if r[c] != exp[c]]
        if diff:
            c = diff[0]
            print(f"MISMATCH at event {i}, column {c}: file {r[c]!r} != checker {exp[c]!r}")
            return 1
    if len(events) != len(want):
        print(f"MISMATCH: file has {len(events)} events, checker {len(want)}")
        return 1
    print(f"match: {len(events)} events, {total // R} rows, all {len(ALL_FIELDS)} columns ({packer}, R={R}, B={B})")
    return 0


def declared(summary_path, packer):
    """The audit's own rows, R and B for `packer` (summary.json's packers.PACKER)."""
    try:
        with open(summary_path, encoding="utf-8") as f:
            s = json.load(f)["packers"][packer]
        return {"rows": int(s["rows"]), "row_capacity": int(s["row_capacity"]), "buffer": int(s["buffer"])}
    except OSError as e:
        raise InputError(f"{summary_path}: cannot read the audit summary ({e.strerror})")
    except (ValueError, KeyError, TypeError):  # UnicodeDecodeError is a ValueError
        raise InputError(f"{summary_path}: not an audit summary with packers.{packer}: rows, row_capacity and buffer")


def settled(flag, given, audit, default, summary_path):
    """A setting: the flag's value, else the audit's (--summary), else the default; a flag that contradicts the
    audit is refused (the replay would differ from the audit's at the first event and read as a MISMATCH)."""
    if given is not None and audit is not None and given != audit:
        raise InputError(f"{flag} {given}: the audit in {summary_path} ran at {audit}; give that, or leave {flag} out")
    return given if given is not None else audit if audit is not None else default


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--self-test", action="store_true", help="hand-worked examples, the Proposition, pass bounds")
    ap.add_argument("--events", help="events CSV exported by the audit")
    ap.add_argument("--lengths", help="stream lengths file: one refill batch per line")
    ap.add_argument("--packer", choices=PACKERS, default="original", help="packer that produced the events")
    ap.add_argument("--row-capacity", type=int, help="R = context + 1 (default: the --summary's, else 2049)")
    ap.add_argument("--buffer", type=int, help="minimum buffered spans B (default: the --summary's, else 1000)")
    cov = ap.add_mutually_exclusive_group()
    cov.add_argument("--rows", type=int, help="rows the export must cover")
    cov.add_argument("--summary", help="audit summary.json: the export must cover its declared rows, at its R and B")
    a = ap.parse_args(argv)
    if a.self_test:
        return self_test()
    if not (a.events and a.lengths):
        ap.error("give --self-test, or both --events and --lengths")
    try:
        audit = declared(a.summary, a.packer) if a.summary else {}
        R = settled("--row-capacity", a.row_capacity, audit.get("row_capacity"), 2049, a.summary)
        B = settled("--buffer", a.buffer, audit.get("buffer"), 1000, a.summary)
        if R < 2:
            raise InputError(f"--row-capacity {R}: must be at least 2")
        if not 1 <= B <= MAX_BUFFER:
            raise InputError(f"--buffer {B}: must be between 1 and {MAX_BUFFER:,} (spans the checker holds)")
        if a.rows is not None and a.rows < 1:
            raise InputError(f"--rows {a.rows}: must be positive")
        rows = audit.get("rows", a.rows)
        if rows is None:
            print("note: no --rows or --summary given: coverage of the declared budget is not checked", file=sys.stderr)
        return compare(a.events, a.lengths, a.packer, R, B, rows)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
