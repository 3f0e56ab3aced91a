"""Every parameter of an evaluation in one dict: what a frozen protocol pins down."""
from eval.compare import BOOTSTRAP_SEED
from eval.rankings import RANKING_SEED
from eval.windows import POPULATIONS

PAPER_CONF_TARGETS = 10_485_760


def evaluation_plan(source, n_val, context, eval_rows, eval_batches, per_stratum=None, replicates=10000):
    """Populations, sampling, bootstrap and confirmation settings for a corpus.

    climbmix: the paper's rows, seeds and sizes. The offline corpus: the two halves of its
    validation shard, 64 sources per stratum and half the official stream for confirmation.
    """
    if source == "climbmix":
        pops = {k: {"rows": list(v["rows"]), "seed": v["seed"]} for k, v in POPULATIONS.items()}
        conf_targets = PAPER_CONF_TARGETS
    else:
        half = n_val // 2
        pops = {"dev": {"rows": [0, half], "seed": POPULATIONS["dev"]["seed"]},
                "conf": {"rows": [half, n_val], "seed": POPULATIONS["conf"]["seed"]}}
        conf_targets = eval_batches * eval_rows * context // 2
    return {
        "populations": pops,
        "per_stratum": per_stratum or (256 if source == "climbmix" else 64),
        "context": context,
        "replicates": replicates,
        "alpha": 0.05,
        "bootstrap_seed": BOOTSTRAP_SEED,
        "contrast_strata": [5, 6],  # 4097-8192 and 8193-16384 (scaled with the context)
        "confirmation_batches": max(1, conf_targets // (eval_rows * context)),
        "ranking_seed": RANKING_SEED,
        "ranking_subsets": 1000,
    }
