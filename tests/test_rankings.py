"""Rankings at prefixes (eval/rankings.py) against hand-worked values: prefix sizes, BPB as a
ratio of sums, the tie order, reversals, contrasts, the subset interval recomputed from its
definition, and the rendered table. No model: nats are written out, so this is cheap enough
to be the mutation tests of eval/rankings.py."""
import math

import numpy as np
import pytest

from eval.figures import prefix_rankings
from eval.rankings import bpb, order, prefix_rows, rankings, rankings_md

LN2 = math.log(2)


def test_prefix_rows_are_the_papers_counts_or_the_same_fractions():
    assert prefix_rows(10240, 2048) == [128, 1024, 5120]  # 10,240 x 2,048 = 20,971,520 targets
    # 100 rows: 1.25 -> 2 (at least two rows), 10, 50
    assert prefix_rows(100, 2048) == [2, 10, 50]
    assert prefix_rows(8, 4, (8, 16), 32) == [2, 4]
    # at the full length the counts are t // context, not rounded and not raised to two: 4 // 4, 11 // 4
    assert prefix_rows(8, 4, (4, 11), 32) == [1, 2]
    assert prefix_rows(12, 4, (8, 16), 33) == [3, 6]  # 12 x 8 / 33 = 2.9, 12 x 16 / 33 = 5.8


def test_bpb_is_a_ratio_of_sums_and_ties_order_by_name():
    # 3 + 5 nats over 2 + 6 bytes: 8 / (8 ln 2) = 1 / ln 2 (a mean of ratios would differ)
    assert bpb(np.array([3.0, 5.0]), np.array([2, 6])) == pytest.approx(1 / LN2)
    assert order({"b": 1.0, "a": 1.0, "c": 0.5}) == ["c", "a", "b"]


def _three():
    # integer nats, one byte per row: BPB = mean nats / ln 2, and every sum is exact in any order
    nats = np.array([[0, 2, 2, 2],    # a: 1.5 / ln 2 in full, 0 on the first row
                     [1, 1, 1, 1],    # ref: 1 / ln 2
                     [3, 1, 1, 1]],   # b: 1.5 / ln 2 in full, 3 / ln 2 on the first row
                    dtype=float)
    return nats, np.ones((3, 4), dtype=np.int64)


def test_rankings_on_a_hand_worked_case():
    nats, nbytes = _three()
    res = rankings(nats, nbytes, ["a", "ref", "b"], "ref", [1, 4])
    assert res["methods"] == ["a", "ref", "b"] and res["reference"] == "ref" and res["total_rows"] == 4
    assert res["subsets"] == 1000 and res["seed"] == 20261009 and res["generator"] == "numpy.random.default_rng (PCG64)"
    assert res["full"] == {"a": pytest.approx(1.5 / LN2), "ref": pytest.approx(1 / LN2), "b": pytest.approx(1.5 / LN2)}
    assert res["full_order"] == ["ref", "a", "b"]  # a and b tie: by name
    first, whole = res["prefixes"]
    assert first["rows"] == 1 and first["scores"] == {"a": 0.0, "ref": pytest.approx(1 / LN2), "b": pytest.approx(3 / LN2)}
    assert first["order"] == ["a", "ref", "b"] and first["reversals"] == [["ref", "a"]]
    assert whole["order"] == ["ref", "a", "b"] and whole["reversals"] == []
    # contrasts: every method but the reference, in the given order
    assert [c["method"] for c in first["contrasts"]] == ["a", "b"]
    ca, cb = first["contrasts"]
    assert ca["delta"] == pytest.approx(-1 / LN2) and ca["full_delta"] == pytest.approx(0.5 / LN2)
    assert cb["delta"] == pytest.approx(2 / LN2) and cb["full_delta"] == pytest.approx(0.5 / LN2)
    # one-row subsets: a - ref is -1 on one row in four and +1 on the others (about 250 of 1,000 draws each
    # way), so the 2.5% and 97.5% quantiles are -1 and +1; b - ref is +2 or 0. The prefix deltas sit on the
    # interval's ends: inside.
    assert ca["interval95"] == pytest.approx([-1 / LN2, 1 / LN2]) and not ca["outside"]
    assert cb["interval95"] == pytest.approx([0.0, 2 / LN2]) and not cb["outside"]
    # a subset of all four rows is the whole stream: the interval is one point, the prefix delta on it
    for c in whole["contrasts"]:
        assert c["interval95"] == [c["full_delta"], c["full_delta"]] and not c["outside"]


@pytest.mark.parametrize("d_sign", [-1, 1])
def test_a_prefix_delta_beyond_the_interval_is_flagged_either_way(d_sign, tmp_path):
    # ref scores 1 nat a row; m scores 1 + d_sign on the first two rows and 1 on the other 38: the prefix of
    # two rows differs by d_sign / ln 2, while 1,000 two-row subsets of 40 rows mostly differ by 0
    nats = np.ones((2, 40))
    nats[1, :2] += d_sign
    res = rankings(nats, np.ones((2, 40), dtype=np.int64), ["ref", "m"], "ref", [2])
    c = res["prefixes"][0]["contrasts"][0]
    assert c["delta"] == pytest.approx(d_sign / LN2) and c["outside"]
    md = rankings_md(res, 2)
    assert "1 of 1 lie outside" in md and md.splitlines()[-1].endswith(" | yes |")
    # the figure draws it too (as errorbar offsets, a delta outside its interval was a negative error: a crash)
    prefix_rankings(res, 1, tmp_path / "prefix_rankings.png")
    assert (tmp_path / "prefix_rankings.png").stat().st_size > 0


def test_the_interval_is_the_quantiles_of_uniform_subsets_drawn_in_order():
    # the definition, written out: for each prefix in turn, `subsets` draws without replacement of `rows` row
    # indices from PCG64 with the named seed; the delta of ratios of sums; its 2.5% and 97.5% quantiles
    g = np.random.default_rng(5)
    nats, nbytes = g.uniform(1, 3, (3, 30)), g.integers(1, 5, (3, 30))
    res = rankings(nats, nbytes, ["x", "y", "z"], "y", [5, 12], subsets=200, seed=77)
    rng = np.random.default_rng(77)
    for p, rows in zip(res["prefixes"], (5, 12)):
        draws = [rng.choice(30, size=rows, replace=False) for _ in range(200)]
        for c, i in zip(p["contrasts"], (0, 2)):
            d = [nats[i][s].sum() / (LN2 * nbytes[i][s].sum()) - nats[1][s].sum() / (LN2 * nbytes[1][s].sum())
                 for s in draws]
            assert c["interval95"] == pytest.approx([np.quantile(d, 0.025), np.quantile(d, 0.975)], rel=1e-12)


def test_rankings_table_is_rendered_line_by_line():
    nats, nbytes = _three()
    res = rankings(nats, nbytes, ["a", "ref", "b"], "ref", [1, 4])
    assert rankings_md(res, 2) == (
        "3 checkpoints on the first 8 targets of the official stream; 2 methods x 2 prefixes = 4 contrasts against "
        "ref (the paper: 6 x 3 = 18); 0 of 4 lie outside their nominal 95% subset interval (not "
        "multiplicity-adjusted).\n"
        "\n"
        "| Method | Full BPB | 2 targets | 8 targets |\n"
        "|---|---:|---:|---:|\n"
        "| ref | 1.442695 | 1.442695 (#2) | 1.442695 (#1) |\n"
        "| a | 2.164043 | 0.000000 (#1) | 2.164043 (#2) |\n"
        "| b | 2.164043 | 4.328085 (#3) | 2.164043 (#3) |\n"
        "\n"
        "Reversals against the full ranking: 2: 1; 8: 0\n"
        "\n"
        "| Contrast vs ref | Prefix targets | Stream-prefix delta | Full delta | 95% subset interval | Outside |\n"
        "|---|---:|---:|---:|---|---|\n"
        "| a | 2 | -1.442695 | +0.721348 | [-1.442695, +1.442695] | no |\n"
        "| b | 2 | +2.885390 | +0.721348 | [+0.000000, +2.885390] | no |\n"
        "| a | 8 | +0.721348 | +0.721348 | [+0.721348, +0.721348] | no |\n"
        "| b | 8 | +0.721348 | +0.721348 | [+0.721348, +0.721348] | no |\n")
    # as eval records them: the paper's prefixes, scaled to this stream, are said to be
    res["declared"] = {"paper_prefix_targets": [262_144, 2_097_152, 10_485_760]}
    assert rankings_md(res, 2).splitlines()[0].endswith(
        "The prefixes stand for the declared 262,144 / 2,097,152 / 10,485,760 (the paper's) of 20,971,520 targets, at "
        "the same fractions of this stream.")
