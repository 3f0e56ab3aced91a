"""The supplied optimizer (docs/baseline.md, "Optimizer and schedule"): Muon for the 2-D matrices
inside the blocks, AdamW for embeddings, head and scalars, and the schedules.

Muon per shape group: Nesterov momentum, 5 Polar-Express orthogonalization steps in bf16,
a NorMuon-style second-moment normalization that keeps the Frobenius norm (one value per
row when rows >= cols, square included; one per column of a wide matrix),
and cautious weight decay p <- p - lr*g - lr*wd*p*[g*p >= 0].
"""
import torch

POLAR_EXPRESS = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)


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


class Muon(torch.optim.Optimizer):
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

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            params = group["params"]
            if params[0].grad is None:
                continue
            st = self.state[params[0]]  # group state lives on the first parameter
            G = torch.stack([p.grad for p in params]).float()
            rows, cols = G.shape[-2:]
            # the statistic's side differs from orthogonalize's branch on square matrices:
            # one value per row when rows >= cols (tall and square), per column when wide
            per_row = rows >= cols
            if "momentum_buffer" not in st:
                st["momentum_buffer"] = torch.zeros_like(G)
                st["second_moment"] = torch.zeros(*G.shape[:-2], rows if per_row else 1, 1 if per_row else cols,
                                                  dtype=torch.float32, device=G.device)
            mu = group["momentum"]
            buf = st["momentum_buffer"]
            buf.lerp_(G, 1 - mu)
            G = G.lerp(buf, mu)  # Nesterov
            O = orthogonalize(G, group["ns_steps"]).float()
            # NorMuon: EMA of the mean squared update over the last dim (per row) or over the rows (per column)
            v = O.square().mean(dim=-1 if per_row else -2, keepdim=True)
            sm = st["second_moment"]
            sm.lerp_(v, 1 - group["beta2"])
            U = O * sm.clamp_min(1e-10).rsqrt()
            U = U * (O.norm(dim=(-2, -1), keepdim=True) / U.norm(dim=(-2, -1), keepdim=True).clamp_min(1e-10))
            lr = group["lr"] * self.shape_lr_scale(G.shape)
            wd = group["weight_decay"]
            for i, p in enumerate(params):
                u = U[i].to(p.dtype)
                mask = (u * p) >= 0
                p.sub_(lr * u + lr * wd * p * mask)


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
    adamw = torch.optim.AdamW(adam_groups, eps=1e-10, weight_decay=0.0, foreach=False)
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
    progress = step / updates
    m = lr_multiplier(progress) if lr_mult is None else lr_mult
    for opt in (adamw, muon):
        for g in opt.param_groups:
            g["lr"] = g["initial_lr"] * m
    for g in muon.param_groups:
        g["momentum"] = muon_momentum(step)
        g["weight_decay"] = wd * (1 - progress)
    return m
