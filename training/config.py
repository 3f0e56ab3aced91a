"""Run configuration: a JSON file plus key=value overrides; unknown keys are errors."""
import json
from dataclasses import asdict, dataclass, fields

from corpus.errors import DataError
from loaders.core import PACKERS

# the paper's condition names -> packers
CONDITIONS = {"baseline": "original", "random_crop": "random_span", "segmented": "segment_first",
              "lossless": "lossless"}


@dataclass
class TrainConfig:
    # model (SPEC.md "Model")
    depth: int = 8
    width: int = 512
    heads: int = 4
    kv_heads: int = 4
    context: int = 2048
    vocab: int = 8192
    window_pattern: str = "SSSL"
    short_window: int = 1024
    # data
    source: str = "stdlib"
    data_dir: str = ""
    loader: str = "original"
    train_shards: str = ""  # comma list of training shard names; empty: all of them
    train_docs: str = ""  # file of document indices (whitespace separated) into those shards; empty: all
    buffer: int = 1000
    random_span_seed: int = 314159265
    # optimization
    updates: int = 953
    micro_rows: int = 64
    accum: int = 4
    seed: int = 43
    muon_lr: float = 0.04
    weight_decay: float = 0.2
    # evaluation (SPEC.md "Official metric")
    eval_batches: int = 160
    eval_rows: int = 64
    # run
    name: str = "run"
    checkpoint_every: int = 0  # 0: only at the end
    keep_checkpoints: int = 2
    device: str = "auto"
    compile: str = "auto"  # auto: on for CUDA, off on CPU
    bf16: str = "auto"  # autocast + bf16 embeddings: auto = on for CUDA
    prefetch: int = 1

    @property
    def targets_per_update(self):
        return self.micro_rows * self.context * self.accum

    def to_dict(self):
        return asdict(self)


def _coerce(name, value, typ):
    if isinstance(value, str) and typ is not str:
        try:
            return typ(value)
        except ValueError:
            raise DataError(f"config key {name!r}: {value!r} is not a valid {typ.__name__}") from None
    if typ is float and isinstance(value, int):
        return float(value)
    if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
        raise DataError(f"config key {name!r}: {value!r} is not a valid {typ.__name__}")
    return value


def resolve_config(path=None, overrides=()):
    """TrainConfig from a JSON file and 'key=value' overrides, validated."""
    types = {f.name: f.type for f in fields(TrainConfig)}
    values = {}
    if path:
        try:
            with open(path) as f:
                values.update(json.load(f))
        except FileNotFoundError:
            raise DataError(f"{path}: config file not found") from None
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    for ov in overrides:
        if "=" not in ov:
            raise DataError(f"override {ov!r} is not of the form key=value")
        k, v = ov.split("=", 1)
        values[k.strip()] = v
    for k in values:
        if k not in types:
            raise DataError(f"unknown config key {k!r}")
    cfg = TrainConfig(**{k: _coerce(k, v, types[k]) for k, v in values.items()})
    if cfg.loader in CONDITIONS:
        cfg.loader = CONDITIONS[cfg.loader]
    if cfg.loader not in PACKERS:
        raise DataError(f"config key 'loader': {cfg.loader!r} is not one of {', '.join(PACKERS)}")
    if cfg.width % cfg.heads or cfg.heads % cfg.kv_heads:
        raise DataError("config: width must divide by heads, and heads by kv_heads")
    return cfg
