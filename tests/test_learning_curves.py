"""Learning curves: validation BPB on fixed official rows logged every few updates (train_log.jsonl)."""
import json

import pytest
import torch

from train import train
from training.config import resolve_config
from training.model import GPT


def test_val_bpb_points_in_the_log_are_the_official_metric_on_the_same_rows(small_corpus, tmp_path, monkeypatch):
    base = dict(depth=1, width=32, heads=2, kv_heads=2, context=32, short_window=16, vocab=400, micro_rows=2,
                accum=1, updates=4, eval_batches=2, eval_rows=4, buffer=40, data_dir=str(small_corpus), prefetch=0)
    cfg = resolve_config(None, [f"{k}={v}" for k, v in base.items()])
    modes, forward = [], GPT.forward

    def recording(self, *a, **kw):  # (grad enabled, training mode) of every forward
        modes.append((torch.is_grad_enabled(), self.training))
        return forward(self, *a, **kw)

    monkeypatch.setattr(GPT, "forward", recording)
    res = train(cfg, tmp_path, log=lambda m: None, curve_points=2)
    log = [json.loads(x) for x in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in log if "val_bpb" in e] == [2, 4]  # every updates // points, and the last
    # at the last update the model is the final one and eval_batches (2) equals the probe's 2 batches:
    # the logged point is the official score of the run
    assert log[-1]["val_bpb"] == pytest.approx(res["official"]["bpb"], rel=1e-9)
    assert log[1]["val_bpb"] != log[-1]["val_bpb"]  # training moved the model between the points
    # updates 3 and 4 train after the probe at update 2: the probe gave the model back in training mode
    assert [m for g, m in modes if g] == [True] * 4 and [m for g, m in modes if not g] == [False] * 6


def six_runs(tmp_path):
    """The tiny preset's six results (16 official batches of 8 rows x 128 targets) and run folders whose logs
    hold a validation point at updates 20 and 40."""
    results, dirs = [], []
    for i, name in enumerate(["baseline_s43", "baseline_s44", "random_crop_s43", "random_crop_s44", "segmented_s43",
                              "segmented_s44"]):
        d = tmp_path / name
        d.mkdir()
        d.joinpath("train_log.jsonl").write_text("".join(
            json.dumps({"step": s, "targets": s * 2048, "val_bpb": 3.0 - s / 50 + i / 100}) + "\n" for s in (20, 40)))
        cfg = dict(depth=2, width=64, micro_rows=8, accum=2, context=128, eval_batches=16, eval_rows=8)
        results.append({"name": name, "seed": 43 + i % 2, "parameters": 1000, "updates": 40, "targets": 81920,
                        "config": cfg, "official": {"bpb": 2.3, "ce": 6.0, "perplexity": 400.0, "eval_targets": 16384},
                        "training_seconds": 1.0, "total_seconds": 2.0, "tokens_per_second": 100.0,
                        "peak_memory_mib": 10.0})
        dirs.append(d)
    return results, dirs


def test_the_curves_say_which_rows_they_are_on_not_the_official_score(tmp_path, monkeypatch):
    """The curves use the first CURVE_BATCHES (2) of the 16 official batches: read as the official score
    they would end ~0.15 BPB above it."""
    from comparison import figures, run_six

    results, dirs = six_runs(tmp_path)
    assert ("Learning curves: validation BPB on the first 2 of the 16 official batches (2,048 of the official score's "
            "16,384 validation targets), the same rows at every point for every run") in run_six.table(results)
    assert ("A curve's last point is not the official BPB: that is on all 16 batches, in the table."
            in run_six.table(results))
    saved = []
    monkeypatch.setattr(figures, "_save", lambda fig, path: saved.append(fig))
    figures.learning_curves(dirs, results, tmp_path / "curves.png", 2)
    ax = saved[0].axes[0]
    assert ax.get_title() == "Validation BPB on the first 2 of 16 official batches (2,048 targets)"
    assert ax.get_ylabel() == "validation BPB on 2,048 targets (not the official score)"
