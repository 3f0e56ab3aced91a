"""Audit quantities from a replay: mass partition, crops, coverage, retention, protection."""
import numpy as np

from audit.proposition import check_proposition
from loaders.core import CROP

STRATA = (32, 128, 512, 1024, 2049, 4096, 8192, 16384)  # inclusive upper bounds, BOS included


def stratum_labels(bounds=STRATA):
    labels, lo = [], 1
    for b in bounds:
        labels.append(f"{lo}-{b}")
        lo = b + 1
    labels.append(f">{bounds[-1]}")
    return labels


def stratum_of(lengths, bounds=STRATA):
    return np.searchsorted(np.asarray(bounds), lengths, side="left")


def summarize_replay(rep) -> dict:
    ev, core, R, B = rep.events, rep.core, rep.R, rep.B
    arrived_len = rep.arrived_lengths()
    n_arr = len(arrived_len)
    seg = rep.packer == "segment_first"
    emitted, discarded = int(ev["emitted"].sum()), int(ev["discarded"].sum())
    buffered = core.buffered_tokens()
    arrived_tok = int(arrived_len.sum())
    crops = ev[ev["kind"] == CROP]
    # per-source sums over all events (segment chunks and lossless continuations included)
    src = ev["source_id"]
    added = ev["lead_bos"].astype(np.int64) if seg else np.zeros(len(ev), np.int64)
    own_emitted = np.bincount(src, weights=ev["emitted"] - added, minlength=n_arr)[:n_arr]
    started = np.zeros(n_arr, bool)
    started[src] = True
    fully = own_emitted == arrived_len
    strata = stratum_of(arrived_len)
    labels = stratum_labels()
    loaded_by = np.bincount(strata, weights=arrived_len, minlength=len(labels))
    kept_by = np.bincount(strata, weights=own_emitted, minlength=len(labels))
    count_by = np.bincount(strata, minlength=len(labels))
    started_by = np.bincount(strata, weights=started, minlength=len(labels))
    long_ev = ev[ev["source_len"] > R]
    applies = rep.packer != "segment_first"  # pre-segmentation removes the hypothesis (section 3, Limits)
    violation, ps, _ = check_proposition(rep.stream, rep.raw, rep.refill_log, B, R)
    out = {
        "packer": rep.packer,
        "row_capacity": R,
        "buffer": B,
        "rows": rep.rows,
        "targets": rep.rows * (R - 1),
        "passes_started": core.pass_idx + (1 if core.refill_idx else 0),
        "sources_arrived": n_arr,
        "tokens_arrived": arrived_tok,
        "bos_added": int(core.added_bos),
        "emitted": emitted,
        "discarded": discarded,
        "buffered": buffered,
        "partition_holds": arrived_tok + int(core.added_bos) == emitted + discarded + buffered,
        "selection_events": int(len(ev)),
        "crop_events": int(len(crops)),
        "crop_median_emitted": float(np.median(crops["emitted"])) if len(crops) else None,
        "crops_emitting_only_bos": int((crops["emitted"] == 1).sum()),
        "sources_started": int(started.sum()),
        "sources_fully_emitted": int(fully.sum()),
        "sources_never_started": int(n_arr - started.sum()),
        "sources_longer_than_R_arrived": int((arrived_len > R).sum()),
        "sources_longer_than_R_started": int(started[arrived_len > R].sum()),
        "retention_by_stratum": [
            {"stratum": labels[k], "sources": int(count_by[k]), "started": int(started_by[k]),
             "loaded_tokens": int(loaded_by[k]), "emitted_tokens": int(kept_by[k]),
             "retained": (float(kept_by[k] / loaded_by[k]) if loaded_by[k] else None)}
            for k in range(len(labels))
        ],
        "startup_delay_targets": int(long_ev["target_offset"].min()) if len(long_ev) else None,
        "share_emitted_from_long_sources": float(long_ev["emitted"].sum() / emitted) if emitted else 0.0,
        "protected": {
            "size": len(ps.members),
            "tokens": int(ps.mass),
            "share_of_arrived": ps.mass / arrived_tok if arrived_tok else 0.0,
            "share_of_buffered": ps.mass / buffered if buffered else 0.0,
            "proposition_held": (violation is None) if applies else None,
            "first_violation": violation if applies else None,
            "applies": applies,
        },
    }
    if applies:
        # the protected sources must still be buffered whole and unstarted
        out["protected"]["all_buffered_unstarted"] = bool(not started[list(ps.members)].any()) if ps.members else True
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
