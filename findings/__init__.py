"""The paper's published values (paper_values.json, kept once), the regime indicators they imply, and the
findings page: each section computed from a run's result files, then rendered.

    summary.py              the page: its sections in order, the scorecard, SUMMARY.md and findings.json
    section.py              Section (one section, computed) and the formats the section modules share
    audit_sections.py       3, 5.1, 5.2, the regime indicators, any packer, the frontier: from records/audit_summary.py,
                            audit_comparison.py and frontier.py
    training_section.py     5.3, the matched training runs: from records/training.py
    evaluation_sections.py  5.4-5.6, confirmation, source windows, prefix rankings: from records/evaluation.py
    queue_sections.py       the shard queue and its study: from records/queue_run.py, reexecution.py, study.py
    provenance.py           the provenance table (what ran), from records/provenance.py

The package imports nothing above corpus/, presets/ and records/, so the audit may take the paper's values
from here."""
import json
import math
from pathlib import Path

PAPER = json.loads((Path(__file__).with_name("paper_values.json")).read_text())

_S, _C = PAPER["setup"], PAPER["s5_1_coverage"]
_LONGEST_CHUNKS = 1 + math.ceil((_S["longest_source"] - _S["R"]) / (_S["R"] - 1))  # 142: segment-first chunks
# the paper's regime indicators (as audit/regime.py computes them for a run), derived from its published values
PAPER_REGIME = {
    "row_capacity": _S["R"], "buffer": _S["B"], "targets": _S["targets_per_run"],
    "sources_per_pass": _S["eligible_sources"], "tokens_per_pass": _S["eligible_tokens"], "longest": _S["longest_source"],
    "longest_chunks": _LONGEST_CHUNKS, "longest_chunks_share_of_B": _LONGEST_CHUNKS / _S["B"],
    "protected_share_of_arrived": _C["protected_pct_of_arrived"] / 100, "passes_started": 1,
    "sources_arrived": _C["sources_arrived"], "arrived_over_B": _C["sources_arrived"] / _S["B"],
    "budget_share_of_corpus": _S["targets_per_run"] / _S["eligible_tokens"],
    "share_emitted_from_long_sources": _C["share_emitted_long_pct_original"] / 100,
    "sources_started_original": None,  # not stated in the paper
    "sources_started_segment_first": None,  # nor this: it states what segment-first consumes (arrivals), below
    "sources_arrived_segment_first": _C["segment_first_sources"],
}
