"""Run configuration: a JSON file plus key=value overrides; unknown keys and values out of
range are errors naming the key. A checkpoint stores the resolved config and its hash;
resuming under a config that differs outside RESUME_MAY_DIFFER is refused."""
import hashlib
import json
import math
from dataclasses import asdict, dataclass, fields, replace

from errors import DataError
from loaders.core import PACKERS
from presets.shapes import PAPER
from presets.six import CONDITIONS  # a condition's name is accepted as its packer's (loader=segmented)
from presets.typed import check_keys, coerce
from training.device import check_device_string
from training.model import ModelConfig


@dataclass
class TrainConfig:
    """Every key of a run; the defaults are the paper's (presets/shapes.py PAPER for the model)."""
    # model (docs/baseline.md, "Model")
    depth: int = PAPER.depth
    width: int = PAPER.width
    heads: int = PAPER.heads
    kv_heads: int = PAPER.kv_heads
    context: int = PAPER.context
    vocab: int = 8192
    window_pattern: str = "SSSL"
    short_window: int = PAPER.short_window
    # data
    source: str = "stdlib"
    data_dir: str = ""
    loader: str = "original"
    train_shards: str = ""  # comma list of training shard names; empty: all of them
    train_docs: str = ""  # file of document indices (whitespace separated) into those shards; empty: all
    buffer: int = 1000  # the training stream's minimum buffer B
    max_source_len: int = 0  # demo only: train on sources of at most this many tokens (0: all); evaluation sees all
    random_span_seed: int = 314159265
    # optimization
    updates: int = 953
    micro_rows: int = 64
    accum: int = 4
    seed: int = 43
    muon_lr: float = 0.04
    weight_decay: float = 0.2
    # evaluation (docs/baseline.md, "Official metric")
    eval_batches: int = 160
    eval_rows: int = 64
    eval_buffer: int = 1000  # B of the official and evaluation streams: the paper's metric, whatever the training B
    # run
    name: str = "run"
    checkpoint_every: int = 100  # also at the end; 0: only at the end
    keep_checkpoints: int = 2
    device: str = "auto"
    compile: str = "auto"  # auto: on for CUDA, off on CPU
    attention: str = "auto"  # auto: flex on CUDA, SDPA with a dense mask elsewhere; or flex / sdpa
    bf16: str = "auto"  # autocast + bf16 embeddings: auto = on for CUDA
    prefetch: int = 1

    @property
    def row_capacity(self) -> int:
        """R: a packed row holds context + 1 tokens (each of the context inputs predicts the next)."""
        return self.context + 1

    @property
    def targets_per_update(self):
        return self.micro_rows * self.context * self.accum

    def to_dict(self):
        return asdict(self)


# keys that change how a run is executed, never what it trains nor what its official score measures
RESUME_MAY_DIFFER = ("name", "data_dir", "device", "compile", "attention", "prefetch", "checkpoint_every",
                     "keep_checkpoints")
# the official score's population (which validation rows, how many targets): a resume that changed them would
# put a score on other rows beside the run's others under the same name, so they are refused like training keys
SCORE_KEYS = ("eval_batches", "eval_rows", "eval_buffer")
POSITIVE = ("depth", "width", "heads", "kv_heads", "context", "vocab", "short_window", "buffer", "updates",
            "micro_rows", "accum", "eval_batches", "eval_rows", "eval_buffer", "keep_checkpoints")
CHOICES = {"device": None, "compile": ("auto", "on", "off"), "bf16": ("auto", "on", "off"),
           "attention": ("auto", "flex", "sdpa")}


def config_sha256(d: dict) -> str:
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()


def resume_differences(saved: dict, cfg: "TrainConfig") -> list:
    """Keys (outside RESUME_MAY_DIFFER) whose values differ between a checkpoint's config and cfg."""
    now = cfg.to_dict()
    return sorted(k for k in set(saved) | set(now) if k not in RESUME_MAY_DIFFER and saved.get(k) != now.get(k))


def for_world_size(cfg: "TrainConfig", world: int) -> "TrainConfig":
    """cfg for `world` ranks with the same targets per update (micro_rows x accum x context;
    accum counts microbatches over all ranks, each rank runs accum / world of them).

    When accum does not divide by world, accum becomes the least multiple of world that is a
    multiple of accum and micro_rows shrinks by the same factor: the paper's 64 x 4 rows
    become 32 x 8 on 8 GPUs, the same 256 rows (524,288 targets) in the same order per update."""
    if cfg.accum % world == 0:
        return cfg
    accum = cfg.accum * world // math.gcd(cfg.accum, world)
    factor = accum // cfg.accum
    if cfg.micro_rows % factor:
        raise DataError(f"accum={cfg.accum} x micro_rows={cfg.micro_rows} cannot be split over {world} ranks with the "
                        f"same rows per update (accum must divide by {world}; micro_rows by {factor})")
    return replace(cfg, accum=accum, micro_rows=cfg.micro_rows // factor)


def origin(where, origins, *keys) -> str:
    """Where the named keys' values came from ("CFG.json", "command line"), for an error line: a value
    refused must be looked for where it was given."""
    return " and ".join(dict.fromkeys((origins or {}).get(k, where) for k in keys))


def validate(cfg: "TrainConfig", where="config", origins=None):
    """origins: key -> where its value came from (keys not in it: `where`)."""
    at = lambda *keys: origin(where, origins, *keys)  # noqa: E731
    for k in POSITIVE:
        if getattr(cfg, k) < 1:
            raise DataError(f"{at(k)} key {k!r}: {getattr(cfg, k)} must be at least 1")
    for k in ("muon_lr", "weight_decay"):
        v = getattr(cfg, k)
        if not math.isfinite(v) or v < 0:
            raise DataError(f"{at(k)} key {k!r}: {v} must be a finite number >= 0")
    for k in ("checkpoint_every", "prefetch"):
        if getattr(cfg, k) < 0:
            raise DataError(f"{at(k)} key {k!r}: {getattr(cfg, k)} must be >= 0")
    if cfg.max_source_len and cfg.max_source_len <= cfg.row_capacity:
        raise DataError(f"{at('max_source_len')} key 'max_source_len': {cfg.max_source_len} must be 0 (no cap) or "
                        f"longer than a row ({cfg.row_capacity}), or no source would be long")
    if not cfg.window_pattern or set(cfg.window_pattern) - {"S", "L"}:
        raise DataError(f"{at('window_pattern')} key 'window_pattern': {cfg.window_pattern!r} must be letters S and L")
    for k, allowed in CHOICES.items():
        v = getattr(cfg, k)
        if allowed and v not in allowed:
            raise DataError(f"{at(k)} key {k!r}: {v!r} is not one of {', '.join(allowed)}")
    check_device_string(cfg.device, f"{at('device')} key 'device'")


def resolve_config(path=None, overrides=()):
    """TrainConfig from a JSON file and 'key=value' overrides, validated."""
    types = {f.name: f.type for f in fields(TrainConfig)}
    values, origins = {}, {}
    if path:
        try:
            with open(path) as f:
                loaded = json.load(f)
        except FileNotFoundError:
            raise DataError(f"{path}: config file not found") from None
        except (OSError, UnicodeDecodeError) as e:
            raise DataError(f"{path}: cannot be read ({type(e).__name__})") from None
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
        if not isinstance(loaded, dict):
            raise DataError(f"{path}: a config must be a JSON object of key: value, not a {type(loaded).__name__}")
        values.update(loaded)
        origins = dict.fromkeys(loaded, str(path))
    for ov in overrides:
        if "=" not in ov:
            raise DataError(f"override {ov!r} is not of the form key=value")
        k, v = ov.split("=", 1)
        values[k.strip()] = v
        if path:  # beside a file, a key=value pair is named as the command line's, not the file's
            origins[k.strip()] = "command line"
    check_keys(TrainConfig, values)
    cfg = TrainConfig(**{k: coerce(k, v, types[k], origin("config", origins, k)) for k, v in values.items()})
    if cfg.loader in CONDITIONS:
        cfg.loader = CONDITIONS[cfg.loader]
    if cfg.loader not in PACKERS:
        raise DataError(f"{origin('config', origins, 'loader')} key 'loader': {cfg.loader!r} is not one of "
                        f"{', '.join(PACKERS)}")
    validate(cfg, where="config", origins=origins)
    if cfg.width % cfg.heads or cfg.heads % cfg.kv_heads:
        raise DataError("config: width must divide by heads, and heads by kv_heads")
    validate_model_shape(cfg, where="config", origins=origins)
    return cfg


def validate_model_shape(cfg: "TrainConfig", where="config", origins=None):
    """Shapes the model cannot build or run, refused when the config is resolved rather than
    as a shape error inside the first forward pass."""
    gate = ModelConfig.ve_gate_channels  # the value-embedding gate reads this many channels of the input
    if cfg.width < gate:
        raise DataError(f"{origin(where, origins, 'width')} key 'width': {cfg.width} must be at least {gate} (the "
                        f"value-embedding gate's input channels)")
    head_dim = cfg.width // cfg.heads
    if head_dim % 2:
        raise DataError(f"{origin(where, origins, 'width', 'heads')} keys 'width'/'heads': head dimension "
                        f"{cfg.width}/{cfg.heads} = {head_dim} must be even (rotary embeddings rotate pairs of channels)")
