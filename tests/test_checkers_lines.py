"""What the numpy verifiers print: a failing line states the comparison that failed ("> tolerance"), and a
saved score off in either direction fails. Hand-made inputs small enough to work out by hand: one source
(or two rows), so every bootstrap replicate or subset equals the point value and the intervals collapse."""
import json
import math
import re

import numpy as np

from checkers.verify_evaluation_summary import main as rankings_main
from checkers.verify_window_evidence import main as windows_main

LN2 = math.log(2)


def window_files(tmp_path, tail_delta):
    """One stratum, one source: beginning (row 0) and tail (row 1) windows of one bin, 8 bytes each.
    Baseline 8 ln2 nats on both (1.0 BPB); random_crop 12 ln2 on the beginning (1.5), 4 ln2 on the tail (0.5).
    So begin delta +0.5, tail delta -0.5, interaction -1.0, every replicate -1.0."""
    p = {"seed": 0, "contrasts": [], "strata": [0], "conditions": ["random_crop"], "seeds": [1],
         "baseline": "baseline", "replicates": 10, "alpha": 0.05}
    np.savez(tmp_path / "e.npz", kind=np.array([0, 1]), source_index=np.array([0, 0]), stratum=np.array([0, 0]),
             bytes=np.array([[8], [8]]), count=np.array([[8], [8]]),
             baseline_s1_nats=np.array([[8 * LN2], [8 * LN2]]), random_crop_s1_nats=np.array([[12 * LN2], [4 * LN2]]),
             meta=np.asarray(json.dumps(p)))
    cell = {"stratum": 0, "condition": "random_crop", "seed": 1, "sources": 1, "begin_delta": 0.5,
            "tail_delta": tail_delta, "interaction": -1.0, "interval95": [-1.0, -1.0], "begin_bins": [0.5], "tail_bins": [-0.5], "declared": False}
    (tmp_path / "s.json").write_text(json.dumps({"params": p, "cells": [cell]}))
    return tmp_path / "s.json", tmp_path / "e.npz"


def test_a_failing_window_line_says_greater_than_the_tolerance(tmp_path, capsys):
    assert windows_main([str(f) for f in window_files(tmp_path, -0.5)]) == 0
    # a rounding-sized difference, below the tolerance
    assert re.search(r"PASS  deltas, .* agree \(largest difference \S+ <= 1e-09\)", capsys.readouterr().out)
    assert windows_main([str(f) for f in window_files(tmp_path, -0.49)]) == 1  # 0.01 off
    out = capsys.readouterr().out
    assert "FAIL  deltas, interactions, intervals and bin contributions agree (largest difference 1.00e-02 > 1e-09)" in out


def ranking_files(tmp_path, full_b=1.5, delta=0.5):
    """Methods a (reference) and b, two rows of 4 bytes: a 4 ln2 + 4 ln2 nats (1.0 BPB), b 8 ln2 + 4 ln2 (1.5).
    The only prefix is both rows, so every subset is both rows: delta 0.5, interval [0.5, 0.5], not outside."""
    np.savez(tmp_path / "e.npz", nats=np.array([[4 * LN2, 4 * LN2], [8 * LN2, 4 * LN2]]),
             bytes=np.array([[4, 4], [4, 4]]), names=np.asarray(["a", "b"]), reference=np.asarray("a"),
             prefixes=np.array([2]))
    saved = {"methods": ["a", "b"], "reference": "a", "full": {"a": 1.0, "b": full_b}, "full_order": ["a", "b"],
             "seed": 0, "subsets": 5,
             "prefixes": [{"rows": 2, "order": ["a", "b"], "reversals": [], "scores": {"a": 1.0, "b": full_b},
                           "contrasts": [{"method": "b", "delta": delta, "interval95": [0.5, 0.5], "outside": False}]}]}
    (tmp_path / "r.json").write_text(json.dumps(saved))
    return [str(tmp_path / "r.json"), str(tmp_path / "e.npz")]


def test_a_failing_ranking_line_says_greater_than_the_tolerance(tmp_path, capsys):
    assert rankings_main(ranking_files(tmp_path)) == 0
    assert "(largest difference 0.00e+00 <= 1e-09)" in capsys.readouterr().out
    assert rankings_main(ranking_files(tmp_path, delta=0.51)) == 1
    assert "FAIL  contrast deltas, subset intervals and outside flags (largest difference 1.00e-02 > 1e-09)" in \
        capsys.readouterr().out


def test_a_saved_score_too_high_fails_as_one_too_low_does(tmp_path, capsys):
    for b in (1.4, 1.6):  # 0.1 below and 0.1 above the recomputed 1.5
        assert rankings_main(ranking_files(tmp_path, full_b=b)) == 1
        out = capsys.readouterr().out
        assert "FAIL  full-stream BPB of every method" in out and "FAIL  prefix of 2 rows" in out, (b, out)
