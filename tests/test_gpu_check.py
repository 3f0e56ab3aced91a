"""`python -m training.gpu_check --device cpu --tiny`: every line of the GPU check except the
CUDA kernels, on CPU. The compiled variant (torch.compile on CPU: ~90 s cold on 2 cores) runs
when PACKAUDIT_SLOW=1."""
import json
import os

import pytest

from training.gpu_check import main

EXPECTED = ["attention forward, flex vs float64", "attention forward, flex vs SDPA-with-mask",
            "attention backward dq", "attention backward dk", "attention backward dv", "device", "tokens/s",
            "MFU", "peak memory MiB", "loader wait share", "loss falls", "resume at 20: max abs loss difference",
            "resume at 20: parameters after 30"]


def run_check(tmp_path, capsys, *extra):
    rc = main(["--device", "cpu", "--tiny", "--out", str(tmp_path), *extra])
    printed = capsys.readouterr().out
    res = json.loads((tmp_path / "gpu_check.json").read_text())
    assert rc == 0, printed
    assert [r["check"][:len(e)] for r, e in zip(res["rows"], EXPECTED)] == EXPECTED
    by = {r["check"].split(" (")[0]: r for r in res["rows"]}
    assert all(r["pass"] in (True, None) for r in res["rows"]) and res["passed"]
    # the resumed updates 21-30 equal the uninterrupted ones bitwise on CPU
    assert res["resumed_losses"] == res["losses"][20:] and len(res["losses"]) == 30
    assert by["resume at 20: max abs loss difference, updates 21-30"]["value"] == 0
    assert 0 <= by["loader wait share of update time"]["value"] < 1
    assert by["tokens/s"]["value"] > 0 and by["MFU"]["value"] is None  # no CPU peak is invented
    assert (tmp_path / "ckpt_000020.pt").exists() and (tmp_path / "gpu_check.md").read_text() in printed
    return res


def test_gpu_check_tiny_on_cpu(tmp_path, capsys):
    res = run_check(tmp_path, capsys)
    assert "compile off" in res["rows"][6]["check"]


@pytest.mark.skipif(os.environ.get("PACKAUDIT_SLOW") != "1", reason="compiled CPU path: ~90 s cold; PACKAUDIT_SLOW=1")
def test_gpu_check_tiny_compiled_on_cpu(tmp_path, capsys):
    res = run_check(tmp_path, capsys, "--compile", "on")
    assert "compile on" in res["rows"][6]["check"]


def test_gpu_check_refuses_without_a_device_choice(capsys):
    assert main(["--device", "cpu", "--updates", "5"]) == 2
    assert "error:" in capsys.readouterr().err


def test_mfu_peak_comes_from_the_detected_device(monkeypatch):
    import torch

    from training.mfu import peak_flops

    assert peak_flops("cpu") is None
    for name, want in (("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H200", 989e12), ("NVIDIA A100-SXM4-80GB", 312e12),
                       ("Some Future GPU", None)):
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda dev=None, n=name: n)
        assert peak_flops("cuda:0") == want, name


def test_compile_is_static_shape(monkeypatch):
    """torch.compile(model, dynamic=False) as the baseline (evaluation pads instead of recompiling)."""
    import torch

    from training.config import resolve_config
    from training.trainer import build_model, maybe_compile

    seen = []
    monkeypatch.setattr(torch, "compile", lambda m, **kw: seen.append(kw) or m)
    cfg = resolve_config(None, ["depth=1", "width=32", "heads=1", "kv_heads=1", "context=8", "short_window=4",
                                "vocab=32", "compile=on"])
    maybe_compile(build_model(cfg, "cpu", seed=0), cfg, "cpu")
    assert seen == [{"dynamic": False}]
    cfg.compile = "auto"  # auto: eager on CPU
    maybe_compile(build_model(cfg, "cpu", seed=0), cfg, "cpu")
    assert len(seen) == 1
