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
