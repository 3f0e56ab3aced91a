"""Settings of the queue study and the plan they imply (shards, trained targets, updates, FLOPs).

tiny      the CPU setting the main job runs as the smoke test of every path: the tiny model
          of the six-config protocol on the offline corpus, shards of two updates, two cipher
          shards and four damaged shards in the pool, an in-sample false-rejection rate. Its
          numbers are noise-dominated and say nothing about whether the queue helps.
small     the CPU study that says something at small scale (about 25 minutes on 2 idle
          cores; not part of the main job): the same model, a stable phase of 40 shards
          (3.3 x the shared stage-A training of 12 shards), 80 held-out homogeneous transitions
          on a discarded branch (k and frac chosen on the first 20, the rate reported on the
          other 59), a pool with realistic damage (damage.py: mojibake, boilerplate,
          line_shuffle, truncate at doses drawn from 5-100%) besides two cipher shards, and
          arm A's reference curve up to 4 x the budget.
planned   the small setting with the number of seeds per arm that stage A's noise asks for
          (power.py: printed before the arms train), at most max_seeds = 10 for CPU time; each
          seed's runs are measured on the reference curve of the other seeds.
proxy64m  the proposal's 64M proxy on one GPU with the supplied architecture: depth 7,
          width 640 (5 heads of 128) gives 65,864,334 parameters (+2.9% of 64M); 32,768
          targets per update (16 rows of 2,048: the proposal's 32 x 1,024 per step), one
          shard = its 20,000-step checkpoint interval = 655,360,000 targets; the budget is
          6 stable shards + 1 decay shard = 140,000 updates (the length of the proposal's
          64M run). Stage A is the proposal's ten shards of one homogeneous source: one
          warm-up, six for sigma_d, three held-out shards measured at 24 checkpoints each
          (sub-shard transitions: k and frac chosen on the first 10, the rate reported on
          the other 60; see sub_shard_note).

Shared by all arms: `budget_shards` accepted shards of the pool's mean size at constant LR,
then the final decay of exactly `decay_shards` x (updates per shard) updates inside each
arm's own queue, on shards that arm's policy accepts. Arm A also provides the reference
curve: decay branches at 2^(j / reference_per_doubling) x budget from `reference_lowest`
up to `reference_cap` x budget, stopping once the curve covers every arm's final loss.
The candidate pool holds `pool_factor` x budget shards (A needs up to the cap).
"""
import math
from dataclasses import asdict, dataclass, replace

from presets.shapes import PROXY64M, TINY, ModelShape
from presets.typed import at_least
from shardqueue.settings import QueueSettings
from shardqueue.study.reference_curve import fractions


@dataclass(frozen=True)
class StudyPreset:
    """One setting of the study: the model and its batch, the shards and the budget, stage A, the pool,
    arm A's reference curve, the seeds. summary.json records it as `setting` (to_dict)."""
    source: str
    shape: ModelShape
    micro_rows: int
    accum: int
    eval_batches: int
    eval_rows: int
    shard_targets: int
    budget_shards: int  # accepted shards in the stable phase
    decay_shards: int
    pool_factor: float
    warmup_shards: int
    sigma_shards: int
    held_out_shards: int
    choose_transitions: int  # 0: an in-sample rate, labelled so
    held_out_branch: bool
    checkpoints_per_shard: int
    harmful_shards: int
    damaged_shards: int
    per_domain: int
    rotation_shards: int
    reference_lowest: float
    reference_cap: float
    reference_per_doubling: int
    seeds: tuple = (43, 44)
    max_seeds: int = 0  # 0: run `seeds` (the proposal's two); else the count planned from stage A, at most this
    pool_seed: int = 1003
    minutes_per_shard: float | None = None  # GPU presets: the proposal's estimate of one shard's wall time
    train_overrides: tuple = ()  # further TrainConfig (key, value) pairs, e.g. a small test corpus's vocab

    MINIMA = {"micro_rows": 1, "accum": 1, "eval_batches": 1, "eval_rows": 1, "shard_targets": 1, "budget_shards": 1,
              "decay_shards": 1, "warmup_shards": 0, "sigma_shards": 2, "held_out_shards": 1, "choose_transitions": 0,
              "checkpoints_per_shard": 1, "harmful_shards": 0, "damaged_shards": 0, "per_domain": 1,
              "rotation_shards": 1, "reference_per_doubling": 1, "max_seeds": 0}

    def __post_init__(self):
        at_least(self, self.MINIMA, "study preset")
        if len(self.seeds) < 2 or not 0 < self.reference_lowest <= 1 <= self.reference_cap or self.pool_factor <= 0:
            raise ValueError("study preset: seeds must be two or more, reference_lowest <= 1 <= reference_cap, "
                             "pool_factor > 0")
        if self.max_seeds and self.max_seeds < len(self.seeds):
            raise ValueError(f"study preset: max_seeds ({self.max_seeds}) is below the {len(self.seeds)} seeds given")

    def model(self) -> dict:
        """The TrainConfig keys of this preset's model, batch and evaluation."""
        return {**self.shape, "micro_rows": self.micro_rows, "accum": self.accum, "eval_batches": self.eval_batches,
                "eval_rows": self.eval_rows, **dict(self.train_overrides)}

    def with_source(self, source) -> "StudyPreset":
        return replace(self, source=source)

    def with_vocab(self, vocab) -> "StudyPreset":
        """The preset with its model's vocabulary set to `vocab` (a prepared corpus's tokenizer's)."""
        return replace(self, train_overrides=tuple({**dict(self.train_overrides), "vocab": vocab}.items()))

    def to_dict(self) -> dict:
        d = {"source": self.source, "model": self.model()}
        d.update({k: v for k, v in asdict(self).items()
                  if k not in ("source", "shape", "micro_rows", "accum", "eval_batches", "eval_rows", "train_overrides")})
        d["seeds"] = list(self.seeds)
        if d["minutes_per_shard"] is None:
            del d["minutes_per_shard"]
        return d


PRESETS = {
    "tiny": StudyPreset(
        source="stdlib", shape=TINY, micro_rows=8, accum=1, eval_batches=4, eval_rows=8,
        shard_targets=2048, budget_shards=4, decay_shards=1, pool_factor=2.5,
        warmup_shards=2, sigma_shards=10, held_out_shards=8, choose_transitions=0, held_out_branch=False,
        checkpoints_per_shard=1, harmful_shards=2, damaged_shards=4, per_domain=8, rotation_shards=6,
        reference_lowest=0.5, reference_cap=2.0, reference_per_doubling=2),
    "small": StudyPreset(
        source="stdlib", shape=TINY, micro_rows=8, accum=1, eval_batches=8, eval_rows=8,
        shard_targets=2048, budget_shards=40, decay_shards=4, pool_factor=4.5,
        # 80 held-out shards + 1 recovery shard: 81 transitions on a discarded branch; k and frac from the first
        # 20, the rate reported on the other 59 (disjoint shards)
        warmup_shards=2, sigma_shards=10, held_out_shards=80, choose_transitions=20, held_out_branch=True,
        checkpoints_per_shard=1, harmful_shards=2, damaged_shards=48, per_domain=12, rotation_shards=6,
        reference_lowest=0.125, reference_cap=4.0, reference_per_doubling=2),
    # the small setting with as many seeds as stage A's noise asks for, at most max_seeds (CPU time)
    "planned": StudyPreset(
        source="stdlib", shape=TINY, micro_rows=8, accum=1, eval_batches=8, eval_rows=8,
        shard_targets=2048, budget_shards=40, decay_shards=4, pool_factor=4.5,
        warmup_shards=2, sigma_shards=10, held_out_shards=80, choose_transitions=20, held_out_branch=True,
        checkpoints_per_shard=1, harmful_shards=2, damaged_shards=48, per_domain=12, rotation_shards=6,
        reference_lowest=0.125, reference_cap=4.0, reference_per_doubling=2, max_seeds=10),
    "proxy64m": StudyPreset(
        source="climbmix", shape=PROXY64M, micro_rows=16, accum=1, eval_batches=160, eval_rows=16,
        shard_targets=20000 * 16 * 2048, budget_shards=6, decay_shards=1, pool_factor=2.5,
        # 2 + 1: three held-out shards, ten stage-A shards in all
        warmup_shards=1, sigma_shards=6, held_out_shards=2, choose_transitions=10, held_out_branch=False,
        checkpoints_per_shard=24, harmful_shards=0, damaged_shards=0, per_domain=64, rotation_shards=6,
        reference_lowest=0.5, reference_cap=2.0, reference_per_doubling=2,
        minutes_per_shard=55),  # the proposal's estimate for one 64M shard on its v5 hardware
}
NODE = {"name": "one 8-GPU node", "gpus": 8, "host_memory_gib": 128}
SUB_SHARD_NOTE = (
    "False rejections from sub-shard transitions (stage A's held-out shards measured at checkpoints inside them): "
    "they bound how often the rule, with thresholds k x sigma_d set on whole-shard changes, fires on short stretches "
    "of one homogeneous source at stage A's point of training. They cannot bound whole-shard false rejections: a "
    "sub-shard moves the model less than a shard, so its rises are smaller and the rate is optimistic; nor rates at "
    "later training stages or on other sources. Consecutive sub-shard transitions share a model trajectory, so they "
    "are not independent draws; the Clopper-Pearson bound treats them as if they were.")
PROXY_TARGET_PARAMS = 64_000_000
BYTES_PER_TOKEN = 2
CLIMBMIX_TOKENS_PER_FILE = 400e9 / 6543  # the dataset's nominal 400B tokens over 6,543 files (GPT-2 count)


def setting_of(preset) -> StudyPreset:
    """A preset by name, or a setting already made from one (with_vocab: a prepared corpus's vocabulary)."""
    return preset if isinstance(preset, StudyPreset) else PRESETS[preset]


def train_config(preset, seed, data_dir="", name="study"):
    """The TrainConfig of one run of this preset (a name, or a setting made from one)."""
    # late: queue/study.py reads this module before parsing, and its --help needs no torch
    from training.config import resolve_config

    p = setting_of(preset)
    ov = [f"{k}={v}" for k, v in p.model().items()] + [f"source={p.source}", f"seed={seed}", f"name={name}"]
    if data_dir:
        ov.append(f"data_dir={data_dir}")
    return resolve_config(None, ov)


def model_size(preset):
    """(parameters, training FLOPs per target) of the preset's model (a name, or a setting made from one), counted
    from its shapes: its vocabulary included, which sizes the embedding and the head."""
    # late: queue/study.py reads this module before parsing, and its --help needs no torch
    from training.trainer import model_config

    mc = model_config(train_config(preset, 0))
    return mc.parameter_counts()[0], mc.flops_per_token()


def candidate_shards(p):
    return math.ceil(p.pool_factor * p.budget_shards)


def queue_settings(p) -> QueueSettings:
    """The calibration settings of the queue (run_queue.calibrate) this preset asks for."""
    return QueueSettings(shard_tokens=p.shard_targets, warmup_shards=p.warmup_shards, sigma_shards=p.sigma_shards,
                         held_out_shards=p.held_out_shards, candidates=candidate_shards(p), decay_shards=p.decay_shards,
                         harmful_shards=p.harmful_shards, per_domain=p.per_domain, pool_seed=p.pool_seed,
                         damaged_shards=p.damaged_shards, held_out_branch=p.held_out_branch,
                         choose_transitions=p.choose_transitions, checkpoints_per_shard=p.checkpoints_per_shard)


def reference_fractions(p):
    return fractions(p.reference_lowest, p.reference_cap, p.reference_per_doubling)


def decay_updates(p, targets_per_update):
    """U: the final decay's length in updates, the same in every arm and every reference branch."""
    return p.decay_shards * max(1, p.shard_targets // targets_per_update)


def plan(preset, setting=None):
    """Per arm and seed: planned shards, trained targets, updates, FLOPs; plus the study totals,
    GPU-hours, data, disk and peak host memory against NODE.

    Counts are the plan without rejections (each rejection adds two shards, the rejected one
    and its recovery shard, both rolled back; a first-rotation branch check one more); arm A
    is counted to its cap (it stops earlier once its curve covers every arm's loss).
    FLOPs: training 6N-style per target (the model's own estimate) plus forward passes
    (a third of that per token) for control measurements, screens and final scores.
    `setting`, where given, is the one made from the preset for a run (with_vocab: its corpus's vocabulary).
    """
    p = setting or PRESETS[preset]
    n_params, fpt = model_size(p)
    cfg = train_config(p, 0)
    per_update = cfg.targets_per_update
    upd_per_shard = max(1, p.shard_targets // per_update)
    shard_t = upd_per_shard * per_update
    fwd = fpt / 3
    n_ctrl, n_sel = (5, 3) if p.source == "stdlib" else (4, 4)
    measure_tok = n_ctrl * p.per_domain * cfg.context
    select_tok = n_sel * p.per_domain * cfg.context
    screen_tok = shard_t + 32 * cfg.context  # the shard plus the pool sample, before each candidate
    final_tok = cfg.eval_batches * cfg.eval_rows * cfg.row_capacity + measure_tok + select_tok
    cand = candidate_shards(p)
    fr = reference_fractions(p)
    cap = p.reference_cap
    if cap * p.budget_shards + p.decay_shards > cand:
        raise ValueError(f"preset {preset}: the pool ({cand} shards) cannot carry arm A to its cap")
    a_stable = math.ceil(cap * p.budget_shards)
    n_shared = p.warmup_shards + p.sigma_shards + (0 if p.held_out_branch else p.held_out_shards + 1)
    n_cal = p.warmup_shards + p.sigma_shards + p.held_out_shards + 1
    n_meas = p.sigma_shards + 1 + (p.held_out_shards + 1) * p.checkpoints_per_shard

    def arm(stable, decays, note):
        shards = stable + decays * p.decay_shards
        return {"shards": shards, "trained_targets": shards * shard_t, "updates": shards * upd_per_shard,
                "flops": shards * shard_t * fpt + fwd * ((stable + 1) * measure_tok + stable * screen_tok
                                                        + decays * (measure_tok + select_tok) + final_tok),
                "note": note}

    arms = {"A": arm(a_stable, len(fr) + 1, f"stable up to {cap:g} x budget ({a_stable} shards), decay branches "
                                            f"at {', '.join(f'{f:.3g}' for f in fr)} x budget, then its own decay"),
            "B": arm(p.budget_shards, 1, "minimum; +2 shards per rejection, +1 or +2 per branch check (a reserve "
                                               "shard, then one of the same source)"),
            "C": arm(p.budget_shards, 1, "minimum; +2 shards per random rejection")}
    stage_a = {"shards": n_cal, "shared_shards": n_shared, "trained_targets": n_cal * shard_t,
               "updates": n_cal * upd_per_shard, "measurements": n_meas,
               "flops": n_cal * shard_t * fpt + fwd * n_meas * measure_tok}
    seeds = p.max_seeds or len(p.seeds)  # a planned count: at most max_seeds
    extra_starts = (seeds - 1) * n_shared  # another seed's start state: the shared shards from its own init
    total_updates = stage_a["updates"] + extra_starts * upd_per_shard + seeds * sum(a["updates"] for a in arms.values())
    pool_tokens = (cand + p.harmful_shards + p.damaged_shards) * shard_t
    data_tokens = pool_tokens + n_cal * shard_t
    shards_trained = total_updates // upd_per_shard
    out = {
        "preset": preset, "parameters": n_params, "flops_per_target": fpt, "targets_per_update": per_update,
        "updates_per_shard": upd_per_shard, "shard_targets": shard_t, "budget_shards": p.budget_shards,
        "decay_shards": p.decay_shards, "decay_updates": decay_updates(p, per_update),
        "budget_targets": p.budget_shards * shard_t, "reference_fractions": fr, "reference_cap": cap,
        "pool_shards": cand, "pool_tokens": pool_tokens, "pool_disk_bytes": pool_tokens * BYTES_PER_TOKEN,
        "stage_a": stage_a, "extra_seed_start_shards": extra_starts, "arms": arms, "seeds": list(p.seeds),
        "max_seeds": p.max_seeds,
        "total_updates": total_updates, "total_targets": total_updates * per_update,
        "total_flops": stage_a["flops"] + extra_starts * shard_t * fpt + seeds * sum(a["flops"] for a in arms.values()),
        "data_tokens_needed": data_tokens, "data_disk_bytes": data_tokens * BYTES_PER_TOKEN,
        "shards_trained": shards_trained,
        # the proposal's minutes per shard price a shard's training FLOPs; screens, measurements and final scores
        # (forward passes, compiled like training) are priced at the same FLOP rate
        "gpu_hours_estimate": (hours_per_flop(p, shard_t, fpt) * (stage_a["flops"] + extra_starts * shard_t * fpt
                                                                  + seeds * sum(a["flops"] for a in arms.values()))
                               if p.minutes_per_shard is not None else None),
        "training_gpu_hours": shards_trained * p.minutes_per_shard / 60 if p.minutes_per_shard is not None else None,
        "climbmix_files_estimate": math.ceil(data_tokens / CLIMBMIX_TOKENS_PER_FILE) if p.source == "climbmix" else None,
    }
    if p.minutes_per_shard is not None:
        out["node"] = node_fit(p, out, n_params, cfg)
    return out


def hours_per_flop(p, shard_t, fpt):
    """GPU-hours per FLOP at the proposal's minutes per shard (a shard's training FLOPs: shard_t x fpt)."""
    return p.minutes_per_shard / 60 / (shard_t * fpt)


def node_fit(p, pl, n_params, cfg):
    """GPU-hours and wall time of the plan on NODE (one 8-GPU node, 128 GiB host memory).

    Runs are independent after stage A: the six runs (3 arms x 2 seeds) go one per GPU. Peak
    host memory and disk are counted term by term in footprint.py (host_footprint), which
    reads `runs_in_parallel` from here.
    """
    runs = 3 * len(p.seeds)
    per_flop = hours_per_flop(p, pl["shard_targets"], pl["flops_per_target"])
    hours_a = pl["stage_a"]["flops"] * per_flop
    arm_hours = {a: v["flops"] * per_flop for a, v in pl["arms"].items()}
    return {"node": NODE["name"], "gpus": NODE["gpus"], "host_memory_gib": NODE["host_memory_gib"],
            "runs_in_parallel": min(runs, NODE["gpus"]), "wall_hours": hours_a + max(arm_hours.values())}


def _bytes(n):
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.2f} MB"


def false_rejection_lines(pl):
    p = PRESETS[pl["preset"]]
    m, c = p.checkpoints_per_shard, p.choose_transitions
    states = 1 + (p.held_out_shards + 1) * m
    where = "on a branch that is then discarded" if p.held_out_branch else "inside stage A's shards"
    kind = (f"k and frac chosen on the first {c} transitions, the rate reported on the other {states - c - 3}"
            if c else "k, frac and the rate on the same transitions (in-sample)")
    out = [f"false rejections: {p.held_out_shards + 1} held-out shards {where}"
           + (f", measured at {m} checkpoints each" if m > 1 else "") + f": {states - 2} transitions; {kind}"]
    if m > 1:
        out.append(SUB_SHARD_NOTE)
    return out + [""]


def format_plan(pl):
    sa = pl["stage_a"]
    lines = [f"preset {pl['preset']}: {pl['parameters']:,} parameters, {pl['flops_per_target']:,} training FLOPs "
             f"per target",
             f"shard = {pl['updates_per_shard']:,} updates x {pl['targets_per_update']:,} targets = "
             f"{pl['shard_targets']:,} trained targets; budget {pl['budget_shards']} stable shards + a final decay of "
             f"{pl['decay_updates']} updates ({pl['decay_shards']} shard(s)) per run",
             f"candidate pool {pl['pool_shards']} shards (arm A's reference runs up to {pl['reference_cap']:g} x the "
             f"stable budget) + cipher and damaged shards = {pl['pool_tokens']:,} tokens "
             f"({_bytes(pl['pool_disk_bytes'])} at 2 bytes per token)",
             f"stage A (once): {sa['shards']} shards ({sa['shared_shards']} of them shared training that every arm "
             f"starts from), {sa['trained_targets']:,} targets, {sa['updates']:,} updates, {sa['measurements']} control "
             f"measurements, {sa['flops']:.3e} FLOPs; each further seed trains its own start state on the same "
             f"{sa['shared_shards']} shared shards", ""] + false_rejection_lines(pl) + [
             "| Arm | Shards | Trained targets | Updates | FLOPs | Note |", "|---|---:|---:|---:|---:|---|"]
    for arm, a in pl["arms"].items():
        lines.append(f"| {arm} (per seed) | {a['shards']} | {a['trained_targets']:,} | {a['updates']:,} | "
                     f"{a['flops']:.3e} | {a['note']} |")
    seeds = (f"seeds {pl['seeds']}" if not pl["max_seeds"] else
             f"seeds: as many as stage A's noise asks for (printed before the arms train), at most {pl['max_seeds']} "
             f"from {pl['seeds'][0]}; at {pl['max_seeds']}")
    lines += ["", f"{seeds}: whole study {pl['total_updates']:,} updates, {pl['total_targets']:,} "
                  f"trained targets, {pl['total_flops']:.3e} FLOPs (without rejections; arm A to its cap)",
              f"data: {pl['data_tokens_needed']:,} tokens (pool + stage A) = {_bytes(pl['data_disk_bytes'])} "
              f"at 2 bytes per token"]
    if pl["climbmix_files_estimate"]:
        lines[-1] += (f"; about {pl['climbmix_files_estimate']} ClimbMix files at the dataset's nominal "
                      f"{CLIMBMIX_TOKENS_PER_FILE / 1e6:.0f}M tokens per file")
    if pl["gpu_hours_estimate"]:
        n = pl["node"]
        lines.append(f"GPU-hours: {pl['shards_trained']} shards trained in all ({pl['training_gpu_hours']:.0f} GPU-hours at "
                     f"the proposal's estimate of 55 minutes per 64M shard); with the screens, control measurements and "
                     f"final scores at the same FLOP rate about {pl['gpu_hours_estimate']:.0f} GPU-hours "
                     f"(more with rejections)")
        lines.append(f"node: {n['node']} ({n['gpus']} GPUs, {n['host_memory_gib']} GiB host memory): stage A on one "
                     f"GPU, then the {n['runs_in_parallel']} runs one per GPU: about {n['wall_hours']:.0f} hours wall "
                     f"time (more with rejections); host memory and disk follow (footprint.py)")
    return "\n".join(lines)
