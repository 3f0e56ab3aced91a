"""The queue study's summary (queue_study/summary.json, schema "queue-study/5"): every key the report, the
figures and the findings page read, with its type (SCHEMA), checked when the summary is built and when it is
read back; typed where its readers look inside (the adoption rule's outcome, the seeds, each run).
shardqueue/study/run.py builds it, shardqueue/study/report.py renders it."""
from dataclasses import dataclass, fields
from pathlib import Path

from corpus.atomic import atomic_write_json
from errors import DataError
from records.json_record import read_json

VERSION = "queue-study/5"
# queue-study/4 named budget_check's verdict "equal", though it holds where the arms trained budgets up to a shard
# apart (the report said "not equal" beside it); /5 names it "held". A /4 summary reads as /5 (upgraded below).
UPGRADES = {"queue-study/4": lambda d: {**d, "schema": VERSION, **({"budget_check": {
    ("held" if k == "equal" else k): v for k, v in d["budget_check"].items()}} if isinstance(d.get("budget_check"), dict)
    else {})}}  # a /4 file without its budget check is named by the schema check, not a KeyError
NUM = (int, float)
OPT_NUM = (int, float, type(None))
OPT_INT = (int, type(None))
RUN_SCHEMA = {
    "arm": str, "seed": int, "name": str,
    "trained_targets": int,  # read from the run's own decision log
    "final_selection": dict,  # {"mean": BPB, domain: BPB}, after the decay
    "final_control": dict,  # {domain: BPB}, after the decay
    "efficiency": {"points": OPT_NUM, "d_eq": OPT_NUM, "reason": str},
    "decisions": dict,  # {"accept": n, "flag": n, "reject": n, "deferred": n, "quarantined": n, ...}
    "rejected": list,  # [{"shard", "sources", "outcome", "position"}]
    "compute": {"accepted_updates": int, "wasted_updates": dict, "screen_passes": int, "wall_s": dict},
    "decay": {"updates": int, "targets": int, "shards": list},  # the final decay: on shards this run accepted
    "control_trace": list,  # [{"D", "losses", "mark"}], arm B only (empty elsewhere)
}
SCHEMA = {
    "schema": str, "preset": str, "plan": dict,
    "calibration": {"source": str, "sigma": dict, "k": NUM, "recovery": str, "false_rejection": dict,
                    "curves": dict, "curve_variant": {"requested": bool, "used": bool, "reason": str}},
    "selection": {"domains": list, "non_english_axis": {"present": bool, "text": str}},
    "efficiency_definition": str, "axis_definition": str, "schedule": str,
    "reference_curve": {"D": list, "L": list, "per_seed": dict, "cap": NUM, "fractions": list,
                        "coverage": {"ok": bool, "lowest": NUM, "highest": NUM, "below": list, "above": list}},
    "runs": [RUN_SCHEMA],
    "budget_check": {"targets": dict, "held": bool, "rule": str, "problems": list},
    "adoption": {"rule": str, "seeds": list, "b_minus_a": dict, "b_minus_c": dict, "seed_spread": OPT_NUM,
                 "per_arm_spread": dict, "threshold": OPT_NUM, "threshold_if_largest_pairwise": OPT_NUM,
                 "rule_met": bool, "intervals": dict, "verdict": str, "reasons": list, "measured": bool},
    "seeds": {"used": int, "list": list, "planned": OPT_INT, "preset_max": int, "from_measured_spread": OPT_INT,
              "expected_width_points": OPT_NUM},
    "power": {"sigma_run_bpb": NUM, "sigma_diff_bpb": NUM, "beta": OPT_NUM, "sigma_diff_points": OPT_NUM,
              "floor": NUM, "level": NUM, "seeds_needed": OPT_INT, "reason": str},
    "arm_c": dict,  # {seed: {"B": {...}, "C": {...}, "equal", "why_not", "positions", "window"}}
    "compute": {"per_arm": dict, "b_over_a": dict},
    "per_axis": {"defined": bool, "reason": str, "gaps_bpb": dict},
    "answers": {"caught": dict, "false_rejections_clean": dict, "screen": dict, "compute": dict},
    "provenance": {"date": str, "commit": str, "machine": str},
    "seed_effects": str,
    "decisions_table": {"rows": int, "parquet": str, "csv": str},
    "timing": dict,
    "limits": str,
    "earlier_attempts": [{"folder": str, "files": int}],  # interrupted runs' files, moved aside on restart
}


class SchemaError(ValueError):
    pass


def validate(obj, schema=SCHEMA, where="summary"):
    """Raise SchemaError naming the first key that is missing or of the wrong type."""
    if isinstance(schema, dict):
        if not isinstance(obj, dict):
            raise SchemaError(f"{where}: expected an object, got {type(obj).__name__}")
        for k, sub in schema.items():
            if k not in obj:
                raise SchemaError(f"{where}: key {k!r} is missing")
            validate(obj[k], sub, f"{where}.{k}")
    elif isinstance(schema, list):
        if not isinstance(obj, list):
            raise SchemaError(f"{where}: expected a list, got {type(obj).__name__}")
        for i, item in enumerate(obj):
            validate(item, schema[0], f"{where}[{i}]")
    else:
        types = schema if isinstance(schema, tuple) else (schema,)
        if isinstance(obj, bool) and bool not in types:
            raise SchemaError(f"{where}: expected {'/'.join(t.__name__ for t in types)}, got bool")
        if not isinstance(obj, types):
            raise SchemaError(f"{where}: expected {'/'.join(t.__name__ for t in types)}, got {type(obj).__name__}")


@dataclass(frozen=True)
class Interval:
    """A mean over seeds with its 95% t interval."""
    mean: float
    low: float
    high: float
    df: int

    @classmethod
    def of(cls, d) -> "Interval | None":
        return None if not d else cls(d["mean"], d["low"], d["high"], d["df"])


@dataclass(frozen=True)
class Adoption:
    """The pre-registered adoption rule applied, with the paired intervals beside it (study/adoption.py)."""
    rule: str
    seeds: list
    b_minus_a: dict  # {seed: efficiency points of B - A, or None}
    b_minus_c: dict
    seed_spread: float | None
    per_arm_spread: dict
    threshold: float | None
    threshold_if_largest_pairwise: float | None
    rule_met: bool
    intervals: dict  # {"B-A": {"mean", "low", "high", "df", ...}, "B-C": ...}
    verdict: str
    reasons: list
    measured: bool

    def interval(self, other) -> Interval | None:
        """B - other's paired efficiency points over the seeds (other: A or C), where measured."""
        return Interval.of(self.intervals.get(f"B-{other}"))


@dataclass(frozen=True)
class StudyRun:
    """One run (arm at a seed) of the study: its trained targets, final losses, efficiency and compute."""
    arm: str
    seed: int
    name: str
    trained_targets: int
    final_selection: dict  # {"mean": BPB, domain: BPB}
    final_control: dict
    efficiency: dict
    decisions: dict
    rejected: list
    compute: dict
    decay: dict
    control_trace: list

    @property
    def selection_mean(self):
        return self.final_selection["mean"]


@dataclass(frozen=True)
class StudySummary:
    """summary.json as one record; to_json() is the file's content, key for key."""
    values: dict  # the whole summary, checked against SCHEMA
    adoption: Adoption
    runs: list  # [StudyRun]

    @classmethod
    def from_json(cls, d, where="summary") -> "StudySummary":
        """The record of a summary (SchemaError naming the first missing or mistyped key)."""
        if d.get("schema") in UPGRADES:
            d = UPGRADES[d["schema"]](d)
        validate(d, where=where)
        if d["schema"] != VERSION:
            raise SchemaError(f"{where}: schema {d['schema']!r}, expected {VERSION!r}")
        return cls(d, _typed(Adoption, d["adoption"]), [_typed(StudyRun, r) for r in d["runs"]])

    @classmethod
    def load(cls, path) -> "StudySummary | None":
        """The summary in path; None when there is none; DataError when it is not one."""
        d = read_json(path)
        if d is None:
            return None
        try:
            return cls.from_json(d, str(Path(path)))
        except SchemaError as e:
            raise DataError(str(e)) from None

    def to_json(self) -> dict:
        return self.values

    def write(self, path):
        atomic_write_json(path, self.values)

    @property
    def seeds_used(self) -> int:
        return self.values["seeds"]["used"]

    @property
    def seeds_planned(self) -> int | None:
        return self.values["seeds"]["planned"]

    def gap_interval(self, other) -> Interval | None:
        """B - other's gap to the reference curve (BPB), where measured."""
        return Interval.of(((self.values["per_axis"] or {}).get("intervals_bpb") or {}).get(f"B-{other}"))

    @property
    def b_over_a(self) -> tuple | None:
        """B's compute over A's, as ratios: (trained targets, wall time); None where not measured."""
        over = (self.values["compute"] or {}).get("b_over_a") or {}
        return None if over.get("trained_targets") is None else (over["trained_targets"], over["wall_s"])


def _typed(cls, d):
    """cls from those keys of d that are its fields (a schema-checked summary holds them all)."""
    return cls(**{f.name: d.get(f.name) for f in fields(cls)})
