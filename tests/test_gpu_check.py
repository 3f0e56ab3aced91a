"""`python -m gpu_check --device cpu --tiny`: every part of the GPU check on CPU,
through the real train.py, eval.official and eval scoring. The compiled variant (torch.compile
on CPU: ~90 s cold on 2 cores) runs when PACKAUDIT_SLOW=1."""
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpu_check.__main__ import main
from training.config import resolve_config

# Late imports: gpu_check.parts imports torch._dynamo (1.3 s of CPU), which only the test process that runs these
# tests should pay, not each one that collects them (tests/conftest.py's SAME_PROCESS keeps its users together)
PARTS = ["attention", "train", "scoring", "resume", "queue", "ddp"]


def run_check(tmp_path, capsys, data_dir, *extra, rc=0):
    code = main(["--device", "cpu", "--tiny", "--out", str(tmp_path), "--data-dir", str(data_dir), *extra])
    printed = capsys.readouterr().out
    assert code == rc, printed
    res = json.loads((tmp_path / "gpu_check.json").read_text())
    assert (tmp_path / "gpu_check.md").read_text() in printed
    return res, {r["check"].split(" (")[0]: r for p in res["parts"].values() for r in p["rows"]}


# torch warns that uncompiled flex attention materialises the scores; the tiny CPU check runs uncompiled on purpose
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile:UserWarning")
def test_gpu_check_tiny_on_cpu_runs_every_part(tmp_path, capsys, small_corpus):
    res, by = run_check(tmp_path, capsys, small_corpus)
    assert sorted(res["parts"]) == sorted(PARTS) and res["passed"]
    assert all(r["pass"] in (True, None) for p in res["parts"].values() for r in p["rows"])
    assert res["config"]["vocab"] == 400  # the tiny model follows the prepared corpus
    # train: the real train.py wrote its run; 19 timed updates after the 11 untimed
    assert (tmp_path / "run" / "summary.json").exists() and (tmp_path / "run" / "ckpt_000030.pt").exists()
    assert by["tokens/s"]["value"] > 0 and by["MFU"]["value"] is None  # no CPU peak is invented
    assert "updates 12-30, compile off" in [r["check"] for r in res["parts"]["train"]["rows"]][1]
    assert by["attention dtypes, 2 calls"]["value"] == "torch.float32" and by["attention dtypes, 2 calls"]["pass"]
    assert by["loss falls"]["pass"] and 0 <= by["loader wait share of update time"]["value"] < 1
    # scoring: a fresh official score reproduces train.py's own rows bitwise, as the gate demands
    gate = by["official rows: eval.official vs train.py's own, as the re-scoring gate judges"]
    assert gate["value"] == "bitwise equal" and gate["pass"]
    assert by["official rows: max abs nats difference of one row"]["value"] == 0
    assert by["window batch"]["pass"]
    # resume: train.py --resume from update 20 in a fresh folder gives updates 21-30 bitwise
    assert by["resume at 20: max abs loss difference, updates 21-30"]["value"] == 0
    assert by["resume at 20: parameters after 30"]["value"] == 0
    assert (tmp_path / "resumed" / "ckpt_000030.pt").exists()
    # queue: two shards through the runner's screen, train and measure steps (eager on CPU: no graphs judged)
    queue = res["parts"]["queue"]["rows"]
    assert queue[0]["pass"] and queue[0]["check"].startswith("queue: two shards trained (") and queue[1]["pass"]
    assert queue[4]["pass"] and queue[4]["check"].startswith("queue: attention dtypes while measuring")
    assert queue[3]["pass"] is None and queue[3]["criterion"] == "compile off"
    assert "not run" in by["DDP, 2 ranks"]["value"]
    # the gate's verdict can fail: one row's recorded nats one float64 step away
    path = tmp_path / "run" / "official_rows.parquet"
    t = pq.read_table(path)
    nats = t.column("nats").to_numpy().copy()
    nats[1] = np.nextafter(nats[1], np.inf)
    pq.write_table(t.set_column(t.schema.get_field_index("nats"), "nats", pa.array(nats)), path)
    ctx = {"cfg": resolve_config(None, [f"{k}={v}" for k, v in res["config"].items()]), "device": "cpu",
           "run": tmp_path / "run", "summary": json.loads((tmp_path / "run" / "summary.json").read_text()),
           "data_dir": str(small_corpus)}
    from gpu_check import parts as gpu_parts

    rows = {r["check"]: r for r in gpu_parts.scoring(ctx)}
    gate = rows["official rows: eval.official vs train.py's own, as the re-scoring gate judges"]
    assert gate["pass"] is False and "official nats (first at row 1)" in gate["value"]


def test_a_raising_part_is_recorded_failed_and_the_others_run(tmp_path, capsys, small_corpus, monkeypatch):
    from gpu_check import parts as gpu_parts

    def broken(ctx):
        raise RuntimeError("simulated kernel failure")

    monkeypatch.setitem(gpu_parts.PARTS, "attention", broken)
    res, by = run_check(tmp_path, capsys, small_corpus, "--parts", "attention,train", "--updates", "13",
                        "--resume-at", "12", rc=1)
    assert not res["passed"] and not res["parts"]["attention"]["passed"]
    assert by["attention: raised"]["value"] == "RuntimeError: simulated kernel failure"
    assert res["parts"]["train"]["passed"] and by["loss falls"]["pass"]


def test_gpu_check_prepares_a_small_corpus_when_given_none(tmp_path):
    from corpus.layout import Layout
    from gpu_check.__main__ import ensure_data

    d, vocab = ensure_data(None, 300, tmp_path, True, lambda m: None)
    assert vocab == 300 and Layout(d, "stdlib").prepared()["vocab_size"] == 300


@pytest.mark.skipif(os.environ.get("PACKAUDIT_SLOW") != "1", reason="compiled CPU path: ~90 s cold; PACKAUDIT_SLOW=1")
def test_gpu_check_tiny_compiled_on_cpu(tmp_path, capsys, small_corpus):
    res, by = run_check(tmp_path, capsys, small_corpus, "--compile", "on")
    assert by["compiled graph breaks"]["value"] == 0


@pytest.mark.parametrize("argv", [["--device", "cpu", "--updates", "5"], ["--device", "cuda:abc"],
                                  ["--device", "cpu", "--parts", "attention,gpus"]])
def test_gpu_check_refuses_bad_arguments_with_exit_2(argv, capsys, tmp_path):
    assert main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1


def test_mfu_peak_comes_from_the_detected_device(monkeypatch):
    import torch

    from training.mfu import peak_flops

    assert peak_flops("cpu") is None
    # dense bf16 peaks (no sparsity): H100 SXM 989, NVL 835, PCIe 756 TFLOP/s; H200 and GH200 989
    for name, want in (("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H100 NVL", 835e12),
                       ("NVIDIA H200", 989e12), ("NVIDIA GH200 480GB", 989e12), ("NVIDIA A100-SXM4-80GB", 312e12),
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


def test_ddp_part_runs_torchrun_with_two_ranks_and_compares_losses(tmp_path, monkeypatch):
    """The DDP part's own logic (it runs only with 2+ GPUs): torchrun with 2 ranks on the run's
    config, then the per-update losses against the one-process run."""
    import subprocess

    import torch

    from gpu_check import parts as gpu_parts
    from training.config import resolve_config

    cfg = resolve_config(None, ["updates=4", "device=cuda"])
    one = tmp_path / "run"
    one.mkdir()
    losses = [5.0, 4.0, 3.5, 3.0]
    (one / "train_log.jsonl").write_text("".join(json.dumps({"step": i + 1, "loss": x}) + "\n"
                                                 for i, x in enumerate(losses)))
    seen = {}

    def torchrun(cmd, **kw):
        seen["cmd"] = cmd
        given = json.loads(open(cmd[cmd.index("--config") + 1]).read())
        out = Path(cmd[cmd.index("--out") + 1])
        out.mkdir(parents=True)
        shift = [1e-3, -1e-3, 1e-3, 0.5]  # updates 1-3 within 2e-3; the last one far off (reported only)
        (out / "train_log.jsonl").write_text("".join(json.dumps({"step": i + 1, "loss": x + d}) + "\n"
                                                     for i, (x, d) in enumerate(zip(losses, shift))))
        seen["config"] = given
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(gpu_parts, "run_group", torchrun)
    rows = gpu_parts.ddp({"cfg": cfg, "device": "cuda:0", "out": tmp_path, "run": one})
    assert seen["cmd"][1:5] == ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    assert seen["config"] == {**cfg.to_dict(), "device": "cuda"}
    assert rows[0]["pass"] and rows[0]["value"] == pytest.approx(1e-3)
    assert rows[1]["value"] == pytest.approx(0.5) and rows[1]["pass"] is None
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert "not run" in gpu_parts.ddp({"cfg": cfg, "device": "cuda:0", "out": tmp_path, "run": one})[0]["value"]
