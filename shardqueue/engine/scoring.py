"""What a queue model is scored on: the official BPB (the paper's metric) and the control and selection sets."""
from eval.official import row_statistics, scores
from shardqueue.world.domains import measure


def score(model, world, cfg=None, fixed_rows=None):
    """{"official": BPB, "control": {domain: BPB}, "selection": {domain: BPB}} of a model (a forward:
    a compiled one with fixed_rows, measure's one shape)."""
    cfg = cfg or world.cfg
    stats = row_statistics(model, world.val, world.token_bytes, cfg.eval_batches, cfg.eval_rows, cfg.row_capacity,
                           world.device)
    return {"official": scores(stats)["bpb"],
            "control": measure(model, world.sets["control"], world.token_bytes, world.device, fixed_rows=fixed_rows),
            "selection": measure(model, world.sets["selection"], world.token_bytes, world.device,
                                 fixed_rows=fixed_rows)}


def final_score(runner, world, cfg):
    """The score a run's final decay records: through the forward that trained (compiled where it is),
    at its one shape (a run, and reconstruct --execute, which must score as the run did)."""
    tr = runner.trainer
    return lambda model: score(tr.scoring_forward(model), world, cfg, tr.fixed_rows)
