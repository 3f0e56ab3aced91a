"""The queue's warmup-stable-decay schedule (the proposal "Can a model help choose its next
training data?": "A warmup-stable-decay schedule keeps the learning rate constant while
the queue operates").

    warmup  stage A's first updates: the LR multiplier rises linearly, (i + 1) / W over the
            W updates of the warm-up shards, so the first updates of a fresh model are small
    stable  multiplier 1 for the rest of stage A and the whole queue
    decay   the final decay: 1 - u / U over its U updates (reaching 0 at the end)

Weight decay stays at the configured value throughout. The queue compares model states
before and after a shard and assumes nothing else drifts between them; the baseline's
weight decay falls with training progress, which would move every state a little on its
own. Muon applies weight decay multiplied by the LR (p -= lr * wd * p), so during the
decay the effective weight decay still falls with the LR to 0, as in the baseline.
"""
from training.optim import muon_momentum


def set_schedule(adamw, muon, step, lr_mult, weight_decay):
    """LR (initial LR x multiplier), Muon momentum (by step, as the baseline) and constant weight decay."""
    for opt in (adamw, muon):
        for g in opt.param_groups:
            g["lr"] = g["initial_lr"] * lr_mult
    for g in muon.param_groups:
        g["momentum"] = muon_momentum(step)
        g["weight_decay"] = weight_decay
    return lr_mult


def warmup(start, warmup_updates):
    """Multiplier of update i of a call that starts at global update `start` (stage A)."""
    if warmup_updates <= 0:
        return 1.0
    return lambda i: min(1.0, (start + i + 1) / warmup_updates)


def decay(done, total):
    """Multiplier of update i of a call that starts after `done` of the decay's `total` updates."""
    return lambda i: max(0.0, 1.0 - (done + i) / total)
