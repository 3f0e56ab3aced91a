"""Settings of the queue study and the plan they imply (shards, trained targets, updates, FLOPs).

tiny      the CPU setting the main job runs: the tiny model of the six-config protocol on
          the offline corpus, shards of a few updates. It exercises every path of the
          study; its numbers are noise-dominated and say nothing about the proposal's claim.
proxy64m  the proposal's 64M proxy on one GPU with the supplied architecture: depth 7,
          width 640 (5 heads of 128) gives 65,864,334 parameters (+2.9% of 64M); 32,768
          targets per update (16 rows of 2,048, the proposal's 32 × 1,024 per step), one
          shard = its 20,000-step checkpoint interval = 655,360,000 targets; the budget is
          140,000 updates (7 shards, the length of the proposal's 64M run), the candidate
          pool 1.5 × the budget (11 shards), stage A ten shards of one source.

Budget rule shared by all arms: `budget_shards` accepted shards, the last `decay_shards`
of them trained in the linear decay to LR 0. Arm A also provides the reference curve of
the selection axis: its stable phase continues on the pool, and a decay branch of the
same length is run from its stable state at each count in `reference_shards`; the branch
at `budget_shards` is arm A's own result.
"""
import math

PRESETS = {
    "tiny": {
        "source": "stdlib",
        "model": {"depth": 2, "width": 64, "heads": 2, "kv_heads": 2, "context": 128, "short_window": 64,
                  "micro_rows": 8, "accum": 1},
        "shard_targets": 4096,
        "budget_shards": 6,
        "decay_shards": 1,
        "pool_factor": 1.5,
        "calibration_shards": 10,
        "warmup_shards": 2,
        "reference_shards": [3, 5, 6, 7, 9],
        "seeds": [43, 44],
        "eval_tokens_per_measure": 24 * 128,
    },
    "proxy64m": {
        "source": "climbmix",
        "model": {"depth": 7, "width": 640, "heads": 5, "kv_heads": 5, "context": 2048, "short_window": 1024,
                  "micro_rows": 16, "accum": 1},
        "shard_targets": 20000 * 16 * 2048,
        "budget_shards": 7,
        "decay_shards": 1,
        "pool_factor": 1.5,
        "calibration_shards": 10,
        "warmup_shards": 1,
        "reference_shards": [4, 5, 6, 7, 8, 9, 10],
        "seeds": [43, 44],
        "eval_tokens_per_measure": 6 * 64 * 2048,
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


def pool_shards(p):
    return math.ceil(p["pool_factor"] * p["budget_shards"])


def plan(preset):
    """Per arm and seed: planned shards, trained targets, updates, FLOPs; plus the study totals."""
    p = PRESETS[preset]
    n_params, fpt = model_size(preset)
    cfg = train_config(preset, 0)
    per_update = cfg.targets_per_update
    upd_per_shard = max(1, p["shard_targets"] // per_update)
    shard_t = upd_per_shard * per_update
    eval_flops = p["eval_tokens_per_measure"] * fpt / 3  # one forward pass = a third of a training step's FLOPs
    pool = pool_shards(p)
    if max(p["reference_shards"]) > pool:
        raise ValueError(f"preset {preset}: reference_shards reach {max(p['reference_shards'])} > pool {pool} shards")
    if p["budget_shards"] not in p["reference_shards"]:
        raise ValueError(f"preset {preset}: reference_shards must contain the budget ({p['budget_shards']})")
    ref_stable = max(p["reference_shards"]) - p["decay_shards"]
    arms = {
        # A: stable run to the last reference point, one decay branch per reference point; no control measurements
        "A": {"shards": ref_stable + p["decay_shards"] * len(p["reference_shards"]), "measures": 0,
              "selection_scores": len(p["reference_shards"]),
              "note": f"stable to {ref_stable} shards, decay branches at {p['reference_shards']} shards"},
        # B: the budget plus whatever rejections cost (two shards each, +1 for a first-rotation branch check)
        "B": {"shards": p["budget_shards"], "measures": p["budget_shards"] - p["decay_shards"] + 1,
              "selection_scores": 1, "note": "minimum (no flag); each rejection adds 2 shards, a branch check 1"},
        "C": {"shards": p["budget_shards"], "measures": 0, "selection_scores": 1,
              "note": "minimum; each random rejection adds 2 shards (rejected + recovery, both rolled back)"},
    }
    for a in arms.values():
        a["trained_targets"] = a["shards"] * shard_t
        a["updates"] = a["shards"] * upd_per_shard
        a["flops"] = a["trained_targets"] * fpt + (a["measures"] + a["selection_scores"]) * eval_flops
    calib_shards = p["warmup_shards"] + p["calibration_shards"]
    stage_a = {"shards": calib_shards, "trained_targets": calib_shards * shard_t, "updates": calib_shards * upd_per_shard,
               "flops": calib_shards * shard_t * fpt + (p["calibration_shards"] + 1) * eval_flops}
    seeds = len(p["seeds"])
    total_targets = stage_a["trained_targets"] + seeds * sum(a["trained_targets"] for a in arms.values())
    pool_tokens = pool * shard_t
    data_tokens = pool_tokens + stage_a["trained_targets"]
    return {
        "preset": preset, "parameters": n_params, "flops_per_target": fpt, "targets_per_update": per_update,
        "updates_per_shard": upd_per_shard, "shard_targets": shard_t, "budget_shards": p["budget_shards"],
        "budget_targets": p["budget_shards"] * shard_t, "pool_shards": pool, "pool_tokens": pool_tokens,
        "pool_disk_bytes": pool_tokens * BYTES_PER_TOKEN, "stage_a": stage_a, "arms": arms, "seeds": p["seeds"],
        "total_updates": stage_a["updates"] + seeds * sum(a["updates"] for a in arms.values()),
        "total_targets": total_targets,
        "total_flops": stage_a["flops"] + seeds * sum(a["flops"] for a in arms.values()),
        "data_tokens_needed": data_tokens,
        "climbmix_files_estimate": math.ceil(data_tokens / CLIMBMIX_TOKENS_PER_FILE) if p["source"] == "climbmix" else None,
    }


def format_plan(pl):
    lines = [f"preset {pl['preset']}: {pl['parameters']:,} parameters, {pl['flops_per_target']:,} training FLOPs "
             f"per target",
             f"shard = {pl['updates_per_shard']:,} updates x {pl['targets_per_update']:,} targets = "
             f"{pl['shard_targets']:,} trained targets; budget {pl['budget_shards']} shards = "
             f"{pl['budget_targets']:,} targets per run",
             f"candidate pool {pl['pool_shards']} shards = {pl['pool_tokens']:,} tokens "
             f"({pl['pool_disk_bytes'] / 1e9:.2f} GB at 2 bytes per token)",
             f"stage A (once): {pl['stage_a']['shards']} shards, {pl['stage_a']['trained_targets']:,} targets, "
             f"{pl['stage_a']['updates']:,} updates, {pl['stage_a']['flops']:.3e} FLOPs", "",
             "| Arm | Shards | Trained targets | Updates | FLOPs | Note |", "|---|---:|---:|---:|---:|---|"]
    for arm, a in pl["arms"].items():
        lines.append(f"| {arm} (per seed) | {a['shards']} | {a['trained_targets']:,} | {a['updates']:,} | "
                     f"{a['flops']:.3e} | {a['note']} |")
    lines += ["", f"seeds {pl['seeds']}: whole study {pl['total_updates']:,} updates, {pl['total_targets']:,} "
                  f"trained targets, {pl['total_flops']:.3e} FLOPs (without rejections)"]
    if pl["climbmix_files_estimate"]:
        lines.append(f"data: {pl['data_tokens_needed']:,} tokens (pool + stage A) ~ "
                     f"{pl['climbmix_files_estimate']} ClimbMix files at the dataset's nominal tokens per file")
    return "\n".join(lines)
