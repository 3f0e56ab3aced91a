"""Every parameter of an evaluation in one dict: what a frozen protocol pins down."""
from eval.compare import BOOTSTRAP_SEED
from eval.rankings import PAPER_PREFIX_TARGETS, RANKING_SEED
from eval.windows import PAPER_CONTEXT, POPULATIONS

PAPER_CONF_TARGETS = 10_485_760
PAPER_DEV_MAX_SOURCE = 4096  # section 5.6: the official development stream emits no source longer than this
RANKING_SEED_OF_RUNS = 43  # section 5.6 ranks the seed-43 checkpoints


def ranking_population(run_names, seed=RANKING_SEED_OF_RUNS):
    """The default section 5.6 set: the runs of one model seed, the baseline of that seed as reference."""
    names = sorted(n for n in run_names if n.endswith(f"_s{seed}"))
    ref = f"baseline_s{seed}" if f"baseline_s{seed}" in names else (names[0] if names else None)
    return {"population": names, "reference": ref, "seed": seed}


def stream_checks(context, eval_rows, eval_batches):
    """The paper's pre-scoring checks, scaled to the context as the window strata are (R stays exactly R)."""
    return {
        "conf": {"max_source_len": context + 1, "section": "5.4",
                 "claim": "the confirmation stream emits no source longer than R"},
        "dev": {"max_source_len": round(PAPER_DEV_MAX_SOURCE * context / PAPER_CONTEXT), "section": "5.6",
                "rows": eval_batches * eval_rows,
                "claim": f"the official development stream emits no source longer than "
                         f"{PAPER_DEV_MAX_SOURCE} x context/{PAPER_CONTEXT} at its full length"},
    }


def evaluation_plan(source, n_val, context, eval_rows, eval_batches, per_stratum=None, replicates=10000,
                    run_names=(), buffer=1000):
    """Populations, sampling, bootstrap, confirmation, stream checks and the ranked set for a corpus.

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
        "buffer": buffer,
        "replicates": replicates,
        "alpha": 0.05,
        "bootstrap_seed": BOOTSTRAP_SEED,
        "contrast_strata": [5, 6],  # 4097-8192 and 8193-16384 (scaled with the context)
        "confirmation_batches": max(1, conf_targets // (eval_rows * context)),
        "ranking_seed": RANKING_SEED,
        "ranking_subsets": 1000,
        "ranking": {**ranking_population(run_names), "prefix_targets": list(PAPER_PREFIX_TARGETS)},
        "stream_checks": stream_checks(context, eval_rows, eval_batches),
    }


def complete_plan(plan, run_names, eval_rows, eval_batches, buffer):
    """A protocol frozen before the ranked set and stream checks were declared: derive them from ITS runs.

    Returns (plan, notes). The derivation uses the protocol's run list, never the folder's contents.
    """
    plan, notes = dict(plan), []
    if "ranking" not in plan:
        plan["ranking"] = {**ranking_population(run_names), "prefix_targets": list(PAPER_PREFIX_TARGETS)}
        notes.append("ranked set not declared in this protocol: its seed-43 runs are ranked")
    if "stream_checks" not in plan:
        plan["stream_checks"] = stream_checks(plan["context"], eval_rows, eval_batches)
        notes.append("stream checks not declared in this protocol: the paper's, scaled to its context")
    if "buffer" not in plan:
        plan["buffer"] = buffer
    return plan, notes
