"""The supplied optimizer (docs/baseline.md, "Optimizer and schedule"): Muon for the 2-D matrices
inside the blocks, AdamW for embeddings, head and scalars, and the schedules.

Muon per shape group: Nesterov momentum, 5 Polar-Express orthogonalization steps in bf16,
a NorMuon-style second-moment normalization that keeps the Frobenius norm (one value per
row when rows >= cols, square included; one per column of a wide matrix),
and cautious weight decay p <- p - lr*g - lr*wd*p*[g*p >= 0].

The arithmetic follows the baseline's steps dtype by dtype (docs/baseline.md, "Optimizer
arithmetic"): its hyperparameters live in float32 tensors, Muon casts beta2, lr and wd to the
bf16 of the orthogonalized update and scales that update in bf16 (only the weight-decay term
is float32); AdamW computes in float32 and stores each bf16 tensor once. Each step is a
handful of batched (stacked or foreach) ops per group, not a loop over parameters:
training/optim_reference.py is the per-parameter form the tests compare it with.
"""
import struct

import torch

POLAR_EXPRESS = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)


def to_f32(x: float) -> float:
    """x rounded to the nearest float32 (ties to even), as a Python float."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def to_bf16(x: float) -> float:
    """float32(x) rounded to the nearest bf16 (ties to even), as torch converts float32 to bf16."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def orthogonalize(G: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """Approximate polar factor of each matrix in G (..., rows, cols), computed in bf16."""
    X = G.bfloat16()
    X = X / (X.norm(dim=(-2, -1), keepdim=True) * 1.02 + 1e-6)
    tall = X.size(-2) > X.size(-1)  # strictly: a square matrix takes the A = X X^T form
    for a, b, c in POLAR_EXPRESS[:steps]:
        if tall:
            A = X.mT @ X
            X = a * X + X @ (b * A + c * (A @ A))
        else:
            A = X @ X.mT
            X = a * X + (b * A + c * (A @ A)) @ X
    return X


def muon_scalars(lr, momentum, beta2, wd):
    """The baseline's Muon hyperparameters at their precision: momentum float32 (the gradient's
    dtype); beta2, lr and wd cast from float32 to the update's bf16; lr*wd a bf16 product.
    Python floats holding float32 and bf16 values exactly: float32 arithmetic on them done in
    float64 and rounded once is float32's own result (53 >= 2 * 24 + 2 bits)."""
    mu = to_f32(momentum)
    lr_b, wd_b = to_bf16(to_f32(lr)), to_bf16(to_f32(wd))
    return {"momentum": mu, "momentum_weight": to_f32(1 - mu), "beta2_weight": to_bf16(1 - to_bf16(to_f32(beta2))),
            "lr": lr_b, "lr_wd": to_bf16(lr_b * wd_b)}


def normuon_scale(O: torch.Tensor, second_moment: torch.Tensor, beta2_weight: float) -> torch.Tensor:
    """Updates second_moment (float32, one value per row or column) with O's mean square and
    returns the float32 factor that divides O by its square root and restores O's Frobenius norm."""
    per_row = O.size(-2) >= O.size(-1)
    red = -1 if per_row else -2
    v = O.float().square().mean(dim=red, keepdim=True)
    n = O.size(red)
    norm = (v.sum(dim=(-2, -1), keepdim=True) * n).sqrt()
    second_moment.lerp_(v, beta2_weight)
    step = second_moment.clamp_min(1e-10).rsqrt()
    new_norm = ((v * n) * step.square()).sum(dim=(-2, -1), keepdim=True).sqrt()
    return step * (norm / new_norm.clamp_min(1e-10))


class Optimizer(torch.optim.Optimizer):
    """torch's Optimizer with add_param_group, zero_grad, state_dict and load_state_dict called undecorated. torch
    wraps the four in torch._disable_dynamo, whose first call imports torch._dynamo: 1.6 s of CPU in every process
    that builds an optimizer (a run, each torchrun rank, each Ray worker of a study), where nothing is compiled.
    The wrapper only matters inside a compiled region, and no optimizer call runs in one: training/trainer.py
    compiles the model alone."""

    def add_param_group(self, param_group):
        return _undecorated(torch.optim.Optimizer.add_param_group)(self, param_group)

    def zero_grad(self, set_to_none=True):
        return _undecorated(torch.optim.Optimizer.zero_grad)(self, set_to_none)

    def state_dict(self):
        return _undecorated(torch.optim.Optimizer.state_dict)(self)

    def load_state_dict(self, state_dict):
        return _undecorated(torch.optim.Optimizer.load_state_dict)(self, state_dict)


def _undecorated(method):
    return getattr(method, "__wrapped__", method)  # functools.wraps keeps the function it wraps there


class Muon(Optimizer):
    """Muon over groups of same-shaped matrices (one stacked, batched update per group)."""

    def __init__(self, params, lr=0.04, momentum=0.95, ns_steps=5, beta2=0.95, weight_decay=0.0):
        params = list(params)
        by_shape = {}
        for p in params:
            by_shape.setdefault(tuple(p.shape), []).append(p)
        groups = [{"params": ps} for _, ps in sorted(by_shape.items())]
        super().__init__(groups, dict(lr=lr, momentum=momentum, ns_steps=ns_steps, beta2=beta2,
                                      weight_decay=weight_decay))

    @staticmethod
    def shape_lr_scale(shape):
        rows, cols = shape[-2], shape[-1]
        return max(1.0, rows / cols) ** 0.5

    def group_state(self, group, G):
        st = self.state[group["params"][0]]  # group state lives on the first parameter
        if "momentum_buffer" not in st:
            rows, cols = G.shape[-2:]
            per_row = rows >= cols  # square matrices: per row (the statistic's side, not orthogonalize's branch)
            st["momentum_buffer"] = torch.zeros_like(G)
            st["second_moment"] = torch.zeros(*G.shape[:-2], rows if per_row else 1, 1 if per_row else cols,
                                              dtype=torch.float32, device=G.device)
        return st

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            params = group["params"]
            if params[0].grad is None:
                continue
            G = torch.stack([p.grad for p in params]).float()
            st = self.group_state(group, G)
            s = muon_scalars(group["lr"] * self.shape_lr_scale(G.shape), group["momentum"], group["beta2"],
                             group["weight_decay"])
            buf = st["momentum_buffer"]
            buf.lerp_(G, s["momentum_weight"])
            G.lerp_(buf, s["momentum"])  # Nesterov
            O = orthogonalize(G, group["ns_steps"])
            U = O * normuon_scale(O, st["second_moment"], s["beta2_weight"]).to(O.dtype)  # scaled in bf16
            P = torch.stack(params)
            mask = (U * P) >= 0
            P.sub_(U * s["lr"] + P * s["lr_wd"] * mask)  # lr*U in bf16; the weight-decay term float32
            torch._foreach_copy_(params, list(P.unbind(0)))


def adamw_scalars(lr, beta1, beta2, eps, step):
    """The baseline's fused AdamW step's scalars, float32: lerp weights, bias corrections, step size.
    beta ** step is float64 rounded to float32 once (torch's float32 pow may be one unit off)."""
    b1, b2 = to_f32(beta1), to_f32(beta2)
    bias1, bias2 = to_f32(1 - to_f32(b1 ** step)), to_f32(1 - to_f32(b2 ** step))
    return {"w1": to_f32(1 - b1), "w2": to_f32(1 - b2), "bias2": bias2, "eps": to_f32(eps),
            "step_size": to_f32(to_f32(lr) / bias1)}


class AdamW(Optimizer):
    """AdamW without weight decay (the baseline's groups have none), as the baseline's fused step:
    m <- lerp(m, g, 1-b1); v <- lerp(v, g^2, 1-b2); p <- p - lr/(1-b1^t) * m / (sqrt(v/(1-b2^t)) + eps),
    computed in float32 for every parameter; a bf16 parameter and its bf16 moments are read once
    and written once (rounded once), as a fused kernel that keeps its intermediates in registers.
    One foreach call per op for all float32 tensors and one for all bf16 tensors (per-tensor
    scalars), instead of one call per op and parameter."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps))

    @torch.no_grad()
    def step(self):
        batches = {}  # dtype -> (params, grads, exp_avgs, exp_avg_sqs, scalars per tensor)
        for group in self.param_groups:
            scalars = {}
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["step"] = 0
                    st["exp_avg"] = torch.zeros_like(p)
                    st["exp_avg_sq"] = torch.zeros_like(p)
                st["step"] = t = int(st["step"]) + 1
                if t not in scalars:
                    scalars[t] = adamw_scalars(group["lr"], *group["betas"], group["eps"], t)
                b = batches.setdefault(p.dtype, ([], [], [], [], []))
                for lst, x in zip(b, (p, p.grad, st["exp_avg"], st["exp_avg_sq"], scalars[t])):
                    lst.append(x)
        for dtype, (p_, g_, m_, v_, s_) in batches.items():
            if dtype == torch.float32:
                adamw_math(p_, g_, m_, v_, s_)
            else:  # read once in float32, compute, write back once (one rounding per stored value)
                p32, g32, m32, v32 = ([x.float() for x in xs] for xs in (p_, g_, m_, v_))
                adamw_math(p32, g32, m32, v32, s_)
                for dst, src in ((p_, p32), (m_, m32), (v_, v32)):
                    torch._foreach_copy_(dst, src)


def adamw_math(p, g, m, v, s):
    """In place on float32 lists, s the scalars of each tensor: the fused step's formula (see AdamW)."""
    col = lambda k: [x[k] for x in s]  # noqa: E731
    torch._foreach_lerp_(m, g, col("w1"))
    torch._foreach_lerp_(v, torch._foreach_mul(g, g), col("w2"))
    denom = torch._foreach_div(v, col("bias2"))
    torch._foreach_sqrt_(denom)
    torch._foreach_add_(denom, col("eps"))
    update = torch._foreach_div(m, denom)
    torch._foreach_mul_(update, [-x for x in col("step_size")])
    torch._foreach_add_(p, update)


def build_optimizers(model, muon_lr=0.04, wd=0.2):
    """AdamW groups (docs/baseline.md) and Muon for the block matrices. Returns (adamw, muon)."""
    s = (model.cfg.n_embd / 768) ** -0.5
    betas = (0.8, 0.95)
    adam_groups = [
        {"params": [model.lm_head.weight], "lr": 0.004 * s, "betas": betas},
        {"params": [model.wte.weight], "lr": 0.6 * s, "betas": betas},
        {"params": list(model.value_embeds.parameters()), "lr": 0.6 * s, "betas": betas},
        {"params": [model.resid_lambdas], "lr": 0.005, "betas": betas},
        {"params": [model.x0_lambdas], "lr": 0.5, "betas": (0.96, 0.95)},
    ]
    adam_groups = [g for g in adam_groups if g["params"]]
    for g in adam_groups:
        g["initial_lr"] = g["lr"]
    adamw = AdamW(adam_groups, eps=1e-10)
    matrices = [p for p in model.blocks.parameters() if p.ndim == 2]
    muon = Muon(matrices, lr=muon_lr, weight_decay=wd)
    for g in muon.param_groups:
        g["initial_lr"] = g["lr"]
    covered = {id(p) for g in adam_groups for p in g["params"]} | {id(p) for p in matrices}
    missing = [n for n, p in model.named_parameters() if id(p) not in covered]
    if missing:
        raise RuntimeError(f"parameters without an optimizer: {missing}")
    return adamw, muon


def lr_multiplier(progress: float) -> float:
    """No warmup; constant for the first half; then linear to 0."""
    return 1.0 if progress < 0.5 else max(0.0, (1.0 - progress) / 0.5)


def muon_momentum(step: int) -> float:
    f = min(step / 300, 1.0)
    return (1 - f) * 0.85 + f * 0.95


def apply_schedules(adamw, muon, step, updates, wd=0.2, lr_mult=None):
    """Progress is step / updates: the paper's runs are a fixed number of updates (the baseline's
    is wall-clock, docs/baseline.md, "Schedule progress")."""
    progress = step / updates
    m = lr_multiplier(progress) if lr_mult is None else lr_mult
    for opt in (adamw, muon):
        for g in opt.param_groups:
            g["lr"] = g["initial_lr"] * m
    for g in muon.param_groups:
        g["momentum"] = muon_momentum(step)
        g["weight_decay"] = wd * (1 - progress)
    return m
