"""Per-row, per-position-bin sufficient statistics of a model on fixed inputs.

For every row and bin: nats summed over targets with token_bytes > 0, bytes summed over
all targets, and the number of targets with token_bytes > 0. Targets of -1 are padding
(causal right-padding cannot change an earlier position's loss) and count nowhere.
Everything later (BPB, CE, deltas, bootstraps, bin contributions) is a ratio of sums of
these numbers, so they are all an evaluation needs to keep.
"""
import numpy as np
import torch

from training.device import autocast as device_autocast, to_device


def bin_index(T, edges):
    """Bin of each target position 0..T-1 for bins [edges[k], edges[k+1]); positions past the last edge -> last bin."""
    pos = np.arange(T)
    return np.clip(np.searchsorted(np.asarray(edges), pos, side="right") - 1, 0, len(edges) - 2)


@torch.no_grad()
def score_rows(model, x, y, token_bytes, edges, device, autocast=False):
    """x, y: int64 [N, T] (y = -1 for padding). Returns nats float64 [N, bins], bytes/count int64 [N, bins].
    The forward runs in eval mode; the model is left in the mode it came in."""
    x, y = to_device(x, device), to_device(y, device)
    tb = to_device(token_bytes, device).long()
    was_training = model.training
    model.eval()
    try:
        with device_autocast(device, autocast):
            loss = model(x, y, reduction="none").view(y.shape).double()
    finally:  # the caller's mode back: a probe between training updates leaves the model training
        model.train(was_training)
    valid = y >= 0
    b = torch.where(valid, tb[y.clamp_min(0)], torch.zeros_like(y))
    counted = b > 0
    nats_tok = torch.where(counted, loss, torch.zeros_like(loss))
    n_bins = len(edges) - 1
    idx = torch.as_tensor(bin_index(y.shape[1], edges), device=device)
    onehot = torch.nn.functional.one_hot(idx, n_bins).double()  # [T, bins]
    nats = (nats_tok @ onehot).cpu().numpy()
    # integer sums by index_add, exact on every device: CUDA has no integer matmul kernel
    per_bin = torch.zeros(y.shape[0], n_bins, dtype=torch.int64, device=y.device)
    nbytes = per_bin.index_add(1, idx, b).cpu().numpy()
    count = per_bin.index_add(1, idx, counted.long()).cpu().numpy()
    return nats, nbytes, count


def bpb(nats, nbytes):
    return float(np.sum(nats) / (np.log(2) * np.sum(nbytes)))
