"""The forward-only screen: a candidate shard's BPB minus the BPB of a fixed sample of the pool, at the model's
current parameters, before the shard trains (the proposal asks whether it predicts the training-based
decision; the study's report measures that)."""
import numpy as np

from shardqueue.engine.training import params_sha256
from shardqueue.world.domains import rows_bpb

SAMPLE_ROWS = 32


class Screen:
    """rows(sid): a shard's (x, y) rows. The pool sample is drawn once; its BPB is kept for every set of parameters
    it was measured at (one float each), so a run of accepted-or-rolled-back shards measures it once per state.
    Keeping only the newest, a rollback's state was measured again: after a flagged candidate's recovery shard
    was screened, the next candidate's screen met the rolled-back parameters (15 of 29 measurements of the
    strict test run)."""

    def __init__(self, world, pool, rows):
        self.world, self.pool, self.rows = world, pool, rows
        self.sample = None  # (x, y) of the pool sample's rows
        self._pool_bpb = {}

    def __call__(self, trainer, sid):
        """{"shard_bpb", "pool_bpb", "score"} through the trainer's forward (compiled where training is) at one shape."""
        key = params_sha256(trainer.model)
        if key not in self._pool_bpb:
            x, y = self.pool_rows()
            self._pool_bpb[key] = self._bpb(trainer, x, y)
        b = self._bpb(trainer, *self.rows(sid))
        return {"shard_bpb": b, "pool_bpb": self._pool_bpb[key], "score": b - self._pool_bpb[key]}

    def _bpb(self, trainer, x, y):
        return rows_bpb(trainer.eval_fwd, x, y, self.world.token_bytes, self.world.device, trainer.autocast,
                        fixed_rows=trainer.fixed_rows)

    def pool_rows(self, n_rows=SAMPLE_ROWS):
        """n_rows full rows drawn (seeded) from all ordinary pool shards, read row by row."""
        if self.sample is None:
            shards, harm = {s["id"]: s for s in self.pool["shards"]}, self.pool["harmful"]["label"]
            ids = [s for s in self.pool["order"] if not shards[s]["sources"].get(harm)]
            rng = np.random.default_rng(self.pool["seed"] + 5)
            views = [self.rows(sid) for sid in ids]
            full = np.cumsum([len(x) - 1 for x, _ in views])  # full rows only: a shard's last row is padded
            total = int(full[-1]) if len(full) else 0
            pick = np.sort(rng.choice(total, size=min(n_rows, total), replace=False))
            xs, ys = [], []
            for g in pick.tolist():
                k = int(np.searchsorted(full, g, side="right"))
                r = g - (int(full[k - 1]) if k else 0)
                xs.append(views[k][0][r])
                ys.append(views[k][1][r])
            self.sample = (np.stack(xs), np.stack(ys))
        return self.sample
