"""The audit from Python: trace your own packer on your corpus's lengths.

  from audit.api import trace
  from mypackers import pack            # pack(docs) yields rows; docs: an iterator of token-id arrays
  print(trace(pack, "my_lengths.txt", row_capacity=2049)["verdict"])

`trace` returns the packer's summary (the keys of summary.json's packers.<name>, with
by_label, position_exposure, protected, trace) plus the horizon and the verdict sentence.
`python -m audit --lengths F --trace MODULE:CALLABLE` is the same from the command line,
with the report, the figures and the comparison to the paper's packers.
"""
import tempfile
from pathlib import Path

import numpy as np

from audit.adapters import Spec, check_own_name
from audit.lengths_file import read_stream
from audit.pipeline import StreamInput, audit_packer, horizon
from audit.replay import PAPER_TARGETS
from audit.report import overdrawn, verdict
from audit.topology import audit_topology, check_topology, file_count, file_of, parse_split, worker_streams
from errors import DataError

PAPER_SHARE = PAPER_TARGETS / 631_241_817  # the paper's budget as a share of its corpus: one pass or less


def trace(packer, lengths, row_capacity=2049, buffer=1000, targets=None, labels=None, refill_docs=128, name=None,
          ranks=1, loader_workers=1, split_by="document"):
    """Audit `packer` on `lengths` (a length file, or an array of lengths in arrival order).

    targets: the budget (default: the paper's share of one pass); buffer: the B of the Proposition's
    protected set that the report counts. ranks x loader_workers > 1 adds 'topology': the same budget
    over that many worker streams, each its own packer (audit/topology.py; split_by as python -m audit's
    --split-by, but these lengths come with no files: 'file-group:G' and 'file' are refused). Raises DataError on
    bad input."""
    if isinstance(lengths, (str, Path)):
        L, refills, file_labels = read_stream(lengths)
        labels = file_labels if labels is None else labels
    else:
        L, refills = np.asarray(lengths, dtype=np.int64), None
        if L.ndim != 1 or not len(L) or L.min() < 1:
            raise DataError("lengths: a non-empty 1-D array of lengths, each at least 1")
    if labels is not None and len(labels) != len(L):
        raise DataError(f"labels: {len(labels):,} labels for {len(L):,} documents; give one label per document")
    if refills is None:
        refills = np.append(np.arange(0, len(L), refill_docs), len(L))
    stream = StreamInput("lengths", "lengths", L, refills, None if labels is None else np.asarray(labels, dtype=object))
    R = row_capacity
    targets = targets or int(PAPER_SHARE * stream.tokens) // (R - 1) * (R - 1)
    if targets < R - 1 or targets % (R - 1):
        raise DataError(f"targets {targets}: a positive multiple of R - 1 = {R - 1}")
    rows = targets // (R - 1)
    for what, v in (("ranks", ranks), ("loader_workers", loader_workers)):
        if v < 1:
            raise DataError(f"{what} {v}: must be positive")
    group, W = parse_split(split_by).for_ranks(ranks), worker_streams(ranks, loader_workers)
    check_topology(stream.n, W, group, file_of(stream), file_count(stream))
    name = name or getattr(packer, "__name__", "packer")
    check_own_name(name, "trace: ")  # the audit's own packer of that name would be audited instead
    spec = Spec(name, lambda R_, B_, w: packer, why_not="its rule is unknown to the audit: the Proposition is not checked")
    with tempfile.TemporaryDirectory() as d:
        s = audit_packer(stream, name, rows, R, buffer, Path(d), user=spec)
        topo = audit_topology(stream, [name], rows, R, buffer, Path(d), ranks, loader_workers, group, refill_docs,
                              spec) if W > 1 else None
    if "refused" in s:
        raise DataError(f"{name}: {s['refused']}")
    if not s["partition_holds"]:  # its figures would be read as a finding about a packer that works
        raise DataError(f"{name}: {overdrawn(s)}")
    passes, sentence = horizon(targets, stream)
    summary = {"targets": targets, "row_capacity": R, "horizon": {"passes": passes, "sentence": sentence},
               "packers": {name: s}}
    s.pop("plot", None)
    out = {**s, "horizon": summary["horizon"], "verdict": verdict(summary)}
    if topo is not None:
        out["topology"] = topo
    return out
