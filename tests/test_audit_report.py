"""What a researcher reads: per-label coverage of a labelled parquet corpus confirmed by a
brute-force count (the standard-library checker's literal replay), the horizon in the first
line, the verdict last, events as parquet unless CSV is asked for, the folder's size, the
comparison across packers read back through its record, and the README's own example auditing one pass."""
import json
import re
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import audit.__main__ as audit_cli
from audit.__main__ import main as audit_main
from audit.compare import rows_made_note, sentence
from audit.adapters import FIRST_ID
from audit.api import trace
from audit.compute import trace_packer
from audit.feed import PassRefills
from audit.report import bounds_section, documents_section, label_section, verdict
from checkers.packing_checker import replay_literal
from conftest import ROOT
from findings.summary import packers_section
from records.audit_comparison import Comparison

LABELS = ("web", "code", "books", "papers")


@pytest.fixture(scope="module")
def labelled(small_corpus, tmp_path_factory):
    """A parquet corpus with four source labels, prepared by prepare.py, then audited."""
    import prepare

    d = tmp_path_factory.mktemp("labelled")
    rec = json.loads((small_corpus / "stdlib" / "prepared.json").read_text())
    texts = [t for n in rec["train_shards"]
             for t in pq.read_table(small_corpus / "stdlib" / "raw" / n, columns=["text"]).column("text").to_pylist()]
    texts = texts[:900]
    pq.write_table(pa.table({"text": texts, "site": [LABELS[i % 4] for i in range(len(texts))]}), d / "in.parquet")
    data = d / "data"
    assert prepare.main(["--source", "parquet", "--input", str(d / "in.parquet"), "--source-column", "site",
                         "--data-dir", str(data), "--shards", "3", "--row-group-size", "150", "--vocab-size", "300"]) == 0
    out = d / "audit"
    assert audit_main(["--source", "parquet", "--data-dir", str(data), "--row-capacity", "129", "--buffer", "30",
                       "--packers", "original,lossless,concat_chunk", "--permutations", "0", "--no-figures",
                       "--out", str(out)]) == 0
    return data, out


def _stream(data, out):
    refills = [[int(x) for x in ln.split()] for ln in (out / "stream_lengths.txt").read_text().splitlines()]
    rec = json.loads((data / "parquet" / "prepared.json").read_text())
    labels = [v for n in rec["train_shards"]
              for v in pq.read_table(data / "parquet" / "raw" / n, columns=["source"]).column("source").to_pylist()]
    return refills, labels


def test_per_label_coverage_equals_a_brute_force_count(labelled):
    data, out = labelled
    s = json.loads((out / "summary.json").read_text())
    refills, labels = _stream(data, out)
    n = len(labels)
    assert n == sum(len(r) for r in refills)
    for packer in ("original", "lossless"):
        ev, arrivals = replay_literal(refills, packer, 129, 30, s["rows"])
        want = {lab: Counter() for lab in LABELS}
        started = {e[0] for e in ev}
        for _, src, L in arrivals:
            c = want[labels[src % n]]
            c["docs"] += 1
            c["tokens"] += L
            c["started"] += src in started
        for src, _start, em, disc, _k, _lead in ev:
            want[labels[src % n]]["emitted"] += em
            want[labels[src % n]]["discarded"] += disc
        got = {d["label"]: d for d in s["packers"][packer]["by_label"]}
        assert set(got) == set(LABELS)
        for lab in LABELS:
            for k in ("docs", "tokens", "started", "emitted", "discarded"):
                assert got[lab][k] == want[lab][k], (packer, lab, k)
            assert got[lab]["buffered"] == want[lab]["tokens"] - want[lab]["emitted"] - want[lab]["discarded"]
    # every event carries its source's label
    t = pq.read_table(out / "events_original.parquet", columns=["source_id", "label"])
    assert [labels[i % n] for i in t.column("source_id").to_pylist()] == t.column("label").to_pylist()


def test_report_first_line_verdict_last_parquet_by_default_and_size(labelled):
    _, out = labelled
    md = (out / "report.md").read_text().strip().splitlines()
    assert md[0].startswith("**The budget is") and "of one pass" in md[0]
    assert md[-1].startswith("Verdict: ") and md[-1].endswith(".") and "never starts" in md[-1]
    text = "\n".join(md)
    for heading in ("## Per-label coverage", "## Position exposure", "## One table across packers", "### concat_chunk"):
        assert heading in text
    assert not list(out.glob("*.csv")) and (out / "events_concat_chunk.parquet").exists()
    size = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    stated = float(re.search(r"This folder holds ([\d.,]+) MB", text).group(1).replace(",", ""))
    assert abs(stated - size / 1e6) < 0.05
    c = Comparison.load(out)  # comparison.json read back through its record, as the findings page reads it
    assert set(c.packers) == {"original", "lossless", "concat_chunk"} and c.sentence.startswith("Across 3")
    assert c.packers["lossless"].discarded_share == 0 and c.packers["concat_chunk"].long_never_started <= \
        c.packers["original"].long_never_started


def test_a_budget_past_one_pass_is_said_first(tmp_path, capsys):
    f = tmp_path / "l.txt"
    f.write_text("\n".join(map(str, [5, 40, 3, 90, 7] * 20)) + "\n")  # 2,900 tokens per pass
    assert audit_main(["--lengths", str(f), "--row-capacity", "33", "--buffer", "4", "--targets", str(32 * 300),
                       "--packers", "original", "--permutations", "0", "--no-figures", "--out", str(tmp_path / "o")]) == 0
    first = (tmp_path / "o" / "report.md").read_text().splitlines()[0]
    assert first.startswith("**The budget is 3.3 passes over this corpus") and "arrives repeatedly" in first
    assert "; buffer B=4. The trainer's" in (tmp_path / "o" / "report.md").read_text()
    printed = capsys.readouterr().out
    assert "note: The budget is 3.3 passes" in printed and printed.count("The budget is 3.3 passes") == 1
    # one packer: its own sentence, not a comparison "across 1 packers"
    assert "\nAt 9,600 targets, original leaves " in printed and "Across 1 packers" not in printed


def test_per_label_coverage_counts_documents_apart_from_their_arrivals(tmp_path):
    """A budget of 3.3 passes brings each document back: the label table's arrivals are the tally's (three or four
    per document), its documents each document once, from the fate table (worked by hand: label a holds the 40
    documents of lengths 5 and 3, b the 60 of 40, 90 and 7; b's 20 of length 90 > R = 33 are cropped, never
    dropped, so every document started)."""
    pq.write_table(pa.table({"length": [5, 40, 3, 90, 7] * 20, "label": ["a", "b", "a", "b", "b"] * 20}),
                   tmp_path / "l.parquet")
    assert audit_main(["--lengths", str(tmp_path / "l.parquet"), "--column", "length", "--label-column", "label",
                       "--row-capacity", "33", "--buffer", "4", "--targets", str(32 * 300), "--packers", "original",
                       "--permutations", "0", "--no-figures", "--out", str(tmp_path / "o")]) == 0
    s = json.loads((tmp_path / "o" / "summary.json").read_text())["packers"]["original"]
    arrivals = {d["label"]: d["docs"] for d in s["by_label"]}
    assert arrivals["a"] > 80 and arrivals["b"] > 120  # more than two passes' arrivals
    report = (tmp_path / "o" / "report.md").read_text()
    part = report[report.index("## Per-label coverage"):]
    header = next(ln for ln in part.splitlines() if ln.startswith("| label |"))
    assert header.startswith("| label | documents | documents never started | arrivals | tokens |")
    for label, docs in (("a", 40), ("b", 60)):
        row = next(ln for ln in part.splitlines() if ln.startswith(f"| {label} |")).split(" | ")
        assert row[1:4] == [str(docs), "0", f"{arrivals[label]:,}"], row


def test_permutation_delays_read_when_no_long_source_is_emitted():
    def line(delays, unpermuted):
        got = [d for d in delays if d is not None]
        p = {"count": len(delays), "seeds": list(range(len(delays))), "delays": delays, "unpermuted": unpermuted,
             "min": min(got) if got else None, "max": max(got) if got else None}
        return bounds_section({"permutations": p, "buffer": 4, "pass_bounds": []})[2]

    assert line([None, None], None).startswith("2 seeded permutations (seeds 0..1): no source longer than R was "
                                               "emitted within the budget in any of them (unpermuted: n/a).")
    assert "at 5 – 7 targets (unpermuted: at 6 targets); in 1 of them none was emitted" in line([5, None, 7], 6)
    assert "at 5 – 7 targets (unpermuted: at 6 targets). Paper" in line([5, 7], 6)


def test_the_readme_example_audits_one_pass_by_default(tmp_path):
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Audit your own corpus")[1].split("\n## ")[0]
    first = next(ln for ln in section.splitlines() if ln.startswith("python -m audit --lengths"))
    assert "--targets" not in first and "--updates" not in first
    f = tmp_path / "my_lengths.txt"
    f.write_text("\n".join(map(str, np.random.default_rng(0).integers(1, 5000, 2000))) + "\n")
    argv = first.split()[3:]
    argv[argv.index("my_lengths.txt")] = str(f)
    argv[argv.index("--out") + 1] = str(tmp_path / "out")
    assert audit_main(argv + ["--packers", "original", "--permutations", "0", "--no-figures"]) == 0
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["horizon"]["passes"] <= 1


def test_the_audits_own_stream_export_is_accepted_as_lengths(labelled, tmp_path):
    _, out = labelled
    assert audit_main(["--lengths", str(out / "stream_lengths.txt"), "--row-capacity", "129", "--buffer", "30",
                       "--packers", "original", "--permutations", "0", "--no-figures", "--out", str(tmp_path / "again")]) == 0
    a = json.loads((out / "summary.json").read_text())["packers"]["original"]
    b = json.loads((tmp_path / "again" / "summary.json").read_text())["packers"]["original"]
    # the same refills, so the same replay (labels aside: a length file carries none)
    for k in ("emitted", "discarded", "buffered", "sources_arrived", "sources_started", "selection_events"):
        assert a[k] == b[k], k


def test_a_missing_library_is_one_line_naming_the_extra(tmp_path, capsys, monkeypatch):
    import audit.pipeline as pipeline

    monkeypatch.setattr(pipeline, "installed", lambda spec: False)
    f = tmp_path / "l.txt"
    f.write_text("5\n40\n")
    assert audit_main(["--lengths", str(f), "--packers", "original,trl_bfd", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "trl_bfd" in err[0] and "audit-libs" in err[0] and not (tmp_path / "o").exists()


def test_your_own_packer_from_the_command_line(tmp_path, monkeypatch):
    # a packer that keeps the first `keep` tokens of each document, one document per row
    (tmp_path / "mypackers.py").write_text("def pack(docs, keep=8):\n    for d in docs:\n        yield d[:keep]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    f = tmp_path / "l.txt"
    f.write_text("\n".join(map(str, [5, 12, 3, 20] * 10)) + "\n")  # 400 tokens
    assert audit_main(["--lengths", str(f), "--row-capacity", "9", "--buffer", "2", "--targets", "80", "--packers",
                       "original", "--trace", "mypackers:pack", "--trace-arg", "keep=8", "--permutations", "0",
                       "--no-figures", "--out", str(tmp_path / "o")]) == 0
    s = json.loads((tmp_path / "o" / "summary.json").read_text())["packers"]["pack"]
    # 10 rows (80 targets / 8): documents 0..9, each cut to 8 tokens: 5 + 8 + 3 + 8 (+ 5 + 8 + 3 + 8 + 5 + 8)
    assert s["rows"] == 10 and s["emitted"] == 61 and s["sources_arrived"] == 10  # pulled one at a time
    assert s["discarded"] == 4 + 12 + 4 + 12 + 4 and s["buffered"] == 0 and s["settings"] == {"keep": "8"} and s["how"] == "traced"
    # its rows are short, not padded: 61 of the 10 rows' 90 positions hold a token; the paper's packer fills its rows
    comp = json.loads((tmp_path / "o" / "comparison.json").read_text())["packers"]
    assert (comp["pack"]["padding_share"], comp["pack"]["empty_share"]) == (0.0, 29 / 90)
    assert comp["original"]["empty_share"] == 0.0
    md = (tmp_path / "o" / "report.md").read_text()
    assert "| padding | empty |" in md
    # B is the paper's packers' buffer: a library or own packer keeps its own (a new user's probe read B=1000 on a
    # Megatron report); with the paper's packers alone the header says B bare (the test below)
    assert "buffer B=2 (the paper's packers'; a library packer buffers as its own code does)." in md


def test_the_main_jobs_packer_comparison_says_what_it_left_out(tmp_path, monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(audit_cli, "main", lambda argv, left_out=None: seen.append((argv, left_out)) or 0)
    assert audit_cli.audit_offline(out=tmp_path) == 0
    argv, left = seen[0]
    packers = argv[argv.index("--packers") + 1].split(",")
    assert "titan_first_fit" not in packers and "titan_concat" in packers  # the libraries are pinned for the tests
    assert list(left) == ["titan_first_fit"] and "left out here: titan_first_fit (" in capsys.readouterr().out
    # the audit itself carries them: comparison.json, the report's table, the findings page
    monkeypatch.undo()
    f = tmp_path / "l.txt"
    f.write_text("\n".join(map(str, [5, 40, 3, 90, 7] * 20)) + "\n")
    out = tmp_path / "o"
    assert audit_cli.main(["--lengths", str(f), "--row-capacity", "33", "--buffer", "4", "--targets", "320",
                           "--packers", "original", "--permutations", "0", "--no-figures", "--out", str(out)],
                          left_out={"slow_one": "minutes here"}) == 0
    assert json.loads((out / "comparison.json").read_text())["left_out"] == {"slow_one": "minutes here"}
    assert "- slow_one: not run here (minutes here); audit it alone with --packers slow_one" in (out / "report.md").read_text()
    sec = packers_section(out, out)
    assert sec.rows[-1] == ("slow_one", "left out of the main job: minutes here; audit it alone with --packers slow_one",
                            "—")
    assert sec.score[1].startswith("1 packers (1 replayed, 0 traced, 0 as rules from their code)")
    assert "rows of R" not in sec.rows[0][1]  # its R is the budget's
    # a packer whose rows hold one token less than the budget's R (a library's own capacity): its row says so
    comp = json.loads((out / "comparison.json").read_text())
    comp["packers"]["original"]["row_capacity"] = 32
    (out / "comparison.json").write_text(json.dumps(comp))
    assert packers_section(out, out).rows[0][1].startswith("rows of R = 32; ")


# a hand-made labelled stream: lengths 2, 9, 4 (a), 7, 3 (b), 5 (c); the packer puts each document in a row
# of its own but never emits documents 2 (a, 4 tokens) and 3 (b, 7 tokens), so they never start
SKIP_LENGTHS = np.array([2, 9, 4, 7, 3, 5])
SKIP_LABELS = np.array(["a", "a", "a", "b", "b", "c"], dtype=object)


def _skip_two(docs):
    for i, d in enumerate(docs):
        if i not in (2, 3):
            yield d


def _skip_two_summary():
    refills = PassRefills(SKIP_LENGTHS, np.array([0, 6]), SKIP_LABELS, max_passes=1)
    return trace_packer(_skip_two, refills, "skip_two", 4, 10, 1, FIRST_ID)


def test_longest_never_started_is_the_longest_unstarted_document_of_its_label_not_its_longest():
    by = {d["label"]: d for d in _skip_two_summary()["by_label"]}
    # a: 9 is its longest but started; 4 never did. b: 7 never started. c: every document started
    assert {lab: by[lab]["longest_never_started"] for lab in by} == {"a": 4, "b": 7, "c": None}
    assert {lab: (by[lab]["started"], by[lab]["never_started"]) for lab in by} == {"a": (2, 1), "b": (1, 1), "c": (1, 0)}
    rows = [ln for ln in label_section({"skip_two": _skip_two_summary()}) if ln.startswith("| a |")
            or ln.startswith("| c |")]
    assert rows[0].endswith("| 4 |") and rows[1].endswith("| n/a |")


def test_the_verdict_names_the_label_of_lowest_representation():
    s = _skip_two_summary()
    # arrived 15, 10, 5 of 30; emitted 2 + 9, 3, 5 of 19: representation a (11/19)/(1/2) = 22/19,
    # b (3/19)/(1/3) = 9/19 (the lowest), c (5/19)/(1/6) = 30/19 (the highest)
    rep = {d["label"]: d["representation"] for d in s["by_label"]}
    assert rep == pytest.approx({"a": 22 / 19, "b": 9 / 19, "c": 30 / 19}, rel=1e-12)
    line = verdict({"packers": {"skip_two": s}, "horizon": {"passes": 1.0}, "targets": 36, "row_capacity": 10})
    assert line.endswith("; the most under-represented label is 'b' (15.79% of emitted tokens against 33.33% of "
                         "arrived).")


def test_the_long_documents_sentence_and_table_count_the_same_documents():
    """Worked by hand: 11 documents longer than R, 3 trained whole, 1 in part, 2 waiting and 1 dropped (3 arrived and
    never started), 4 never reached: 7 not trained at all; the table's "> R never started" is 3 of the 7 arrived."""
    long_fates = {"whole": 3, "partial": 1, "waiting": 2, "dropped": 1, "not_arrived": 4}
    fates = {"whole": 20, "partial": 2, "waiting": 5, "dropped": 1, "not_arrived": 6}
    d = {"documents": 34, "arrivals": 28, "by_fate": fates, "longer_than_R": long_fates, "by_label": [{}],
         "by_stratum": []}
    s = {"rows": 5, "budget_rows": 5, "budget_reached": True, "row_capacity": 9, "documents": d}
    text = "\n".join(documents_section({}, {"original": s}))
    assert ("Of the 11 documents longer than a row (R = 9 tokens), 7 were not trained at all (3 arrived and never "
            "started, 4 never reached).") in text
    assert "| original | 5 | 20 | 2 | 6 | 6 | 3 of 7 arrived |" in text


def _row(long_never, long_arrived, docs_never=None, docs_arrived=None, emitted=1000, padding=0.0, R=9, reached=True,
         empty=0.0):
    return {"long_never_started": long_never, "long_arrived": long_arrived, "long_documents_never_started": docs_never,
            "long_documents_arrived": docs_arrived, "sources_never_started": long_never, "emitted_tokens": emitted,
            "padding_share": padding, "empty_share": empty, "row_capacity": R, "discarded_share": 0.1, "continuation_rows": 0,
            "rows": 10 if reached else 5, "budget_rows": 10, "budget_reached": reached}


def test_who_discards_the_most_names_a_tie_and_says_when_none_does():
    """It once named the first packer as discarding "the most (0.00% ...)" where none discarded a token."""
    from audit.compare import discards

    assert discards(["a", "b"], 0.0, 2) == "no packer discards a token"
    assert discards(["a", "b"], 0.1, 2) == "both discard 10.00% of arrived tokens"
    assert discards(["a", "b"], 0.1, 3) == "a and b discard the most (10.00% of arrived tokens)"
    assert discards(["c"], 0.25, 3) == "c discards the most (25.00% of arrived tokens)"
    assert discards(["c"], 0.25, 1) == "c discards the most (25.00% of arrived tokens)"  # alone: no "each"


def test_the_comparison_ranks_by_documents_names_a_tie_and_says_the_rows_hold_unequal_tokens():
    """Hand-worked: one packer's stream wrapped, bringing its 106 long documents back as 212 arrivals; another read
    one pass, 106 arrivals. Both never start any of the 106: a tie in documents, where arrivals would rank the
    wrapped one first. The padded packer emits 468 tokens against 1,130: equal rows, unequal tokens."""
    rows = {"original": _row(106, 106, 106, 106, emitted=1130),
            "axolotl_chat_template": _row(212, 212, 106, 106, emitted=1130),
            "foundry_binpack": _row(40, 106, 40, 106, emitted=468, padding=0.5877, R=9)}
    said = sentence(rows, {"targets": 80})
    assert said.startswith("Across 3 packers asked for 10 rows, original and axolotl_chat_template leave the most "
                           "documents longer than R unstarted (106 of 106 each), each discard 10.00% of arrived tokens")
    # a packer that refused the stream is in the table, not in the ranking, and the count says so (a new user's probe
    # read "across 24 packers" under a progress bar of 25)
    refused = {"packers": {**dict.fromkeys(rows, {}), "megatron_blend": {"refused": "one dataset"}}}
    assert sentence(rows, {"targets": 80, **refused}).startswith(
        "Across 3 packers that made rows (1 more refused the stream) asked for 10 rows, original and")
    one = {"original": dict(rows["original"], budget_reached=True, discarded_share=0.1, continuation_rows=0)}
    assert sentence(one, {"targets": 80, **refused}).endswith(" 1 other packer refused the stream.")  # review
    assert said.endswith(" The rows do not hold equal tokens: foundry_binpack emitted 468 (padding 58.77%, empty 0.00%, "
                         "rows of R = 9), original 1,130; compare shares, not counts, across them.")
    # one packer without a fate table: every packer is ranked by its arrivals, and said to be
    rows["original"]["long_documents_never_started"] = None
    assert "axolotl_chat_template leaves the most arrived sources longer than R unstarted (212 of 212)" in sentence(
        rows, {"targets": 80})


def test_a_packer_that_made_no_row_is_said_to_start_nothing_not_ranked_on_zero_of_zero():
    """A new user's probe: `--passes 1` on 5 documents at B = 2, where the paper's packer made no row, read "original
    ... leave the most documents longer than R unstarted (original: 0 of 0; ...)" and a verdict "never starts 0 of
    the 0 arrived sources longer than R", as if it were good news. Hand-worked: original made no row; two others
    made rows and left none of their long documents unstarted."""
    idle = dict(_row(0, 0, 0, 0, emitted=0, reached=False), rows=0)
    rows = {"original": idle, "concat_chunk": _row(0, 1, 0, 1), "trl_bfd": _row(0, 1, 0, 1, reached=False)}
    said = sentence(rows, {"targets": 80})
    assert said.startswith("original made no row of the budget's 10 (its input ended before it filled one), so it "
                           "trained nothing and started no document. Across 2 packers asked for 10 rows, none leaves "
                           "any arrived document longer than R unstarted, both discard 10.00% of arrived tokens"), said
    assert "0 of 0" not in said and "trl_bfd 5 (50%)" in said
    both = {"original": idle, "lossless": dict(idle, input_ended=False)}
    assert sentence(both, {"targets": 80}) == (
        "original and lossless made no row of the budget's 10 (they stopped yielding rows before filling one), so "
        "they trained nothing and started no document.")


def test_one_packer_says_arrived_once_with_or_without_a_fate_table():
    """Hand-worked: one packer, 3 of 7 long documents never started (9 arrivals); without a fate table (--no-fates)
    its arrivals are counted, and the sentence once said "arrived arrived sources"."""
    assert sentence({"original": _row(4, 9, 3, 7)}, {"targets": 80}) == (
        "At 80 targets, original leaves 3 of 7 arrived documents longer than R unstarted and discards 10.00% of "
        "arrived tokens.")
    assert sentence({"original": _row(4, 9)}, {"targets": 80}) == (
        "At 80 targets, original leaves 4 of 9 arrived sources longer than R unstarted and discards 10.00% of arrived "
        "tokens.")


def test_a_refused_packer_is_named_where_the_rows_are_said_to_be_made():
    made = {"original": _row(1, 2)}
    assert rows_made_note({"packers": made}) == "Every packer made the budget's rows. "
    assert rows_made_note({"packers": made, "refused": {"bad": "ValueError: too long"}}) == (
        "**Not every packer made the budget's rows:** bad refused this stream and made none (its row says why). ")
    made["short"] = _row(1, 2, reached=False)
    assert rows_made_note({"packers": made, "refused": {"bad": "x", "worse": "y"}}) == (
        "**Not every packer made the budget's rows:** bad and worse refused this stream and made none (its row says "
        "why); the input of some ended first (see \"rows made\"): each is read at what it made. ")


def _audit_own(tmp_path, monkeypatch, module, code, name, paper="original"):
    """An audit of the packer `name` written in `module` (a module each: one imported stays in sys.modules) beside
    one of the paper's, on forty documents at R = 9 and a budget of 10 rows: its exit status."""
    (tmp_path / f"{module}.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    f = tmp_path / "l.txt"
    f.write_text("\n".join(map(str, [5, 12, 3, 20] * 10)) + "\n")
    return audit_main(["--lengths", str(f), "--row-capacity", "9", "--buffer", "2", "--targets", "80", "--packers",
                       paper, "--trace", f"{module}:{name}", "--permutations", "0", "--no-figures", "--out",
                       str(tmp_path / "o")])


def test_your_own_packer_that_reverses_its_rows_is_said_in_the_console_and_report_and_under_a_topology(
        tmp_path, monkeypatch, capsys):
    # each document a row of its own, its first nine tokens reversed: the first, of 5 tokens, reads 4 3 2 1 0
    code = "def rev(docs):\n    for d in docs:\n        yield list(d)[:9][::-1]\n"
    assert _audit_own(tmp_path, monkeypatch, "revpackers", code, "rev") == 0  # its tokens all add up: a finding
    said = ("**10 of its 10 rows hold a document's tokens out of their order** (first: in row 0, counting from 0, "
            "the 1st document it pulled continues at its position 4 without a BOS, with its position 0 after it)")
    assert said in capsys.readouterr().out and said in (tmp_path / "o" / "report.md").read_text()
    assert "out of their order" not in (tmp_path / "o" / "report.md").read_text().split("**original**")[1].split("\n")[0]
    # two worker streams (documents dealt alternately): the rows summed, the first place named with its stream
    import revpackers

    two = trace(revpackers.rev, [5, 12, 3, 20] * 10, row_capacity=9, buffer=2, targets=80, loader_workers=2)
    merged = two["topology"]["packers"]["rev"]["merged"]
    assert merged["rows_out_of_order"] == 10
    assert merged["out_of_order_first"] == {"row": 0, "source": 0, "position": 4, "other_position": 0,
                                            "other_before": False, "worker_stream": 0}


def test_your_own_packer_that_fails_on_the_stream_fails_the_audit_in_one_line(tmp_path, monkeypatch, capsys):
    # rows longer than R: the researcher's code is wrong, which a library's refusal (a finding) is not
    code = "def bad(docs):\n    for d in docs:\n        yield list(d) * 3\n"
    assert _audit_own(tmp_path, monkeypatch, "brokenpackers", code, "bad") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: your packer bad failed on this stream (ValueError: the packer yielded a row of ")
    assert "**Not every packer made the budget's rows:** bad refused this stream" in (tmp_path / "o" / "report.md").read_text()


@pytest.mark.parametrize("code,name,rc,needle", [
    # a name the audit has: its own packer was audited in the user's place
    ("def original(docs):\n    for d in docs:\n        yield list(d)[:9]\n", "original", 2,
     "error: --trace 'own_original:original': 'original' is the name of a packer the audit has (the paper's)"),
    # the module's own error at import: a traceback, before
    ("def pack(docs:\n", "pack", 2, "error: --trace 'own_pack:pack': cannot load it (SyntaxError: "),
    # a token emitted twice: status 1 with no line, before
    ("def dup(docs):\n    for d in docs:\n        d = list(d)\n        yield (d[:1] + d)[:9]\n", "dup", 1,
     "error: dup: the partition does not add up: "),
    # a packer that yields nothing: status 0, before
    ("def nothing(docs):\n    return iter([])\n", "nothing", 1,
     "error: your packer nothing failed on this stream (it yielded no row)"),
    # a batch of two rows: refused as one row of 18 tokens, before; a float row: cast silently
    ("import numpy as np\ndef two(docs):\n    for d in docs:\n        yield np.resize(d, (2, 9))\n", "two", 1,
     "error: your packer two failed on this stream (ValueError: the packer yielded a batch of shape (2, 9), not a row"),
    ("import numpy as np\ndef floats(docs):\n    for d in docs:\n        yield np.asarray(d[:9], np.float32)\n",
     "floats", 1, "error: your packer floats failed on this stream (ValueError: the packer yielded a row of float32 "
                  "values: yield integer token ids"),
    # a packer that reads its input twice: the second read finds it ended, and the line said nothing of it
    ("def twice(docs):\n    n = sum(1 for _ in docs)\n    for d in docs:\n        yield list(d)[:9]\n", "twice", 1,
     "error: your packer twice failed on this stream (it yielded no row, though it read its input to the end (40 "
     "documents): they come once, as a loader's iterator gives them)"),
], ids=["paper-name", "syntax-error", "token-twice", "no-row", "batch", "float-row", "reads-twice"])
def test_a_packer_of_your_own_that_is_wrong_is_one_line_naming_what(tmp_path, monkeypatch, capsys, code, name, rc,
                                                                    needle):
    """Found by a user writing packers of their own (a helper's probe, 2026-12-07)."""
    assert _audit_own(tmp_path, monkeypatch, f"own_{name}", code, name, paper="lossless") == rc
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(needle), err
    assert "Traceback" not in "\n".join(err)
    if name == "twice":  # the report says it too
        assert ("**twice** stopped after 0 of the 10 rows the budget asks for: its input ended first, read to the end "
                "before any row (the documents come once") in (tmp_path / "o" / "report.md").read_text()


def test_a_packer_of_your_own_that_stops_early_is_said_to_stop_not_its_input(tmp_path, monkeypatch):
    code = "def early(docs):\n    for i, d in zip(range(3), docs):\n        yield list(d)[:9]\n"
    assert _audit_own(tmp_path, monkeypatch, "earlypackers", code, "early", paper="lossless") == 0
    report = (tmp_path / "o" / "report.md").read_text()
    assert ("**early** stopped after 3 of the 10 rows the budget asks for: it stopped yielding rows, its input not "
            "ended") in report and "its input ended first" not in report.split("**early**")[1].split("\n")[0]
    # and the notes across packers say the same, not "its input ended first" (a review's find)
    assert "its input ended first" not in report and "the input of some ended first" not in report
    assert ("**Not every packer made the budget's rows:** some stopped yielding rows, their input not ended" in report
            and "budget of 10 rows: it stopped yielding rows, its input not ended, so these made fewer rows" in report)
    # one that reads all its input first, then packs a part of it: its input did end (the passes the audit gives it)
    code = "def greedy(docs):\n    docs = list(docs)\n    for d in docs[:3]:\n        yield list(d)[:9]\n"
    assert _audit_own(tmp_path, monkeypatch, "greedypackers", code, "greedy", paper="lossless") == 0
    report = (tmp_path / "o" / "report.md").read_text()
    assert "**greedy** stopped after 3 of the 10 rows the budget asks for: its input ended first" in report


def test_one_pass_that_never_fills_the_buffer_draws_its_figures_and_says_so(tmp_path, capsys):
    # found by a new user: `--passes 1` on 600 documents (fewer than B = 1000) ended in
    # `error: not enough values to unpack (expected 2, got 0)` from the length histogram, with figures on: the
    # paper's packers made no row and nothing arrived to draw; position exposure then raised a TypeError
    f = tmp_path / "L.txt"
    f.write_text("\n".join(map(str, np.random.default_rng(1).integers(1, 90, 30))) + "\n")
    out = tmp_path / "out"
    assert audit_main(["--lengths", str(f), "--row-capacity", "33", "--buffer", "40", "--passes", "1",
                       "--packers", "original,concat_chunk", "--permutations", "0", "--out", str(out)]) == 0
    assert "never fill it and make no row" in capsys.readouterr().out
    s = json.loads((out / "summary.json").read_text())
    assert s["packers"]["original"]["rows"] == 0 and s["packers"]["concat_chunk"]["rows"] > 0
    report = (out / "report.md").read_text()  # no "never starts 0 of the 0 arrived" where nothing was trained
    assert ("Verdict: original made no row of the budget's 34 (its input ended first; original never packs from "
            "fewer than B = 40 spans), so it trained nothing and started none of the 30 documents.") in report
    assert "of the 0 arrived" not in report
    drawn = sorted(p.name for p in out.glob("*.png"))
    assert "length_histogram.png" not in drawn and {"position_exposure.png", "comparison.png"} <= set(drawn)
    assert sorted(s["figures"]) == drawn


def test_the_corpus_line_says_how_many_documents_are_a_lone_bos():
    """An empty text or token list under --bos auto or add is a document of one token, the BOS: the report said
    nothing of them (found by a user's corpus with an empty row)."""
    from audit.report import corpus_lines

    c = {"documents": 1500, "tokens": 59006, "inputs": [{"files": [1, 2], "format": "jsonl"}],
         "bos": {"policy": "auto", "id": 1}, "empty_documents": 3}
    assert corpus_lines(c)[0].startswith("Corpus: 1,500 documents (3 of them a lone BOS: an empty text or token "
                                         "list), 59,006 tokens, read from 2 files (jsonl); BOS policy auto")
    for quiet in ({**c, "empty_documents": 0}, {k: v for k, v in c.items() if k != "empty_documents"}):
        assert corpus_lines(quiet)[0].startswith("Corpus: 1,500 documents, 59,006 tokens")
    # a Megatron prefix is one dataset of two files (a new user's probe read "2 files" for one prefix)
    mg = {**c, "inputs": [{"files": ["a.idx", "a.bin"], "format": "megatron"}, {"files": [1], "format": "jsonl"}]}
    assert "read from 1 file and 1 Megatron prefix (each a .bin and its .idx) (jsonl, megatron);" in corpus_lines(mg)[0]
    mg["inputs"] = mg["inputs"][:1] * 2
    assert "read from 2 Megatron prefixes (each a .bin and its .idx) (megatron);" in corpus_lines(mg)[0]


def test_the_label_tables_and_figure_show_the_thirty_labels_with_the_most_documents(tmp_path):
    """A label column with a value per document (found with --label-column id: a 154 KB report, 1,592 console
    lines and a label figure 152,025 pixels wide). 35 labels here: documents 1..35, label 'l{k}' with k + 1
    documents: the tables keep the 30 with the most (l5..l34) and say that 5 are left out; the figure draws 30."""
    from PIL import Image

    from audit.plots import label_coverage

    labels = [f"l{k:02d}" for k in range(35) for _ in range(k + 1)]
    lengths = [40 + (i * 7) % 90 for i in range(len(labels))]
    pq.write_table(pa.table({"length": lengths, "label": labels}), tmp_path / "l.parquet")
    assert audit_main(["--lengths", str(tmp_path / "l.parquet"), "--column", "length", "--label-column", "label",
                       "--row-capacity", "65", "--buffer", "8", "--packers", "original", "--permutations", "0",
                       "--no-figures", "--out", str(tmp_path / "o")]) == 0
    report = (tmp_path / "o" / "report.md").read_text()
    for section, counted in (("### original: by label", "documents"), ("## Per-label coverage", "arrivals")):
        part = report[report.index(section):]
        rows = re.findall(r"^\| (l\d\d) \|", part[:part.index("more labels")], re.M)
        assert rows == [f"l{k:02d}" for k in range(5, 35)], (section, rows)
        assert f"5 more labels, none with more {counted} than those shown, are left out here" in part
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert len(summary["packers"]["original"]["by_label"]) == 35  # every label kept in the summary
    wide = [{"packer": "original", "by_label": [{"label": f"id{i}", "docs": 1, "representation": 1.0}
                                                 for i in range(1500)]}]
    label_coverage(wide, tmp_path / "labels.png")
    assert Image.open(tmp_path / "labels.png").size[0] < 4000  # 30 bars, not 1,500
