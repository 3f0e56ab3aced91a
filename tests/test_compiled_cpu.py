"""The compiled training path on CPU, in the normal suite.

train.py with compile=on goes through torch.compile(model, dynamic=False) for training and
for the final official score. The default backend (inductor) generates and compiles C++ on
CPU: about 35 s even with a warm cache on 2 shared cores, so it stays behind
PACKAUDIT_SLOW=1 (tests/test_gpu_check.py). Here the backend is AOT-eager: the same Dynamo
capture and AOT-autograd forward/backward graphs that inductor would receive, run by
eager kernels, so graph breaks, guards, the fixed evaluation shape and the compiled
model's numbers are all checked in a few seconds.
"""
import pytest
import torch

from train import train
from training.config import resolve_config

MICRO = dict(depth=1, width=32, heads=2, kv_heads=2, context=16, short_window=8, vocab=400, micro_rows=2, accum=2,
             updates=3, eval_batches=2, eval_rows=3, buffer=20, prefetch=0, checkpoint_every=0, device="cpu")


def test_compiled_training_and_scoring_equal_eager(small_corpus, tmp_path, monkeypatch):
    compiled = []
    real_compile = torch.compile

    def aot_eager(model, **kw):
        assert kw == {"dynamic": False}  # the fixed-shape compile of the baseline
        compiled.append(model)
        return real_compile(model, backend="aot_eager", **kw)

    monkeypatch.setattr(torch, "compile", aot_eager)
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()  # graphs compiled by earlier tests in this process do not count here
    runs = {}
    for mode in ("off", "on"):
        cfg = resolve_config(None, [f"{k}={v}" for k, v in {**MICRO, "compile": mode, "data_dir": small_corpus}.items()])
        runs[mode] = train(cfg, tmp_path / mode, log=lambda m: None)
    assert len(compiled) == 1  # only the compile=on run compiled, once: training and scoring share it
    eager, comp = runs["off"], runs["on"]
    assert comp["final_train_loss"] == pytest.approx(eager["final_train_loss"], rel=1e-5)
    for key in ("bpb", "ce"):
        assert comp["official"][key] == pytest.approx(eager["official"][key], rel=1e-5)
    assert comp["official"]["fingerprint"] == eager["official"]["fingerprint"]
    # eval_rows = 3 in batches: the same [3, 16] shape each time, so one graph for scoring
    # and one for training (grad mode and train/eval mode are guarded): no recompilation per batch
    assert counters["stats"]["unique_graphs"] <= 2, dict(counters["stats"])
