"""Evaluation: windows, bins, padding, re-scoring, bootstrap, rankings, the numpy checkers."""
import json
import math
import shutil
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from conftest import ROOT
from eval.compare import window_cells
from eval.confirmation import find_duplicates
from eval.rankings import rankings
from eval.scoring import score_rows
from eval.windows import WindowSpec, build_windows, sample_sources, score_windows
from loaders.stream import open_split
from train import train
from training.trainer import build_model
from training.config import resolve_config


def tiny_cfg(small_corpus, **kw):
    base = dict(depth=2, width=32, heads=2, kv_heads=2, context=32, short_window=16, vocab=400, micro_rows=4,
                accum=2, updates=3, eval_batches=4, eval_rows=4, buffer=1000, data_dir=str(small_corpus))
    base.update(kw)
    return resolve_config(None, [f"{k}={v}" for k, v in base.items()])


@pytest.fixture(scope="module")
def evaluated(small_corpus, tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    for cond, loader in (("baseline", "original"), ("random_crop", "random_span")):
        for seed in (43, 44):
            train(tiny_cfg(small_corpus, loader=loader, seed=seed, name=f"{cond}_s{seed}"), runs / f"{cond}_s{seed}",
                  log=lambda m: None)
    from eval.__main__ import main as eval_main

    out = tmp_path_factory.mktemp("eval")
    assert eval_main(["--runs", str(runs), "--out", str(out), "--replicates", "300", "--device", "cpu", "--exploratory",
                      "--no-figures"]) == 0
    return runs, out


@pytest.fixture(scope="module")
def model(small_corpus):
    torch.manual_seed(0)
    m = build_model(tiny_cfg(small_corpus), "cpu", seed=0)
    for b in m.blocks:
        torch.nn.init.normal_(b.attn.c_proj.weight, 0, 0.05)
        torch.nn.init.normal_(b.mlp.c_proj.weight, 0, 0.05)
    return m


def test_bins_add_up_to_the_whole_window(small_corpus, model):
    s = open_split(small_corpus, "stdlib", "val")
    spec = WindowSpec.for_context(32, 147018, per_stratum=20)
    win = build_windows(s, spec)
    tb = np.random.default_rng(0).integers(0, 5, 400)  # some zero-byte tokens too
    binned = score_windows(model, win, tb, spec, "cpu")
    whole = score_windows(model, win, tb, WindowSpec(32, spec.strata, (0, 32), 20, spec.seed), "cpu")
    assert np.abs(binned["nats"].sum(1) - whole["nats"][:, 0]).max() < 1e-7
    assert np.array_equal(binned["bytes"].sum(1), whole["bytes"][:, 0])
    assert np.array_equal(binned["count"].sum(1), whole["count"][:, 0])
    assert np.array_equal(whole["count"][:, 0], ((win["y"] >= 0) & (tb[np.maximum(win["y"], 0)] > 0)).sum(1))



def test_window_batches_keep_one_shape_and_padding_changes_no_statistic(small_corpus, model):
    s = open_split(small_corpus, "stdlib", "val")
    spec = WindowSpec.for_context(32, 147018, per_stratum=20)
    win = build_windows(s, spec)
    tb = np.random.default_rng(0).integers(0, 5, 400)
    n = len(win["x"])
    batch = 7 if n % 7 else 6  # a last, smaller batch exists
    assert n % batch
    shapes = []

    class Recorder(torch.nn.Module):  # the model, recording the batch shapes it is given
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, *a, **k):
            shapes.append(tuple(a[0].shape))
            return self.m(*a, **k)

    padded = score_windows(Recorder(model), win, tb, spec, "cpu", batch=batch)
    one = score_windows(model, win, tb, spec, "cpu", batch=n)  # one batch, nothing padded: the reference
    assert set(shapes) == {(batch, win["x"].shape[1])}
    for k in ("bytes", "count"):
        assert np.array_equal(padded[k], one[k])
    assert np.abs(padded["nats"] - one["nats"]).max() < 1e-4

def test_right_padding_changes_no_loss(model):
    rng = np.random.default_rng(1)
    tb = np.ones(400, dtype=np.int64)
    for n in (1, 5, 17, 31):
        toks = rng.integers(0, 396, n + 1)
        x_short, y_short = toks[None, :-1], toks[None, 1:]
        x_pad = np.concatenate([x_short, np.full((1, 32 - n), 7)], 1)
        y_pad = np.concatenate([y_short, np.full((1, 32 - n), -1)], 1)
        a = score_rows(model, x_short, y_short, tb, [0, n], "cpu")
        b = score_rows(model, x_pad, y_pad, tb, [0, 32], "cpu")
        assert abs(a[0][0, 0] - b[0][0, 0]) < 1e-9 and a[1][0, 0] == b[1][0, 0] and a[2][0, 0] == b[2][0, 0]


def test_window_sample_is_reproducible_and_follows_the_rules(small_corpus):
    s = open_split(small_corpus, "stdlib", "val")
    spec = WindowSpec.for_context(32, 147018, per_stratum=10)
    a, b = build_windows(s, spec), build_windows(s, spec)
    assert a["fingerprint"] == b["fingerprint"] and np.array_equal(a["source_index"], b["source_index"])
    other = build_windows(s, WindowSpec.for_context(32, 147019, per_stratum=10))
    assert other["fingerprint"] != a["fingerprint"]
    idx = sample_sources(s.lengths, spec)
    assert len(set(idx.tolist())) == len(idx)  # without replacement
    for i, kind, y in zip(a["source_index"], a["kind"], a["y"]):
        doc = s.doc_tokens(i)
        L = len(doc)
        n = int((y >= 0).sum())
        if kind == 0:
            assert n == min(L, 33) - 1 and np.array_equal(y[:n], doc[1:n + 1])
        else:
            assert L > 33 and n == 32 and np.array_equal(y[:n], doc[L - 32:])
    counts = np.bincount(np.searchsorted(spec.strata, s.lengths, side="left"), minlength=8)
    got = np.bincount(a["stratum"][a["kind"] == 0], minlength=8)
    assert np.array_equal(got, np.minimum(counts, 10))


def test_rescoring_a_checkpoint_reproduces_its_statistics(evaluated, small_corpus):
    runs, out = evaluated
    from training.checkpoint import load_checkpoint

    payload = load_checkpoint(runs / "random_crop_s44" / "ckpt_000003.pt")
    cfg = tiny_cfg(small_corpus)
    m = build_model(cfg, "cpu")
    m.load_state_dict(payload["model"])
    t = pq.read_table(out / "random_crop_s44" / "windows_dev.parquet")
    meta = {k.decode(): v.decode() for k, v in t.schema.metadata.items()}
    spec = WindowSpec(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in json.loads(meta["spec"]).items()
                         if k != "labels"})
    s = open_split(small_corpus, "stdlib", "val", row_range=tuple(json.loads(meta["rows"])))
    win = build_windows(s, spec)
    assert win["fingerprint"] == meta["fingerprint"]
    from corpus.layout import Layout
    from corpus.tokenizer import load_token_bytes

    st = score_windows(m, win, load_token_bytes(Layout(small_corpus, "stdlib").tokenizer), spec, "cpu")
    for b in range(st["nats"].shape[1]):
        assert np.array_equal(t.column(f"nats_{b}").to_numpy(), st["nats"][:, b])
        assert np.array_equal(t.column(f"bytes_{b}").to_numpy(), st["bytes"][:, b])


def _synthetic_evidence(rng, n, effect_tail, effect_begin=0.0, bins=2):
    """Two windows per source (beginning, tail); nats ~ bytes x rate; a condition shifts the rates."""
    nb = rng.integers(20, 60, size=(2 * n, bins))
    base = nb * rng.normal(1.0, 0.3, size=(2 * n, 1))
    kind = np.tile([0, 1], n)
    shift = np.where(kind == 1, effect_tail, effect_begin)[:, None] * math.log(2)
    cond = base + nb * shift + nb * rng.normal(0, 0.05, size=(2 * n, 1))
    return {"kind": kind, "source_index": np.repeat(np.arange(n), 2), "stratum": np.full(2 * n, 5), "bytes": nb,
            "baseline_s43_nats": base, "x_s43_nats": cond}


def test_bootstrap_recovers_a_known_effect():
    rng = np.random.default_rng(0)
    ev = _synthetic_evidence(rng, 200, effect_tail=-0.05, effect_begin=0.02)
    (cell,) = window_cells(ev, ["x"], "baseline", [43], [5], {(5, "x", 43)}, 2000, 0.05, 7)
    assert abs(cell["interaction"] - (-0.07)) < 0.01
    assert abs(cell["tail_delta"] - (-0.05)) < 0.01 and abs(cell["begin_delta"] - 0.02) < 0.01
    lo, hi = cell["interval_adjusted"]
    assert hi < 0 and lo < -0.07 < hi
    assert abs(sum(cell["tail_bins"]) - cell["tail_delta"]) < 1e-12


def test_null_interval_covers_zero_at_about_the_nominal_rate():
    rng = np.random.default_rng(1)
    covered = 0
    trials = 200
    for t in range(trials):
        ev = _synthetic_evidence(rng, 60, effect_tail=0.0)
        (cell,) = window_cells(ev, ["x"], "baseline", [43], [5], set(), 400, 0.05, t)
        lo, hi = cell["interval95"]
        covered += lo <= 0 <= hi
    assert 0.88 * trials <= covered <= 0.995 * trials


def test_rankings_find_a_constructed_reversal():
    rows = 100
    nbytes = np.full((2, rows), 100)
    nats = np.zeros((2, rows))
    nats[0] = 100 * math.log(2) * 1.0
    nats[1] = 100 * math.log(2) * 1.1
    nats[1, :10] = 100 * math.log(2) * 0.5  # method b is better on the first 10 rows only
    res = rankings(nats, nbytes, ["a", "b"], "a", [10, 80], subsets=50)  # b: 0.5 on 10 rows, 1.025 on 80
    assert res["full_order"] == ["a", "b"]
    assert res["prefixes"][0]["reversals"] == [["a", "b"]] and res["prefixes"][1]["reversals"] == []
    assert res["prefixes"][0]["contrasts"][0]["outside"]


def test_duplicates_match_brute_force(small_corpus):
    from corpus.layout import Layout
    from corpus.shards import iter_row_group_texts

    lay = Layout(small_corpus, "stdlib")
    rec = lay.prepared()
    train_texts = {t for n in rec["train_shards"] for _, b in iter_row_group_texts(lay.raw / n) for t in b}
    val = [t for _, b in iter_row_group_texts(lay.raw / rec["val_shard"]) for t in b]
    a, b = len(val) // 3, len(val)
    want = [r for r in range(a, b) if val[r] in train_texts or val[r] in val[:r]]
    assert [r for r, _ in find_duplicates(small_corpus, "stdlib", (a, b))] == want


def test_duplicates_of_validation_rows_before_the_range_are_excluded(monkeypatch, tmp_path):
    # the paper excludes rows that duplicate a training document or an *earlier* validation row, inside the
    # confirmation range or before it; the prepared corpus dedups, so this stream is written by hand
    import eval.confirmation as conf

    class FakeLayout:
        def __init__(self, data_dir, source):
            self.raw = tmp_path

        def prepared(self):
            return {"train_shards": ["t.parquet"], "val_shard": "v.parquet"}

    groups = {"t.parquet": [["T", "u"]], "v.parquet": [["a", "b", "T"], ["a", "T", "b"], ["c", "c", "a"]]}
    monkeypatch.setattr(conf, "Layout", FakeLayout)
    monkeypatch.setattr(conf, "iter_row_group_texts", lambda path: enumerate(groups[path.name]))
    # rows 3..7: 3 repeats row 0 and 5 row 1 (both before the range), 4 is a training text, 7 repeats row 6;
    # row 8 repeats row 0 too but lies past the range's end
    assert find_duplicates(tmp_path, "x", (3, 8)) == [(3, "val:0"), (4, "train:t.parquet"), (5, "val:1"), (7, "val:6")]


def _run(script, *args):
    return subprocess.run([sys.executable, str(ROOT / "checkers" / script), *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def _in_process(capsys, main_, *args):
    """A checker's main() in this process, answered as _run answers: the altered-file cases test what the checks
    find in the files named, and the command lines themselves ran on the real outputs (each ~0.15 s of CPU, most
    of it numpy's import; tests/test_checkers_refuse.py calls main() the same way)."""
    capsys.readouterr()
    rc = main_([str(a) for a in args])
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, rc, out, err)


def test_checkers_pass_on_real_outputs_and_fail_on_altered_files(evaluated, tmp_path, capsys):
    from checkers.verify_evaluation_summary import main as rankings_main
    from checkers.verify_window_evidence import main as windows_main

    _, out = evaluated
    r = _run("verify_window_evidence.py", out)
    assert r.returncode == 0 and "0 failed" in r.stdout, r.stdout + r.stderr
    r = _run("verify_evaluation_summary.py", out)
    assert r.returncode == 0 and "0 failed" in r.stdout, r.stdout + r.stderr
    # the 5.4 scores recomputed from the per-row evidence, not only from confirmation.json's totals
    r = _run("verify_confirmation.py", out)
    assert r.returncode == 0 and "0 failed" in r.stdout and "NOTE" not in r.stdout, r.stdout + r.stderr
    assert r.stdout.count("BPB") >= 3 * 4 and "recomputed from confirmation_evidence.npz" in r.stdout
    # an altered summary number
    s = json.loads((out / "window_summary_dev.json").read_text())
    s["cells"][0]["tail_delta"] += 1e-6
    (tmp_path / "s.json").write_text(json.dumps(s))
    r = _in_process(capsys, windows_main, tmp_path / "s.json", out / "window_evidence_dev.npz")
    assert r.returncode == 1 and "FAIL" in r.stdout
    # an altered statistic in the evidence
    z = dict(np.load(out / "window_evidence_dev.npz"))
    key = next(k for k in z if k.startswith("random_crop") and k.endswith("_nats"))
    z[key] = z[key].copy()
    z[key][np.flatnonzero(z["kind"] == 1)[0], -1] += 0.5
    np.savez(tmp_path / "e.npz", **z)
    r = _in_process(capsys, windows_main, out / "window_summary_dev.json", tmp_path / "e.npz")
    assert r.returncode == 1 and "FAIL" in r.stdout
    # the population's own numbers, each altered alone: once unchecked, each passed
    for alter in (lambda s: s["cells"][0].update(sources=s["cells"][0]["sources"] + 1),
                  lambda s: s["per_stratum"][-1].update(sources=s["per_stratum"][-1]["sources"] + 1),
                  lambda s: s.update(text_targets=s["text_targets"] + 1),
                  lambda s: s["per_stratum"].pop()):
        s = json.loads((out / "window_summary_dev.json").read_text())
        alter(s)
        (tmp_path / "s.json").write_text(json.dumps(s))
        r = _in_process(capsys, windows_main, tmp_path / "s.json", out / "window_evidence_dev.npz")
        assert r.returncode == 1 and r.stdout.count("FAIL") == 1, r.stdout
    z = dict(np.load(out / "window_evidence_dev.npz"))
    z["source_len"] = z["source_len"].copy()
    z["source_len"][0] = 1 if z["stratum"][0] else 10 ** 9  # a length of another stratum than the window's
    np.savez(tmp_path / "e.npz", **z)
    r = _in_process(capsys, windows_main, out / "window_summary_dev.json", tmp_path / "e.npz")
    assert r.returncode == 1 and "FAIL  each window's stratum follows from its source's length" in r.stdout, r.stdout
    # the two populations' files swapped: the arguments are wrong, not the evaluation (it once said FAIL deltas)
    r = _in_process(capsys, windows_main, out / "window_summary_dev.json", out / "window_evidence_conf.npz")
    assert r.returncode == 2 and "FAIL" not in r.stdout and r.stderr.count("\n") == 1, r.stdout + r.stderr
    assert "window_summary_dev.json is of population dev" in r.stderr and "of population conf" in r.stderr
    rk = json.loads((out / "rankings.json").read_text())
    rk["prefixes"][1]["contrasts"][0]["interval95"][0] -= 1e-4
    (tmp_path / "r.json").write_text(json.dumps(rk))
    r = _in_process(capsys, rankings_main, tmp_path / "r.json", out / "ranking_evidence.npz")
    assert r.returncode == 1 and "FAIL" in r.stdout


def test_a_second_evaluation_reuses_finished_statistics(evaluated):
    from eval.__main__ import main as eval_main

    runs, out = evaluated
    files = sorted(out.glob("*/windows_*.parquet")) + sorted(out.glob("*/confirmation_rows.parquet"))
    before = {f: (f.stat().st_mtime_ns, f.read_bytes()) for f in files}
    summary = (out / "window_summary_dev.json").read_text()
    assert eval_main(["--runs", str(runs), "--out", str(out), "--replicates", "300", "--device", "cpu", "--exploratory",
                      "--no-figures"]) == 0
    assert {f: (f.stat().st_mtime_ns, f.read_bytes()) for f in files} == before  # nothing re-scored
    assert (out / "window_summary_dev.json").read_text() == summary


def test_a_statistics_file_cut_short_is_scored_again_with_a_note(evaluated, tmp_path, capsys):
    """A truncated per-run statistics file in --out (a disk that filled) once ended the rerun in pyarrow's
    traceback; it is scored again, to the same bytes."""
    from eval.__main__ import main as eval_main

    runs, out = evaluated
    copy = tmp_path / "eval"
    shutil.copytree(out, copy)
    cut = copy / "baseline_s43" / "windows_dev.parquet"
    whole = cut.read_bytes()
    cut.write_bytes(whole[:len(whole) // 2])
    assert eval_main(["--runs", str(runs), "--out", str(copy), "--replicates", "300", "--device", "cpu",
                      "--exploratory", "--no-figures"]) == 0
    assert f"note: {cut} is unreadable" in capsys.readouterr().out and cut.read_bytes() == whole
    assert (copy / "window_summary_dev.json").read_text() == (out / "window_summary_dev.json").read_text()


def test_checkers_and_official_have_working_help(capsys):
    for script in ("verify_window_evidence.py", "verify_evaluation_summary.py"):
        r = _run(script, "--help")
        assert r.returncode == 0 and "usage" not in r.stderr and "Recompute" in r.stdout, r.stderr
    from eval.official import main as official_main

    with pytest.raises(SystemExit) as e:
        official_main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    for phrase in ("a training checkpoint", "data root", "torch device", "per-row sufficient statistics"):
        assert phrase in out


def test_checkers_refuse_non_finite_values_and_files_they_cannot_check(evaluated, tmp_path, capsys):
    """NaN fails (max() would skip it); truncated, empty, list-shaped or incomplete files are one
    line, exit 2, never PASS (issue 20)."""
    from checkers.verify_evaluation_summary import main as rankings_main
    from checkers.verify_window_evidence import main as windows_main

    _, out = evaluated
    wsum, wev = out / "window_summary_dev.json", out / "window_evidence_dev.npz"
    rsum, rev = out / "rankings.json", out / "ranking_evidence.npz"
    s = json.loads(wsum.read_text())
    for field, at in (("tail_delta", None), ("interaction", None), ("interval95", 0)):
        bad = json.loads(json.dumps(s))
        if at is None:
            bad["cells"][0][field] = float("nan")
        else:
            bad["cells"][0][field][at] = float("nan")
        (tmp_path / "s.json").write_text(json.dumps(bad))
        assert windows_main([str(tmp_path / "s.json"), str(wev)]) == 1, field
    rk = json.loads(rsum.read_text())
    for field, at in (("delta", None), ("interval95", 1)):
        bad = json.loads(json.dumps(rk))
        c = bad["prefixes"][0]["contrasts"][0]
        if at is None:
            c[field] = float("nan")
        else:
            c[field][at] = float("nan")
        (tmp_path / "r.json").write_text(json.dumps(bad))
        assert rankings_main([str(tmp_path / "r.json"), str(rev)]) == 1, field
    capsys.readouterr()
    (tmp_path / "cut.npz").write_bytes(wev.read_bytes()[: wev.stat().st_size // 2])
    (tmp_path / "empty.npz").write_bytes(b"")
    (tmp_path / "list.json").write_text("[1, 2]")
    no_full = {k: v for k, v in rk.items() if k != "full"}
    (tmp_path / "no_full.json").write_text(json.dumps(no_full))
    rcut = tmp_path / "rcut.npz"
    rcut.write_bytes(rev.read_bytes()[: rev.stat().st_size // 2])
    for main_, args in ((windows_main, [wsum, tmp_path / "cut.npz"]), (windows_main, [wsum, tmp_path / "empty.npz"]),
                        (windows_main, [tmp_path / "list.json", wev]),
                        (rankings_main, [rsum, rcut]), (rankings_main, [rsum, tmp_path / "empty.npz"]),
                        (rankings_main, [tmp_path / "list.json", rev]),
                        (rankings_main, [tmp_path / "no_full.json", rev])):
        rc = main_([str(a) for a in args])
        err = capsys.readouterr().err
        assert rc == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error:"), (args, rc, err)
