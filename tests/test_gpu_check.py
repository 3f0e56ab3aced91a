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
