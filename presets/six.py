"""The paper's six matched runs: three conditions (each a packer) at two model seeds, in two sizes.

Conditions: baseline (the original packer), random_crop (random spans), segmented (segment-first),
each at model seeds 43 and 44. The paper preset is 953 updates of 64 rows x 2048 targets x 4
accumulation steps (TrainConfig's defaults); the tiny preset changes only sizes (model, context,
rows, updates, evaluation length) and scales the buffer, nothing about the packing rules or the seeds.

The tiny preset is chosen to sit in the paper's regime (see `python -m audit.regime`): R = 129,
B = 20 and a budget of 81,920 targets, with training sources longer than 320 tokens filtered out
FOR THE DEMO ONLY (max_source_len: dropped whole, not cropped; on the offline corpus 3,650 of 14,525
sources, 85.4% of training tokens; the audit and the evaluation see every source). A filter rather
than a crop to 320 because it keeps the paper's ratios closer: the emitted share from sources longer
than R is 45.7% against 67.0% for a crop (paper 11.76%), and segment-first consumes (pulls in) 80% of
the sources the original does (1,024 of 1,280; paper 84%, 702,208 of 836,864: the paper states arrivals,
not starts; segment-first starts 74% of the original's starts, and 56% under a crop); both give a 15%
longest-chunks share and about 4-5% protected. Without the filter the offline corpus's longest source (~39k tokens) would make ~306
segment-first chunks, 15x the buffer, and a few sources would fill every row. With it: the longest
source's chunks are 3 of B = 20 (15%; paper 142 of 1000), the protected set holds ~4.9% of arrived
tokens (paper 4.37%), and the stream does not wrap (paper: no wrap).
"""
from dataclasses import asdict, dataclass

from presets.shapes import TINY, ModelShape
from presets.typed import ConfigKeys

# the paper's condition names -> the packers they train on (loaders/core.py PACKERS)
CONDITIONS = {"baseline": "original", "random_crop": "random_span", "segmented": "segment_first"}
SEEDS = (43, 44)


def condition_of(packer: str) -> str:
    """The condition a packer trains (a packer outside the six keeps its own name)."""
    return next((c for c, p in CONDITIONS.items() if p == packer), packer)


def run_name(condition: str, seed: int) -> str:
    return f"{condition}_s{seed}"


def run_names() -> tuple:
    """The six runs' names, conditions first: baseline_s43, baseline_s44, random_crop_s43, ..."""
    return tuple(run_name(c, s) for c in CONDITIONS for s in SEEDS)


@dataclass(frozen=True)
class Regime(ConfigKeys):
    """The training stream's buffer B and the demo-only filter on source length (0: none)."""
    buffer: int
    max_source_len: int

    def config_keys(self) -> dict:
        return asdict(self)


# B = 20 and the 320-token filter (tokens, BOS included) apply together: B = 20 without the filter would
# be worse than B = 1000 (the longest source's ~308 chunks would be 15x the buffer)
TINY_REGIME = Regime(buffer=20, max_source_len=320)


@dataclass(frozen=True)
class SixRuns(ConfigKeys):
    """One size of the six runs, as the TrainConfig keys it sets; what is left as None keeps
    TrainConfig's default (the paper's)."""
    source: str
    shape: ModelShape | None = None
    micro_rows: int | None = None
    accum: int | None = None
    updates: int | None = None
    eval_batches: int | None = None
    eval_rows: int | None = None
    regime: Regime | None = None

    def config_keys(self) -> dict:
        out = {"source": self.source, **(self.shape.config_keys() if self.shape else {})}
        for k in ("micro_rows", "accum", "updates", "eval_batches", "eval_rows"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        return {**out, **(self.regime.config_keys() if self.regime else {})}


PRESETS = {
    "paper": SixRuns(source="climbmix"),
    "tiny": SixRuns(source="stdlib", shape=TINY, micro_rows=8, accum=2, updates=40, eval_batches=16, eval_rows=8,
                    regime=TINY_REGIME),
}


def defining_keys(preset: str) -> tuple:
    """The keys the six runs of a preset differ by (name, loader, seed): what makes them six runs, so an
    override applied to all six may not set one."""
    runs = configs(preset)
    return tuple(k for k in runs[0] if len({str(r[k]) for r in runs}) > 1)


def configs(preset: str) -> list:
    """The six configs of a preset, as TrainConfig keys: name, loader and seed over the preset's sizes."""
    return [{"name": run_name(c, seed), "loader": packer, "seed": seed, **PRESETS[preset]}
            for c, packer in CONDITIONS.items() for seed in SEEDS]
