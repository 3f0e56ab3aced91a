"""Model, optimizers and one optimizer update: the piece train.py and the shard queue share.

A Trainer's state_dict (model + both optimizers) together with a loader's state_dict and
the RNG states is everything a rollback point needs. With a process group of W ranks the
model is wrapped in DistributedDataParallel; each rank runs accum/W microbatches and the
gradients are averaged across ranks once per update (no_sync on all but the last).
"""
import contextlib
import math
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from errors import DataError
from training.config import TrainConfig
from training.device import autocast, bf16_autocast
from training.model import GPT, ModelConfig
from training.optim import apply_schedules, build_optimizers

# odd 61-bit multiplier: a position-weighted int64 sum of a microbatch's token ids
# identifies it cheaply on any device (integer sums wrap identically in any order)
_CHECK_MULT = 0x1F3D5B79A1C3E5F7


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite: nothing after it is logged or checkpointed."""


def model_config(cfg: TrainConfig) -> ModelConfig:
    return ModelConfig(sequence_len=cfg.context, vocab_size=cfg.vocab, n_layer=cfg.depth, n_embd=cfg.width,
                       n_head=cfg.heads, n_kv_head=cfg.kv_heads, window_pattern=cfg.window_pattern,
                       short_window=cfg.short_window)


def bf16_enabled(cfg, device):
    return bf16_autocast(device, cfg.bf16)


def flex_enabled(cfg, device):
    """attention=flex, or auto on CUDA when the model is compiled. Uncompiled, flex attention runs
    its eager path (B x H x T x T float32 scores, saved for backward: out of memory at the paper's
    sizes), so compile=off on CUDA takes SDPA with a dense window mask."""
    cuda = torch.device(device).type == "cuda"
    return cfg.attention == "flex" or (cfg.attention == "auto" and cuda and compile_enabled(cfg, device))


def build_model(cfg: TrainConfig, device, seed=None):
    mc = model_config(cfg)
    if seed is not None:
        torch.manual_seed(seed)
        if torch.cuda.is_available():
            torch.cuda.manual_seed(seed)
    dev = torch.device(device)
    model = GPT(mc, use_flex=flex_enabled(cfg, device)).to(dev)
    model.init_weights()
    if bf16_enabled(cfg, device):
        model.embeddings_to_bf16()
    return model  # the context's attention masks were built by .to(dev) (GPT._apply)


def compile_enabled(cfg, device):
    return cfg.compile == "on" or (cfg.compile == "auto" and torch.device(device).type == "cuda")


def maybe_compile(model, cfg, device):
    """torch.compile(dynamic=False) on CUDA by default (as the baseline; flex attention needs it
    to be fast), eager on CPU. Fixed shapes: evaluation pads its last batch instead of recompiling."""
    return torch.compile(model, dynamic=False) if compile_enabled(cfg, device) else model


def microbatch_check(x, y):
    """An int64 fingerprint of one (inputs, targets) microbatch, computed where the tensors live."""
    rows = torch.cat([x, y[:, -1:]], dim=1).long()
    w = torch.arange(1, rows.numel() + 1, device=rows.device, dtype=torch.int64) * _CHECK_MULT
    return (rows.flatten() * w).sum()


def pack_update(total, checks):
    """One rank's update record as one int64 vector on its device: the bits of the float64 loss
    sum, then the microbatch fingerprints. One collective gathers every rank's record."""
    return torch.cat([total.reshape(1).view(torch.int64), torch.stack(checks)])


def unpack_updates(rows):
    """(world, 1 + microbatches) int64 records on the CPU -> (the loss sums added in rank order,
    the fingerprints per rank). Every rank adds in the same order, so all get the same loss."""
    total = 0.0
    for s in rows[:, 0].contiguous().view(torch.float64).tolist():
        total += s
    return total, rows[:, 1:].tolist()


class Trainer:
    def __init__(self, cfg: TrainConfig, device, world=1):
        if cfg.accum % world:
            raise DataError(f"accum={cfg.accum} must be a multiple of the world size {world}")
        if flex_enabled(cfg, device) and torch.device(device).type != "cuda":
            raise DataError("attention=flex: torch has flex attention's forward on CPU but no backward; "
                            "train on CPU with attention=sdpa (evaluation may use flex)")
        if flex_enabled(cfg, device) and not compile_enabled(cfg, device):
            raise DataError("attention=flex with compile=off: flex attention would train eagerly (B x H x T x T "
                            "float32 scores saved for backward); use compile=on or attention=sdpa")
        self.cfg, self.device, self.world = cfg, device, world
        self.accum_local = cfg.accum // world
        self.model = build_model(cfg, device, seed=cfg.seed)
        self.adamw, self.muon = build_optimizers(self.model, cfg.muon_lr, cfg.weight_decay)
        self.ddp = None
        if world > 1:
            dev = torch.device(device)
            # cos/sin are constants: no buffer broadcast each forward (forward_sync_buffers: torch 2.13's name for
            # broadcast_buffers, which now warns; the buffers are still synced once at init, equal on every rank)
            self.ddp = DDP(self.model, device_ids=[dev.index] if dev.type == "cuda" else None,
                           forward_sync_buffers=False)
        self.fwd = maybe_compile(self.ddp or self.model, cfg, device)
        # scoring runs on rank 0 alone: through the bare model, since a DDP forward may join collectives
        # that the other ranks (waiting at the final barrier) never enter
        self.eval_fwd = self.fwd if self.ddp is None else maybe_compile(self.model, cfg, device)
        self.autocast = bf16_enabled(cfg, device)
        # a compiled forward is specialised to one shape (dynamic=False): a caller that trains or scores
        # another number of rows (the shard queue) pads to the microbatch; None when eager (any shape)
        self.fixed_rows = cfg.micro_rows if compile_enabled(cfg, device) else None
        self.rank = dist.get_rank() if world > 1 else 0
        self.last_checks = []  # this rank's microbatch fingerprints of the last update
        self.last_checks_by_rank = []  # every rank's, in rank order (gathered with the loss)
        self.last_wait = 0.0  # seconds of the last update spent waiting for the loader

    def update(self, loader, step, updates, lr_mult=None):
        """One optimizer update from accum microbatches of `loader`; returns (mean loss, lr multiplier).

        step/updates drive the schedules; lr_mult overrides the LR multiplier (the queue's
        stable phase keeps it at 1).
        """
        m = apply_schedules(self.adamw, self.muon, step, updates, self.cfg.weight_decay, lr_mult)
        total = torch.zeros((), device=self.device, dtype=torch.float64)
        checks = []
        # DDP averages over ranks; scaling by world makes the result sum/accum as in one process
        scale = self.world / self.cfg.accum
        wait = 0.0
        for j in range(self.accum_local):
            t0 = time.perf_counter()
            x, y = next(loader)
            wait += time.perf_counter() - t0
            checks.append(microbatch_check(x, y))
            last = j == self.accum_local - 1
            sync = self.ddp.no_sync() if (self.ddp is not None and not last) else contextlib.nullcontext()
            with sync:
                with autocast(self.device, self.autocast):
                    loss = self.fwd(x, y)
                (loss * scale).backward()
            total += loss.detach().double()
        record = pack_update(total, checks)
        work = None
        if self.world > 1:  # one collective for loss and fingerprints, overlapping the optimizer steps
            gathered = record.new_empty(self.world * record.numel())
            work = dist.all_gather_single(gathered, record, async_op=True)
            record = gathered
        self.adamw.step()
        self.muon.step()
        self.model.zero_grad(set_to_none=True)
        if work is not None:
            work.wait()
        total, self.last_checks_by_rank = unpack_updates(record.view(self.world, -1).cpu())  # the one sync
        loss = total / self.cfg.accum
        self.last_checks = self.last_checks_by_rank[self.rank]
        self.last_wait = wait
        if not math.isfinite(loss):
            raise TrainingDiverged(f"loss became {loss} at update {step + 1}; nothing of it was logged or checkpointed")
        return loss, m

    def scoring_forward(self, model):
        """What scores `model`: eval_fwd (compiled where training is) for this trainer's own model,
        any other model as it is."""
        return self.eval_fwd if model is self.model else model

    def state_dict(self):
        return {"model": self.model.state_dict(), "adamw": self.adamw.state_dict(), "muon": self.muon.state_dict()}

    def load_state_dict(self, st):
        self.model.load_state_dict(st["model"])
        self.adamw.load_state_dict(st["adamw"])
        self.muon.load_state_dict(st["muon"])
