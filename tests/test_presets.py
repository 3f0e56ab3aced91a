"""The shared presets: typed, defined once, and what their users read."""
from dataclasses import dataclass

import pytest

from corpus.errors import DataError
from presets import shapes, six
from presets.typed import at_least, build


@dataclass
class Settings:
    count: int = 1
    rate: float = 0.5
    name: str = "x"
    flag: bool = False
    limit: int | None = None


def test_build_converts_command_line_strings_and_names_a_bad_key():
    s = build(Settings, {"count": "3", "rate": "0.25", "flag": "true", "limit": "7"}, "queue setting")
    assert (s.count, s.rate, s.flag, s.limit) == (3, 0.25, True, 7)
    assert build(Settings, {"rate": 2, "flag": 0, "limit": None}).rate == 2.0
    for values, needle in (({"cuont": 3}, "unknown queue setting key 'cuont'"),
                           ({"count": "3.5"}, "queue setting key 'count': '3.5' is not a valid int"),
                           ({"rate": True}, "key 'rate': True is a boolean, not a float"),
                           ({"flag": "maybe"}, "key 'flag': 'maybe' is not true or false"),
                           ({"name": 3}, "key 'name': 3 is not a valid str")):
        with pytest.raises(DataError, match=needle):
            build(Settings, values, "queue setting")
    with pytest.raises(DataError, match="key 'count': 0 must be at least 1"):
        at_least(Settings(count=0), {"count": 1})


def test_a_shape_knows_its_row_capacity_and_composes_as_config_keys():
    assert shapes.TINY.row_capacity == 129 and shapes.PAPER.row_capacity == 2049
    assert {**shapes.QUEUE_DEMO, "depth": 3}["depth"] == 3 and dict(shapes.TINY)["context"] == 128


def test_the_six_configs_name_each_condition_and_seed_once():
    names = [c["name"] for c in six.configs("tiny")]
    assert names == list(six.run_names()) and len(set(names)) == 6
    assert {c["loader"] for c in six.configs("paper")} == set(six.CONDITIONS.values())
    assert six.condition_of("segment_first") == "segmented" and six.condition_of("lossless") == "lossless"
    tiny = dict(six.PRESETS["tiny"])
    assert (tiny["buffer"], tiny["max_source_len"]) == (six.TINY_REGIME.buffer, six.TINY_REGIME.max_source_len)
    assert dict(six.PRESETS["paper"]) == {"source": "climbmix"}  # the rest: TrainConfig's defaults, the paper's


def test_the_paper_regime_is_the_audits():
    # the findings page reads the paper's indicators from findings/, the audit derives its own (issue 27 merges them)
    import audit.regime
    import findings

    assert findings.PAPER_REGIME == audit.regime.PAPER
