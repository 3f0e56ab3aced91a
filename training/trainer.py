"""Model, optimizers and one optimizer update: the piece train.py and the shard queue share.

A Trainer's state_dict (model + both optimizers) together with a loader's state_dict and
the RNG states is everything a rollback point needs.
"""
import math

import torch
import torch.distributed as dist

from training.config import TrainConfig
from training.model import GPT, ModelConfig
from training.optim import apply_schedules, build_optimizers


def model_config(cfg: TrainConfig) -> ModelConfig:
    return ModelConfig(sequence_len=cfg.context, vocab_size=cfg.vocab, n_layer=cfg.depth, n_embd=cfg.width,
                       n_head=cfg.heads, n_kv_head=cfg.kv_heads, window_pattern=cfg.window_pattern,
                       short_window=cfg.short_window)


def bf16_enabled(cfg, device):
    return cfg.bf16 == "on" or (cfg.bf16 == "auto" and torch.device(device).type == "cuda")


def build_model(cfg: TrainConfig, device, meta=False, seed=None):
    mc = model_config(cfg)
    if meta:
        with torch.device("meta"):
            return GPT(mc)
    if seed is not None:
        torch.manual_seed(seed)
        if torch.cuda.is_available():
            torch.cuda.manual_seed(seed)
    dev = torch.device(device)
    model = GPT(mc, use_flex=dev.type == "cuda").to(dev)
    model.init_weights()
    if bf16_enabled(cfg, device):
        model.embeddings_to_bf16()
    return model


def maybe_compile(model, cfg, device):
    """torch.compile on CUDA by default (flex attention needs it to be fast), eager on CPU."""
    on = cfg.compile == "on" or (cfg.compile == "auto" and torch.device(device).type == "cuda")
    return torch.compile(model) if on else model


class Trainer:
    def __init__(self, cfg: TrainConfig, device, world=1):
        if cfg.accum % world:
            raise ValueError(f"accum={cfg.accum} must be a multiple of the world size {world}")
        self.cfg, self.device, self.world = cfg, device, world
        self.accum_local = cfg.accum // world
        self.model = build_model(cfg, device, seed=cfg.seed)
        self.adamw, self.muon = build_optimizers(self.model, cfg.muon_lr, cfg.weight_decay)
        self.fwd = maybe_compile(self.model, cfg, device)
        self.autocast = bf16_enabled(cfg, device)

    def update(self, loader, step, updates, lr_mult=None):
        """One optimizer update from accum microbatches of `loader`; returns (mean loss, lr multiplier).

        step/updates drive the schedules; lr_mult overrides the LR multiplier (the queue's
        stable phase keeps it at 1).
        """
        m = apply_schedules(self.adamw, self.muon, step, updates, self.cfg.weight_decay, lr_mult)
        total = torch.zeros((), device=self.device, dtype=torch.float64)
        dev_type = torch.device(self.device).type
        for _ in range(self.accum_local):
            x, y = next(loader)
            with torch.autocast(device_type=dev_type, dtype=torch.bfloat16, enabled=self.autocast):
                loss = self.fwd(x, y)
            (loss / self.cfg.accum).backward()
            total += loss.detach().double()
        if self.world > 1:
            for p in self.model.parameters():
                dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            dist.all_reduce(total, op=dist.ReduceOp.SUM)
        self.adamw.step()
        self.muon.step()
        self.model.zero_grad(set_to_none=True)
        loss = total.item() / self.cfg.accum
        if not math.isfinite(loss):
            raise RuntimeError(f"loss became {loss} at update {step}")
        return loss, m

    def state_dict(self):
        return {"model": self.model.state_dict(), "adamw": self.adamw.state_dict(), "muon": self.muon.state_dict()}

    def load_state_dict(self, st):
        self.model.load_state_dict(st["model"])
        self.adamw.load_state_dict(st["adamw"])
        self.muon.load_state_dict(st["muon"])
