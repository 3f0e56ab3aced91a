"""The frontier (python -m audit ... --sweep): a point is the single audit of its configuration (one stream, and
two ranks against the topology audit's merged totals); the cheapest-change line on a stream worked by hand, and
in its other two forms; the Pareto set; bad input refused in one line with nothing written."""
import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from audit import __main__ as audit_cli
from audit import frontier_figure
from audit import run as audit_run
from audit import sweep
from conftest import one_line_error

R = 128  # a stratum bound: the single audit's exposure rows above it are exactly the sources longer than R


def _lengths_file(tmp_path):
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 100, 3000)
    lengths[::13] = rng.integers(R + 1, 6 * R, len(lengths[::13]))
    lengths[::97] = R  # exactly R: not long
    path = tmp_path / "lengths.txt"
    path.write_text("\n".join(map(str, lengths.tolist())) + "\n")
    return path


def _single(tmp_path, lengths, name, *extra):
    out = tmp_path / name
    assert audit_cli.main(["--lengths", str(lengths), "--row-capacity", str(R), "--targets", str(600 * (R - 1)),
                           "--permutations", "0", "--no-figures", "--out", str(out), *extra]) == 0
    return json.loads((out / "summary.json").read_text())


def _last_tenth(exposure):
    """Emitted over arrived tokens of the last tenth, over the strata above R."""
    rows = [e for e in exposure if int(e["stratum"].lstrip(">").split("-")[0]) > R]
    return sum(e["emitted_tokens"][9] for e in rows) / sum(e["arrived_tokens"][9] for e in rows)


def test_a_frontier_point_is_the_single_audit_of_its_configuration(tmp_path):
    lengths = _lengths_file(tmp_path)
    out = tmp_path / "frontier"
    assert audit_cli.main(["--lengths", str(lengths), "--row-capacity", str(R), "--targets", str(600 * (R - 1)),
                           "--sweep", "buffer=3,40", "--sweep", "packer=original,lossless", "--sweep", "ranks=1,2",
                           "--out", str(out)]) == 0
    front = json.loads((out / "frontier.json").read_text())
    assert {p.name for p in out.iterdir()} == set(sweep.FILES)
    assert "![frontier](frontier.png)" in (out / "frontier.md").read_text()
    point = {(p["buffer"], p["packer"], p["ranks"]): p for p in front["points"]}
    one = _single(tmp_path, lengths, "one", "--buffer", "40", "--packers", "lossless")["packers"]["lossless"]
    got = point[40, "lossless", 1]
    assert got["crop_waste"] == one["discarded"] / one["tokens_arrived"] and got["tokens_arrived"] == one["tokens_arrived"]
    assert got["long_arrivals"] == one["sources_longer_than_R_arrived"] > 0
    assert got["long_arrivals_never_started"] == \
        one["sources_longer_than_R_arrived"] - one["sources_longer_than_R_started"]
    assert got["last_tenth_exposure"] == pytest.approx(_last_tenth(one["position_exposure"]), rel=1e-12)
    # documents, as the single audit's fate table has them (one row a document, its arrivals added up)
    fates = pq.read_table(tmp_path / "one" / "fates_lossless.parquet").to_pandas()
    long = fates[fates["length"] > R]
    assert got["long_documents"] == (long["fate"] != "not_arrived").sum() > 0
    assert got["long_documents_never_started"] == long["fate"].isin(["waiting", "dropped"]).sum()
    two = _single(tmp_path, lengths, "two", "--buffer", "3", "--packers", "original", "--ranks", "2")
    merged, got = two["topology"]["packers"]["original"]["merged"], point[3, "original", 2]
    assert (got["discarded"], got["tokens_arrived"]) == (merged["discarded"], merged["tokens_arrived"])
    assert got["long_arrivals_never_started"] == \
        merged["sources_longer_than_R_arrived"] - merged["sources_longer_than_R_started"]
    assert got["last_tenth_exposure"] == pytest.approx(_last_tenth(merged["position_exposure"]), rel=1e-12)


def test_a_pipeline_with_one_packer_for_the_run_is_one_stream_in_the_frontier_too(tmp_path, capsys):
    """--pipeline project runs one packer whatever --ranks says: the plain audit replays one stream, and the
    frontier's current point was replayed as two (found by a user: another crop waste and never-started count than
    the audit's). Sweeping ranks under such a pipeline is refused: every point would be the same packer."""
    lengths = _lengths_file(tmp_path)
    common = ["--lengths", str(lengths), "--row-capacity", str(R), "--targets", str(600 * (R - 1)), "--pipeline",
              "project", "--ranks", "2", "--buffer", "40"]
    assert audit_cli.main(common + ["--sweep", "buffer=3,40", "--no-figures", "--out", str(tmp_path / "f")]) == 0
    current = [p for p in json.loads((tmp_path / "f" / "frontier.json").read_text())["points"] if p["current"]]
    one = _single(tmp_path, lengths, "one", *common[6:])
    assert one["pipeline"]["worker_streams"] == 1 and len(current) == 1 and current[0]["ranks"] == 1
    s = one["packers"]["original"]
    assert (current[0]["discarded"], current[0]["tokens_arrived"]) == (s["discarded"], s["tokens_arrived"])
    one_line_error(capsys, audit_cli.main(common + ["--sweep", "ranks=1,2", "--out", str(tmp_path / "g")]),
                   "--sweep ranks: --pipeline project runs one packer for the whole run, whatever its ranks")
    assert not (tmp_path / "g").exists()


def test_the_buffer_note_is_of_the_worker_streams_of_the_point_with_the_largest_buffer(tmp_path, capsys):
    """The paper's point (B 1,000, one stream) was checked with the command line's worker streams: a note said its
    buffer held more than a pass of the smallest of 4 streams (750 documents), though it runs one. Now the point that has the largest
    buffer is checked with its own streams (the most of them on a tie), and one more note names every other point whose
    buffer holds more than a pass of its smallest stream."""
    lengths = _lengths_file(tmp_path)  # 3,000 documents
    common = ["--lengths", str(lengths), "--row-capacity", str(R), "--targets", str(600 * (R - 1)), "--no-figures"]
    assert audit_cli.main(common + ["--loader-workers", "4", "--buffer", "8", "--sweep", "buffer=4",
                                    "--out", str(tmp_path / "f")]) == 0
    assert "note:" not in capsys.readouterr().out
    assert audit_cli.main(common + ["--sweep", "ranks=2", "--sweep", "buffer=2000", "--out", str(tmp_path / "g")]) == 0
    assert "note: --sweep's largest buffer 2,000 holds more documents than a pass of the smallest of the 2 worker " \
           "streams (1,500)" in capsys.readouterr().out
    # a smaller buffer at more streams than the largest buffer's point: 800 > 3,000 / 4 (said nowhere before)
    assert audit_cli.main(common + ["--sweep", "ranks=1,4", "--sweep", "buffer=800,1000", "--out",
                                    str(tmp_path / "h")]) == 0
    out = capsys.readouterr().out
    assert "note: --sweep's largest buffer 1,000 holds more documents than a pass of the smallest of the 4 worker " \
           "streams (750)" in out
    assert "note: 1 more configuration(s) hold more documents in a buffer than a pass of their smallest worker stream " \
           "gives: B=800 at 4 worker stream(s) (750 documents in the smallest)." in out


def test_the_cheapest_change_on_a_stream_worked_by_hand(tmp_path, capsys):
    # R = 4, one document a refill: a source of 5 tokens, then eleven of 2; 3 rows (9 targets). The current
    # configuration, B = 2 original, always has a 2 that fits and never starts the 5 (waste 0). B = 1 original
    # crops the 5 in row 1 (4 emitted, 1 discarded; docs 0-4 arrive: 13 tokens, waste 1/13). Segment-first cuts the
    # 5 into chunks of 4 and 2 (BOS + 1), which fit: started, waste 0, at B = 1 and at B = 2. Cheapest: the fewest
    # settings changed (one: B = 1 original and B = 2 segment-first), then the least waste: the packer alone. The
    # 5's last tenth has no token (5 - (9 * 5 + 9) // 10 = 0): exposure n/a. The paper's configuration gets no row
    # of 2,048 targets.
    path = tmp_path / "l.txt"
    path.write_text("\n".join(map(str, [5] + [2] * 11)) + "\n")
    out = tmp_path / "f"
    assert audit_cli.main(["--lengths", str(path), "--row-capacity", "4", "--buffer", "2", "--refill-docs", "1",
                           "--targets", "9", "--sweep", "buffer=1,2", "--sweep", "packer=original,segment_first",
                           "--no-figures", "--out", str(out)]) == 0
    front = json.loads((out / "frontier.json").read_text())
    got = {(p["buffer"], p["packer"]): (p["crop_waste"], p["long_documents_never_started"]) for p in front["points"]}
    assert got == {(1, "original"): (1 / 13, 0), (1, "segment_first"): (0.0, 0), (2, "original"): (0.0, 1),
                   (2, "segment_first"): (0.0, 0)}
    want = ("Cheapest listed change that starts every document longer than 4 tokens that arrived by the horizon "
            "(cheapest: fewest settings changed, then least crop waste, then most last-tenth exposure): packer original "
            "-> segment_first (crop waste 0.00% -> 0.00%; never started 1 of 1 arrived -> 0 of 1 arrived; last-tenth "
            "exposure n/a -> n/a).")
    md = (out / "frontier.md").read_text()
    assert front["cheapest_change"] == want and want in md
    said = capsys.readouterr().out
    assert "left out: this budget gives it no row" in said
    # --no-figures: the tables without the figure, and the page says so rather than link a missing file
    assert sorted(p.name for p in out.iterdir()) == ["frontier.json", "frontier.md"]
    assert "frontier.png" not in md and "No figure: the frontier ran with --no-figures." in md
    assert f"wrote {out}: frontier.md, frontier.json\n" in said


def test_never_started_counts_documents_not_their_arrivals_worked_by_hand(tmp_path):
    # R = 4, one document a refill, a pass of three: a 5, then two 2s; 2 rows (6 targets). B = 3 original: the buffer
    # {5, 2, 2} gives row 1 a 2, then (refilled with the 5's second arrival) the other 2; row 2 the 2s of the
    # second pass. Six arrivals, two of them the 5, neither started: 1 document of 1 never started, 2 arrivals of 2.
    # B = 1: the buffer {5} has nothing that fits, so row 1 crops the 5 (started); row 2 the two 2s: 0 of 1, 0 of 1
    path = tmp_path / "l.txt"
    path.write_text("5\n2\n2\n")
    out = tmp_path / "f"
    assert audit_cli.main(["--lengths", str(path), "--row-capacity", "4", "--buffer", "3", "--refill-docs", "1",
                           "--targets", "6", "--sweep", "buffer=1,3", "--no-figures", "--out", str(out)]) == 0
    front = json.loads((out / "frontier.json").read_text())
    keys = ("long_documents", "long_documents_never_started", "long_arrivals", "long_arrivals_never_started")
    assert {p["buffer"]: tuple(p[k] for k in keys) for p in front["points"]} == {3: (1, 1, 2, 2), 1: (1, 0, 1, 0)}
    assert front["long_documents_in_stream"] == 1
    md = (out / "frontier.md").read_text()
    assert "| 1 of 1 documents | 2 of 2 |" in md and "| 0 of 1 documents | 0 of 1 |" in md
    # every column named, the rows numbered as the figure's points
    assert ("| # | configuration | the paper's | current | crop waste | never started (longer than 4, of those "
            "arrived) | their arrivals never started | last-tenth exposure | rows | seconds |") in md
    assert [ln.split(" | ")[0] for ln in md.splitlines() if ln.startswith("| ") and "R 4," in ln] == ["| 1", "| 2"]


def _point(buffer, packer, waste, never, exposure=0.5, per_pass=3000, arrived=200):
    return {"row_capacity": 9, "buffer": buffer, "packer": packer, "ranks": 1, "loader_workers": 1,
            "crop_waste": waste, "long_documents_never_started": never, "long_documents": arrived,
            "last_tenth_exposure": exposure, "worker_streams": 1, "documents_per_pass": per_pass}


PAPERS = {"row_capacity": 9, "buffer": 1000, "packer": "original", "ranks": 1, "loader_workers": 1}


def test_the_cheapest_change_is_one_setting_before_two_even_at_more_waste():
    # the reviewer's corpus (3,000 documents a pass): segment-first alone starts every long document at 0.37% waste
    # and 88.54% exposure; with B = 10,000 as well it wastes 0.01% at 93.0%. One change beats two, whatever the waste;
    # the less wasteful pair is named after it, so the line never gives the one change's waste as the only price
    pts = [_point(1000, "original", 0.0083, 106, 0.0), _point(1000, "segment_first", 0.0037, 0, 0.8854),
           _point(10000, "segment_first", 0.0001, 0, 0.93), _point(10000, "original", 0.0005, 106, 0.0)]
    assert sweep.cheapest_change(pts, PAPERS, 2049) == (
        "Cheapest listed change that starts every document longer than 2,049 tokens that arrived by the horizon "
        "(cheapest: fewest settings changed, then least crop waste, then most last-tenth exposure): packer original -> "
        "segment_first (crop waste 0.83% -> 0.37%; never started 106 of 200 arrived -> 0 of 200 arrived; last-tenth "
        "exposure 0.00% -> 88.54%). The least crop waste that starts every document takes 2 settings changed: buffer "
        "1000 -> 10000, packer original -> segment_first (crop waste 0.01%; never started 0 of 200 arrived; last-tenth "
        "exposure 93.00%; B 10,000 holds more documents than a pass of the stream (3,000)).")
    # the probe's case: the one change (B 1000 -> 1) wastes far more than the current configuration, two changes less
    probe = [_point(1000, "original", 0.0094, 40, 0.0), _point(1, "original", 0.2659, 0, 0.0183),
             _point(10, "segment_first", 0.023, 0, 0.9755), _point(1, "segment_first", 0.05, 0, 0.99)]
    assert sweep.cheapest_change(probe, PAPERS, 2049).endswith(
        "buffer 1000 -> 1 (crop waste 0.94% -> 26.59%; never started 40 of 200 arrived -> 0 of 200 arrived; last-tenth "
        "exposure 0.00% -> 1.83%). The least crop waste that starts every document takes 2 settings changed: buffer "
        "1000 -> 10, packer original -> segment_first (crop waste 2.30%; never started 0 of 200 arrived; last-tenth "
        "exposure 97.55%).")
    # the main job's case: segment-first reaches fewer of the stream's long documents by the horizon (600 of 761),
    # so its 0 is of another population than the original's 624, and the line says so
    pts[1]["long_documents"] = 150
    assert "never started 106 of 200 arrived -> 0 of 150 arrived, 50 of the stream's 200 never reached;" in \
        sweep.cheapest_change(pts, PAPERS, 2049, in_stream=200)
    # a change that crops away most of what arrives is named with that said (row_capacity 2049 -> 2: 99.64%)
    cut = [_point(1000, "original", 0.0357, 40, 0.0), {**_point(1000, "original", 0.9964, 0, 0.0), "row_capacity": 2}]
    assert sweep.cheapest_change(cut, PAPERS, 2049).endswith(
        "last-tenth exposure 0.00% -> 0.00%; it crops away most of the arrived tokens).")
    pts[2]["long_documents"] = 120  # and the less wasteful pair's own population, said in its clause too (review)
    assert "(crop waste 0.01%; never started 0 of 120 arrived, 80 of the stream's 200 never reached;" in \
        sweep.cheapest_change(pts, PAPERS, 2049, in_stream=200)


def test_the_cheapest_change_among_single_changes_is_the_least_waste_then_the_most_exposure_and_a_big_buffer_is_said():
    now = _point(1000, "original", 0.0083, 5, 0.0)
    # two single changes at 1.00% and one at 2.00%: the least waste ties, the more exposed (90% to 80%) wins over
    # the smaller buffer
    pts = [now, _point(1000, "segment_first", 0.01, 0, 0.9), _point(100, "original", 0.01, 0, 0.8),
           _point(1000, "lossless", 0.02, 0, 1.0)]
    assert sweep.cheapest_change(pts, PAPERS, 9).endswith(
        "exposure): packer original -> segment_first (crop waste 0.83% -> 1.00%; never started 5 of 200 arrived -> 0 "
        "of 200 arrived; last-tenth exposure 0.00% -> 90.00%).")
    # the only change that starts them all: a buffer of 10,000 on a stream of 3,000 documents a pass
    pts = [now, _point(10000, "original", 0.001, 0, 0.5), _point(1000, "lossless", 0.0, 3, 1.0)]
    assert sweep.cheapest_change(pts, PAPERS, 9).endswith(
        "exposure): buffer 1000 -> 10000 (crop waste 0.83% -> 0.10%; never started 5 of 200 arrived -> 0 of 200 "
        "arrived; last-tenth exposure 0.00% -> 50.00%; B 10,000 holds more documents than a pass of the stream "
        "(3,000)).")


def test_the_cheapest_change_line_when_the_current_one_starts_everything_and_when_none_does():
    cur = {"row_capacity": 9, "buffer": 5, "packer": "original", "ranks": 1, "loader_workers": 1}
    pts = [_point(5, "original", 0.2, 3), _point(50, "original", 0.1, 2), _point(5, "lossless", 0.0, 1)]
    line = sweep.cheapest_change(pts, cur, 9)
    assert line.startswith("None of the 3 listed configurations starts every document longer than 9 tokens that "
                           "arrived") \
        and "the fewest never started is 1 of 200 arrived (R 9, B 5, lossless, 1 rank(s))" in line \
        and line.endswith("leaves 3 of 200 arrived.")
    pts[0]["long_documents_never_started"] = 0
    assert sweep.cheapest_change(pts, cur, 9).startswith("The current configuration (R 9, B 5, original, 1 rank(s)) "
                                                         "already starts every document longer than 9 tokens that "
                                                         "arrived by the horizon (0 of 200 arrived;")


def test_the_header_names_the_targets_of_each_r_whose_rows_do_not_divide_the_budget():
    """A new user's probe: frontier.md said every configuration replayed to 395,264 targets where its R = 4,097
    points made 96 rows of 4,096 = 393,216 (395,264 / 4,096 = 96.5). Hand-worked."""
    pts = [{"row_capacity": R, "targets": t} for R, t in ((2049, 395264), (4097, 393216), (1025, 395264))]
    assert sweep._fewer_targets({"targets": 395264, "points": pts}) == (
        ": where R - 1 does not divide the budget, to the last whole row below it (R = 4,097: 393,216)")
    assert sweep._fewer_targets({"targets": 395264, "points": pts[::2]}) == ""


def test_the_pareto_set_is_every_point_no_other_beats_on_all_three():
    pts = [_point(1, "a", 0.1, 5, 0.5), _point(2, "b", 0.2, 5, 0.5), _point(3, "c", 0.3, 0, 0.1),
           _point(4, "d", 0.1, 5, 0.5), _point(5, "e", 0.0, 9, 0.9)]
    assert sweep.pareto(pts) == [0, 2, 3, 4]  # b loses to a on waste alone; a and d tie, neither beats the other


@pytest.mark.parametrize("sweeps,needle", [
    (["bufer=1,2"], "--sweep 'bufer=1,2': expected KEY=V1,V2,... with KEY one of buffer, packer, row_capacity, ranks"),
    (["buffer="], "--sweep buffer=: no values"),
    (["buffer=1,0"], "--sweep buffer=0: B must be at least 1"),
    (["buffer=1", "buffer=2"], "--sweep buffer: given twice"),
    (["packer=original,shortest"], "--sweep packer=shortest: the frontier replays the paper's packers"),
    (["row_capacity=2049,x"], "--sweep row_capacity=x: expected integers"),
    (["ranks=0"], "--sweep ranks=0: ranks must be at least 1"),
    (["buffer=1,,10"], "--sweep buffer=1,,10: an empty value between commas"),  # it swept 1 and 10
])
def test_a_bad_sweep_is_one_line_and_writes_nothing(tmp_path, capsys, sweeps, needle):
    out = tmp_path / "never"
    argv = ["--lengths", str(tmp_path / "missing.txt"), "--out", str(out)]
    one_line_error(capsys, audit_cli.main(argv + [a for s in sweeps for a in ("--sweep", s)]), needle)
    assert not out.exists()


@pytest.mark.parametrize("extra,needle", [
    (["--csv"], "--sweep: --csv not used by the frontier"),
    (["--no-fates", "--csv"], "--sweep: --csv, --no-fates not used by the frontier"),
    (["--engine", "ray"], "--sweep: --engine ray not used by the frontier"),
    (["--trace", "mypackers:pack"], "--sweep: --trace not used by the frontier"),
    (["--passes", "1"], "--sweep: --passes not used by the frontier (it replays the paper's packers here, each to the "
                        "whole budget with the stream wrapping"),
    # accepted and ignored before (a new user's probe); --permutations 0 asks for nothing and stays accepted
    (["--permutations", "5"], "--sweep: --permutations not used by the frontier"),
    (["--thresholds", "100,200"], "--sweep: --thresholds not used by the frontier"),
    (["--ray-address", "127.0.0.1:1"], "--sweep: --ray-address not used by the frontier"),
])
def test_a_flag_the_frontier_does_not_use_is_refused_not_ignored(tmp_path, capsys, extra, needle):
    out = tmp_path / "never"
    argv = ["--lengths", str(tmp_path / "missing.txt"), "--out", str(out), "--sweep", "buffer=1,2", *extra]
    one_line_error(capsys, audit_cli.main(argv), needle)
    assert not out.exists()


@pytest.mark.parametrize("extra,needle", [
    (["--packers", "trl_bfd"], "--sweep: --packers trl_bfd: the frontier replays the paper's packers (original, "
                               "lossless, segment_first, random_span), not trl_bfd"),
    (["--pipeline", "torchtune"], "--sweep: --pipeline torchtune (its packer torchtune_text): the frontier replays "
                                  "the paper's packers"),
    (["--packers", "lossless,segment_first"], "--sweep: --packers lossless,segment_first: the frontier's current "
                                              "configuration has one packer; list several as --sweep "
                                              "packer=lossless,segment_first"),
])
def test_a_packer_the_frontier_cannot_make_current_is_refused_not_replaced_by_original(tmp_path, capsys, extra,
                                                                                       needle):
    # found by a new user: `--packers trl_bfd --sweep buffer=10,100` swept original and called it the current one
    (tmp_path / "l.txt").write_text("5\n40\n3\n90\n7\n" * 4)
    out = tmp_path / "never"
    argv = ["--lengths", str(tmp_path / "l.txt"), "--row-capacity", "33", "--out", str(out), "--sweep", "buffer=1,2"]
    one_line_error(capsys, audit_cli.main(argv + extra), needle)
    assert not out.exists()


def test_one_paper_packer_in_packers_is_the_frontiers_current_configuration(tmp_path):
    (tmp_path / "l.txt").write_text("5\n40\n3\n90\n7\n" * 4)
    argv = ["--lengths", str(tmp_path / "l.txt"), "--row-capacity", "33", "--sweep", "buffer=1,2", "--packers",
            "lossless", "--no-figures", "--out", str(tmp_path / "f")]
    assert audit_cli.main(argv) == 0
    points = json.loads((tmp_path / "f" / "frontier.json").read_text())["points"]
    assert [p["packer"] for p in points if p["current"]] == ["lossless"]


def test_a_sweep_whose_largest_buffer_the_memory_cannot_hold_is_one_line_and_writes_nothing(tmp_path, capsys,
                                                                                            monkeypatch):
    # 20 documents; the largest buffer, 2,000 places of 310 bytes and 2,000 arrivals of 320: 1.2 MB
    (tmp_path / "l.txt").write_text("5\n40\n3\n90\n7\n" * 4)
    monkeypatch.setattr(audit_run, "physical_memory", lambda: 10 ** 6)
    out = tmp_path / "never"
    one_line_error(capsys, audit_cli.main(["--lengths", str(tmp_path / "l.txt"), "--row-capacity", "33", "--out",
                                           str(out), "--sweep", "buffer=4,2000"]),
                   "--sweep's largest buffer 2,000 needs about 1.2 MB of memory, more than this machine's 976.6 KB; "
                   "give smaller buffers in --sweep")
    assert not out.exists()
    # a sweep of other keys: the largest buffer is the command line's own
    one_line_error(capsys, audit_cli.main(["--lengths", str(tmp_path / "l.txt"), "--row-capacity", "33", "--buffer",
                                           "2000", "--out", str(out), "--sweep", "row_capacity=33,40"]),
                   "--buffer 2,000 needs about 1.2 MB of memory", "give a smaller --buffer")
    assert not out.exists()


def test_the_sweeps_largest_buffer_is_named_where_it_comes_from():
    current = {"row_capacity": 33, "buffer": 40, "packer": "original", "ranks": 1, "loader_workers": 1}
    assert sweep.largest_buffer(sweep.configurations({"buffer": [4, 2000]}, current), {"buffer": [4, 2000]},
                                current)[:2] == (2000, "--sweep's largest buffer")
    big = {**current, "buffer": 5000}
    assert sweep.largest_buffer(sweep.configurations({"ranks": [1, 2]}, big), {"ranks": [1, 2]}, big)[:2] == \
        (5000, "--buffer")
    assert sweep.largest_buffer(sweep.configurations({"ranks": [1, 2]}, current), {"ranks": [1, 2]},
                                current)[0:2] == (1000, "the paper's buffer (its configuration is a point of every sweep)")


def test_a_sweep_point_that_runs_out_of_memory_is_named_in_one_line_and_nothing_is_written(tmp_path, capsys,
                                                                                           monkeypatch):
    (tmp_path / "l.txt").write_text("5\n40\n3\n90\n7\n" * 4)
    replay = sweep.measure

    def runs_out_at_b_8(stream, cfg, *a):
        if cfg["buffer"] == 8:
            raise MemoryError
        return replay(stream, cfg, *a)

    monkeypatch.setattr(sweep, "measure", runs_out_at_b_8)
    out = tmp_path / "never"
    one_line_error(capsys, audit_cli.main(["--lengths", str(tmp_path / "l.txt"), "--row-capacity", "33", "--out",
                                           str(out), "--sweep", "buffer=4,8"]),
                   "out of memory at R 33, B 8, original, 1 rank(s) (the packer's buffer",
                   f"smaller buffers in --sweep; nothing written, {out} is as it was")
    assert not out.exists()


def test_the_findings_page_shows_the_frontier_its_figure_and_the_cheapest_change(tmp_path):
    # what the main job writes to runs/main/frontier, read back by findings.summary: every point a row, the Pareto
    # marks and the headline as frontier.json has them, and the figure on the page
    from findings.summary import build, render

    run = tmp_path / "run"
    assert audit_cli.main(["--lengths", str(_lengths_file(tmp_path)), "--row-capacity", str(R), "--targets",
                           str(600 * (R - 1)), "--sweep", "buffer=1,10,100", "--sweep", "packer=original,segment_first",
                           "--permutations", "0", "--out", str(run / "frontier")]) == 0
    f = json.loads((run / "frontier" / "frontier.json").read_text())
    sec = next(s for s in build(run) if s.key == "frontier")
    assert sec.headline == f["cheapest_change"] and len(sec.rows) == len(f["points"]) >= 6  # + the current, the paper's
    assert sec.score[0].endswith("longer than R that arrived by the horizon")  # not every document: some never arrive
    assert [i for i, r in enumerate(sec.rows) if r[2] == "yes"] == f["pareto"]
    for r, p in zip(sec.rows, f["points"]):
        assert r[0].startswith(f"R {p['row_capacity']:,}, B {p['buffer']:,}, {p['packer']},")
        assert f"/ {p['long_documents_never_started']:,} of {p['long_documents']:,} /" in r[1]
    assert "![frontier](frontier/frontier.png)" in render(build(run), run)
    # a frontier run with --no-figures: the page says so rather than link a file that is not there
    (run / "frontier" / "frontier.png").unlink()
    page = render(build(run), run)
    assert "frontier.png" not in page and "No figure: the frontier ran with --no-figures." in page


def _tree(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("out,needle", [
    ("data", "--out data: holds the input data/l.txt"),
    (".", "--out .: is the working folder"),
    ("audited", "--out audited: holds an audit's output (comparison.json, events_original.parquet, "
                "fates_original.parquet, ...); the frontier goes to a folder of its own"),
    ("mine", "--out mine: holds files that are not an earlier frontier's output (notes.txt)"),
])
def test_a_sweeps_out_is_held_to_the_audits_checks(tmp_path, capsys, monkeypatch, out, needle):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "l.txt").write_text("5\n40\n3\n90\n7\n" * 4)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me\n")
    monkeypatch.chdir(tmp_path)
    common = ["--lengths", "data/l.txt", "--row-capacity", "33", "--permutations", "0"]
    assert audit_cli.main(common + ["--packers", "original", "--no-figures", "--out", "audited"]) == 0
    before = _tree(tmp_path)
    one_line_error(capsys, audit_cli.main(common + ["--sweep", "buffer=2,4", "--out", out]), needle)
    assert _tree(tmp_path) == before  # nothing written, nothing removed


def test_an_audit_and_a_frontier_each_refuse_the_others_folder_and_replace_their_own(tmp_path, capsys):
    # the frontier is not the audit's to delete: a folder holding one (alone, or beside an audit's output written by
    # an earlier version) is refused by the audit, in one line naming it, and kept; a frontier replaces its own
    (tmp_path / "l.txt").write_text("5\n40\n3\n90\n7\n" * 4)
    common = ["--lengths", str(tmp_path / "l.txt"), "--row-capacity", "33", "--permutations", "0"]
    audit = common + ["--packers", "original", "--no-figures", "--out"]
    front, both = tmp_path / "front", tmp_path / "both"
    assert audit_cli.main(common + ["--sweep", "buffer=2,4", "--out", str(front)]) == 0
    assert audit_cli.main(audit + [str(both)]) == 0
    for name in sweep.FILES:
        (both / name).write_bytes((front / name).read_bytes())
    for folder in (front, both):
        before = _tree(folder)
        one_line_error(capsys, audit_cli.main(audit + [str(folder)]),
                       f"--out {folder}: holds a --sweep's frontier (frontier.json, frontier.md, frontier.png), which "
                       "the audit would delete with the folder it replaces whole")
        assert _tree(folder) == before
    (front / "added.txt").write_text("x")  # an earlier frontier's folder, a file added: replaced whole, as an audit's
    assert audit_cli.main(common + ["--sweep", "buffer=2,4", "--out", str(front)]) == 0
    assert sorted(p.name for p in front.iterdir()) == sorted(sweep.FILES)
    assert not list(tmp_path.glob(".front.*"))  # no folder of the swap left beside it
    # another run's output in a subfolder (a frontier inside an audit's folder, an audit inside a frontier's) was
    # deleted with the folder: refused, naming it
    shutil.copytree(front, both / "frontier")
    for name in sweep.FILES:
        (both / name).unlink()
    shutil.copytree(both, front / "audit", ignore=shutil.ignore_patterns("frontier"))
    for folder, argv, inner in ((both, audit, "frontier"), (front, common + ["--sweep", "buffer=2,4", "--out"], "audit")):
        before = _tree(folder)
        one_line_error(capsys, audit_cli.main(argv + [str(folder)]),
                       f"--out {folder}: holds another run's output in {inner}/ (an audit's or a frontier's)")
        assert _tree(folder) == before


def test_the_figure_names_only_the_pareto_set_the_papers_and_the_current_and_joins_points_at_one_place():
    pts = [{**_point(1, "lossless", 0.0, 1), "paper": False, "current": False},
           {**_point(1000, "original", 0.0083, 5), "paper": True, "current": True},
           {**_point(10000, "original", 0.0005, 5, 0.0), "paper": False, "current": False, "ranks": 8},
           {**_point(10, "lossless", 0.0, 12), "paper": False, "current": False, "row_capacity": 4097}]
    names = frontier_figure.frontier_names(pts, [0], 9)
    assert names == [("1", "B=1 lossless"), ("2", "B=1,000 original"), ("3", None), ("4", None)]
    # 1 and 3 drawn 3 pixels apart share a label; 2 and 4 are alone
    xy = [(10, 10), (50, 50), (13, 10), (90, 10)]
    assert frontier_figure.same_place(xy, names) == [(10, 10, "1: B=1 lossless; 3"), (50, 50, "2: B=1,000 original"),
                                                     (90, 10, "4")]
    assert frontier_figure.key_lines(pts, 9)[2:] == ["  3  B=10,000 N=8 original", "  4  B=10 R=4,097 lossless"]


def test_the_figures_labels_never_cover_each_other_in_a_cluster_at_zero_waste(tmp_path, monkeypatch):
    # the reviewer's x = 0 clusters: lossless at every buffer, a buffer so large it crops nothing, the Pareto set
    # at 0 never started a hair apart; every label (text, not its leader line) apart from every other, in its panel
    from matplotlib.text import Text
    pts = []
    for k, (b, packer, waste, never, exp) in enumerate(
            [(1, "lossless", 0.0, 1, 0.99), (10, "lossless", 0.0, 12, 0.75), (100, "lossless", 0.0, 103, 0.0),
             (1000, "lossless", 0.0, 103, 0.0), (10000, "lossless", 0.0, 103, 0.0),
             (10000, "original", 0.0005, 103, 0.0), (10000, "random_span", 0.0005, 103, 0.0),
             (1000, "original", 0.0083, 103, 0.0), (1000, "random_span", 0.0083, 103, 0.0),
             (10000, "segment_first", 0.0, 0, 0.27), (1000, "segment_first", 0.0068, 0, 0.865),
             (100, "segment_first", 0.0197, 0, 0.936), (10, "segment_first", 0.0214, 3, 0.943),
             (1, "segment_first", 0.0224, 3, 0.941), (1, "original", 0.1128, 2, 0.034)]):
        pts.append({**_point(b, packer, waste, never, exp), "paper": k == 7, "current": k == 7})
    figures = []
    monkeypatch.setattr(frontier_figure, "_write", lambda fig, path: figures.append(fig))
    frontier_figure.frontier(pts, sweep.pareto(pts), 9, tmp_path / "frontier.png")
    fig = figures[0]
    fig.canvas.draw()  # as saving it would: the annotations take their places
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes[:2]:
        frame = ax.get_window_extent(renderer)
        boxes = [Text.get_window_extent(t, renderer) for t in ax.texts]
        assert len(boxes) >= 8
        assert all(frame.x0 <= b.x0 and b.x1 <= frame.x1 and frame.y0 <= b.y0 and b.y1 <= frame.y1 for b in boxes)
        assert not [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:] if a.overlaps(b)]
