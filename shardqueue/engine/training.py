"""The queue's training step and what it is checked by: optimizer updates over a shard's rows, the SHA256 of
a model's parameters (what a rollback must restore bitwise), and one thread for queue work."""
import hashlib

import numpy as np
import torch

from shardqueue.engine.packing import update_batches
from shardqueue.engine.schedule import set_schedule
from training.device import autocast, to_device


def params_sha256(model):
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes() if v.numel() else b"")
    return h.hexdigest()


def train_rows(trainer, x, y, step, updates, micro_rows, accum, lr_mult):
    """Optimizer updates over rows (x, y), each token weighted equally within its update. With a
    compiled forward the last microbatch is padded with masked rows (update_batches): one shape.

    Returns (mean loss per target, updates, targets)."""
    cfg, dev = trainer.cfg, trainer.device
    nats, targets, n_up = 0.0, 0, 0
    for i, mbs in enumerate(update_batches(x, y, micro_rows, accum, pad=trainer.fixed_rows is not None)):
        mult = lr_mult(i) if callable(lr_mult) else lr_mult
        set_schedule(trainer.adamw, trainer.muon, step + i, mult, cfg.weight_decay)  # constant weight decay
        valid = sum(int((yy >= 0).sum()) for _, yy in mbs)
        total = torch.zeros((), dtype=torch.float64, device=dev)
        for xx, yy in mbs:
            # inputs follow the model; the forward runs under train.py's autocast policy
            with autocast(dev, trainer.autocast):
                loss = trainer.fwd(to_device(xx, dev), to_device(yy, dev), reduction="none").sum()
            (loss / valid).backward()
            total += loss.detach().double()
        trainer.adamw.step()
        trainer.muon.step()
        trainer.model.zero_grad(set_to_none=True)
        if not np.isfinite(total.item()):
            raise RuntimeError(f"loss became {total.item()} at update {step + i}")
        nats, targets, n_up = nats + total.item(), targets + valid, n_up + 1
    return nats / max(targets, 1), n_up, targets


class one_thread:
    """The queue's matrices are tiny: with two intra-op threads, Muon's small bf16 matmuls spend
    ~100x longer synchronising than computing (measured: 119 ms vs 0.9 ms CPU per call). Run
    queue work single-threaded and restore the caller's setting afterwards."""

    def __enter__(self):
        self.n = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc):
        torch.set_num_threads(self.n)
