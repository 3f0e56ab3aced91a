"""SUMMARY.md: every number it states comes from the run's result files (recomputed here from the JSON)."""
import json
import random
import re

from findings import PAPER
from findings.evaluation_sections import paper_cell, position_shares
from findings.queue_sections import rate_rule, reexecution_cell
from findings.section import signs_agree
from findings.summary import build, main, render
from findings.training_section import filter_counts
from records.evaluation import WindowCell
from records.queue_run import RuleCalibration
from records.reexecution import Difference, Reexecution


def _write(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def _cells(dicts):
    """Window cells as the evaluation's record reads them, from the keys a test gives."""
    keys = ("condition", "seed", "stratum", "declared", "interaction", "interval_adjusted", "tail_delta", "begin_delta",
            "tail_bins")
    return [WindowCell(**{k: c.get(k) for k in keys}) for c in dicts]


def calibration(**kw):
    """A run summary's calibration: k 3, frac 0.5, in-sample unless kw says otherwise."""
    return RuleCalibration(**{"k": 3, "frac": 0.5, "sigma": {}, "false_rejections": 0, "transitions": 12,
                              "upper95": 0.221, "rate_kind": "in-sample", **kw})


def reexecution(**kw):
    """What a re-execution of the whole log found: by default it held, bitwise, on this machine."""
    return Reexecution(**{"held": True, "mode": "bitwise", "tolerance": 0.0, "same_machine": True,
                          "parameter_hashes_compared": True, "first": 1, "last": 58, "records": 58,
                          "from_checkpoint": None, "seconds": 31.4, "largest_float_difference": {},
                          "difference": None, "whole_log": True, **kw})


def _packer(rng, name, applies=True):
    arrived = rng.randrange(10**6, 10**7)
    emitted, discarded = rng.randrange(arrived // 3), rng.randrange(arrived // 10)
    return {"packer": name, "sources_arrived": rng.randrange(1000, 99999), "tokens_arrived": arrived, "emitted": emitted,
            "discarded": discarded, "buffered": arrived - emitted - discarded, "partition_holds": True,
            "crop_events": rng.randrange(5000), "crop_median_emitted": float(rng.randrange(1, 30)),
            "crops_emitting_only_bos": rng.randrange(500), "bos_added": rng.randrange(900),
            "sources_longer_than_R_arrived": 900, "sources_longer_than_R_started": rng.randrange(900),
            "share_emitted_from_long_sources": rng.random(), "startup_delay_targets": rng.randrange(10**6),
            "protected": {"applies": applies, "proposition_held": True if applies else None, "size": rng.randrange(1, 999),
                          "tokens": rng.randrange(arrived), "share_of_arrived": rng.random(), "share_of_buffered": rng.random(),
                          "all_buffered_unstarted": True}}


def fake_run(root, rng):
    pk = {n: _packer(rng, n, n != "segment_first") for n in ("original", "random_span", "lossless", "segment_first")}
    _write(root / "audit" / "summary.json", {
        "schema": "audit-summary/1", "packers": pk, "buffer": 20, "row_capacity": 129, "targets": 81920,
        "permutations": {"count": 5, "min": 1234567, "max": 2345678},
        "pass_bounds": [{"length_at_least": 4096, "sources_per_pass": 7, "earliest_possible_pass": 3},
                        {"length_at_least": 39167, "sources_per_pass": 1, "earliest_possible_pass": 20}]})
    bpb = {}
    for cond, loader in (("baseline", "original"), ("random_crop", "random_span"), ("segmented", "segment_first")):
        for seed in (43, 44):
            bpb[(cond, seed)] = 2 + rng.random()
            _write(root / "train" / f"{cond}_s{seed}" / "summary.json", {
                "config": {"loader": loader, "seed": seed, "depth": 2, "width": 64, "context": 128, "updates": 40},
                "official": {"bpb": bpb[(cond, seed)]}})
    conf = {(c, s): 2 + rng.random() for c, s in bpb}
    _write(root / "eval" / "confirmation.json", {"status": "confirmed", "targets": 8192, "duplicates": [[1, "x"]] * 3,
                                                 "scores": [{"condition": c, "seed": s, "bpb": v} for (c, s), v in conf.items()]})
    cells = []
    for i in range(8):
        lo = rng.uniform(-0.1, 0.05)
        cells.append({"declared": True, "condition": "random_crop", "seed": 43, "stratum": i, "sources": 10,
                      "interaction": rng.uniform(-0.1, 0.1), "tail_delta": rng.uniform(-0.1, 0.1),
                      "begin_delta": rng.uniform(-0.1, 0.1), "interval_adjusted": [lo, lo + rng.uniform(0, 0.1)], "tail_bins": [rng.uniform(-0.01, 0.01)] * 4})
    for p in ("dev", "conf"):
        _write(root / "eval" / f"window_summary_{p}.json", {"cells": cells, "per_stratum": [{"sources": 11}, {"sources": 4}],
                                                            "text_targets": 75_691 if p == "conf" else 70_001})
    prefixes = [{"reversals": [["a", "b"]] * rng.randrange(3),
                 "contrasts": [{"outside": rng.random() < 0.3} for _ in range(2)]} for _ in range(3)]
    _write(root / "eval" / "rankings.json", {"prefixes": prefixes, "methods": ["a", "b", "c"]})
    return pk, bpb, conf, cells, prefixes


def _rows(md, title):
    """The (quantity, ours, paper) rows of one section of the page."""
    part = md.split(f"## {title}", 1)[1].split("\n## ", 1)[0]
    return [tuple(c.strip() for c in line.strip("|").split("|")) for line in part.splitlines()
            if line.startswith("| ") and not line.startswith("| quantity")]


def test_summary_numbers_are_the_result_files_numbers(tmp_path):
    rng = random.Random(7)
    for trial in range(5):
        root = tmp_path / f"run{trial}"
        pk, bpb, conf, cells, prefixes = fake_run(root, rng)
        md = render(build(root), root)
        o = pk["original"]
        rows51 = dict((q, ours) for q, ours, _ in _rows(md, "5.1 Coverage at the horizon"))
        assert rows51["sources arrived"] == f"{o['sources_arrived']:,}"
        assert rows51["tokens arrived = emitted + discarded + buffered"] == \
            f"{o['tokens_arrived']:,} = {o['emitted']:,} + {o['discarded']:,} + {o['buffered']:,}"
        assert f"{100 * o['protected']['share_of_arrived']:.2f}%" in rows51["protected tokens (share of arrived / of buffered)"]
        rows53 = _rows(md, "5.3 Matched training runs (official BPB)")
        for (cond, seed), v in bpb.items():
            ours = next(r[1] for r in rows53 if r[0].startswith(f"{cond} seed {seed}"))
            assert ours.startswith(f"{v:.5f}")
            if cond != "baseline":  # the delta is recomputed here from the two summaries
                assert f"({v - bpb[('baseline', seed)]:+.5f})" in ours
        rows54 = _rows(md, "5.4 Confirmation score")
        for (cond, seed), v in conf.items():
            if cond != "baseline":
                ours = next(r[1] for r in rows54 if r[0].startswith(f"{cond} seed {seed}"))
                assert ours == f"{v - conf[('baseline', seed)]:+.5f}"
        neg = sum(c["interaction"] < 0 for c in cells)
        excl = sum(c["interval_adjusted"][1] < 0 or c["interval_adjusted"][0] > 0 for c in cells)
        rows55 = dict((q, ours) for q, ours, _ in _rows(md, "5.5 Source windows: beginnings against tails"))
        assert rows55["declared contrasts: negative interactions"] == f"{neg} of 8"
        assert rows55["intervals excluding zero (interval adjusted)"] == f"{excl} of 8"
        # the text targets each checkpoint scored in the confirmation windows (the paper's 3,214,901), not those of
        # the confirmation stream (confirmation.json's 8,192, section 5.4), which the row once showed
        assert rows55["confirmation window text targets per checkpoint"] == "75,691"
        rev = sum(len(p["reversals"]) for p in prefixes)
        outside = sum(c["outside"] for p in prefixes for c in p["contrasts"])
        rows56 = dict((q, ours) for q, ours, _ in _rows(md, "5.6 Prefix rankings"))
        assert rows56["ranking reversals"] == str(rev)
        assert rows56["contrasts outside the 95% subset interval"] == f"{outside} of 6"


def test_paper_column_is_the_data_file(tmp_path):
    fake_run(tmp_path, random.Random(1))
    md = render(build(tmp_path), tmp_path)
    rows53 = _rows(md, "5.3 Matched training runs (official BPB)")
    paper = next(r[2] for r in rows53 if r[0].startswith("segmented seed 44"))
    assert paper.startswith(f"{PAPER['s5_3_official_bpb']['segmented_s44']:.5f}")


def test_missing_stages_are_reported_not_filled_in(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    assert main(["--out", str(tmp_path / "run")]) == 0
    md = (tmp_path / "run" / "SUMMARY.md").read_text()
    assert md.count("Not run: no results under") >= 7
    assert not re.search(r"\| [\d,.]+ \|", md.split("## Regime")[0])  # no number of ours where nothing ran
    assert "Read " in capsys.readouterr().out
    assert main(["--out", str(tmp_path / "nowhere")]) == 2 and not (tmp_path / "nowhere").exists()
    # folders given one by one: the page is written into a new --out (the --help's own example on a fresh checkout)
    assert main(["--out", str(tmp_path / "page" / "paper"), "--audit", str(tmp_path / "run")]) == 0
    assert (tmp_path / "page" / "paper" / "SUMMARY.md").is_file()


def test_first_128_share_is_the_first_two_bins_together():
    # bins [0,32), [32,128), [128,512), [512,2048) of a cell whose tail improved by 0.8: the "first 128"
    # share is (0.1 + 0.3) / 0.8 = 50% and the "after 512" share 0.2 / 0.8 = 25%; cells not declared,
    # not improved or without bins are left out
    cells = [{"declared": True, "tail_bins": [-0.1, -0.3, -0.2, -0.2], "tail_delta": -0.8},
             {"declared": False, "tail_bins": [-1, 0, 0, 0], "tail_delta": -1},
             {"declared": True, "tail_bins": [0.1, 0, 0, 0], "tail_delta": 0.1},
             {"declared": True, "tail_bins": None, "tail_delta": -0.5}]
    first, last = position_shares(_cells(cells))
    assert [round(x, 9) for x in first] == [50.0] and [round(x, 9) for x in last] == [25.0]


# ---- the page's small readings, by hand ---------------------------------------------------------
def test_position_shares_skip_a_cell_with_no_change_and_read_the_last_bin():
    cells = [{"declared": True, "tail_bins": [0, 0, 0, 0], "tail_delta": 0},  # no change: no share to give
             {"declared": True, "tail_bins": [-0.2, -0.3, -0.1, -0.4], "tail_delta": -1.0}]
    first, last = position_shares(_cells(cells))
    assert [round(x, 9) for x in first] == [50.0] and [round(x, 9) for x in last] == [40.0]


def test_signs_agree_counts_zero_as_not_positive_on_both_sides():
    # (0 > 0) == (1 > 0): no; (1 > 0) == (0 > 0): no; (-1 > 0) == (-2 > 0): yes
    assert signs_agree([0.0, 1.0, -1.0], [1.0, 0.0, -2.0]) == "direction agrees in 1 of 3"
    assert signs_agree([], []) == "n/a"


def test_paper_cell_matches_condition_seed_and_rank_among_declared_strata():
    # the paper declares two strata for random_crop at seed 43, 4097-8192 then 8193-16384 (PAPER's order)
    cells = _cells([{"stratum": "s0", "declared": False}, {"stratum": "s1", "declared": True},
                    {"stratum": "s2", "declared": True}])
    got = paper_cell("random_crop", 43, "s2", cells)
    assert (got["condition"], got["seed"], got["stratum"]) == ("random_crop", 43, "8193–16384")
    assert paper_cell("random_crop", 43, "s1", cells)["stratum"] == "4097–8192"
    assert paper_cell("random_crop", 43, "s0", cells) is None  # not declared: no paper cell
    assert paper_cell("random_crop", 43, "s1", cells[:2]) is None  # one declared stratum against the paper's two


def test_rate_rule_reads_five_percent_as_not_below_it():
    assert rate_rule(calibration(false_rejections=1, transitions=20, upper95=0.05)) == (
        "below 5% required: the point estimate does NOT meet it; the 95% bound (5.0%) does not")
    assert rate_rule(calibration(false_rejections=1, transitions=40, upper95=0.049, rate_kind="held-out")) == (
        "below 5% required: the point estimate meets it; the 95% bound (4.9%) meets")


def test_reexecution_cell_in_each_case():
    rx = reexecution(first=1, last=65, same_machine=False, seconds=34.4)
    assert reexecution_cell(rx) == "held: records 1-65 reproduced, bitwise (another machine), in 34 s"
    assert reexecution_cell(reexecution(first=1, last=65, seconds=34.4)).endswith("(this machine), in 34 s")
    failed = reexecution(held=False, difference=Difference(12, "train", "losses", 1.0, 2.0, "the line"))
    assert reexecution_cell(failed) == "FAILED at record 12 (losses)"
    assert reexecution_cell(None) == "not run"


def test_filter_counts_as_the_train_stage_recorded_them(tmp_path):
    assert filter_counts(tmp_path) == ""  # no regime.json: the rule alone
    _write(tmp_path / "regime.json", {"filter": {"dropped": 1234, "sources": 56789, "dropped_token_share": 0.01234}})
    assert filter_counts(tmp_path) == ": 1,234 of 56,789 sources, 1.2% of training tokens"


def test_regime_table_has_a_column_per_run(tmp_path):
    fake_run(tmp_path, random.Random(3))
    ind = {"longest_chunks_share_of_B": 0.02, "protected_share_of_arrived": 0.4987, "passes_started": 2,
           "arrived_over_B": 23.21, "share_emitted_from_long_sources": 0.0697}
    regime = {"columns": {"this audit": ind, "tiny training": {**ind, "passes_started": 1, "arrived_over_B": 64.0}}}
    s = json.loads((tmp_path / "audit" / "summary.json").read_text())
    _write(tmp_path / "audit" / "summary.json", {**s, "regime": regime})  # regime.json repeats it: read from here
    md = render(build(tmp_path), tmp_path)
    part = md.split("## Regime", 1)[1].split("\n## ", 1)[0]
    assert "| indicator | this audit | tiny training | paper |" in part
    assert "| stream passes started | 2 | 1 | 1 |" in part and "| sources arrived / B | 23.2 | 64.0 | 836.9 |" in part
    assert "| protected share of arrived tokens | 49.87% | 49.87% | 4.37% |" in part


def test_permutations_that_emit_no_long_source_read_none_within_the_budget(tmp_path):
    # a valid summary: no permutation emitted a source longer than R within the budget (min and max null)
    pk, *_ = fake_run(tmp_path, random.Random(3))
    s = json.loads((tmp_path / "audit" / "summary.json").read_text())
    s["permutations"] = {"count": 4, "min": None, "max": None}
    _write(tmp_path / "audit" / "summary.json", s)
    rows51 = dict((q, ours) for q, ours, _ in _rows(render(build(tmp_path), tmp_path), "5.1 Coverage at the horizon"))
    assert rows51["first long emission over 4 permutations (targets)"] == "none within the budget"


def test_a_wrapped_stream_gives_its_documents_beside_its_arrivals(tmp_path):
    # the main job's audit: 2 passes, 1,000 of 1,211 arrivals of long sources never started, but 624 of 761 documents
    fake_run(tmp_path, random.Random(3))
    s = json.loads((tmp_path / "audit" / "summary.json").read_text())
    o = s["packers"]["original"]
    o.update(passes_started=2, sources_longer_than_R_arrived=1211, sources_longer_than_R_started=211, documents={
        "longer_than_R": {"whole": 0, "partial": 137, "waiting": 624, "dropped": 0, "not_arrived": 0}})
    _write(tmp_path / "audit" / "summary.json", s)
    sec = next(x for x in build(tmp_path) if x.key == "s5_1")
    assert ("1,000 of 1,211 arrivals of sources longer than R never started (624 of the 761 documents longer than R "
            "that arrived; the stream wrapped: 2 passes started") in sec.headline
    assert sec.rows[0][:2] == ("sources arrived", f"{o['sources_arrived']:,} (2 passes started)")
    # the development stream's row says its own budget and passes (the main job's: 831,488 targets, 2 passes)
    _write(tmp_path / "audit_val" / "summary.json", {**s, "targets": 831_488})
    sec = next(x for x in build(tmp_path) if x.key == "s5_1")
    dev = next(r for r in sec.rows if r[0].startswith("development stream"))
    assert dev[1].endswith("; its budget 831,488 targets, 2 passes started"), dev


def test_a_results_file_of_another_version_is_named_on_the_page_not_called_not_run(tmp_path):
    # an audit folder whose summary.json another version wrote (no schema): its sections say why it was not read
    fake_run(tmp_path, random.Random(5))
    s = json.loads((tmp_path / "audit" / "summary.json").read_text())
    del s["schema"]
    _write(tmp_path / "audit" / "summary.json", s)
    md = render(build(tmp_path), tmp_path)
    part = md.split("## 5.1 Coverage at the horizon", 1)[1].split("\n## ", 1)[0]
    assert "Not read: " in part and "summary.json: schema None, expected 'audit-summary/1'" in part
    assert "Not run: no results under " + str(tmp_path / "audit") + "." not in md
