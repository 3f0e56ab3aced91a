"""The supplied baseline's decoder (docs/baseline.md, "Model"), written from its description.

RMS norm without weights everywhere; embedding normed and kept as x0; before block i,
x = resid_lambda[i] * x + x0_lambda[i] * x0; attention with rotary then QK norm, sliding
windows by layer pattern, value embeddings with a per-head gate on alternate layers;
relu^2 MLP; soft-capped float32 logits.

Sliding window w: query i sees key j iff 0 <= i - j <= w (flash-attention's
window_size=(w, 0) convention); a window >= T is plain causal attention.
"""
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.attention.flex_attention as flex  # the module: a stand-in set on it is the one called
import torch.nn.functional as F


@dataclass
class ModelConfig:
    sequence_len: int = 2048
    vocab_size: int = 8192
    n_layer: int = 8
    n_embd: int = 512
    n_head: int = 4
    n_kv_head: int = 4
    window_pattern: str = "SSSL"
    short_window: int = 1024  # S; L is sequence_len
    ve_gate_channels: int = 32
    softcap: float = 15.0
    rope_base: float = 10000.0

    def windows(self):
        """Per-layer window sizes: pattern repeated, the last layer always long."""
        w = []
        for i in range(self.n_layer):
            c = self.window_pattern[i % len(self.window_pattern)]
            w.append(self.short_window if c == "S" else self.sequence_len)
        w[-1] = self.sequence_len
        return w

    def has_ve(self, i):
        return i % 2 == (self.n_layer - 1) % 2

    def parameter_counts(self):
        """(all, token embedding, value embeddings, scalars): GPT(self).param_groups_counts() from the shapes its
        modules take, without building it. A model built on the meta device to count them imports torch._dynamo
        (nn.Embedding's initialisation goes through torch._refs there): 1.6 s of CPU for a count, each
        `--dry-run` and each study plan."""
        d, vocab, layers = self.n_embd, self.vocab_size, self.n_layer
        hd = d // self.n_head
        q, kv = self.n_head * hd, self.n_kv_head * hd
        ve_layers = sum(self.has_ve(i) for i in range(layers))
        attention = d * q + 2 * d * kv + q * d  # c_q, c_k, c_v, c_proj
        mlp = 2 * d * 4 * d  # c_fc, c_proj
        gates = ve_layers * self.ve_gate_channels * self.n_kv_head
        wte, ve, scalars = vocab * d, ve_layers * vocab * kv, 2 * layers  # resid and x0 lambdas
        return wte + layers * (attention + mlp) + gates + ve + d * vocab + scalars, wte, ve, scalars

    def flops_per_token(self, counts=None):
        """6 x (params - token emb - value embs - scalars) + sum_layers 12 * heads * head_dim * min(window, T);
        counts: param_groups_counts() of a built model (default: parameter_counts())."""
        n_all, n_wte, n_ve, n_scalar = counts or self.parameter_counts()
        hd = self.n_embd // self.n_head
        attn = sum(12 * self.n_head * hd * min(w, self.sequence_len) for w in self.windows())
        return 6 * (n_all - n_wte - n_ve - n_scalar) + attn

    def to_dict(self):
        return asdict(self)


def norm(x):
    # CUDA autocast (torch >= 2.12) runs rms_norm in fp32; casting back keeps the baseline's bf16
    # residual stream and gives attention q, k, v of one dtype (flex's backward refuses mixed ones)
    return F.rms_norm(x, (x.size(-1),)).to(x.dtype)


def rotary(x, cos, sin):
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat([x1 * cos + x2 * sin, x2 * cos - x1 * sin], dim=-1)


def window_mask(T, window, device):
    i = torch.arange(T, device=device)
    diff = i[:, None] - i[None, :]
    return (diff >= 0) & (diff <= window)


class AttentionBackend:
    """Picks the attention kernel: SDPA (explicit mask, or is_causal when the window covers
    the context), or flex attention with a sliding-window block mask when use_flex. The flex
    path is the same on every device; torch 2.13 has its forward on CPU but no CPU backward.

    Masks are kept per (kind, length, window, device). A compiled forward reads a prepared mask
    as a constant; for a length nobody prepared it builds the mask inside its own graph (traced,
    so no graph break; rebuilt at every call, which is slower but never silently eager). An
    eager forward builds a missing mask once and keeps it."""

    def __init__(self, use_flex=False):
        self.use_flex = use_flex
        self._masks = {}
        self.record = None  # a list: (q, k, v) dtypes of every call are appended (device checks)

    def prepare(self, T, windows, device):
        """Build the masks of every windowed layer for length-T inputs on device, before any
        compiled forward: a mask built inside one costs a graph break per windowed layer."""
        for w in set(windows):
            if w < T - 1:
                self.mask("flex" if self.use_flex else "dense", T, w, self.indexed(device))

    @staticmethod
    def indexed(device):
        """`cuda` as the `cuda:N` that tensors report, so a prepared mask is found in forward."""
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            return torch.device("cuda", torch.cuda.current_device())
        return device

    @staticmethod
    def _key(kind, T, window, device):
        return kind, T, window, device.type, device.index

    @staticmethod
    def build(kind, T, window, device):
        if kind == "flex":
            def mod(b, h, qi, ki):
                return (qi >= ki) & (qi - ki <= window)

            return flex.create_block_mask(mod, None, None, T, T, device=device)
        return window_mask(T, window, device)

    def mask(self, kind, T, window, device):
        key = self._key(kind, T, window, device)
        if key not in self._masks:
            self._masks[key] = self.build(kind, T, window, device)
        return self._masks[key]

    def __call__(self, q, k, v, window):
        # q, k, v: (B, H, T, D)
        T = q.shape[2]
        if self.record is not None:
            self.record.append((q.dtype, k.dtype, v.dtype))
        if window >= T - 1:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        kind = "flex" if self.use_flex else "dense"
        mask = self._masks.get(self._key(kind, T, window, q.device))  # a plain lookup traces without a break
        if mask is None and torch.compiler.is_compiling():
            mask = self.build(kind, T, window, q.device)  # traced into the graph: a cache write would break it
        elif mask is None:
            mask = self.mask(kind, T, window, q.device)
        if self.use_flex:
            return flex.flex_attention(q, k, v, block_mask=mask)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        d, self.h, self.hkv = cfg.n_embd, cfg.n_head, cfg.n_kv_head
        self.hd = d // cfg.n_head
        self.c_q = nn.Linear(d, self.h * self.hd, bias=False)
        self.c_k = nn.Linear(d, self.hkv * self.hd, bias=False)
        self.c_v = nn.Linear(d, self.hkv * self.hd, bias=False)
        self.c_proj = nn.Linear(self.h * self.hd, d, bias=False)
        self.gate_ch = cfg.ve_gate_channels
        self.ve_gate = nn.Linear(self.gate_ch, self.hkv, bias=False) if cfg.has_ve(layer) else None

    def forward(self, x, ve, cos, sin, window, attend):
        B, T, _ = x.shape
        q = self.c_q(x).view(B, T, self.h, self.hd)
        k = self.c_k(x).view(B, T, self.hkv, self.hd)
        v = self.c_v(x).view(B, T, self.hkv, self.hd)
        if ve is not None:
            gate = 2 * torch.sigmoid(self.ve_gate(x[..., : self.gate_ch]))  # (B, T, hkv)
            v = v + gate.unsqueeze(-1) * ve.view(B, T, self.hkv, self.hd)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)  # under bf16 autocast q, k stay bf16 (as the baseline's bf16 tables)
        q, k = norm(rotary(q, cos, sin)), norm(rotary(k, cos, sin))
        k, v = k.to(q.dtype), v.to(q.dtype)  # one dtype for the kernel, bf16 under autocast
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if self.hkv != self.h:
            k = k.repeat_interleave(self.h // self.hkv, dim=1)
            v = v.repeat_interleave(self.h // self.hkv, dim=1)
        y = attend(q, k, v, window)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d, bias=False)
        self.c_proj = nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        return self.c_proj(F.relu(self.c_fc(x)).square())


class Block(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.attn = Attention(cfg, layer)
        self.mlp = MLP(cfg.n_embd)

    def forward(self, x, ve, cos, sin, window, attend):
        x = x + self.attn(norm(x), ve, cos, sin, window, attend)
        return x + self.mlp(norm(x))


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig, use_flex=False):
        super().__init__()
        self.cfg = cfg
        d = cfg.n_embd
        self.wte = nn.Embedding(cfg.vocab_size, d)
        self.blocks = nn.ModuleList([Block(cfg, i) for i in range(cfg.n_layer)])
        kv_dim = cfg.n_kv_head * (d // cfg.n_head)
        self.value_embeds = nn.ModuleDict(
            {str(i): nn.Embedding(cfg.vocab_size, kv_dim) for i in range(cfg.n_layer) if cfg.has_ve(i)})
        self.lm_head = nn.Linear(d, cfg.vocab_size, bias=False)
        self.resid_lambdas = nn.Parameter(torch.ones(cfg.n_layer))
        self.x0_lambdas = nn.Parameter(torch.full((cfg.n_layer,), 0.1))
        self.windows = cfg.windows()
        self.attend = AttentionBackend(use_flex)
        hd = d // cfg.n_head
        inv = 1.0 / (cfg.rope_base ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        t = torch.arange(cfg.sequence_len, dtype=torch.float32)
        freqs = torch.outer(t, inv)
        self.register_buffer("cos", freqs.cos()[None, :, None, :], persistent=False)
        self.register_buffer("sin", freqs.sin()[None, :, None, :], persistent=False)

    @torch.no_grad()
    def init_weights(self):
        d = self.cfg.n_embd
        bound = math.sqrt(3) / math.sqrt(d)
        nn.init.normal_(self.wte.weight, 0.0, 1.0)
        nn.init.normal_(self.lm_head.weight, 0.0, 0.001)
        for b in self.blocks:
            for lin in (b.attn.c_q, b.attn.c_k, b.attn.c_v, b.mlp.c_fc):
                nn.init.uniform_(lin.weight, -bound, bound)
            nn.init.zeros_(b.attn.c_proj.weight)
            nn.init.zeros_(b.mlp.c_proj.weight)
            if b.attn.ve_gate is not None:
                nn.init.zeros_(b.attn.ve_gate.weight)
        for ve in self.value_embeds.values():
            nn.init.uniform_(ve.weight, -bound, bound)
        self.resid_lambdas.fill_(1.0)
        self.x0_lambdas.fill_(0.1)

    def prepare_masks(self, T=None, device=None):
        """Attention masks for length-T inputs (default: the context) on device (default: the model's)."""
        device = device or self.lm_head.weight.device
        if torch.device(device).type != "meta":  # a meta model (training/bench.py counts its ops) needs none
            self.attend.prepare(T or self.cfg.sequence_len, self.windows, device)

    def _apply(self, fn, *args, **kwargs):
        """After .to(device) (and every other move or cast): the context's masks on the device the
        model now lives on, so a compiled forward at the context length reads them as constants."""
        out = super()._apply(fn, *args, **kwargs)
        self.prepare_masks()
        return out

    def embeddings_to_bf16(self):
        """The baseline stores token and value embeddings in bf16 (done on CUDA)."""
        self.wte.to(torch.bfloat16)
        for ve in self.value_embeds.values():
            ve.to(torch.bfloat16)

    def forward(self, idx, targets=None, reduction="mean"):
        B, T = idx.shape
        cos, sin = self.cos[:, :T], self.sin[:, :T]
        # device-aware: the argument-less form only sees CUDA autocast, so CPU bf16 stayed fp32
        t = idx.device.type  # autocast has no rules for some types (meta): never enabled there
        dtype = torch.bfloat16 if torch.amp.is_autocast_available(t) and torch.is_autocast_enabled(t) else \
            self.lm_head.weight.dtype
        x = norm(self.wte(idx).to(dtype))
        x0 = x
        for i, block in enumerate(self.blocks):
            x = self.resid_lambdas[i] * x + self.x0_lambdas[i] * x0
            ve = self.value_embeds[str(i)](idx).to(x.dtype) if str(i) in self.value_embeds else None
            x = block(x, ve, cos, sin, self.windows[i], self.attend)
        x = norm(x)
        logits = self.lm_head(x).float()
        logits = self.cfg.softcap * torch.tanh(logits / self.cfg.softcap)
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1,
                               reduction=reduction)

    # ---- accounting -------------------------------------------------------------
    def param_groups_counts(self):
        n_all = sum(p.numel() for p in self.parameters())
        n_wte = self.wte.weight.numel()
        n_ve = sum(p.numel() for p in self.value_embeds.parameters())
        n_scalar = self.resid_lambdas.numel() + self.x0_lambdas.numel()
        return n_all, n_wte, n_ve, n_scalar

    def flops_per_token(self):
        return self.cfg.flops_per_token(self.param_groups_counts())
