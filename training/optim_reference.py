"""Per-parameter forms of training/optim.py's steps: one matrix or tensor at a time, op by op,
with the same arithmetic. The reference the optimizer tests compare the batched steps with,
and the "one Python step per parameter" side of the optimizer benchmark (training/bench.py)."""
import torch

from training.optim import adamw_scalars, muon_scalars, orthogonalize


def muon_matrix_step(p, g, buf, sm, lr, momentum, beta2, wd, ns_steps=5):
    """One Muon update of one matrix p (float32) in place; buf and sm are its state."""
    s = muon_scalars(lr * max(1.0, p.shape[0] / p.shape[1]) ** 0.5, momentum, beta2, wd)
    g = g.float()
    buf.lerp_(g, s["momentum_weight"])
    g = g.lerp(buf, s["momentum"])
    O = orthogonalize(g, ns_steps)
    per_row = O.shape[0] >= O.shape[1]
    v = O.float().square().mean(dim=1 if per_row else 0, keepdim=True)
    n = O.shape[1] if per_row else O.shape[0]
    norm = (v.sum() * n).sqrt()
    sm.lerp_(v, s["beta2_weight"])
    step = sm.clamp_min(1e-10).rsqrt()
    scale = step * (norm / ((v * n) * step.square()).sum().sqrt().clamp_min(1e-10))
    u = O * scale.to(torch.bfloat16)
    mask = (u * p) >= 0
    p.sub_(u * s["lr"] + p * s["lr_wd"] * mask)


def adamw_tensor_step(p, g, m, v, lr, beta1, beta2, eps, step):
    """One AdamW update of one tensor in place, in float32; a bf16 p, m, v are each rounded once."""
    s = adamw_scalars(lr, beta1, beta2, eps, step)
    p32, g32, m32, v32 = p.float(), g.float(), m.float(), v.float()
    m32 = m32.lerp(g32, s["w1"])
    v32 = v32.lerp(g32 * g32, s["w2"])
    p32 = p32 + (m32 / ((v32 / s["bias2"]).sqrt() + s["eps"])) * -s["step_size"]
    p.copy_(p32)
    m.copy_(m32)
    v.copy_(v32)


class ReferenceMuon:
    """Muon's state per matrix (not per shape group) and a loop over matrices."""

    def __init__(self, params, lr=0.04, momentum=0.95, beta2=0.95, weight_decay=0.0):
        self.params = list(params)
        self.lr, self.momentum, self.beta2, self.weight_decay = lr, momentum, beta2, weight_decay
        self.state = {}

    @torch.no_grad()
    def step(self):
        for p in self.params:
            if p.grad is None:
                continue
            if p not in self.state:
                rows, cols = p.shape
                self.state[p] = (torch.zeros_like(p, dtype=torch.float32),
                                 torch.zeros(rows if rows >= cols else 1, 1 if rows >= cols else cols, device=p.device))
            buf, sm = self.state[p]
            muon_matrix_step(p, p.grad, buf, sm, self.lr, self.momentum, self.beta2, self.weight_decay)


class ReferenceAdamW:
    """AdamW's loop over tensors, one op at a time (the groups of a torch optimizer)."""

    def __init__(self, groups, eps=1e-10):
        self.param_groups = [dict(g) for g in groups]
        self.eps = eps
        self.state = {}

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                t, m, v = self.state.get(p, (0, torch.zeros_like(p), torch.zeros_like(p)))
                self.state[p] = (t + 1, m, v)
                adamw_tensor_step(p, p.grad, m, v, group["lr"], *group["betas"], self.eps, t + 1)
