"""The evaluation's results as the findings page reads them (eval/__main__.py writes them): the confirmation
score, the source-window contrasts and the prefix rankings. The files hold more; their loaders here are the one
place their keys are read."""
from dataclasses import dataclass
from pathlib import Path

from records.json_record import read_json


@dataclass(frozen=True)
class Confirmation:
    """confirmation.json: each checkpoint's BPB on the frozen confirmation stream."""
    bpb: dict  # {(condition, seed): BPB}
    targets: int
    duplicates: int  # exact duplicates of training rows, excluded
    status: str | None

    @classmethod
    def load(cls, folder) -> "Confirmation | None":
        c = read_json(Path(folder) / "confirmation.json")
        if not c or not c.get("scores"):
            return None
        return cls({(r["condition"], r["seed"]): r["bpb"] for r in c["scores"]}, c.get("targets", 0),
                   len(c.get("duplicates", [])), c.get("status"))


@dataclass(frozen=True)
class WindowCell:
    """One condition and seed's contrast in one length stratum: tail minus beginning, against the baseline."""
    condition: str
    seed: int
    stratum: object  # the stratum's index or name
    declared: bool  # one of the contrasts declared before confirmation
    interaction: float | None
    interval_adjusted: list | None  # [low, high], multiplicity-adjusted
    tail_delta: float | None
    begin_delta: float | None
    tail_bins: list | None  # the tail's delta per position bin


@dataclass(frozen=True)
class WindowSummary:
    """window_summary_{dev,conf}.json: the contrasts and the sources per length stratum."""
    cells: list  # [WindowCell]
    stratum_sources: list  # sources per stratum, in stratum order
    top_stratum: object  # the last stratum's name ("n/a" where unnamed), None without strata
    text_targets: int | None
    labels: list  # the strata's labels, by index

    @classmethod
    def load(cls, folder, population) -> "WindowSummary | None":
        w = read_json(Path(folder) / f"window_summary_{population}.json")
        if not w:
            return None
        cells = [WindowCell(c.get("condition"), c.get("seed"), c.get("stratum"), bool(c.get("declared")),
                            c.get("interaction"), c.get("interval_adjusted"), c.get("tail_delta"),
                            c.get("begin_delta"), c.get("tail_bins")) for c in w["cells"]]
        strata = w.get("per_stratum") or []
        return cls(cells, [p["sources"] for p in strata], strata[-1].get("stratum", "n/a") if strata else None,
                   w.get("text_targets"), (w.get("spec") or {}).get("labels") or [])


@dataclass(frozen=True)
class Rankings:
    """rankings.json: the checkpoints ranked by the full score and by prefixes of it."""
    reversals: int  # ranking reversals between the full score and all prefixes
    prefixes: int
    contrasts: int  # method/prefix contrasts
    outside: int  # of them, outside their 95% subset interval
    methods: list  # the ranked checkpoints

    @classmethod
    def load(cls, folder) -> "Rankings | None":
        r = read_json(Path(folder) / "rankings.json")
        if not r or r.get("skipped") or not r.get("prefixes"):
            return None
        contrasts = [c for p in r["prefixes"] for c in p["contrasts"]]
        return cls(sum(len(p.get("reversals", [])) for p in r["prefixes"]), len(r["prefixes"]), len(contrasts),
                   sum(bool(c.get("outside")) for c in contrasts), r.get("methods", []))
