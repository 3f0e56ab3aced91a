"""Stage A, the calibration every run of a folder starts from: the pool frozen, an LR warm-up, sigma_d from
shards of one homogeneous source, k and the recovery fraction chosen on transitions held out of sigma
(policy/rule.py), and the calibrated state; and what reads a calibration folder back: its record checked,
its world rebuilt identically, a seed's start state (the calibrated one, or another seed's trained on the
same shards)."""
import json
import math
import os
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from console.progress import bar as progress_bar
from corpus.atomic import atomic_write_json
from corpus.layout import Layout
from errors import DataError
from loaders.stream import open_split
from shardqueue.engine.packing import shard_rows, shard_tokens, update_batches
from shardqueue.engine.run_folder import (
    START_KEY,
    cached_start_state,
    move_aside,
    read_state,
    start_state_key,
    write_state,
)
from shardqueue.engine.schedule import warmup
from shardqueue.engine.start_record import LOCATION_KEYS
from shardqueue.engine.training import one_thread, train_rows
from shardqueue.policy.rule import FRAC_GRID, K_GRID, TARGET, rate_kind
from shardqueue.policy.rule import calibrate as calibrate_rule
from shardqueue.settings import QueueSettings, check_seed
from shardqueue.world.damaged_pool import reopen
from shardqueue.world.domains import measure
from shardqueue.world.harmful import with_harmful_copies
from shardqueue.world.corpus_view import World
from shardqueue.world.pool import CALIBRATION_DRAW, build_pool, eligible
from shardqueue.world.rotation import LABEL_COLUMNS, load_rotation, save_rotation, shard_docs, source_labels
from training.config import resolve_config
from training.resume import restore_trainer_state, trainer_state
from training.trainer import Trainer


# the config stage A calibrated with (recorded_config), beside config.json: a file of its own, not a key of
# calibration.json, whose keys a run's start record digests one by one (a new key would change every start record)
CALIBRATED_CONFIG = "calibrated_config.json"
# what calibrate writes into its folder (pool.json's first: every partial stage A holds it or its sidecar)
CALIBRATION_FILES = ("pool.json", "pool.json.sha256", "calibration_plan.json", "config.json", CALIBRATED_CONFIG,
                     "calibrated_state.pt", "calibration.json")


def check_prepared(data_dir, source, give):
    """The prepared corpus a command reads, else one line; where the data folder holds another source's corpus, the
    line names it and how to ask for it (give: the flag, a format of the source's name), rather than advise to
    prepare a corpus the user never meant to use."""
    lay = Layout(data_dir, source)
    held = [s for s in ("stdlib", "climbmix", "parquet") if s != source and Layout(data_dir, s).record.exists()]
    if lay.record.exists() or not held:
        lay.prepared()  # a corpus there (checked), or none at all: the usual line, naming the prepare command
        return
    raise DataError(f"{lay.record}: no {source} corpus prepared; {data_dir} holds a prepared {' and a '.join(held)} "
                    f"corpus: give {give.format(held[0])} to use it (or prepare this one: `{lay.prepare_command()}`)")


def load_config(config=None, overrides=()):
    """The training config of stage A, its data root absolute: a run, a reconstruct or a re-execution reads it
    from any working folder (a relative one was read against the folder each was started from)."""
    for ov in overrides:
        if "=" not in ov:
            raise DataError(f"override {ov!r} is not of the form key=value")
    cfg = resolve_config(config, list(overrides))
    check_seed(cfg.seed, "config key 'seed'")  # stage A's seed, and every run's that names none
    if cfg.data_dir and not os.path.isabs(cfg.data_dir):
        cfg.data_dir = os.path.abspath(cfg.data_dir)
    return cfg


def stage_a_shards(s) -> int:
    """Stage A's calibration shards: warm-up, sigma and held-out shards, and one more to end the last transition."""
    return s.warmup_shards + s.sigma_shards + s.held_out_shards + 1


def source_sizes(lengths, labels, ok) -> dict:
    """Stage A's source (the commonest label, as the pool picks it), its training documents, those the pool may draw
    (ok: at most half a shard long, and no copy of a validation text where the caller knows them) and their tokens."""
    src = Counter(labels).most_common(1)[0][0]
    mine = np.array([lab == src for lab in labels], dtype=bool)
    drawable = mine & np.asarray(ok, dtype=bool)
    return {"source": src, "labels": len(set(labels)), "documents": int(mine.sum()), "drawable": int(drawable.sum()),
            "tokens": int(np.asarray(lengths, dtype=np.int64)[drawable].sum())}


def calibration_need(s) -> int:
    """The tokens stage A's calibration draw takes from its source (CALIBRATION_DRAW x its shards' nominal tokens)."""
    return math.ceil(stage_a_shards(s) * s.shard_tokens * CALIBRATION_DRAW)


def calibration_shortfall(sizes, s, exact=True) -> str:
    """'' where stage A's source holds the tokens its calibration draw takes; else one line saying what it has and
    what the plan needs. exact: sizes left out copies of validation texts (else the run leaves them out too)."""
    n, need = stage_a_shards(s), calibration_need(s)
    if sizes["tokens"] >= need:
        return ""
    label = f"the commonest of {sizes['labels']} labels" if sizes["labels"] > 1 else "the corpus's one label"
    return (f"source {sizes['source']!r} has too few documents for {n} calibration shards: stage A's source ({label}) "
            f"has {sizes['documents']:,} training documents, {sizes['drawable']:,} of them at most half a shard long "
            f"({s.shard_tokens // 2:,} tokens){' and no copy of a validation text' if exact else ''}, holding "
            f"{sizes['tokens']:,} tokens; the calibration draws {need:,} ({n} shards of {s.shard_tokens:,} tokens, and "
            "a quarter over, as whole documents); give more documents of that source, or fewer or smaller shards")


def corpus_sizes(data_dir, source, s) -> dict | None:
    """source_sizes of a prepared corpus from its files alone (its document lengths and the label column), for a
    plan before anything trains, copies of validation texts not left out; None where the labels are each document's
    register, which only reading every text gives."""
    lay = Layout(data_dir, source)
    shards = [lay.raw / n for n in lay.prepared()["train_shards"]]
    if not all(any(c in pq.ParquetFile(p).schema_arrow.names for c in LABEL_COLUMNS) for p in shards):
        return None
    lengths = open_split(data_dir, source, "train").lengths
    return source_sizes(lengths, source_labels(lay, "train"), lengths <= s.shard_tokens // 2)


def calibrate(out, config=None, overrides=(), settings=None, device="cpu", fresh=False) -> dict:
    """Stage A; writes config.json, calibrated_config.json, pool.json, calibration_plan.json, calibration.json and
    calibrated_state.pt into `out`. Returns the calibration record (rec["ok"] False: failed)."""
    with one_thread():
        return _calibrate(out, config, overrides, settings, device, fresh)


def _calibrate(out, config, overrides, settings, device, fresh):
    s = QueueSettings.of(settings)
    out = Path(out)
    earlier = (out / "calibration.json").exists() or (out / "decisions.jsonl").exists()
    if earlier and not fresh:
        raise DataError(f"{out}: holds an earlier calibration or run; use another folder or --fresh "
                        f"(moves the old contents aside)")
    cfg = load_config(config, overrides)
    world = World(cfg, device, s.per_domain, domains=s.domains)
    ok, _ = eligible(world, s.shard_tokens)  # the pool's own test: at most half a shard, no validation text
    short = calibration_shortfall(source_sizes(world.train.lengths, world.labels, ok), s)
    if short:  # before the pool's own refusal, which said neither what the source has nor what the plan needs
        raise DataError(short)
    n_cal = stage_a_shards(s)
    pool = build_pool(world, s.shard_tokens, s.pool_seed, n_cal, s.candidates, s.decay_shards, s.harmful_shards,
                      s.prose_shards, n_late=s.late_shards, n_damaged=s.damaged_shards, n_reserve=s.reserve_shards)
    if earlier:  # only once the config, its corpus and the pool are good: a refused --fresh keeps the folder as it was
        move_aside(out, None)
    # the pool first, the config after it: a folder a kill left with a config.json holds a pool.json beside it, which
    # says the folder is an earlier calibration's (out_folder.QUEUE_FOLDER), not a user's config
    save_rotation(out / "pool.json", pool)
    plan = plan_record(s, pool)
    atomic_write_json(out / "calibration_plan.json", plan)
    atomic_write_json(out / "config.json", cfg.to_dict())
    atomic_write_json(out / CALIBRATED_CONFIG, recorded_config(cfg.to_dict()))  # what check_config holds it to
    trainer = Trainer(cfg, device)
    run = train_stage_a(trainer, world, pool, s)
    rec = choose_rule(run["states"], s)
    if run["branch"] is not None:  # the held-out transitions' branch is discarded: back to the shared state
        restore_trainer_state(trainer, run["branch"])
        run.update(step=run["branch"]["step"], targets=run["branch"]["targets"])
    ns, shared = s.sigma_shards, s.warmup_shards + s.sigma_shards
    ref = run["states"][ns] if run["branch"] is not None else run["states"][-1]
    sha = write_state(out / "calibrated_state.pt", {**trainer_state(trainer), "step": run["step"],
                                                    "targets": run["targets"], "ref": ref})
    rec.update({"plan": plan, "states": run["states"], "seed": cfg.seed, "step": run["step"],
                "targets": run["targets"], "state_sha256": sha, "pool_sha256": load_rotation(out / "pool.json")["_sha256"],
                "warmup_updates": run["warmup_updates"], "shared_shards": pool["calibration"][:shared]
                if run["branch"] is not None else pool["calibration"], "held_out_on_branch": run["branch"] is not None,
                "checkpoints_per_shard": s.checkpoints_per_shard,
                "sigma_shards": pool["calibration"][s.warmup_shards: shared],
                "held_out_shards": pool["calibration"][shared:]})
    atomic_write_json(out / "calibration.json", rec)
    return rec


def plan_record(s, pool) -> dict:
    """calibration_plan.json: the grid, the target and the settings, written before anything trains."""
    return {"k_grid": list(K_GRID), "frac_grid": list(FRAC_GRID), "target": TARGET, "settings": s.to_dict(),
            "rule": "first grid point (k ascending, then frac as listed) with a false-rejection rate < target "
                    "on the choosing transitions (held out of the sigma estimate)",
            "recalibration": "none during a run (no schedule is set); a new calibration is a new folder",
            "calibration_source": pool["calibration_source"], "shards": pool["calibration"],
            "reserve": pool["reserve"]}


def prose_note(s, pool) -> str:
    """'' where the prose shards asked for were planted; else why not, in one sentence. The prose shard is drawn from
    documents labelled exactly 'prose' (pool.draw_documents): a corpus of other labels plants none, and a corpus
    calibrated on prose plants a shard of the calibration source's own register, not another one."""
    if not s.prose_shards:
        return ""
    if not any(r == "prose" for r in pool.get("roles", {}).values()):
        return ("no document is labelled 'prose': the prose shard (a source in another register) is not planted "
                "(--prose-shards 0 leaves it out knowingly)")
    if pool["calibration_source"] == "prose":
        return "the prose shard is of the calibration source's own register (calibrated on 'prose'), not another one"
    return ""


def train_stage_a(trainer, world, pool, s) -> dict:
    """The calibration shards trained in order, the control losses measured after the warm-up and after each
    shard (each sub-shard checkpoint of a held-out shard): {"states", "step", "targets", "branch" (the state
    before the held-out shards when they train on a discarded branch, else None), "warmup_updates"}."""
    cfg, device = trainer.cfg, trainer.device
    shards = {x["id"]: x for x in pool["shards"]}

    def rows(sid):
        return shard_rows(shard_tokens(world.stream, shard_docs(shards[sid])), cfg.context, world.bos)

    def ctrl():  # as the queue runner measures: the trainer's forward, one shape
        return measure(trainer.eval_fwd, world.sets["control"], world.token_bytes, device, trainer.autocast,
                       trainer.fixed_rows)

    warm = s.warmup_shards
    # warmup-stable-decay: the LR rises over the warm-up shards' updates (schedule.py)
    warm_updates = sum(len(update_batches(*rows(sid), cfg.micro_rows, cfg.accum)) for sid in pool["calibration"][:warm])
    step, targets, states, branch = 0, 0, [], None
    bar = progress_bar(pool["calibration"], desc="calibration shards", unit="shard", file=sys.stderr)
    shared = warm + s.sigma_shards  # warm-up and sigma shards: the training every arm starts from
    m = s.checkpoints_per_shard
    for j, sid in enumerate(bar):
        if j == warm:
            states.append(ctrl())
        if j == shared and s.held_out_branch:
            # held-out transitions on a branch that is then discarded: they calibrate the rule without
            # adding to the shared training (restored bitwise by the caller)
            branch = {**trainer_state(trainer, copied=True), "step": step, "targets": targets}
        x, y = rows(sid)
        # sub-shard checkpoints (held-out shards only): m states per shard, each a measured transition
        per = cfg.micro_rows * cfg.accum
        n_up = -(-len(x) // per)
        cuts = [0] + [per * round(n_up * (c + 1) / m) for c in range(m)] if j >= shared else [0, len(x)]
        for a, b in zip(cuts, cuts[1:]):
            if b <= a:
                continue
            loss, n, t = train_rows(trainer, x[a:b], y[a:b], step, cfg.updates, cfg.micro_rows, cfg.accum,
                                    warmup(step, warm_updates))
            step, targets = step + n, targets + t
            if j >= warm:
                states.append(ctrl())
        if j >= warm:
            bar.set_postfix(loss=f"{loss:.3f}")
    return {"states": states, "step": step, "targets": targets, "branch": branch, "warmup_updates": warm_updates}


def choose_rule(states, s) -> dict:
    """The rule's calibration record from stage A's states: sigma_d on the sigma shards, k and frac on the
    held-out transitions (the first choose_transitions of them when set, the rate reported on the rest)."""
    ns, c = s.sigma_shards, s.choose_transitions
    held = states[ns:]
    if not c:
        return calibrate_rule(states[: ns + 1], held)
    if len(held) < c + 4:
        raise DataError(f"{len(held) - 2} held-out transitions cannot give {c} to choose k and frac and some to report")
    return calibrate_rule(states[: ns + 1], held[: c + 2], held[c + 1:])


def check_calibrated(calibration_dir) -> dict:
    """The record of a calibration folder's successful calibration (cheap: a command checks it before it makes
    or locks its own folder)."""
    p = Path(calibration_dir) / "calibration.json"
    if not p.exists():
        raise DataError(f"{p}: not found; run `calibrate` first (the rule is fixed before the queue runs)")
    try:
        calib = json.loads(p.read_text())
    except (ValueError, UnicodeDecodeError):
        raise DataError(f"{p}: not valid JSON") from None
    if not isinstance(calib, dict) or not calib.get("ok"):
        reason = calib.get("reason") if isinstance(calib, dict) else f"a {type(calib).__name__}, not a record"
        raise DataError(f"{p}: the calibration failed ({reason})")
    return calib


def recorded_config(cfg: dict) -> dict:
    """The config as CALIBRATED_CONFIG records it: every key but where the corpus lies (LOCATION_KEYS, as a run's
    start record: a moved data folder holds the same corpus, which its identity and the pool's SHA256s check)."""
    return {k: v for k, v in cfg.items() if k not in LOCATION_KEYS}


def check_config(calibration_dir) -> bool:
    """config.json as stage A calibrated with it (CALIBRATED_CONFIG), else one line naming each key edited since: a
    wider model failed as a size mismatch, another learning rate ran unsaid under a rule calibrated on this one.
    What starts from the calibrated state checks it (a fresh run, dose); a resume and a reconstruct hold the config
    to the run's start record instead, which names each key against the run's own start. False for a calibration
    from before the record was written (nothing to compare with)."""
    d = Path(calibration_dir)
    if not (d / CALIBRATED_CONFIG).exists():
        return False
    then, now = (_json_object(d / name) for name in (CALIBRATED_CONFIG, "config.json"))
    now = recorded_config(now)
    diff = [f"{k} {now.get(k)!r} (stage A calibrated with {then.get(k)!r})" for k in sorted(set(now) | set(then))
            if now.get(k) != then.get(k)]
    if diff:
        raise DataError(f"{d / 'config.json'}: {', '.join(diff[:4])}{', ...' if len(diff) > 4 else ''}: edited since "
                        "stage A, whose noise, rule and state are of the config it calibrated with; restore it, or "
                        "calibrate again into another folder")
    return True


def _json_object(path) -> dict:
    try:
        d = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise DataError(f"{path}: not found") from None
    except (ValueError, UnicodeDecodeError):
        raise DataError(f"{path}: not valid JSON") from None
    if not isinstance(d, dict):
        raise DataError(f"{path}: a {type(d).__name__}, not a JSON object")
    return d


def open_calibration(calibration_dir, device="cpu", data_dir=None):
    """(cfg, world, pool, calibration record) of a calibration folder, verified. data_dir: the data root to read
    the corpus from (a study's driver passes its own to every run), instead of the one config.json records."""
    d = Path(calibration_dir)
    calib = check_calibrated(d)
    cfg_d = json.loads((d / "config.json").read_text())
    if data_dir:
        cfg_d["data_dir"] = str(data_dir)
    cfg = resolve_config(None, [f"{k}={v}" for k, v in cfg_d.items()])
    pool = load_rotation(d / "pool.json")
    if pool["_sha256"] != calib["pool_sha256"]:
        raise DataError(f"{d / 'pool.json'}: not the pool this calibration was made on")
    settings = QueueSettings.of(calib["plan"]["settings"])
    world = World(cfg, device, settings.per_domain, domains=settings.domains)
    world.stream, world.labels_all, copies = with_harmful_copies(world.train, world.labels,
                                                                  pool["harmful"]["source_documents"], pool["seed"] + 7,
                                                                  world.vocab)
    if copies != pool["harmful"]["copies"]:
        raise DataError(f"{d / 'pool.json'}: the harmful source does not rebuild identically")
    reopen(world, pool)
    return cfg, world, pool, calib


def calibrated_state(calibration_dir, calib):
    """The calibrated state of a calibration folder, checked against its record's SHA256."""
    return read_state(Path(calibration_dir) / "calibrated_state.pt", calib["state_sha256"])


def start_state(cfg, world, pool, calib, calibration_dir, seed, out):
    """The state the queue starts from: the calibrated one for the calibration seed; for another
    seed, a model initialised with that seed and trained on the same calibration shards (cached in out)."""
    if seed == calib["seed"]:
        return calibrated_state(calibration_dir, calib)
    key = start_state_key(cfg, calib, seed)
    cached = cached_start_state(out, key)
    if cached is not None:
        return cached
    cfg2 = type(cfg)(**{**cfg.to_dict(), "seed": seed})
    trainer = Trainer(cfg2, world.device)
    shards = {x["id"]: x for x in pool["shards"]}
    step, targets = 0, 0
    for sid in calib.get("shared_shards", pool["calibration"]):
        x, y = shard_rows(shard_tokens(world.stream, shard_docs(shards[sid])), cfg.context, world.bos)
        _, n, t = train_rows(trainer, x, y, step, cfg.updates, cfg.micro_rows, cfg.accum,
                             warmup(step, calib.get("warmup_updates", 0)))
        step, targets = step + n, targets + t
    st = {**trainer_state(trainer), "step": step, "targets": targets}
    (Path(out) / START_KEY).unlink(missing_ok=True)
    sha = write_state(Path(out) / "start_state.pt", st)
    atomic_write_json(Path(out) / START_KEY, {"key": key, "sha256": sha})
    return st


def describe_calibration(rec, note=""):
    """The one line `calibrate` prints on success, and a note under it where one is given (prose_note)."""
    return (f"calibrated: k={rec['k']} frac={rec['frac']} {rate_kind(rec)} false rejections "
            f"{rec['false_rejections']}/{rec['transitions']} (95% upper bound {rec['upper95']:.3f}); "
            f"sigma {', '.join(f'{d}={v:.4f}' for d, v in rec['sigma'].items())}" + (f"\nnote: {note}" if note else ""))
