"""The audit: length replay == token packer, exact partition, checkers against exports."""
import csv
import json
import random
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
from matplotlib.colors import to_hex

from audit import bench as audit_bench
from audit import plots
from audit.__main__ import main as audit_main
from audit.adapters import SPECS
from audit.metrics import pass_bounds, summarize_replay
from audit.replay import Replay, first_long_emission
from checkers.packing_checker import replay as checker_replay
from conftest import ROOT, one_line_error
from loaders.core import PACKERS
from loaders.packers import EVENT_FIELDS, Packer
from loaders.stream import DocumentStream, open_split


@pytest.fixture(scope="module")
def audit_out(small_corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("audit")
    rc = audit_main(["--data-dir", str(small_corpus), "--targets", str(300 * 128), "--row-capacity", "129",
                     "--buffer", "40", "--permutations", "3", "--csv", "--out", str(out)])
    assert rc == 0
    return out


@pytest.mark.parametrize("packer", PACKERS)
def test_audit_events_equal_token_packer_events(small_corpus, packer):
    tok_stream = open_split(small_corpus, "stdlib", "train")
    len_stream = DocumentStream(tok_stream.lengths, tok_stream.refills)  # no tokens at all
    rows_tok, ev_tok = Packer(tok_stream, packer, 129, 40).next_rows(400)
    rep = Replay(len_stream, packer, 400, 129, 40)
    assert np.array_equal(rep.events, ev_tok)
    # and the events describe the rows: each emission is where the record says
    flat = rows_tok.reshape(-1)
    for e in ev_tok[:: max(1, len(ev_tok) // 300)]:
        doc = tok_stream.doc_tokens(e["source_id"] % tok_stream.n)
        p = e["row"] * 129 + e["row_offset"]
        frag = flat[p:p + e["emitted"]]
        if e["lead_bos"]:
            assert frag[0] == tok_stream.bos
            assert np.array_equal(frag[1:], doc[e["span_start"]:e["span_start"] + e["emitted"] - 1])
        else:
            assert np.array_equal(frag, doc[e["span_start"]:e["span_start"] + e["emitted"]])


def _independent_summary(refills, packer, R, B, rows):
    """Mass partition and coverage recomputed from the standard-library checker's replay."""
    ev, arr = checker_replay(refills, packer, R, B, rows)
    arrived = sum(a[2] for a in arr)
    emitted = sum(e[2] for e in ev)
    discarded = sum(e[3] for e in ev)
    started = {e[0] for e in ev}
    added = sum(-(-(a[2] - 1) // (R - 1)) - 1 for a in arr if a[2] > R) if packer == "segment_first" else 0
    return {"sources_arrived": len(arr), "tokens_arrived": arrived, "emitted": emitted, "discarded": discarded,
            "buffered": arrived + added - emitted - discarded, "sources_started": len(started),
            "sources_never_started": len(arr) - len(started), "selection_events": len(ev),
            "crop_events": sum(e[4] == "crop" for e in ev), "bos_added": added}


@pytest.mark.parametrize("seed", range(6))
def test_summary_matches_independent_replay(seed):
    rng = random.Random(seed)
    R, B = rng.randint(4, 40), rng.randint(2, 30)
    lengths = [rng.choice([1, 2, R // 2, R, R + 1, 3 * R, 7 * R]) for _ in range(rng.randint(20, 200))]
    stream = DocumentStream.from_lengths(lengths, refill_docs=rng.randint(1, 16))
    refills = [lengths[a:b] for a, b in zip(stream.refills[:-1], stream.refills[1:])]
    for packer in PACKERS:
        rows = rng.randint(1, 60)
        s = summarize_replay(Replay(stream, packer, rows, R, B))
        want = _independent_summary(refills, packer, R, B, rows)
        assert {k: s[k] for k in want} == want, packer
        assert s["partition_holds"]
        if packer != "segment_first":
            assert s["protected"]["proposition_held"] and s["protected"]["all_buffered_unstarted"]


def test_report_partition_and_files(audit_out):
    s = json.loads((audit_out / "summary.json").read_text())
    for p, d in s["packers"].items():
        assert d["tokens_arrived"] + d["bos_added"] == d["emitted"] + d["discarded"] + d["buffered"], p
        assert d["emitted"] == s["rows"] * 129
    assert s["packers"]["lossless"]["discarded"] == 0
    assert set(s["figures"]) == {"retention_by_stratum.png", "sources_started.png", "buffer_mass.png", "pass_bounds.png",
                                 "length_histogram.png", "label_coverage.png", "position_exposure.png",
                                 "comparison.png", "startup_delay.png"}
    for f in s["figures"]:
        assert (audit_out / f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Proposition held" in (audit_out / "report.md").read_text()
    # the events file says what its integers are, read without this code (a new user's probe read kind 0/1 and an
    # arrival index as a document id): each column's description in the parquet schema, written by hand here
    schema = pq.read_schema(audit_out / "events_original.parquet")
    said = {f.name: f.metadata[b"description"].decode() for f in schema}
    assert set(said) == {*EVENT_FIELDS, "label"} and said["kind"].startswith("0 fit, 1 crop")
    assert said["source_id"].startswith("the source's arrival index") and "a new source" in said["source_id"]


def test_each_permutation_delay_is_that_permutations_first_long_emission(audit_out, small_corpus):
    """The permutations come back from the fan-out engine in task order: delay i is seed i's, `unpermuted` the
    stream's own, each recomputed here from the stream."""
    s = json.loads((audit_out / "summary.json").read_text())
    train = open_split(small_corpus, "stdlib", "train")
    ds, perm = DocumentStream(train.lengths, train.refills), s["permutations"]
    want = [first_long_emission(ds.permuted(seed), 129, 40, max_rows=s["rows"]) for seed in perm["seeds"]]
    assert perm["seeds"] == [0, 1, 2] and perm["delays"] == want and len(set(want)) > 1
    assert perm["unpermuted"] == first_long_emission(ds, 129, 40, max_rows=s["rows"])


def _checker(*args):
    return subprocess.run([sys.executable, "-I", "-S", str(ROOT / "checkers" / "packing_checker.py"), *args],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("packer", PACKERS)
def test_packing_checker_matches_export_and_catches_an_altered_event(audit_out, tmp_path, packer):
    args = ["--lengths", str(audit_out / "stream_lengths.txt"), "--packer", packer, "--row-capacity", "129", "--buffer", "40"]
    r = _checker("--events", str(audit_out / f"events_{packer}.csv"), *args)
    assert r.returncode == 0 and r.stdout.startswith("match:"), r.stdout + r.stderr
    rows = list(csv.DictReader(open(audit_out / f"events_{packer}.csv")))
    i = len(rows) // 2
    rows[i]["span_start"] = str(int(rows[i]["span_start"]) + 1)
    bad = tmp_path / "altered.csv"
    with open(bad, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    r = _checker("--events", str(bad), *args)
    assert r.returncode == 1 and f"MISMATCH at event {i}" in r.stdout


def test_packing_checker_self_test_standard_library_only():
    r = _checker("--self-test")
    assert r.returncode == 0, r.stdout
    assert "0 failed" in r.stdout and r.stdout.count("PASS") >= 9


def test_check_length_histogram_reproduces_the_paper_pass_bounds(tmp_path):
    # counts of sources with length >= 16,384 / 32,768 / 65,536 / 131,072 / 290,219: 789 / 196 / 39 / 9 / 1
    hist = {1000: 5000, 16384: 789 - 196, 32768: 196 - 39, 65536: 39 - 9, 131072: 9 - 1, 290219: 1}
    path = tmp_path / "h.csv"
    path.write_text("length,count\n" + "".join(f"{k},{v}\n" for k, v in hist.items()))
    tokens = sum(k * v for k, v in hist.items())
    r = subprocess.run([sys.executable, "-I", "-S", str(ROOT / "checkers" / "check_length_histogram.py"), str(path),
                        "--sources", str(sum(hist.values())), "--tokens", str(tokens)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    table = [ln.split() for ln in r.stdout.splitlines() if ln.strip() and ln.split()[0].replace(",", "").isdigit()]
    assert [int(t[2]) for t in table] == [2, 6, 26, 112, 1000]
    r = subprocess.run([sys.executable, "-I", "-S", str(ROOT / "checkers" / "check_length_histogram.py"), str(path),
                        "--tokens", str(tokens + 1)], capture_output=True, text=True)
    assert r.returncode == 1 and "FAIL" in r.stdout


def test_the_audits_own_pass_table_rounds_the_earliest_pass_up():
    # the paper's census at B = 1000: 789 / 196 / 39 / 9 / 1 sources of at least 16,384 / ... / 290,219 tokens
    # start no earlier than pass ceil(1000 / r) = 2 / 6 / 26 / 112 / 1000 (a floor would give 1 / 5 / 25 / 111)
    lengths = [1000, 16384, 32768, 65536, 131072, 290219]
    counts = [5000, 789 - 196, 196 - 39, 39 - 9, 9 - 1, 1]
    rows = pass_bounds(lengths, counts, lengths[1:] + [290220], 1000)
    assert [r["length_at_least"] for r in rows] == [16384, 32768, 65536, 131072, 290219, 290220]
    assert [r["sources_per_pass"] for r in rows] == [789, 196, 39, 9, 1, 0]
    assert [r["earliest_possible_pass"] for r in rows] == [2, 6, 26, 112, 1000, None]


def test_first_long_emission_matches_full_replay(small_corpus):
    s = open_split(small_corpus, "stdlib", "train")
    rep = Replay(DocumentStream(s.lengths, s.refills), "original", 600, 129, 40)
    long_ev = rep.events[rep.events["source_len"] > 129]
    want = int(long_ev["target_offset"].min()) if len(long_ev) else None
    assert first_long_emission(s, 129, 40, max_rows=600) == want


def test_audit_of_the_validation_stream(small_corpus, tmp_path):
    rc = audit_main(["--data-dir", str(small_corpus), "--split", "val", "--packers", "original", "--targets",
                     str(50 * 128), "--row-capacity", "129", "--buffer", "40", "--permutations", "0", "--out",
                     str(tmp_path), "--no-csv", "--no-figures"])
    assert rc == 0
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["stream"].endswith(":val") and s["packers"]["original"]["emitted"] == 50 * 129
    val = open_split(small_corpus, "stdlib", "val")
    rep = Replay(DocumentStream(val.lengths, val.refills), "original", 50, 129, 40)
    assert s["packers"]["original"]["selection_events"] == len(rep.events)


def test_regime_indicators_match_the_paper_arithmetic_and_the_audit(small_corpus):
    from audit.regime import PAPER, chunks_of, regime_indicators

    # the paper's longest source, 290,219 tokens at R = 2049: 2049 + 141 chunks of BOS + <= 2048
    assert chunks_of(290_219, 2049) == 142 == PAPER["longest_chunks"]
    assert chunks_of(2049, 2049) == 1 and chunks_of(2050, 2049) == 2 and chunks_of(4097, 2049) == 2
    assert chunks_of(4098, 2049) == 3
    s = open_split(small_corpus, "stdlib", "train")
    s = DocumentStream(s.lengths, s.refills)
    rep = Replay(s, "original", 200, 129, 12)
    ind = regime_indicators(s, 129, 12, 200 * 128, replay=rep)
    summ = summarize_replay(rep)
    assert ind["protected_share_of_arrived"] == summ["protected"]["share_of_arrived"]
    assert ind["passes_started"] == summ["passes_started"] and ind["sources_started_original"] == summ["sources_started"]
    seg = summarize_replay(Replay(s, "segment_first", 200, 129, 12))
    assert ind["sources_started_segment_first"] == seg["sources_started"]
    # the paper's 702,208 is what segment-first consumes (its arrivals): the row it stands in, not the starts'
    assert ind["sources_arrived_segment_first"] == seg["sources_arrived"] > seg["sources_started"]
    assert PAPER["sources_arrived_segment_first"] == 702_208 and PAPER["sources_started_segment_first"] is None
    assert ind["longest_chunks"] == chunks_of(int(s.lengths.max()), 129)


@pytest.mark.parametrize("args,needle", [
    (["--only", "paper,nosuch"], "unknown section nosuch; choose from paper, decode, scale, checker"),
    (["--only", "scale", "--scale", "5,x"], "--scale '5,x'"),
    (["--only", "decode", "--decode-docs", "0"], "--decode-docs 0"),
    (["--only", "paper", "--rounds", "0"], "--rounds 0"),
    (["--only", "paper", "--rounds", "4"], "--rounds 4: at least 5"),
])
def test_the_audit_benchmark_refuses_bad_sections_and_sizes_before_running(monkeypatch, capsys, args, needle):
    for section in ("bench_paper", "bench_decode", "bench_scale", "bench_checker"):
        monkeypatch.setattr(audit_bench, section, lambda *a: pytest.fail("a section ran before the arguments were checked"))
    one_line_error(capsys, audit_bench.main(args), needle)


def test_the_scale_goals_say_which_ratio_holds_and_which_is_missed():
    m = lambda s, mb: {"seconds": s, "peak_bytes": mb * 1e6}  # noqa: E731
    got = {("replay", 6): m(2, 180), ("replay", 7): m(21, 199), ("trace", 5): m(1, 140), ("trace", 6): m(12, 150)}
    lines = audit_bench.scale_goals(got)
    assert lines[0] == ("goal: replay 10^6 -> 10^7 documents: time 10.5x (at most 11x), memory 1.11x (at most 1.3x): "
                        "holds")
    assert lines[1].startswith("goal: trace 10^5 -> 10^6 documents: time 12.0x") and lines[1].endswith("MISSED")
    assert lines[2] == "goal: every size under 1 GB peak (largest: replay 10^7, 199 MB): holds"
    got["trace", 7] = m(100, 1200)
    assert audit_bench.scale_goals(got)[-1].endswith("(largest: trace 10^7, 1,200 MB): MISSED")
    assert audit_bench.scale_goals({("replay", 5): m(1, 150)}) == [
        "goal: every size under 1 GB peak (largest: replay 10^5, 150 MB): holds"]  # no pair measured: no ratio



def test_the_paper_goal_is_decided_by_the_interval_for_the_median_ratio():
    # speed-ups of the compiled audit over the Python one, against the goal (15x unless given)
    assert audit_bench.paper_verdict([15.0, 16.0, 15.5, 17.0, 16.5]) == "holds"  # at least the goal counts
    assert audit_bench.paper_verdict([14.9, 10.0, 12.0, 11.0, 13.0]) == "MISSED"
    assert audit_bench.paper_verdict([16.0, 14.0, 15.5, 17.0, 16.5]).startswith("undecided")  # its range holds 15
    assert audit_bench.paper_verdict([20, 21, 22, 23]) == "undecided: 4 rounds are too few for a 90% interval"
    assert audit_bench.paper_verdict([1.1, 1.2, 1.3, 1.0, 1.05], goal=1.0) == "holds"
    assert audit_bench.median_interval([0.5, 0.6, 0.7, 0.6]) == (0.5, 0.7, 1 - 2 / 16)  # 87.5%
    # five rounds: the range, coverage 1 - 2/32; one round under the goal leaves it undecided
    assert audit_bench.median_interval([0.8, 1.1, 0.9, 0.7, 0.85]) == (0.7, 1.1, 1 - 2 / 32)
    assert audit_bench.paper_verdict([20, 14, 18, 19, 21]).startswith("undecided")
    # nine rounds: k = 2 covers 1 - 2 (1 + 9) / 512 = 96.1% (k = 3 only 1 - 2 (1 + 9 + 36) / 512 = 82.0%)
    nine = [0.81, 0.79, 1.12, 0.83, 0.9, 0.84, 0.77, 0.88, 0.8]
    assert audit_bench.median_interval(nine) == (0.79, 0.9, 1 - 20 / 512)
    nine = [18.1, 17.9, 12.0, 18.3, 19.0, 18.4, 17.7, 18.8, 18.0]
    assert audit_bench.paper_verdict(nine) == "holds"  # one noisy round decides nothing alone
    assert audit_bench.paper_verdict(nine[:8] + [14.0]).startswith("undecided")  # two do
    assert audit_bench.median_interval([1.2, 1.3] + [1.1] * 7)[0] == 1.1
    assert audit_bench.median_interval([3, 1, 5, 2, 4], level=1 - 12 / 32) == (2, 4, 1 - 12 / 32)  # the level reached
    assert audit_bench.median_interval([0.7]) == (0.7, 0.7, 0.0)  # one value: no interval worth the name


# ---- the figures: one colour per packer, legends off the data, empty panels in words ----------------------
def _fake_summary(name, started_long=(0, 0, 0)):
    strata = ["1-32", "33-128", ">128"]
    return {"packer": name, "sources_longer_than_R_arrived": 5,
            "retention_by_stratum": [{"stratum": s, "sources": 3, "retained": 0.5} for s in strata],
            "by_label": [{"label": lab, "representation": 1.0} for lab in ("prose", "test")],
            "position_exposure": [{"stratum": s, "emitted_share": [0.5] * 10} for s in strata],
            "plot": {"curve_edges": [0, 10, 20, 30], "started": [1, 2, 3], "started_long": list(started_long)}}


def _drawn(monkeypatch, draw, *args):
    """The figure a plotting function would write, kept open for inspection."""
    figs = []
    monkeypatch.setattr(plots, "_write", lambda fig, path: figs.append(fig))
    draw(*args, None)
    return figs[0]


def test_every_packer_gets_its_own_colour_in_the_bar_figures(monkeypatch):
    names = list(PACKERS) + list(SPECS) + ["mine_a", "mine_b"]  # ours, every library packer, two unknown ones
    styles = plots.packer_styles(names)
    assert len({to_hex(s["color"]) for s in styles.values()}) == len(names)
    # the paper's four keep the colours they always had
    assert [to_hex(styles[n]["color"]) for n in ("original", "lossless", "segment_first", "random_span")] == \
        ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"]
    summaries = [_fake_summary(n) for n in names[:13]]
    for draw in (plots.retention_by_stratum, plots.label_coverage):
        fig = _drawn(monkeypatch, draw, summaries)
        ax = fig.axes[0]
        handles, labels = ax.get_legend_handles_labels()
        assert labels == names[:13]
        assert len({to_hex(h.patches[0].get_facecolor()) for h in handles}) == 13, draw.__name__
        # the legend lies right of the axes, not over the bars
        fig.canvas.draw()
        assert ax.get_legend().get_window_extent().x0 >= ax.get_window_extent().x1


def test_the_comparison_figure_counts_documents_where_every_packer_has_them(monkeypatch):
    # the main job's torchtune_text: its wrapped stream never starts 633 of 1,522 arrivals, but none of its 761 documents
    row = {"emitted_share": 0.4, "discarded_share": 0.2, "buffered_share": 0.4, "padding_share": 0.0, "rows": 10,
           "long_never_started": 633, "long_arrived": 1522, "long_documents_never_started": 0,
           "long_documents_arrived": 761}
    fig = _drawn(monkeypatch, plots.comparison, {"packers": {"torchtune_text": row}})
    ax = fig.axes[0]
    title = ax.get_title().replace("\n", " ")
    assert [t.get_text() for t in ax.texts] == ["0/761"] and "documents > R never started / arrived" in title
    row["long_documents_never_started"] = None  # no fate table: arrivals, and the title says so
    ax = _drawn(monkeypatch, plots.comparison, {"packers": {"torchtune_text": row}}).axes[0]
    title = ax.get_title().replace("\n", " ")
    assert [t.get_text() for t in ax.texts] == ["633/1,522"] and "arrivals of sources > R" in title
    # the main job's 24 packers: two rows of 12 (in one row, 2,700 pixels wide), every packer once, in order
    row["long_documents_never_started"] = 0
    fig = _drawn(monkeypatch, plots.comparison, {"packers": {f"p{i}": row for i in range(24)}})
    assert [[t.get_text() for t in ax.get_xticklabels()] for ax in fig.axes] == \
        [[f"p{i}" for i in range(12)], [f"p{i}" for i in range(12, 24)]]
    assert fig.get_figwidth() == 0.9 * 12 + 3 and fig.axes[1].get_xlabel() == "packer" == fig.axes[0].get_xlabel() + "packer"


def test_position_exposure_wraps_into_rows_of_at_most_five(monkeypatch):
    fig = _drawn(monkeypatch, plots.position_exposure, [_fake_summary(f"p{i}") for i in range(13)])
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.images]
    assert len(panels) == 13
    rows = {}
    for ax in panels:
        rows.setdefault(round(ax.get_position().y0, 3), []).append(ax)
    assert sorted(len(r) for r in rows.values()) == [3, 5, 5]  # 13 panels: two full rows of five, then three


def test_identical_curves_are_named_together_and_a_flat_panel_says_so(monkeypatch):
    said = []
    monkeypatch.setattr(plots, "_text_panel", lambda ax, text, width=46: said.append(text))
    fig = _drawn(monkeypatch, plots.sources_started, [_fake_summary("original"), _fake_summary("random_span")], 129)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["original = random_span (0)"]
    assert len(said) == 1 and said[0].startswith("No source longer than R = 129 started")
    fig = _drawn(monkeypatch, plots.sources_started, [_fake_summary("original", (0, 1, 2)), _fake_summary("lossless")], 129)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["original (2)", "lossless (0)"]
    assert len(said) == 1  # a curve that moves: drawn, no text panel
    perm = {"count": 3, "seeds": [0, 1, 2], "delays": [None, None, None], "unpermuted": None}
    _drawn(monkeypatch, plots.startup_delay, perm, (1e6, 2e6))
    assert len(said) == 2 and said[1].startswith("Nothing to plot")
    # a library loader's rows hold R - 1 tokens: the panel names the R its count used, not the command line's
    lib = {**_fake_summary("megatron_gpt", (0, 1, 2)), "row_capacity": 128}
    fig = _drawn(monkeypatch, plots.sources_started, [lib], 129)
    assert fig.axes[1].get_title().replace("\n", " ") == "sources longer than R = 128 started"
    fig = _drawn(monkeypatch, plots.sources_started, [{**_fake_summary("original"), "row_capacity": 129}, lib], 129)
    assert fig.axes[1].get_title() == "sources longer than R started\n(R: each packer's row capacity, 128 or 129)"
