"""The training core: paper sizes, learning, exact resume, checkpoints, DDP, optimizer, attention."""
import json
import math
import subprocess
import sys

import pytest
import torch

from conftest import ROOT
from errors import DataError
from train import main as train_main
from train import train
from training.trainer import build_model
from training.checkpoint import load_checkpoint, newest_good_checkpoint
from training.config import resolve_config
from training.model import AttentionBackend, window_mask
from training.optim import POLAR_EXPRESS, Muon, orthogonalize


def tiny(small_corpus, **kw):
    base = dict(depth=2, width=32, heads=2, kv_heads=2, context=32, short_window=16, vocab=400, micro_rows=4,
                accum=2, updates=8, eval_batches=2, eval_rows=4, buffer=40, data_dir=str(small_corpus), prefetch=1)
    base.update(kw)
    return resolve_config(None, [f"{k}={v}" for k, v in base.items()])


def test_paper_config_dry_run_matches_the_paper(capsys):
    # train.py's main in-process: the command line as a process is tests/test_console.py's and test_ddp.py's
    assert train_main(["--config", str(ROOT / "protocols/configs/paper/baseline_s43.json"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "parameters      50,332,176" in out
    assert "FLOPs per token 239,078,400" in out
    assert "planned targets 499,646,464" in out
    assert "1.19455e+17" in out
    assert '"checkpoint_every": 100' in out  # periodic checkpoints by default at paper scale


def test_unknown_config_key_is_named(capsys):
    with pytest.raises(DataError, match="unknown config key 'learning_rate'"):
        resolve_config(None, ["learning_rate=3"])
    assert train_main(["depht=3", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown config key 'depht'" in err and "Traceback" not in err


def test_unknown_config_key_suggests_the_closest_known_keys(capsys):
    assert train_main(["lr=0.1", "--dry-run"]) == 2
    assert capsys.readouterr().err == "error: unknown config key 'lr' (did you mean muon_lr, loader?)\n"
    assert train_main(["depht=3", "--dry-run"]) == 2
    assert capsys.readouterr().err == "error: unknown config key 'depht' (did you mean depth, width?)\n"


def test_a_refused_value_names_where_it_came_from(tmp_path, capsys):
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"updates": 0, "depth": 2}')
    assert train_main(["--config", str(cfg), "--dry-run"]) == 2  # the file's 0
    assert capsys.readouterr().err == f"error: {cfg} key 'updates': 0 must be at least 1\n"
    cfg.write_text('{"updates": 40, "depth": 2}')
    assert train_main(["--config", str(cfg), "updates=0", "--dry-run"]) == 2  # the command line's 0 over the file's 40
    assert capsys.readouterr().err == "error: command line key 'updates': 0 must be at least 1\n"
    assert train_main(["--config", str(cfg), "depth=two", "--dry-run"]) == 2
    assert capsys.readouterr().err == "error: command line key 'depth': 'two' is not a valid int\n"

def test_a_run_without_config_names_the_model_it_builds(capsys, monkeypatch):
    """--help says what a run without --config trains: the defaults, the paper's model unless the pairs change it."""
    import train as train_module

    monkeypatch.setattr(train_module, "train", lambda *a, **kw: None)  # the run itself is not this test's
    assert train_main(["updates=5"]) == 0
    assert capsys.readouterr().out == ("no --config: TrainConfig's defaults with 1 key=value pair(s): depth 8, width "
                                       "512, 50,332,176 parameters (the paper's model), 5 updates of 524,288 targets, "
                                       "device=auto\n")
    assert train_main(["updates=5", "depth=2", "device=cpu"]) == 0
    assert capsys.readouterr().out == ("no --config: TrainConfig's defaults with 3 key=value pair(s): depth 2, width "
                                       "512, 18,874,500 parameters, 5 updates of 524,288 targets, device=cpu\n")
    assert train_main(["--config", str(ROOT / "protocols/configs/tiny/baseline_s43.json")]) == 0
    assert capsys.readouterr().out == ""  # a config file names its own model

def test_tiny_model_loss_falls(small_corpus, tmp_path, monkeypatch):
    import train as train_module

    cfg = tiny(small_corpus, updates=30)
    gc_calls = []  # (call, log lines written): as the baseline, frozen after update 1; released at the end
    logged = lambda: len((tmp_path / "train_log.jsonl").read_text().splitlines())  # noqa: E731
    for call in ("collect", "freeze", "unfreeze"):
        monkeypatch.setattr(train_module.gc, call, lambda call=call: gc_calls.append((call, logged())))
    frozen_by_caller, asked = [0], []  # as in a process that froze nothing of its own (this one did: tests/conftest.py)
    monkeypatch.setattr(train_module.gc, "get_freeze_count", lambda: asked.append(1) or frozen_by_caller[0])
    monkeypatch.setattr(train_module, "_caller_froze", False)
    res = train(cfg, tmp_path, log=lambda m: None)
    assert gc_calls == [("freeze", 0), ("unfreeze", 30)]  # a library call: this process's heap is not collected
    losses = [json.loads(line)["loss"] for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert len(losses) == 30
    assert sum(losses[-5:]) / 5 < sum(losses[:3]) / 3 - 0.5
    assert math.isfinite(res["official"]["bpb"]) and res["official"]["bpb"] > 0
    gc_calls.clear()  # train.py's command line (and run_six) collects before it freezes, as the baseline
    logged = lambda: len((tmp_path / "own" / "train_log.jsonl").read_text().splitlines())  # noqa: E731
    train(tiny(small_corpus, updates=2), tmp_path / "own", log=lambda m: None, collect_garbage=True)
    assert gc_calls == [("collect", 0), ("freeze", 0), ("unfreeze", 2)]
    gc_calls.clear()  # a caller that froze objects of its own keeps them frozen: the run leaves the collector alone
    gc_calls.clear()  # a run that raises after its first update (its first checkpoint fails) unfreezes as well
    logged = lambda: len((tmp_path / "fails" / "train_log.jsonl").read_text().splitlines())  # noqa: E731
    with monkeypatch.context() as m, pytest.raises(OSError, match="disk full"):
        m.setattr(train_module, "checkpoint", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
        train(tiny(small_corpus, updates=2), tmp_path / "fails", log=lambda m: None)
    assert gc_calls == [("freeze", 0), ("unfreeze", 2)]
    gc_calls.clear()
    frozen_by_caller[0] = 12_345
    train(tiny(small_corpus, updates=2), tmp_path / "caller", log=lambda m: None, collect_garbage=True)
    assert gc_calls == [] and len(asked) == 4
    train(tiny(small_corpus, updates=2), tmp_path / "again", log=lambda m: None, collect_garbage=True)
    assert gc_calls == [] and len(asked) == 4  # the frozen objects are not counted again (a walk of each of them)
    # timed as the baseline (`step > 10`): the first 11 updates (compilation, warm-up) are left out; all are in the total
    secs = [json.loads(line)["seconds"] for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert res["timed_updates"] == 19 and res["untimed_warmup_updates"] == 11
    assert res["training_seconds"] == pytest.approx(sum(secs[11:]), rel=1e-9)
    assert res["all_update_seconds"] == pytest.approx(sum(secs), rel=1e-9) and res["total_seconds"] > sum(secs)
    assert res["tokens_per_second"] == pytest.approx(19 * cfg.targets_per_update / sum(secs[11:]), rel=1e-9)


@pytest.mark.parametrize("loader", ["original", "random_span"])
def test_resume_is_bitwise_identical(small_corpus, tmp_path, loader):
    cfg = tiny(small_corpus, updates=8, checkpoint_every=3, loader=loader)
    full = train(cfg, tmp_path / "full", log=lambda m: None)
    assert train(cfg, tmp_path / "cut", stop_after=5, log=lambda m: None) is None  # "interrupted" after 5
    resumed = train(cfg, tmp_path / "cut", resume=True, log=lambda m: None)  # restarts from update 3
    a = load_checkpoint(tmp_path / "full" / "ckpt_000008.pt")["model"]
    b = load_checkpoint(tmp_path / "cut" / "ckpt_000008.pt")["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert full["official"] == {**resumed["official"], "seconds": full["official"]["seconds"]}
    steps = [json.loads(x)["step"] for x in (tmp_path / "cut" / "train_log.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 9))  # the interrupted run's updates 4-5 are not logged twice
    # the newest keep_checkpoints (2) periodic ones plus the final one are kept
    assert sorted(p.name for p in (tmp_path / "full").glob("ckpt_*.pt")) == [
        "ckpt_000003.pt", "ckpt_000006.pt", "ckpt_000008.pt"]


def test_checkpoint_in_fresh_process_gives_same_official_score(small_corpus, tmp_path):
    cfg = tiny(small_corpus, updates=4)
    res = train(cfg, tmp_path, log=lambda m: None)
    r = subprocess.run([sys.executable, "-m", "eval.official", str(tmp_path / "ckpt_000004.pt"), "--device", "cpu",
                        "--out", str(tmp_path / "again.parquet")], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    import pyarrow.parquet as pq

    a, b = pq.read_table(tmp_path / "official_rows.parquet"), pq.read_table(tmp_path / "again.parquet")
    assert a.column("nats").to_pylist() == b.column("nats").to_pylist()
    assert a.column("bytes").to_pylist() == b.column("bytes").to_pylist()
    assert a.schema.metadata[b"fingerprint"] == b.schema.metadata[b"fingerprint"]
    assert f"BPB {res['official']['bpb']:.8f}" in r.stdout


def test_corrupt_checkpoint_is_reported_and_resume_falls_back(small_corpus, tmp_path):
    cfg = tiny(small_corpus, updates=4, checkpoint_every=2, keep_checkpoints=3)
    train(cfg, tmp_path, log=lambda m: None)
    newest = tmp_path / "ckpt_000004.pt"
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2])  # truncated
    with pytest.raises(DataError, match="corrupt or truncated"):
        load_checkpoint(newest)
    msgs = []
    path, payload = newest_good_checkpoint(tmp_path, log=msgs.append)
    assert path.name == "ckpt_000002.pt" and payload["step"] == 2
    assert any("ckpt_000004.pt" in m for m in msgs)
    (tmp_path / "summary.json").unlink()  # as if killed before the end: a finished run is never retrained
    res = train(cfg, tmp_path, resume=True, log=msgs.append)
    assert res is not None and load_checkpoint(newest)["step"] == 4


# ---- optimizer against a plain reading of docs/baseline.md -----------------------------------
def reference_muon_step(p, g, buf, sm, lr, mu, wd, beta2=0.95):
    """One Muon update for one matrix, written out line by line from docs/baseline.md
    ("Optimizer arithmetic"): hyperparameters are float32 numbers; beta2, lr and wd are cast to
    bf16; the update is scaled and multiplied by lr in bf16; the weight-decay term is float32."""
    f32 = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
    mu = f32(mu)
    buf = buf + (g - buf) * (1 - mu)  # buf <- lerp(buf, g, 1 - mu)
    g = g + (buf - g) * mu  # g <- lerp(g, buf, mu)
    X = g.bfloat16()
    X = X / (1.02 * X.norm() + 1e-6)
    rows, cols = X.shape
    for a, b, c in POLAR_EXPRESS:
        if rows > cols:
            A = X.T @ X
            X = a * X + X @ (b * A + c * (A @ A))
        else:
            A = X @ X.T
            X = a * X + (b * A + c * (A @ A)) @ X
    # second moment: per row for tall AND square (rows >= cols), per column only when wide
    v = (X.float() ** 2).mean(dim=1 if rows >= cols else 0, keepdim=True)
    sm = sm + (v - sm) * (1 - f32(beta2).bfloat16()).float()  # EMA weight 1 - 0.94921875
    inv = sm.clamp_min(1e-10).rsqrt()
    scale = inv * (X.float().norm() / (X.float() * inv).norm())  # divided by sqrt(sm), Frobenius norm kept
    u = X * scale.bfloat16()  # bf16 product
    lr = f32(lr * max(1.0, rows / cols) ** 0.5).bfloat16()
    wd = f32(wd).bfloat16()
    p = p - (lr * u + lr * wd * p * ((u * p) >= 0))  # lr * u in bf16, (lr * wd) * p float32
    return p, buf, sm


@pytest.mark.parametrize("shape", [(8, 4), (4, 8), (6, 6), (16, 3)])
def test_muon_matches_reference(shape):
    """Tolerance: the reference sums the norms in another order (float32), which can move a
    bf16 rounding of the scale by one unit (2^-8 relative) on a few elements."""
    torch.manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(*shape)) for _ in range(3)]
    opt = Muon(ps, lr=0.04, momentum=0.9, weight_decay=0.1)
    ref = [(p.detach().clone(), torch.zeros(shape), None) for p in ps]
    rows, cols = shape
    ref = [(p, b, torch.zeros(rows, 1) if rows >= cols else torch.zeros(1, cols)) for p, b, _ in ref]
    for step in range(3):
        grads = [torch.randn(*shape) for _ in ps]
        for p, g in zip(ps, grads):
            p.grad = g.clone()
        opt.step()
        ref = [reference_muon_step(p, g, b, s, 0.04, 0.9, 0.1) for (p, b, s), g in zip(ref, grads)]
        for p, (rp, _, _) in zip(ps, ref):
            assert torch.allclose(p.detach(), rp, rtol=0, atol=0.04 * 2 ** -7)
            assert (p.detach() == rp).float().mean() > 0.9
        for i, (_, _, rs) in enumerate(ref):
            assert torch.allclose(opt.state[ps[0]]["second_moment"][i], rs, rtol=1e-5)


def test_normuon_statistic_shape_on_square_tall_and_wide_matrices():
    # written by hand from the baseline: a square matrix gets one value per ROW, like a tall one
    expected = {(6, 6): (1, 6, 1), (8, 4): (1, 8, 1), (4, 8): (1, 1, 8)}
    for shape, want in expected.items():
        p = torch.nn.Parameter(torch.randn(*shape))
        p.grad = torch.randn(*shape)
        opt = Muon([p])
        opt.step()
        assert tuple(opt.state[p]["second_moment"].shape) == want, shape


def test_orthogonalize_square_takes_the_wide_form():
    # rows > cols strictly selects X <- aX + X(bA + cA^2), A = X^T X; a square matrix takes the other form
    torch.manual_seed(3)
    G = torch.randn(5, 5)
    X = G.bfloat16()
    X = X / (X.norm() * 1.02 + 1e-6)
    for a, b, c in POLAR_EXPRESS:
        A = X @ X.T
        X = a * X + (b * A + c * (A @ A)) @ X
    assert torch.equal(orthogonalize(G), X)


def test_orthogonalize_gives_near_orthogonal_factor():
    torch.manual_seed(1)
    for shape in [(32, 16), (16, 32), (24, 24)]:
        G = torch.randn(*shape)
        s = torch.linalg.svdvals(orthogonalize(G).float())
        assert s.min() > 0.5 and s.max() < 1.5
        # same singular vectors as the exact polar factor: O^T G is symmetric positive semi-definite
        U, _, Vh = torch.linalg.svd(G, full_matrices=False)
        assert torch.nn.functional.cosine_similarity(orthogonalize(G).float().flatten(), (U @ Vh).flatten(), dim=0) > 0.9


# ---- attention backends against a float64 reference --------------------------------
def reference_attention(q, k, v, window):
    T = q.shape[2]
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~window_mask(T, window, q.device), float("-inf"))
    return torch.softmax(s, -1) @ v.double()


@pytest.mark.parametrize("T,window", [(16, 3), (33, 8), (40, 39), (40, 100), (64, 0)])
def test_attention_backends_match_float64_reference(T, window):
    torch.manual_seed(T + window)
    q, k, v = (torch.randn(2, 3, T, 16) for _ in range(3))
    want = reference_attention(q, k, v, window)
    backends = [AttentionBackend(use_flex=False)]
    if torch.cuda.is_available():
        backends.append(AttentionBackend(use_flex=True))
        q, k, v = q.cuda(), k.cuda(), v.cuda()
    for be in backends:
        got = be(q, k, v, window).double().cpu()
        assert torch.allclose(got, want, atol=1e-5), (T, window, be.use_flex)


def test_sliding_window_changes_the_model_output():
    cfg = resolve_config(None, ["depth=2", "width=32", "heads=2", "kv_heads=2", "context=32", "short_window=4",
                                "vocab=64", "window_pattern=SL"])
    m = build_model(cfg, "cpu", seed=0)
    for b in m.blocks:  # non-zero output projections so attention matters
        torch.nn.init.normal_(b.attn.c_proj.weight, 0, 0.1)
    x = torch.randint(0, 64, (1, 32))
    short = m(x)
    m.windows = [32, 32]
    assert not torch.allclose(short, m(x))
    assert torch.allclose(short[:, :5], m(x)[:, :5])  # first 5 positions see the same keys either way


def test_training_on_a_given_list_of_documents(small_corpus, tmp_path):
    from corpus.layout import Layout
    from loaders.stream import open_split
    from train import training_stream

    lay = Layout(small_corpus, "stdlib")
    first = lay.shard_names("train")[0]
    (tmp_path / "docs.txt").write_text("5 3 9 1 0 2")
    cfg = tiny(small_corpus, train_shards=first, train_docs=str(tmp_path / "docs.txt"))
    s = training_stream(cfg, str(small_corpus))
    full = open_split(small_corpus, "stdlib", "train")
    assert [s.doc_tokens(i).tolist() for i in range(s.n)] == [full.doc_tokens(i).tolist() for i in (5, 3, 9, 1, 0, 2)]
    res = train(tiny(small_corpus, updates=2, train_shards=first, train_docs=str(tmp_path / "docs.txt")), tmp_path / "r",
                log=lambda m: None)
    assert res is not None and res["config"]["train_docs"].endswith("docs.txt")
    with pytest.raises(DataError, match="not among the training shards"):
        training_stream(tiny(small_corpus, train_shards="shard_99999"), str(small_corpus))



def test_demo_source_cap_drops_exactly_the_longer_sources_and_leaves_evaluation_alone(small_corpus):
    from loaders.stream import open_split
    from train import training_stream

    full = open_split(small_corpus, "stdlib", "train")
    cap = int(sorted(full.lengths)[len(full.lengths) // 2])  # the median length: about half the sources stay
    s = training_stream(tiny(small_corpus, max_source_len=cap), str(small_corpus))
    kept = [i for i in range(full.n) if full.lengths[i] <= cap]  # the obvious reference, in arrival order
    assert 0 < s.n == len(kept) < full.n
    assert [s.doc_tokens(j).tolist() for j in range(s.n)] == [full.doc_tokens(i).tolist() for i in kept]
    assert training_stream(tiny(small_corpus), str(small_corpus)).n == full.n  # 0: no cap
    with pytest.raises(DataError, match="max_source_len"):
        tiny(small_corpus, max_source_len=10)  # not longer than a row (context 32 + 1)
    # the official metric packs with eval_buffer, never with the (demo-sized) training buffer
    cfg = tiny(small_corpus, buffer=3)
    assert cfg.eval_buffer == 1000 and cfg.buffer == 3

# ---- the GPU code path, exercised on CPU ---------------------------------------------
def test_bf16_forward_keeps_the_cuda_dtypes():
    """Under CUDA bf16 autocast the residual stream is bf16 (as the baseline's) and the logits
    float32, read on fake CUDA tensors so that torch's CUDA autocast rules apply (CPU autocast
    lacks the fp32 rms_norm rule); without autocast the stream follows the fp32 weights."""
    from fake_cuda import cuda_autocast, fake_cuda

    cfg = resolve_config(None, ["depth=2", "width=32", "heads=2", "kv_heads=2", "context=16", "short_window=8",
                                "vocab=64", "bf16=on", "device=cpu", "attention=sdpa"])
    m = build_model(cfg, "cpu", seed=0)
    assert m.wte.weight.dtype == torch.bfloat16 and m.lm_head.weight.dtype == torch.float32
    seen = []
    for b in m.blocks:
        b.register_forward_hook(lambda mod, inp, out: seen.append((inp[0].dtype, out.dtype)))
    x = torch.randint(0, 64, (2, 16))
    m(x)  # without autocast the stream follows the fp32 weights
    assert seen == [(torch.float32, torch.float32)] * 2
    seen.clear()
    with fake_cuda(m), cuda_autocast():
        logits = m(torch.randint(0, 64, (2, 16), device="cuda:0"))
        assert logits.device.type == "cuda"
    assert seen == [(torch.bfloat16, torch.bfloat16)] * 2
    assert logits.dtype == torch.float32


def test_flex_and_dense_mask_match_float64_on_the_sssl_pattern():
    """Per layer of the SSSL pattern: flex (forward; torch has no CPU flex backward) and SDPA
    with the dense mask (forward and backward) against a float64 reference; then the whole
    model with attention=flex against attention=sdpa, same weights."""
    import warnings

    from training.model import ModelConfig

    warnings.filterwarnings("ignore", message=".*flex.*", category=UserWarning)
    T, S = 64, 16
    windows = ModelConfig(sequence_len=T, n_layer=4, window_pattern="SSSL", short_window=S).windows()
    assert windows == [S, S, S, T]
    torch.manual_seed(0)
    flex, dense = AttentionBackend(use_flex=True), AttentionBackend(use_flex=False)
    for w in sorted(set(windows)):
        q, k, v = (torch.randn(1, 2, T, 16, requires_grad=True) for _ in range(3))
        qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
        want = reference_attention(qd, kd, vd, w)
        assert torch.allclose(flex(q.detach(), k.detach(), v.detach(), w).double(), want, atol=1e-5), w
        got = dense(q, k, v, w)
        assert torch.allclose(got.double(), want, atol=1e-5), w
        gout = torch.randn_like(got)
        got.backward(gout)
        want.backward(gout.double())
        for a, b in ((q, qd), (k, kd), (v, vd)):
            assert torch.allclose(a.grad.double(), b.grad, atol=1e-4), w
    base = ["depth=4", "width=32", "heads=2", "kv_heads=2", f"context={T}", f"short_window={S}", "vocab=64",
            "window_pattern=SSSL", "device=cpu"]
    m_flex = build_model(resolve_config(None, base + ["attention=flex"]), "cpu", seed=0)
    m_sdpa = build_model(resolve_config(None, base + ["attention=sdpa"]), "cpu", seed=0)
    for m in (m_flex, m_sdpa):  # attention must matter: non-zero output projections
        torch.manual_seed(1)
        for b in m.blocks:
            torch.nn.init.normal_(b.attn.c_proj.weight, 0, 0.2)
    assert m_flex.attend.use_flex and not m_sdpa.attend.use_flex
    x = torch.randint(0, 64, (2, T))
    with torch.no_grad():
        assert torch.allclose(m_flex(x), m_sdpa(x), atol=1e-5)


def test_evaluation_pads_a_smaller_last_batch_to_the_fixed_shape():
    """A last batch of 3 rows scored padded to 5 (targets -1) gives the 3 rows' statistics exactly."""
    import numpy as np

    from eval.official import score_fixed_shape
    from eval.scoring import score_rows

    cfg = resolve_config(None, ["depth=2", "width=32", "heads=2", "kv_heads=2", "context=16", "short_window=8",
                                "vocab=64", "device=cpu"])
    m = build_model(cfg, "cpu", seed=0)
    shapes = []
    m.register_forward_pre_hook(lambda mod, args: shapes.append(tuple(args[0].shape)))
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 64, (3, 16)), rng.integers(0, 64, (3, 16))
    tb = rng.integers(0, 4, 64)
    want = score_rows(m, x, y, tb, [0, 8, 16], "cpu")
    got = score_fixed_shape(m, x, y, tb, [0, 8, 16], "cpu", batch=5)
    assert shapes == [(3, 16), (5, 16)]
    for a, b in zip(want, got):
        assert a.shape == b.shape and np.allclose(a, b, rtol=1e-12, atol=0)
    assert all(np.array_equal(a, b) for a, b in zip(want[1:], got[1:]))  # bytes and counts exactly
