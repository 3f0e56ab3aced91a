"""Audit quantities from a replay: mass partition, crops, coverage, retention, protection."""
import numpy as np

from audit.compute import finish, lead_flags, protected_of, protected_unstarted
from audit.proposition import PropositionWatch
from audit.strata import STRATA, stratum_labels, stratum_of  # noqa: F401 (the audit's strata, re-exported)
from audit.tally import Tally



def summarize_replay(rep) -> dict:
    """The summary of an in-memory Replay, through the same Tally and watch as the streaming audit."""
    tally = Tally(rep.R, rep.rows * (rep.R - 1))
    arrived = rep.arrived_lengths()
    tally.arrive(0, arrived, None)
    ev = rep.events
    tally.add_events(ev, *lead_flags(rep.packer, ev["lead_bos"]))
    watch = PropositionWatch(rep.B, rep.R)
    n = rep.stream.n
    arrivals = [(before, first, rep.stream.lengths[np.arange(first, first + cnt) % n], None)
                for before, first, cnt in rep.refill_log]
    watch.feed(rep.raw.tolist(), arrivals)
    tally.retire(rep.core.buffered_sources())
    core = rep.core
    prot = protected_of(watch, protected_unstarted(tally.live, watch.ps.members))
    out = finish(tally, prot, rep.packer, rep.rows, rep.R, rep.B, core.pass_idx + (1 if core.refill_idx else 0),
                  core.added_bos, core.buffered_tokens(), [])
    out.pop("plot")
    return out


def pass_bounds(hist_lengths, hist_counts, thresholds, B):
    """Repeated-corpus table: sources per pass with length >= t, earliest possible pass ceil(B/r)."""
    L, C = np.asarray(hist_lengths), np.asarray(hist_counts)
    rows = []
    for t in thresholds:
        r = int(C[L >= t].sum())
        rows.append({"length_at_least": int(t), "sources_per_pass": r,
                     "earliest_possible_pass": (-(-B // r) if r else None)})
    return rows
