"""Settings of the queue study and the plan they imply (shards, trained targets, updates, FLOPs).

tiny      the CPU setting the main job runs: the tiny model of the six-config protocol on
          the offline corpus, shards of two updates, one harmful shard in the pool. It
          exercises every path of the study; its numbers are noise-dominated and say
          nothing about whether the queue helps at scale.
proxy64m  the proposal's 64M proxy on one GPU with the supplied architecture: depth 7,
          width 640 (5 heads of 128) gives 65,864,334 parameters (+2.9% of 64M); 32,768
          targets per update (16 rows of 2,048: the proposal's 32 x 1,024 per step), one
          shard = its 20,000-step checkpoint interval = 655,360,000 targets; the budget is
          6 stable shards + 1 decay shard = 140,000 updates (the length of the proposal's
          64M run); the candidate pool is 1.5 x the stable budget (9 shards) on ClimbMix.

Shared by all arms: `budget_shards` accepted shards at constant LR, then the final decay
over `decay_shards` reserved pool shards (the same shards for every arm). Arm A also
provides the reference curve of the selection axis: it keeps consuming the pool up to
the last of `reference_fractions` x budget, and from its state at each fraction a decay
branch of the same length is scored; the branch at 1.0 is arm A's own result.
"""
import math

PRESETS = {
    "tiny": {
        "source": "stdlib",
        "model": {"depth": 2, "width": 64, "heads": 2, "kv_heads": 2, "context": 128, "short_window": 64,
                  "micro_rows": 8, "accum": 1, "eval_batches": 4, "eval_rows": 8},
        "shard_targets": 2048,
        "budget_shards": 4,  # accepted shards in the stable phase
        "decay_shards": 1,
        "pool_factor": 1.5,
        "warmup_shards": 2,
        "sigma_shards": 10,
        "held_out_shards": 8,
        "harmful_shards": 2,
        "per_domain": 8,
        "rotation_shards": 6,
        "reference_fractions": [0.5, 1.0, 1.5],
        "seeds": [43, 44],
        "pool_seed": 1003,
    },
    "proxy64m": {
        "source": "climbmix",
        "model": {"depth": 7, "width": 640, "heads": 5, "kv_heads": 5, "context": 2048, "short_window": 1024,
                  "micro_rows": 16, "accum": 1, "eval_batches": 160, "eval_rows": 16},
        "shard_targets": 20000 * 16 * 2048,
        "budget_shards": 6,
        "decay_shards": 1,
        "pool_factor": 1.5,
        "warmup_shards": 1,
        "sigma_shards": 10,
        "held_out_shards": 16,
        "harmful_shards": 0,
        "per_domain": 64,
        "rotation_shards": 6,
        "reference_fractions": [0.5, 0.75, 1.0, 1.25, 1.5],
        "seeds": [43, 44],
        "pool_seed": 1003,
        "minutes_per_shard": 55,  # the proposal's estimate for one 64M shard on its v5 hardware
    },
}
PROXY_TARGET_PARAMS = 64_000_000
BYTES_PER_TOKEN = 2
CLIMBMIX_TOKENS_PER_FILE = 400e9 / 6543  # the dataset's nominal 400B tokens over 6,543 files (GPT-2 count)


def train_config(preset, seed, data_dir="", name="study"):
    """The TrainConfig of one run of this preset."""
    from training.config import resolve_config

    p = PRESETS[preset]
    ov = [f"{k}={v}" for k, v in p["model"].items()] + [f"source={p['source']}", f"seed={seed}", f"name={name}"]
    if data_dir:
        ov.append(f"data_dir={data_dir}")
    return resolve_config(None, ov)


def model_size(preset):
    """(parameters, training FLOPs per target) of the preset's model, counted on the meta device."""
    from training.trainer import build_model

    m = build_model(train_config(preset, 0), "cpu", meta=True)
    return m.param_groups_counts()[0], m.flops_per_token()


def candidate_shards(p):
    return math.ceil(p["pool_factor"] * p["budget_shards"])


def queue_settings(p):
    """The calibration settings of the queue (run_queue.calibrate) this preset asks for."""
    return {"shard_tokens": p["shard_targets"], "warmup_shards": p["warmup_shards"], "sigma_shards": p["sigma_shards"],
            "held_out_shards": p["held_out_shards"], "candidates": candidate_shards(p), "decay_shards": p["decay_shards"],
            "harmful_shards": p["harmful_shards"], "per_domain": p["per_domain"], "pool_seed": p["pool_seed"]}


def plan(preset):
    """Per arm and seed: planned shards, trained targets, updates, FLOPs; plus the study totals.

    Counts are the minimum (no rejection); each rejection adds two shards (the rejected one
    and its recovery shard, both rolled back), a first-rotation branch check one more.
    FLOPs: training 6N-style per target (the model's own estimate) plus forward passes
    (a third of that per token) for control measurements, screens and final scores.
    """
    p = PRESETS[preset]
    n_params, fpt = model_size(preset)
    cfg = train_config(preset, 0)
    per_update = cfg.targets_per_update
    upd_per_shard = max(1, p["shard_targets"] // per_update)
    shard_t = upd_per_shard * per_update
    fwd = fpt / 3
    n_ctrl, n_sel = (5, 3) if p["source"] == "stdlib" else (4, 4)
    measure_tok = n_ctrl * p["per_domain"] * cfg.context
    select_tok = n_sel * p["per_domain"] * cfg.context
    screen_tok = shard_t + 32 * cfg.context  # the shard plus the pool sample, before each candidate
    final_tok = cfg.eval_batches * cfg.eval_rows * (cfg.context + 1) + measure_tok + select_tok
    cand = candidate_shards(p)
    fr = p["reference_fractions"]
    if 1.0 not in fr or max(fr) > p["pool_factor"]:
        raise ValueError(f"preset {preset}: reference_fractions must contain 1.0 and stay within the pool factor")
    a_stable = min(cand, math.ceil(max(fr) * p["budget_shards"]))
    n_cal = p["warmup_shards"] + p["sigma_shards"] + p["held_out_shards"] + 1

    def arm(stable, decays, note):
        shards = stable + decays * p["decay_shards"]
        return {"shards": shards, "trained_targets": shards * shard_t, "updates": shards * upd_per_shard,
                "flops": shards * shard_t * fpt + fwd * ((stable + 1) * measure_tok + stable * screen_tok
                                                        + decays * (measure_tok + select_tok) + final_tok),
                "note": note}

    arms = {"A": arm(a_stable, len(fr), f"stable to {a_stable} shards, decay branches at {fr} x budget"),
            "B": arm(p["budget_shards"], 1, "minimum; +2 shards per rejection, +1 per branch check"),
            "C": arm(p["budget_shards"], 1, "minimum; +2 shards per random rejection")}
    stage_a = {"shards": n_cal, "trained_targets": n_cal * shard_t, "updates": n_cal * upd_per_shard,
               "flops": n_cal * shard_t * fpt + fwd * (p["sigma_shards"] + p["held_out_shards"] + 1) * measure_tok}
    seeds = len(p["seeds"])
    extra_starts = (seeds - 1) * n_cal  # another seed's start state: the same calibration shards from its own init
    total_updates = stage_a["updates"] + extra_starts * upd_per_shard + seeds * sum(a["updates"] for a in arms.values())
    pool_tokens = (cand + p["decay_shards"] + p["harmful_shards"]) * shard_t
    data_tokens = pool_tokens + n_cal * shard_t
    return {
        "preset": preset, "parameters": n_params, "flops_per_target": fpt, "targets_per_update": per_update,
        "updates_per_shard": upd_per_shard, "shard_targets": shard_t, "budget_shards": p["budget_shards"],
        "decay_shards": p["decay_shards"], "budget_targets": p["budget_shards"] * shard_t,
        "pool_shards": cand, "pool_tokens": pool_tokens, "pool_disk_bytes": pool_tokens * BYTES_PER_TOKEN,
        "stage_a": stage_a, "extra_seed_start_shards": extra_starts, "arms": arms, "seeds": p["seeds"],
        "total_updates": total_updates, "total_targets": total_updates * per_update,
        "total_flops": stage_a["flops"] + extra_starts * shard_t * fpt + seeds * sum(a["flops"] for a in arms.values()),
        "data_tokens_needed": data_tokens, "data_disk_bytes": data_tokens * BYTES_PER_TOKEN,
        "shards_trained": total_updates // upd_per_shard,
        "gpu_hours_estimate": (total_updates // upd_per_shard) * p["minutes_per_shard"] / 60 if "minutes_per_shard" in p else None,
        "climbmix_files_estimate": math.ceil(data_tokens / CLIMBMIX_TOKENS_PER_FILE) if p["source"] == "climbmix" else None,
    }


def _bytes(n):
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.2f} MB"


def format_plan(pl):
    lines = [f"preset {pl['preset']}: {pl['parameters']:,} parameters, {pl['flops_per_target']:,} training FLOPs "
             f"per target",
             f"shard = {pl['updates_per_shard']:,} updates x {pl['targets_per_update']:,} targets = "
             f"{pl['shard_targets']:,} trained targets; budget {pl['budget_shards']} stable + {pl['decay_shards']} "
             f"decay shard(s) = {(pl['budget_shards'] + pl['decay_shards']) * pl['shard_targets']:,} targets per run",
             f"candidate pool {pl['pool_shards']} shards (1.5 x the stable budget) + decay reserve + harmful shards = "
             f"{pl['pool_tokens']:,} tokens ({_bytes(pl['pool_disk_bytes'])} at 2 bytes per token)",
             f"stage A (once): {pl['stage_a']['shards']} shards, {pl['stage_a']['trained_targets']:,} targets, "
             f"{pl['stage_a']['updates']:,} updates, {pl['stage_a']['flops']:.3e} FLOPs; each further seed trains "
             f"its own start state on the same {pl['stage_a']['shards']} shards", "",
             "| Arm | Shards | Trained targets | Updates | FLOPs | Note |", "|---|---:|---:|---:|---:|---|"]
    for arm, a in pl["arms"].items():
        lines.append(f"| {arm} (per seed) | {a['shards']} | {a['trained_targets']:,} | {a['updates']:,} | "
                     f"{a['flops']:.3e} | {a['note']} |")
    lines += ["", f"seeds {pl['seeds']}: whole study {pl['total_updates']:,} updates, {pl['total_targets']:,} "
                  f"trained targets, {pl['total_flops']:.3e} FLOPs (without rejections)",
              f"data: {pl['data_tokens_needed']:,} tokens (pool + stage A) = {_bytes(pl['data_disk_bytes'])} "
              f"at 2 bytes per token"]
    if pl["climbmix_files_estimate"]:
        lines[-1] += (f"; about {pl['climbmix_files_estimate']} ClimbMix files at the dataset's nominal "
                      f"{CLIMBMIX_TOKENS_PER_FILE / 1e6:.0f}M tokens per file")
    if pl["gpu_hours_estimate"]:
        lines.append(f"time: {pl['shards_trained']} shards trained in all, about {pl['gpu_hours_estimate']:.0f} GPU hours "
                     f"at the proposal's estimate of 55 minutes per 64M shard (one GPU; more with rejections)")
    return "\n".join(lines)
