"""A training run as the findings page reads it: train.py's summary.json (the official score, the model's
shape, its times) and the train stage's regime.json (the demo's training-source filter). The files hold more;
their loaders here are the one place their keys are read."""
import json
from dataclasses import dataclass
from pathlib import Path

from errors import DataError
from records.json_record import read_json


@dataclass(frozen=True)
class TrainedRun:
    loader: str  # the packer it trained with (presets.six: a condition's)
    seed: int
    depth: int
    width: int
    context: int
    updates: int
    buffer: int | None  # the training stream's minimum buffer B
    max_source_len: int | None  # demo only: sources longer than this were filtered out of training (0/None: none)
    bpb: float  # the official score
    ce: float | None
    perplexity: float | None
    training_seconds: float | None
    total_seconds: float | None
    parameters: int | None

    @classmethod
    def load(cls, path) -> "TrainedRun | None":
        """The run of train/<run>/summary.json; None without one or before its official score."""
        s = read_json(path)
        if not isinstance(s, dict) or not s.get("official"):
            return None
        c, o = s["config"], s["official"]
        return cls(loader=c["loader"], seed=c["seed"], depth=c["depth"], width=c["width"], context=c["context"],
                   updates=c["updates"], buffer=c.get("buffer"), max_source_len=c.get("max_source_len"),
                   bpb=o["bpb"], ce=o.get("ce"), perplexity=o.get("perplexity"),
                   training_seconds=s.get("training_seconds"), total_seconds=s.get("total_seconds"),
                   parameters=s.get("parameters"))


@dataclass(frozen=True)
class FinishedRun:
    """A run's summary.json as the evaluation, the protocol's check and the training bench read it: its config (the
    keys of a training/config.py TrainConfig, which the evaluation builds and checks: this level cannot import
    training/), its updates (the final checkpoint's number), its official BPB, CE and the fingerprint of the rows it was
    scored on (None before its score), and its peak host memory. Refused in one line naming the file when it is not that."""
    config: dict
    updates: int
    bpb: float | None
    ce: float | None
    fingerprint: str | None  # of the official stream's rows the run was scored on
    peak_memory_mib: float | None

    @classmethod
    def read(cls, path) -> "FinishedRun":
        path = Path(path)
        try:
            s = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise DataError(f"{path}: not a readable JSON summary ({type(e).__name__}: {str(e).splitlines()[0]})") \
                from None
        if not isinstance(s, dict):
            raise DataError(f"{path}: a run summary must be a JSON object, not {type(s).__name__}")
        for key, typ in (("updates", int), ("config", dict)):
            if not isinstance(s.get(key), typ) or isinstance(s.get(key), bool):
                raise DataError(f"{path}: key '{key}' missing or not a {typ.__name__}")
        official = s.get("official") if isinstance(s.get("official"), dict) else {}
        return cls(s["config"], s["updates"], official.get("bpb"), official.get("ce"), official.get("fingerprint"),
                   s.get("peak_memory_mib"))


@dataclass(frozen=True)
class SourceFilter:
    """How many training sources the demo's length filter dropped (comparison/run_six.py records it)."""
    dropped: int
    sources: int
    dropped_token_share: float

    @classmethod
    def load(cls, folder) -> "SourceFilter | None":
        """The train stage's filter counts (train/regime.json); None where it recorded none."""
        c = (read_json(Path(folder) / "regime.json") or {}).get("filter")
        return cls(c["dropped"], c["sources"], c["dropped_token_share"]) if c else None
