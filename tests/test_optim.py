"""The optimizer's arithmetic and schedules against values worked by hand, and its batched steps
against the per-parameter reference (training/optim_reference.py) on random tensors.

Hand values: bf16 keeps 8 significant bits, so bf16(x) is x rounded to a multiple of
2^(e-7) for 2^e <= |x| < 2^(e+1). The baseline holds hyperparameters as float32 and Muon casts
beta2, lr and wd to bf16: bf16(0.95) = 243/256 = 0.94921875, so the EMA weight 1 - beta2 is
13/256 = 0.05078125; bf16(0.04) = 164/128 * 2^-5 = 0.0400390625; bf16(0.2) = 205/1024.
"""
import copy
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from training import optim
from training.optim import AdamW, Muon, apply_schedules, lr_multiplier, muon_momentum, muon_scalars, to_bf16, to_f32
from training.optim_reference import ReferenceAdamW, ReferenceMuon

BF16 = torch.bfloat16
FP32_095 = 0.949999988079071  # float32(0.95) = 15938355 * 2^-24
FP32_1_MINUS_095 = 0.050000011920928955  # 1 - float32(0.95) = 838861 * 2^-24, exact in float32


# ---- Muon's scalars ------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(x=st.floats(-1e6, 1e6, allow_nan=False) | st.sampled_from([1 + 2 ** -8, 1 + 3 * 2 ** -8, 0.95, 0.04]))
def test_scalar_roundings_are_torchs(x):
    """The Python-float roundings equal torch's float32 and bf16 conversions (ties to even:
    1 + 2^-8 is a tie between 1 and 1 + 2^-7 and goes to 1; 1 + 3 * 2^-8 goes up)."""
    assert to_f32(x) == torch.tensor(x, dtype=torch.float32).item()
    assert to_bf16(x) == torch.tensor(x, dtype=torch.float32).bfloat16().item()


def test_scalar_roundings_by_hand():
    assert (to_bf16(1 + 2 ** -8), to_bf16(1 + 3 * 2 ** -8)) == (1.0, 1 + 2 ** -6)
    assert to_bf16(0.95) == 0.94921875 and to_f32(0.95) == FP32_095


def test_muon_scalars_by_hand():
    s = muon_scalars(0.04, 0.95, 0.95, 0.2)
    assert s["beta2_weight"] == 0.05078125  # 1 - bf16(0.95); in float32 it would be 0.0500000119
    assert s["lr"] == 0.0400390625  # bf16(0.04)
    # bf16(0.0400390625 * 0.2001953125) = bf16(0.0080156...) = 131 * 2^-14
    assert s["lr_wd"] == 131 / 16384
    assert s["momentum"] == FP32_095 and s["momentum_weight"] == FP32_1_MINUS_095  # momentum stays float32
    # a 3x2 matrix: lr * sqrt(3/2) = 0.0489898 -> bf16: 201 * 2^-12; lr * wd -> bf16(0.0098240) = 161 * 2^-14
    s = muon_scalars(0.04 * 1.5 ** 0.5, 0.95, 0.95, 0.2)
    assert (s["lr"], s["lr_wd"]) == (201 / 4096, 161 / 16384)


# ---- one Muon step after orthogonalization, by hand ----------------------------------------
@pytest.fixture
def fixed_polar_factor(monkeypatch):
    """orthogonalize (pinned by tests/test_train.py) replaced by a chosen bf16 factor, so the
    NorMuon scaling, the bf16 products and the cautious weight decay can be worked by hand."""
    seen = []

    def use(O):
        def fake(G, steps=5):
            seen.append(G.clone())
            return torch.tensor(O, dtype=BF16)[None]
        monkeypatch.setattr(optim, "orthogonalize", fake)
        return seen
    return use


def test_normuon_step_on_a_tall_matrix_by_hand(fixed_polar_factor):
    """3x2 (rows >= cols: one second moment per row), O = [[1, 0], [0, 3], [0, 0]].

    v = mean over each row of O^2 = (1/2, 9/2, 0); |O|_F = sqrt(10) = sqrt(sum(v) * 2).
    From zero the EMA gives sm = w * v, w = 13/256: (0.025390625, 0.228515625, 0).
    The factor step * |O| / |O * step| does not depend on w at the first step:
    sqrt(10) / (2 sqrt(v)) = 2.2360680 (row 1) and 0.7453560 (row 2); cast to bf16:
    2.234375 (143/64) and 0.74609375 (191/256). U = O * factor in bf16: row 1 2.234375,
    row 2 3 * 0.74609375 = 2.23828125 -> bf16 2.234375. lr * U in bf16:
    (201/4096) * (143/64) = 0.1096458 -> 225/2048 = 0.10986328125.
    Cautious decay (lr*wd = 161/16384 = 0.00982666015625, float32 term) where U * p >= 0:
    p = [[-1, -1], [0.5, 0.5], [-2, 4]]: only p[0][0] (U > 0, p < 0) is not decayed.
    """
    seen = fixed_polar_factor([[1, 0], [0, 3], [0, 0]])
    P = torch.nn.Parameter(torch.tensor([[-1.0, -1.0], [0.5, 0.5], [-2.0, 4.0]]))
    P.grad = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    opt = Muon([P], lr=0.04, momentum=0.95, weight_decay=0.2)
    opt.step()
    lr_u, lr_wd = 0.10986328125, 0.00982666015625
    assert P.detach().tolist() == [[-1 - lr_u, -1 + lr_wd],
                                   [0.5 - 0.5 * lr_wd, 0.5 - (lr_u + 0.5 * lr_wd)],
                                   [-2 + 2 * lr_wd, 4 - 4 * lr_wd]]
    st = opt.state[P]
    assert st["second_moment"].flatten().tolist() == [0.025390625, 0.228515625, 0.0]
    # Nesterov: buf = w_mu * g with w_mu = 1 - float32(0.95); orthogonalize saw g + mu (buf - g) = 0.0975 g
    assert st["momentum_buffer"][0, 0].tolist() == [FP32_1_MINUS_095, 2 * FP32_1_MINUS_095]
    assert seen[0][0, 0].tolist() == pytest.approx([0.0975, 0.195], rel=1e-6)


def test_normuon_step_on_a_wide_matrix_by_hand(fixed_polar_factor):
    """2x3 (wide: one second moment per column), O = [[1, 0, 0], [0, 3, 0]]: the same factors per
    column as the rows above; lr scale 1, so lr = 0.0400390625 and lr*wd = 131/16384;
    lr * U = (41/1024) * (143/64) = 0.0894623 -> bf16 183/2048 = 0.08935546875."""
    fixed_polar_factor([[1, 0, 0], [0, 3, 0]])
    W = torch.nn.Parameter(torch.tensor([[-1.0, -1.0, 0.5], [0.5, -2.0, 4.0]]))
    W.grad = torch.ones(2, 3)
    opt = Muon([W], lr=0.04, momentum=0.95, weight_decay=0.2)
    opt.step()
    lr_u, lr_wd = 0.08935546875, 131 / 16384
    assert W.detach().tolist() == [[-1 - lr_u, -1 + lr_wd, 0.5 - 0.5 * lr_wd],
                                   [0.5 - 0.5 * lr_wd, -2 - lr_u, 4 - 4 * lr_wd]]
    assert opt.state[W]["second_moment"].tolist() == [[[0.025390625, 0.228515625, 0.0]]]


def test_normuon_factor_restores_the_norm_when_the_second_moment_is_large():
    """O = I (2x2): v = (1/2, 1/2), |O|_F = sqrt(2). A second moment of 100 kept as it is (weight 0)
    gives step 1/10 and |O * step|_F = sqrt(2)/10 < 1: the factor is 1/10 * sqrt(2) / (sqrt(2)/10) = 1
    (gradients shrinking below their history must not be clipped by the norm's guard)."""
    sm = torch.full((1, 2, 1), 100.0)
    got = optim.normuon_scale(torch.eye(2)[None], sm, 0.0)
    assert got.flatten().tolist() == pytest.approx([1.0, 1.0], rel=1e-6)


def test_adamw_scalars_past_the_first_step_by_hand():
    """Step 3, beta1 0.8, beta2 0.95: bias1 = 1 - 0.8^3 = 0.488, bias2 = 1 - 0.95^3 = 0.142625,
    step size 0.7 / 0.488 = 1.4344262 (float32 betas: relative error under 1e-6)."""
    s = optim.adamw_scalars(0.7, 0.8, 0.95, 1e-10, 3)
    assert s["bias2"] == pytest.approx(0.142625, rel=1e-6)
    assert s["step_size"] == pytest.approx(0.7 / 0.488, rel=1e-6)


# ---- AdamW on a bf16 parameter, by hand ----------------------------------------------------
def test_adamw_on_bf16_computes_in_float32_and_rounds_once():
    """p = g = 1 (bf16), first step, betas (0.8, 0.95), lr 0.001952125.

    float32: m = 1 - float32(0.8) = 0.19999999, v = 0.05000001; the bias corrections are the same
    numbers, so p = 1 - lr * m / m / (sqrt(1) + 1e-10) = 0.998047875, above the midpoint
    0.998046875 between the bf16 neighbours 0.99609375 and 1: stored as 1.0. Stored moments:
    bf16(0.19999999) = 205/1024, bf16(0.05000001) = 205/4096. torch's eager AdamW (the step used
    before) rounds m to bf16 first: a step of lr * 1.00098 and p = 0.99609375."""
    p = torch.nn.Parameter(torch.ones(2, dtype=BF16))
    p.grad = torch.ones(2, dtype=BF16)
    opt = AdamW([p], lr=0.001952125, betas=(0.8, 0.95), eps=1e-10)
    opt.step()
    assert p.detach().tolist() == [1.0, 1.0]
    assert opt.state[p]["exp_avg"].tolist() == [205 / 1024] * 2
    assert opt.state[p]["exp_avg_sq"].tolist() == [205 / 4096] * 2
    assert p.dtype == opt.state[p]["exp_avg"].dtype == BF16
    q = torch.nn.Parameter(torch.ones(2, dtype=BF16))
    q.grad = torch.ones(2, dtype=BF16)
    torch.optim.AdamW([q], lr=0.001952125, betas=(0.8, 0.95), eps=1e-10, weight_decay=0.0, foreach=False).step()
    assert q.detach().tolist() == [0.99609375] * 2  # the example tells the two arithmetics apart


# ---- the batched steps against the per-parameter reference ---------------------------------
shapes = st.tuples(st.integers(1, 9), st.integers(1, 9))


@settings(max_examples=12, deadline=None)
@given(shape=shapes, n=st.integers(1, 3), seed=st.integers(0, 2**31 - 1),
       mu=st.floats(0.85, 0.95), lr=st.floats(1e-3, 0.1), wd=st.floats(0.0, 0.2))
def test_muon_groups_equal_the_per_matrix_reference_bitwise(shape, n, seed, mu, lr, wd):
    """Tolerance 0: the stacked group update and a loop over matrices run the same ops per element."""
    g = torch.Generator().manual_seed(seed)
    ps = [torch.nn.Parameter(torch.randn(*shape, generator=g)) for _ in range(n)]
    qs = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    fast = Muon(ps, lr=lr, momentum=mu, weight_decay=wd)
    ref = ReferenceMuon(qs, lr=lr, momentum=mu, weight_decay=wd)
    for _ in range(2):  # the second step reads the first's momentum and second moment
        for p, q in zip(ps, qs):
            p.grad = torch.randn(*shape, generator=g)
            q.grad = p.grad.clone()
        fast.step()
        ref.step()
        assert all(torch.equal(p, q) for p, q in zip(ps, qs))


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 40), min_size=1, max_size=4), seed=st.integers(0, 2**31 - 1),
       lr=st.floats(1e-3, 1.0), bf16=st.lists(st.booleans(), min_size=4, max_size=4))
def test_adamw_foreach_equals_the_per_tensor_reference_bitwise(sizes, seed, lr, bf16):
    """Tolerance 0 on CPU (foreach runs the same float32 ops per tensor); bf16 and float32
    parameters mixed in one group, as the foreach path splits them by dtype."""
    g = torch.Generator().manual_seed(seed)
    ps = [torch.nn.Parameter(torch.randn(k, generator=g).to(BF16 if b else torch.float32)) for k, b in zip(sizes, bf16)]
    qs = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    fast = AdamW([{"params": ps, "lr": lr, "betas": (0.8, 0.95)}], eps=1e-10)
    ref = ReferenceAdamW([{"params": qs, "lr": lr, "betas": (0.8, 0.95)}], eps=1e-10)
    for _ in range(3):
        for p, q in zip(ps, qs):
            p.grad = torch.randn(p.shape, generator=g).to(p.dtype)
            q.grad = p.grad.clone()
        fast.step()
        ref.step()
        assert all(torch.equal(p, q) for p, q in zip(ps, qs))
        assert all(torch.equal(fast.state[p]["exp_avg_sq"], ref.state[q][2]) for p, q in zip(ps, qs))


def test_the_reference_adamw_is_float32_rounded_once():
    """The reference itself against float64 arithmetic rounded to bf16 once (random bf16 tensors,
    one step): equal wherever float32 and float64 round to the same bf16 (nearly everywhere)."""
    g = torch.Generator().manual_seed(0)
    p = torch.randn(4096, generator=g).to(BF16)
    grad = torch.randn(4096, generator=g).to(BF16)
    m, v = torch.zeros_like(p), torch.zeros_like(p)
    q = p.clone()
    from training.optim_reference import adamw_tensor_step

    adamw_tensor_step(q, grad, m, v, 0.7, 0.8, 0.95, 1e-10, 1)
    g64 = grad.double()
    m64, v64 = 0.2 * g64, 0.05 * g64 ** 2
    want = (p.double() - 0.7 / 0.2 * m64 / ((v64 / 0.05).sqrt() + 1e-10)).to(BF16)
    assert (q != want).float().mean() < 1e-3


def test_the_optimizers_never_call_through_torchs_dynamo_wrapper():
    """Built, stepped, zeroed, saved and restored, neither optimizer enters torch._compile's wrapper, whose first
    call imports torch._dynamo (1.6 s of CPU in each process that trains uncompiled); the restored one steps as
    the original does, bit for bit."""
    entered = []

    def watch(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.endswith("torch/_compile.py"):
            entered.append(frame.f_code.co_name)

    model = torch.nn.Sequential(torch.nn.Embedding(5, 4), torch.nn.Linear(4, 3, bias=False))
    sys.setprofile(watch)
    try:
        adamw = AdamW(model[0].parameters(), lr=0.01)
        muon = Muon(model[1].parameters(), lr=0.01)
        for opt in (adamw, muon):
            model(torch.tensor([1, 2])).sum().backward()
            opt.step()
            opt.zero_grad()
            opt.load_state_dict(opt.state_dict())
    finally:
        sys.setprofile(None)
    assert entered == []
    w = model[1].weight
    twin = torch.nn.Parameter(w.detach().clone())
    again = Muon([twin], lr=0.01)
    again.load_state_dict(copy.deepcopy(muon.state_dict()))  # as from a file: no tensor shared
    for p in (w, twin):
        p.grad = torch.ones_like(p)
    muon.step()
    again.step()
    assert torch.equal(w, twin) and torch.equal(muon.state[w]["momentum_buffer"], again.state[twin]["momentum_buffer"])


# ---- the schedules ---------------------------------------------------------------------------
def test_lr_multiplier_by_hand():
    """Constant 1 for the first half, then linear to 0: 1 at 0.5, 0.8 at 0.6, 0.5 at 0.75, 0 at 1."""
    assert [lr_multiplier(x) for x in (0.0, 0.25, 0.4999)] == [1.0, 1.0, 1.0]
    assert lr_multiplier(0.5) == 1.0 and lr_multiplier(0.75) == 0.5 and lr_multiplier(1.0) == 0.0
    assert lr_multiplier(0.6) == pytest.approx(0.8) and lr_multiplier(0.9) == pytest.approx(0.2)


def test_muon_momentum_warms_up_over_300_steps():
    """0.85 at step 0, 0.90 at 150, 0.95 from 300 on, linear between."""
    assert muon_momentum(0) == 0.85
    assert muon_momentum(150) == pytest.approx(0.90) and muon_momentum(30) == pytest.approx(0.86)
    assert muon_momentum(300) == pytest.approx(0.95) and muon_momentum(3000) == pytest.approx(0.95)


def test_apply_schedules_sets_every_group():
    """updates = 8: step 2 (progress 1/4), step 6 (3/4). LR x 1 then x 0.5 of each group's initial
    LR; Muon's weight decay 0.2 (1 - progress) = 0.15 then 0.05; momentum by step."""
    m = torch.nn.Linear(4, 4)
    adamw = AdamW([{"params": [m.bias], "lr": 0.6, "initial_lr": 0.6}], eps=1e-10)
    muon = Muon([m.weight], lr=0.04)
    for g in muon.param_groups:
        g["initial_lr"] = 0.04
    assert apply_schedules(adamw, muon, 2, 8) == 1.0
    assert adamw.param_groups[0]["lr"] == 0.6 and muon.param_groups[0]["lr"] == 0.04
    assert muon.param_groups[0]["weight_decay"] == pytest.approx(0.15)
    assert muon.param_groups[0]["momentum"] == pytest.approx(0.85 + 0.1 * 2 / 300)
    assert apply_schedules(adamw, muon, 6, 8) == 0.5
    assert adamw.param_groups[0]["lr"] == 0.3 and muon.param_groups[0]["lr"] == 0.02
    assert muon.param_groups[0]["weight_decay"] == pytest.approx(0.05)
    assert apply_schedules(adamw, muon, 6, 8, lr_mult=1.0) == 1.0  # the queue's stable phase
    assert muon.param_groups[0]["lr"] == 0.04 and muon.param_groups[0]["weight_decay"] == pytest.approx(0.05)
