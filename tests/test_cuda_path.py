"""The CUDA code path, read on CPU (issue 17): dtypes under CUDA autocast on fake CUDA
tensors, no integer matrix products, and no graph breaks in the compiled forward."""
import math
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from fake_cuda import cuda_autocast, fake_cuda, no_integer_matmul
from training.config import resolve_config
from training.trainer import build_model, model_config

SMALL = ["depth=4", "width=32", "heads=2", "kv_heads=2", "context=64", "short_window=16", "vocab=64"]


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny matrices: a second intra-op thread costs more in handoffs than it computes (20x on
    a loaded 2-core machine)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def flex_stand_in(q, k, v, block_mask=None):
    """flex_attention's eager path compiles itself, which a fake CUDA device cannot: the stand-in
    has its output (q's shape and dtype) and its mask argument."""
    assert block_mask is not None and block_mask.kv_num_blocks.device.type == "cuda"
    return torch.empty_like(q)


def traced_dtypes(attention, monkeypatch):
    """(q, k, v) dtypes at every attention call and (input, output) dtypes of every block, for a
    forward of a bf16 model (bf16 embeddings, as train.py builds it for CUDA) on fake cuda:0
    under CUDA bf16 autocast."""
    import torch.nn.attention.flex_attention as fa

    monkeypatch.setattr(fa, "flex_attention", flex_stand_in)
    cfg = resolve_config(None, SMALL + ["bf16=on", f"attention={attention}"])
    m = build_model(cfg, "cpu", seed=0)
    attn, blocks = [], []
    m.attend.record = attn
    for b in m.blocks:
        b.register_forward_hook(lambda mod, inp, out: blocks.append((inp[0].dtype, out.dtype)))
    with fake_cuda(m):
        x = torch.randint(0, 64, (2, 64), device="cuda:0")
        with cuda_autocast():
            logits = m(x)
        assert logits.device.type == "cuda" and m.lm_head.weight.device.type == "cuda"
    return attn, blocks, logits.dtype


@pytest.mark.parametrize("attention", ["flex", "sdpa"])
def test_attention_gets_one_bf16_dtype_under_cuda_autocast(attention, monkeypatch):
    """CUDA autocast runs rms_norm in fp32 (torch >= 2.12): q, k left the QK norm fp32 while v
    stayed bf16, which flex's backward refuses; the baseline's kernel takes bf16 only."""
    attn, _, _ = traced_dtypes(attention, monkeypatch)
    assert len(attn) == 4  # every layer, windowed or not
    assert attn == [(torch.bfloat16,) * 3] * 4


def test_residual_stream_is_bf16_under_cuda_autocast(monkeypatch):
    """The baseline's residual stream is bf16 under CUDA autocast, and its logits float32."""
    _, blocks, logits = traced_dtypes("flex", monkeypatch)
    assert blocks == [(torch.bfloat16, torch.bfloat16)] * 4
    assert logits == torch.float32


def test_the_fake_cuda_trace_sees_cuda_autocast_rules():
    """The trace is only worth something if torch's CUDA rules run in it: fp32 rms_norm under
    CUDA autocast, not under CPU autocast."""
    with fake_cuda(torch.nn.Module()):
        with cuda_autocast():
            x = torch.ones(2, 8, dtype=torch.bfloat16, device="cuda:0")
            assert torch.nn.functional.rms_norm(x, (8,)).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        x = torch.ones(2, 8, dtype=torch.bfloat16)
        assert torch.nn.functional.rms_norm(x, (8,)).dtype == torch.bfloat16


def test_compiled_forward_has_no_graph_breaks_with_flex():
    """The paper model's layer pattern (SSSL, the last long; windows below the context) with the
    flex path: masks are built before the compiled forward, so dynamo sees one graph. Small width
    and context (the paper's shapes cost ~17 s of CPU here; the breaks come from the layer
    pattern, not the width), and 4 layers, the pattern's unit: each kind of the paper's 8 layers
    (short without and with value embeddings, sharing one mask; long with them, last) is among
    them, and dynamo's time grows with the layers (8: ~0.5 s more of CPU)."""
    shape = ["width=64", "heads=4", "kv_heads=4", "context=256", "short_window=128", "vocab=256", "attention=flex",
             "window_pattern=SSSL"]
    paper = model_config(resolve_config(None, ["depth=8", *shape]))
    cfg = resolve_config(None, ["depth=4", *shape])
    m = build_model(cfg, "cpu", seed=0)
    assert m.windows == [128, 128, 128, 256] and paper.windows() == m.windows * 2
    assert [paper.has_ve(i) for i in range(8)] == [m.cfg.has_ve(i) for i in range(4)] * 2
    x = torch.randint(0, 256, (1, 256))
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ex = torch._dynamo.explain(m)(x)
    finally:
        torch._dynamo.reset()
    assert (ex.graph_break_count, ex.graph_count) == (0, 1), ex.break_reasons


# ---- integer matrix products (no CUDA kernel) ----------------------------------------
class FixedLoss(torch.nn.Module):
    """A stand-in model whose per-target loss is given: scoring's arithmetic alone."""

    def __init__(self, loss):
        super().__init__()
        self.loss = torch.as_tensor(loss, dtype=torch.float32)

    def forward(self, x, y, reduction="none"):
        return self.loss.reshape(-1)


def test_scoring_has_no_integer_matmul_and_sums_per_bin():
    from eval.scoring import score_rows

    # hand-worked: token bytes 0,1,2,3 for ids 0..3; bins [0, 2) and [2, 4); -1 is padding
    tb = np.array([0, 1, 2, 3])
    y = np.array([[1, 2, -1, 0], [3, 0, 3, 1]])
    loss = [[0.5, 1.0, 2.0, 4.0], [0.25, 8.0, 0.5, 1.5]]
    with no_integer_matmul() as probe:
        nats, nbytes, count = score_rows(FixedLoss(loss), np.zeros_like(y), y, tb, [0, 2, 4], "cpu")
    assert probe.products > 0  # the check saw scoring's products
    # row 0: targets 1, 2 count (1 + 2 bytes); -1 counts nowhere; id 0 has 0 bytes (not counted)
    # row 1: id 0 at position 1 is not counted; positions 2, 3 are ids 3, 1
    assert nats.tolist() == [[1.5, 0.0], [0.25, 2.0]]
    assert nbytes.tolist() == [[3, 0], [3, 4]]
    assert count.tolist() == [[2, 0], [1, 2]]
    assert nbytes.dtype == np.int64 and count.dtype == np.int64


def test_integer_matmul_probe_fails_on_an_integer_product():
    with pytest.raises(AssertionError, match="no CUDA kernel"), no_integer_matmul():
        torch.ones(2, 3, dtype=torch.int64) @ torch.ones(3, 1, dtype=torch.int64)
    with no_integer_matmul() as probe:
        torch.ones(2, 3) @ torch.ones(3, 1)
    assert probe.products == 1


def test_a_training_update_has_no_integer_matmul():
    from training.trainer import Trainer

    cfg = resolve_config(None, SMALL + ["depth=2", "context=32", "micro_rows=2", "accum=2", "updates=2"])
    tr = Trainer(cfg, "cpu")
    g = torch.Generator().manual_seed(0)
    batches = iter([(torch.randint(0, 64, (2, 32), generator=g), torch.randint(0, 64, (2, 32), generator=g))
                    for _ in range(2)])
    with no_integer_matmul() as probe:
        loss, _ = tr.update(batches, 0, 2)
    assert probe.products > 0 and math.isfinite(loss)


# ---- one device policy: bad device strings are one line and exit 2 -------------------
@pytest.mark.parametrize("spec, says", [("cuda:abc", "is not auto, cpu, cuda or cuda:N"), ("gpu", "is not auto"),
                                        ("cuda", "has no CUDA"), ("cuda:1", "has no CUDA")])
def test_device_strings_resolve_or_fail_in_one_line(spec, says, monkeypatch):
    from errors import DataError
    from training.device import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DataError, match=says) as e:
        resolve_device(spec, "--device")
    assert "\n" not in str(e.value) and str(e.value).startswith("--device: ")
    assert resolve_device("auto") == "cpu" and resolve_device("cpu") == "cpu"


def test_device_index_past_the_visible_gpus(monkeypatch):
    from errors import DataError
    from training.device import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto") == "cuda" and resolve_device("cuda:1") == "cuda:1"
    with pytest.raises(DataError, match="2 CUDA device"):
        resolve_device("cuda:2")


PAPER = str(Path(__file__).resolve().parents[1] / "protocols/configs/paper/baseline_s43.json")


@pytest.mark.parametrize("argv", [["--config", PAPER, "device=cuda:abc"], ["--config", PAPER, "device=cuda"]])
def test_train_refuses_a_bad_device_with_exit_2(argv, tmp_path, capsys, monkeypatch):
    import train

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert train.main([*argv, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "'device'" in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("spec", ["cuda:abc", "cuda"])
def test_official_score_refuses_a_bad_device_with_exit_2(spec, tmp_path, capsys, monkeypatch):
    from eval.official import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main([str(tmp_path / "ckpt_000001.pt"), "--device", spec]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --device: ") and err.count("\n") == 1


# ---- the paper config on 1, 2, 4 and 8 GPUs --------------------------------------------
@pytest.mark.parametrize("world, micro_rows, accum", [(1, 64, 4), (2, 64, 4), (4, 64, 4), (8, 32, 8)])
def test_paper_config_resolves_for_the_world_size(world, micro_rows, accum):
    from training.config import for_world_size

    cfg = resolve_config(PAPER)
    w = for_world_size(cfg, world)
    assert (w.micro_rows, w.accum) == (micro_rows, accum)
    assert w.accum % world == 0
    assert w.micro_rows * w.accum * w.context == w.targets_per_update == 524288 == 2 ** 19
    assert (cfg.micro_rows, cfg.accum) == (64, 4)  # the given config is not changed


def test_world_size_that_cannot_keep_the_rows_is_refused():
    from errors import DataError
    from training.config import for_world_size

    with pytest.raises(DataError, match="cannot be split over 3 ranks"):
        for_world_size(resolve_config(PAPER), 3)  # 64 x 4 rows: 12 microbatches of 64/3 rows do not exist


def test_train_resolves_the_config_for_torchruns_world_size(monkeypatch):
    import train

    monkeypatch.setenv("WORLD_SIZE", "8")
    w = train.world_config(resolve_config(PAPER))
    assert (w.micro_rows, w.accum, w.targets_per_update) == (32, 8, 524288)


@pytest.mark.parametrize("spec", ["cuda:0", "cuda:1"])
def test_an_explicit_gpu_under_torchrun_is_refused_in_one_line(spec, tmp_path, capsys, monkeypatch):
    """device=cuda:N under torchrun would put every rank on GPU N (NCCL then fails): refused
    before the process group starts; device=cuda gives rank r the GPU cuda:LOCAL_RANK."""
    import train

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(train, "dist_setup", lambda: pytest.fail("the process group was joined"))
    for k, v in {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(k, v)
    assert train.main(["--config", PAPER, f"device={spec}", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: config key 'device': '{spec}' under torchrun") and err.count("\n") == 1
    assert "device=cuda" in err


# ---- the shard queue's train and measure steps on the model's device --------------------
def queue_runner(tmp_path, device, *over):
    """A queue runner on a one-shard pool and one control domain (the train/screen/measure
    paths only: no calibration, no log)."""
    from types import SimpleNamespace

    from shardqueue.engine.packing import shard_rows
    from shardqueue.engine.runner import Runner

    cfg = resolve_config(None, SMALL + ["micro_rows=2", "accum=2", "updates=4", *over])
    g = np.random.default_rng(0)
    x, y = shard_rows(g.integers(1, 64, 6 * 64 - 17), 64, 63)  # 6 rows, the last one padded
    control = {"prose": {"x": x[:2], "y": y[:2]}}
    world = SimpleNamespace(device=device, sets={"control": control}, token_bytes=np.arange(64) % 4)
    r = Runner(cfg, world, {"shards": [], "order": []}, {}, tmp_path, log=lambda m: None)
    r.rows = lambda sid: (x, y)  # the shard's rows, as the runner streams them from the token files
    r.screen_of.sample = (x[:2], y[:2])
    return r


def test_queue_train_and_measure_steps_never_meet_a_cpu_tensor(tmp_path):
    """The model on `meta` standing for a CUDA device: every microbatch and measurement input
    must be moved to it, as on CUDA (the queue fed CPU tensors to the model)."""
    from fake_cuda import meta_as_cuda

    r = queue_runner(tmp_path, "meta")
    assert r.trainer.model.lm_head.weight.device.type == "meta"
    with meta_as_cuda() as probe, np.errstate(invalid="ignore"):  # meta holds no values: BPB is 0/0
        assert r.train_shard("s0")["updates"] == 2  # 6 rows, 2 x 2 per update
        r.measure_fn(r.trainer.model)
        r.screen("s0")
    assert probe.ops_on_meta > 100


def test_queue_train_and_measure_steps_use_train_pys_autocast(tmp_path):
    """bf16=on: the queue's training and measuring forwards run under bf16 autocast, as
    train.py's (CPU autocast here; CUDA takes the same path with bf16=auto)."""
    r = queue_runner(tmp_path, "cpu", "bf16=on", "depth=2")
    seen = r.trainer.model.attend.record = []
    r.train_shard("s0")
    assert len(seen) == 3 * 2 and set(seen) == {(torch.bfloat16,) * 3}  # 3 microbatches (2 + 1) x 2 layers
    seen.clear()
    r.measure_fn(r.trainer.model)
    r.screen("s0")
    assert len(seen) == 3 * 2 and set(seen) == {(torch.bfloat16,) * 3}


def test_queue_measurement_has_no_integer_matmul(tmp_path):
    r = queue_runner(tmp_path, "cpu", "depth=2")
    with no_integer_matmul() as probe:
        bpb = r.measure_fn(r.trainer.model)
    assert probe.products > 0 and math.isfinite(bpb["prose"])


def test_the_last_update_is_padded_to_whole_microbatches_of_masked_rows():
    from shardqueue.engine.packing import update_batches

    # 5 rows of 2 in microbatches of 2, accum 2: update 1 is rows 0-3; update 2 row 4 and, padded,
    # one row of input 0 and target -1 (a masked target: no loss, no gradient)
    x, y = np.arange(10).reshape(5, 2) + 1, np.arange(10).reshape(5, 2) + 100
    plain, padded = update_batches(x, y, 2, 2), update_batches(x, y, 2, 2, pad=True)
    assert [[mx.tolist() for mx, _ in u] for u in plain] == [[[[1, 2], [3, 4]], [[5, 6], [7, 8]]], [[[9, 10]]]]
    assert [[(mx.tolist(), my.tolist()) for mx, my in u] for u in padded][1] == [([[9, 10], [0, 0]],
                                                                                  [[108, 109], [-1, -1]])]
    assert [len(u) for u in padded] == [2, 1] and len(padded) == 2  # no microbatch added, none dropped


def test_padded_rows_change_no_loss_and_no_gradient(tmp_path):
    """train_rows with and without the padding (what a compiled trainer gets): 3 rows in a
    microbatch of 4 get one masked row. The same rows train: the same loss to the bit,
    parameters within float32 rounding of the gradient sums."""
    from shardqueue.engine.packing import shard_rows
    from shardqueue.engine.runner import train_rows

    x, y = shard_rows(np.random.default_rng(1).integers(1, 64, 3 * 64 - 5), 64, 63)
    got = []
    for fixed in (None, 4):
        r = queue_runner(tmp_path, "cpu", "depth=1", "micro_rows=4", "accum=1")
        r.trainer.fixed_rows = fixed
        got.append((train_rows(r.trainer, x, y, 0, 10, 4, 1, 1.0), r.trainer.model.state_dict()))
    (loss, params), (loss_pad, params_pad) = got
    assert loss == loss_pad and loss[1:] == (1, 3 * 64 - 5)
    for k, p in params.items():
        torch.testing.assert_close(params_pad[k], p, rtol=1e-6, atol=1e-7)


def test_a_compiled_queue_compiles_two_graphs_whatever_its_shards_tails(tmp_path, monkeypatch):
    """compile=on (dynamo's capture and guards, run by the eager backend): shards of 5 to 10 rows in
    microbatches of 4 leave tails of 1, 2 and 3 rows, the pool sample has 2 rows and the control
    domains 3 and 5 windows. Screening, training, measuring and a rollback per shard, as a candidate
    step does, compile one training graph and one scoring graph: the count after the first shard is
    the count after all five (unpadded, each new row count compiled anew). No forward runs eagerly."""
    from torch._dynamo.utils import counters

    from shardqueue.engine.packing import shard_rows
    from training.model import GPT

    real_compile, forward, eager = torch.compile, GPT.forward, []

    def seen_eager(self, *a, **kw):  # a compiled call runs the graph, never this Python
        if not torch.compiler.is_compiling():
            eager.append(a[0].shape)
        return forward(self, *a, **kw)

    monkeypatch.setattr(GPT, "forward", seen_eager)
    monkeypatch.setattr(torch, "compile", lambda m, **kw: real_compile(m, backend="eager", **kw))
    torch._dynamo.reset()
    counters.clear()  # graphs of earlier tests in this process do not count here
    r = queue_runner(tmp_path, "cpu", "depth=1", "micro_rows=4", "accum=1", "compile=on")
    g = np.random.default_rng(1)
    shards = {n: shard_rows(g.integers(1, 64, n * 64 - 5), 64, 63) for n in (5, 6, 7, 9, 10)}
    r.world.sets["control"] = {"a": {"x": shards[9][0][:3], "y": shards[9][1][:3]},
                               "b": {"x": shards[9][0][3:8], "y": shards[9][1][3:8]}}
    r.rows, r.ref = (lambda sid: shards[sid]), {}
    graphs = []
    for n in shards:
        r.screen(n)
        snap = r.snapshot()
        assert r.train_shard(n)["updates"] == -(-n // 4)
        r.measure_fn(r.trainer.model)
        r.restore(snap) if n % 2 else None
        graphs.append(counters["stats"]["unique_graphs"])
    torch._dynamo.reset()
    assert graphs == [2] * 5 and not counters["graph_break"], (graphs, dict(counters["graph_break"]))
    assert eager == [] and r.trainer.model.training  # scoring gave the model back in training mode


@pytest.mark.parametrize("script, argv", [("run_queue", ["run", "--device", "cuda:abc"]),
                                          ("run_queue", ["calibrate", "--device", "cuda"]),
                                          ("study", ["--device", "cuda:abc"])])
def test_queue_command_lines_refuse_a_bad_device_with_exit_2(script, argv, tmp_path, capsys, monkeypatch):
    import importlib.util

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    spec = importlib.util.spec_from_file_location(script, Path(__file__).resolve().parents[1] / f"queue/{script}.py")
    rq = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rq)
    assert rq.main([*argv, "--out", str(tmp_path / "q")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --device: ") and err.count("\n") == 1


def test_masks_prepared_for_cuda_are_found_under_the_index_tensors_report(monkeypatch):
    """A model built for `cuda` has tensors on `cuda:N`: a mask prepared under index None would
    never be found, and every windowed layer would build its own inside the compiled forward."""
    from training.model import AttentionBackend

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert AttentionBackend.indexed("cuda") == torch.device("cuda", 1)
    assert AttentionBackend.indexed("cuda:0") == torch.device("cuda", 0)
    assert AttentionBackend.indexed("cpu") == torch.device("cpu")


@pytest.mark.parametrize("argv", [["--exploratory", "--device", "cuda:abc"], ["--exploratory", "--device", "cuda"]])
def test_eval_refuses_a_bad_device_with_exit_2(argv, tmp_path, capsys, monkeypatch):
    from eval.__main__ import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["--runs", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --device: ") and err.count("\n") == 1


# ---- the baseline's process settings ------------------------------------------------------
def test_cuda_process_settings_follow_the_baseline(monkeypatch):
    """TF32 matmuls ("high") and expandable allocator segments on CUDA; no CUDA setting for CPU."""
    from training.device import configure

    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    was = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        configure("cpu")
        assert torch.get_float32_matmul_precision() == "highest" and "PYTORCH_CUDA_ALLOC_CONF" not in os.environ
        configure("cuda:0")  # settings only: nothing here touches a device
        assert torch.get_float32_matmul_precision() == "high"
        assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
        monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64")
        configure("cuda")
        assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:64"  # the caller's choice stands
    finally:
        torch.set_float32_matmul_precision(was)


# ---- the attention kernel on CUDA follows compilation ----------------------------------------
@pytest.mark.parametrize("compile_, attention, flex", [("auto", "auto", True), ("on", "auto", True),
                                                       ("off", "auto", False), ("off", "sdpa", False)])
def test_uncompiled_cuda_training_takes_sdpa(compile_, attention, flex):
    """Eager flex attention materialises B x H x T x T float32 scores: never in training."""
    from training.trainer import flex_enabled

    cfg = resolve_config(None, SMALL + [f"compile={compile_}", f"attention={attention}"])
    assert flex_enabled(cfg, "cuda") is flex and flex_enabled(cfg, "cuda:1") is flex
    assert flex_enabled(cfg, "cpu") is False  # auto is SDPA on CPU, compiled or not


def test_explicit_flex_without_compile_on_cuda_is_refused_in_one_line():
    from errors import DataError
    from training.trainer import Trainer

    cfg = resolve_config(None, SMALL + ["compile=off", "attention=flex"])
    with pytest.raises(DataError, match="attention=flex with compile=off") as e:
        Trainer(cfg, "cuda:0")  # refused before anything touches the device
    assert "\n" not in str(e.value)
