"""SUMMARY.md: what a run of the study found, section by section, our numbers beside the paper's.

  python -m findings.summary --out runs/main
  python -m findings.summary --audit runs/audit_climbmix --train runs/six_paper --eval runs/eval_paper --out runs/paper

Every number on the page is read from a result file of the run (audit*/summary.json,
audit_packers/comparison.json, frontier/frontier.json, train/*/summary.json, train/regime.json, eval/*.json,
queue/queue_summary.json, queue_study/summary.json), each through its record's loader (records/), or computed
here from such numbers; the paper's values come from
findings/paper_values.json, the one place the repository keeps them. A stage whose results
are missing is reported as not run, never filled in. The same facts go to findings.json,
and the headline of each section is printed.
"""
import argparse
import sys
from pathlib import Path

from console.shutdown import skip_final_collections
from console.usage import prog_name
from corpus.atomic import atomic_write_json, atomic_write_text
from findings.audit_sections import (audit_sections, dev_stream_rows, frontier_section, packers_section, regime_section,
                                     topology_rows)
from findings.evaluation_sections import eval_sections
from findings.provenance import to_md
from findings.queue_sections import queue_section, study_section
from findings.section import Section  # noqa: F401 - tests/test_audit_topology.py (another branch's) takes it from here
from findings.training_section import train_section
from records.provenance import collect


# ---------------------------------------------------------------- page

def build(out, audit=None, train=None, evald=None, queue=None, study=None, audit_val=None, packers=None,
          audit_ranks=None, frontier=None):
    """Every section of the page, in its order, computed from the result folders (nothing rendered here)."""
    out = Path(out)
    audit, train = Path(audit or out / "audit"), Path(train or out / "train")
    evald, queue, study = Path(evald or out / "eval"), Path(queue or out / "queue"), Path(study or out / "queue_study")
    s3, s51, s52 = audit_sections(audit, out)
    if s51.rows:
        dev_stream_rows(s51, Path(audit_val or out / "audit_val"), out)
        topology_rows(s51, Path(audit_ranks or out / "audit_ranks8"), out)
    return [s3, s51, s52, packers_section(Path(packers or out / "audit_packers"), out),
            frontier_section(Path(frontier or out / "frontier"), out), regime_section(audit, out),
            train_section(train, out), *eval_sections(evald, out),
            queue_section(queue, out), study_section(study, out)]


# ---------------------------------------------------------------- rendering

def section_md(sec) -> list:
    out = [f"## {sec.title}", ""]
    if sec.headline:
        out += [f"**{sec.headline}**", ""]
    for t in sec.text:
        out += [t, ""]
    if sec.rows:
        out += ["| " + " | ".join(sec.columns) + " |", "|---|" + ("---|" if sec.prose else "---:|") * (len(sec.columns) - 1)]
        out += ["| " + " | ".join(map(str, r)) + " |" for r in sec.rows]
        out.append("")
    out += [f"- {n}" for n in sec.notes]
    links = [x for x in sec.links if x]
    if links:
        out += ["", "Details: " + ", ".join(links)]
    return out + [""]


def scorecard_md(sections):
    """One row per section: what was measured, ours, the paper's, and whether they agree."""
    out = ["## Scorecard", "", "| section | measured | ours | paper | agreement |", "|---|---|---|---|---|"]
    for s in sections:
        if s.key == "regime":
            continue
        m, o, p, a = s.score or ("—", "not run" if (s.headline or "").startswith("Not run") else "—", "—", "—")
        out.append(f"| {s.title.split(' (')[0]} | {m} | {o} | {p} | {a} |")
    return out + ["", "Agreement is about direction and intervals; magnitudes are compared only where the regime "
                  "section says the setting shares the paper's ratios.", ""]


def render(sections, out, provenance=None):
    lines = ["# Findings", "",
             "What this run found, section by section, with the paper's published value beside ours. The paper is "
             "*Source Exclusion in Streaming Pretraining: An Exact Audit of Minimum-Crop Packing*; the queue follows "
             "the proposal *Can a model help choose its next training data?*. Every number below is read from this "
             "run's result files; the paper's values come from `findings/paper_values.json`. Read the regime section "
             "before comparing magnitudes: a small demo shares the paper's mechanism, not its scale.", ""]
    lines += scorecard_md(sections)
    if provenance:
        lines += to_md(provenance)
    for s in sections:
        lines += section_md(s)
    return "\n".join(lines)


def main(argv=None):
    skip_final_collections()  # the interpreter's last scans of every object skipped at exit
    ap = argparse.ArgumentParser(prog=prog_name("python -m findings.summary"), description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/main", help="run folder; SUMMARY.md and findings.json are written here (default runs/main)")
    for k in ("audit", "audit-val", "audit-packers", "audit-ranks", "frontier", "train", "eval", "queue", "study"):
        default = {"study": "queue_study", "audit-val": "audit_val", "audit-packers": "audit_packers",
                   "audit-ranks": "audit_ranks8"}.get(k, k)
        ap.add_argument(f"--{k}", default=None, help=f"{k} results folder (default OUT/{default})")
    ap.add_argument("--data-dir", default=None, help="data root, for the corpus's build id (default: $PACKAUDIT_DATA "
                    "or ~/.cache/packing-audit)")
    ap.add_argument("--corpus-source", default="stdlib", help="the prepared corpus the run read (default stdlib)")
    a = ap.parse_args(argv)
    out = Path(a.out)
    given = (a.audit, a.train, a.eval, a.queue, a.study, a.audit_val, a.audit_packers, a.audit_ranks, a.frontier)
    if not out.is_dir():
        if not any(given):  # nothing to read: a mistyped run folder, said so
            print(f"error: {out}: no such run folder (give the main job's --out, or the result folders one by one "
                  "with --audit, --train, ...)", file=sys.stderr)
            return 2
        out.mkdir(parents=True)  # the page of folders given one by one, written where it was asked for
    secs = build(out, a.audit, a.train, a.eval, a.queue, a.study, a.audit_val, a.audit_packers, a.audit_ranks,
                 a.frontier)
    prov = collect(out, a.data_dir, a.corpus_source, [f for f in given if f])  # sized with the run: what the page reads
    atomic_write_text(out / "SUMMARY.md", render(secs, out, prov) + "\n")
    atomic_write_json(out / "findings.json", {"provenance": prov, "sections": [s.to_json() for s in secs],
                                              "scorecard": [{"section": s.key, **s.to_json()["score"]} for s in secs if s.score]})
    print("\nFindings:")
    for s in secs:
        if s.headline:
            print(f"  {s.title.split(' (')[0]}: {s.headline}")
    print(f"\nRead {out / 'SUMMARY.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
