"""Regime indicators: is a (corpus, R, B, budget) setting in the paper's regime?

The paper's effects depend on ratios, not sizes. A demo on a small corpus can show the
same mechanism only where these ratios have the paper's order of magnitude:

  longest_chunks_share_of_B  chunks of the longest source under segment-first, over B
                             (paper: 142 of 1000 = 14.2%); above ~100% a single source
                             can fill the whole buffer with its chunks
  protected_share_of_arrived tokens of the protected set (largest B-1 long sources) over
                             arrived source tokens, original packer (paper: 4.37%)
  passes_started             stream passes begun within the budget (paper: 1, no wrap)
  arrived_over_B             original sources that arrived, over B (paper: 836,864/1000)
  budget_share_of_corpus     targets over one pass's tokens (paper: 79.2%)

`regime_indicators` computes them with the exact replay; `regime_table_md` prints them
beside the paper's values. `python -m audit.regime --json` prints them for a prepared
corpus and a preset, for other reports to include.
"""
import argparse
import json
import sys

import numpy as np

from audit.proposition import check_proposition
from audit.replay import Replay, rows_for_targets
from corpus.layout import Layout, default_data_dir
from errors import DataError
from findings import PAPER as _P
from findings import PAPER_REGIME as PAPER  # the paper's indicators, derived once from its published values
from presets.six import PRESETS, TINY_REGIME

# what "the paper's order of magnitude" means for each indicator (checked by tests and shown in reports)
TARGET = {
    "longest_chunks_share_of_B": (0.0, 0.15),
    "protected_share_of_arrived": (0.01, 0.10),
    "passes_started": (1, 1),
}


def chunks_of(length, R) -> int:
    """Segment-first entries of one source: the first chunk holds R tokens, each later one BOS + R-1."""
    return 1 if length <= R else 1 + -(-(length - R) // (R - 1))  # integer ceiling, exact at any length


def regime_indicators(stream, R, B, targets, replay=None) -> dict:
    """The indicators of one setting; replay: an existing original-packer Replay at (R, B, targets)."""
    rows = rows_for_targets(targets, R)
    rep = replay if replay is not None else Replay(stream, "original", rows, R, B)
    _, ps, _ = check_proposition(rep.stream, rep.raw.tolist(), rep.refill_log, B, R)
    arrived = rep.arrived_lengths()
    longest = int(stream.lengths.max())
    ev = rep.events
    emitted = int(ev["emitted"].sum())
    core = rep.core
    seg = Replay(stream, "segment_first", rows, R, B)
    return {
        "sources_started_original": int(len(np.unique(ev["source_id"]))),
        "sources_started_segment_first": int(len(np.unique(seg.events["source_id"]))),
        "sources_arrived_segment_first": int(seg.core.arrived_docs),
        "row_capacity": int(R), "buffer": int(B), "targets": int(targets),
        "sources_per_pass": int(stream.n), "tokens_per_pass": int(stream.lengths.sum()),
        "longest": longest, "longest_chunks": chunks_of(longest, R),
        "longest_chunks_share_of_B": chunks_of(longest, R) / B,
        "sources_longer_than_R_per_pass": int((stream.lengths > R).sum()),
        "protected_sources": len(ps.members), "protected_tokens": int(ps.mass),
        "protected_share_of_arrived": ps.mass / int(arrived.sum()),
        "passes_started": core.pass_idx + (1 if core.refill_idx else 0),
        "sources_arrived": int(len(arrived)), "arrived_over_B": len(arrived) / B,
        "budget_share_of_corpus": targets / int(stream.lengths.sum()),
        "share_emitted_from_long_sources": float(ev["emitted"][ev["source_len"] > R].sum() / emitted) if emitted else 0.0,
    }


def indicators_from(stream, R, B, targets, original, segment_first=None) -> dict:
    """The indicators from an audit's summaries (no second replay): the original packer's, and
    segment-first's when it was audited (else its started count is n/a)."""
    longest = int(stream.lengths.max())
    p = original["protected"]
    return {
        "sources_started_original": original["sources_started"],
        "sources_started_segment_first": segment_first["sources_started"] if segment_first else None,
        "sources_arrived_segment_first": segment_first["sources_arrived"] if segment_first else None,
        "row_capacity": int(R), "buffer": int(B), "targets": int(targets),
        "sources_per_pass": int(stream.n), "tokens_per_pass": int(stream.lengths.sum()),
        "longest": longest, "longest_chunks": chunks_of(longest, R), "longest_chunks_share_of_B": chunks_of(longest, R) / B,
        "sources_longer_than_R_per_pass": int((stream.lengths > R).sum()),
        "protected_sources": p["size"], "protected_tokens": p["tokens"], "protected_share_of_arrived": p["share_of_arrived"],
        "passes_started": original["passes_started"], "sources_arrived": original["sources_arrived"],
        "arrived_over_B": original["sources_arrived"] / B, "budget_share_of_corpus": targets / int(stream.lengths.sum()),
        "share_emitted_from_long_sources": original["share_emitted_from_long_sources"],
    }


# the paper's published values the audit's figures draw beside ours
_C = _P["s5_1_coverage"]
PAPER_STARTUP_RANGE = (_C["startup_delay_min_targets"], _C["startup_delay_max_targets"])
PAPER_PASS_BOUNDS = _P["s5_2_pass_bounds"]


def in_regime(ind) -> dict:
    """Indicator -> True/False against TARGET."""
    return {k: lo <= ind[k] <= hi for k, (lo, hi) in TARGET.items()}


def _pct(x):
    return f"{100 * x:.2f}%"


ROWS = (
    ("R (row capacity)", "row_capacity", "{:,}".format),
    ("B (minimum buffered spans)", "buffer", "{:,}".format),
    ("budget (targets)", "targets", "{:,}".format),
    ("sources per pass", "sources_per_pass", "{:,}".format),
    ("longest source (tokens)", "longest", "{:,}".format),
    ("its segment-first chunks", "longest_chunks", "{:,}".format),
    ("... as a share of B (paper's regime: at most ~15%)", "longest_chunks_share_of_B", _pct),
    ("protected share of arrived tokens (paper's regime: 1-10%)", "protected_share_of_arrived", _pct),
    ("passes started (1: the stream did not wrap)", "passes_started", "{:,}".format),
    ("sources arrived / B", "arrived_over_B", "{:,.1f}".format),
    ("budget / tokens per pass", "budget_share_of_corpus", _pct),
    ("emitted share from sources > R (original)", "share_emitted_from_long_sources", _pct),
    ("sources started, original", "sources_started_original", "{:,}".format),
    ("sources started, segment-first", "sources_started_segment_first", "{:,}".format),
    # the paper states arrivals for segment-first ("consumes 702,208 original sources"), not starts
    ("sources arrived, segment-first", "sources_arrived_segment_first", "{:,}".format),
)


def regime_table_md(columns: dict) -> str:
    """columns: {label: indicators}; the paper's column comes first."""
    cols = {"paper": PAPER, **columns}
    out = ["| indicator | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for label, key, f in ROWS:
        out.append(f"| {label} | " + " | ".join(f(c[key]) if c.get(key) is not None else "n/a" for c in cols.values()) + " |")
    return "\n".join(out) + "\n"


def preset_setting(preset: dict):
    """(R, B, targets) of a training preset."""
    # late: the training config loads torch (seconds); `--help`, and an audit that shows no preset, run without it
    from training.config import TrainConfig

    c = TrainConfig(**{k: v for k, v in preset.items() if k in TrainConfig.__dataclass_fields__})
    return c.row_capacity, c.buffer, c.updates * c.targets_per_update


def preset_stream(data_dir, preset: dict):
    """The training stream a preset reads (its train_docs cap applied), lengths only."""
    # late: the token files load pyarrow, which `python -m audit.regime --help` answers without
    from loaders.stream import DocumentStream
    from corpus.pretokenize import TokenShard

    lay = Layout(data_dir, preset.get("source", "stdlib"))
    lengths, refills = [], [0]
    for n in lay.shard_names("train"):
        sh = TokenShard(lay.tokens, n)
        lengths.append(sh.lengths)
        refills.extend((refills[-1] + sh.refills[1:]).tolist())
    s = DocumentStream(np.concatenate(lengths), refills, name=f"{lay.source}:train")
    return s.capped(preset.get("max_source_len", 0))


def tiny_training_column(data_dir) -> dict:
    """The indicators of the tiny training preset on the offline corpus (a report's second column)."""
    tiny = {**PRESETS["tiny"], **TINY_REGIME}
    R, B, T = preset_setting(tiny)
    return regime_indicators(preset_stream(data_dir or default_data_dir(), tiny), R, B, T)


def filter_counts(data_dir, source, max_len) -> dict:
    """How much of the training corpus the demo-only length filter drops (sources longer than max_len)."""
    full = preset_stream(data_dir or default_data_dir(), {"source": source})
    long = full.lengths > max_len
    return {"max_source_len": int(max_len), "sources": int(full.n), "dropped": int(long.sum()),
            "dropped_token_share": float(full.lengths[long].sum() / full.lengths.sum())}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m audit.regime", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    ap.add_argument("--data-dir", default=None, help="data root (default: $PACKAUDIT_DATA or ~/.cache/packing-audit)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the Markdown table")
    a = ap.parse_args(argv)
    try:
        pre = {**PRESETS[a.preset], **(TINY_REGIME if a.preset == "tiny" else {})}
        R, B, T = preset_setting(pre)
        ind = regime_indicators(preset_stream(a.data_dir or default_data_dir(), pre), R, B, T)
    except (DataError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps({"paper": PAPER, a.preset: ind, "in_regime": in_regime(ind)}, indent=2))
    else:
        print(regime_table_md({a.preset: ind}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
