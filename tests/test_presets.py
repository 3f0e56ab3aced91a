"""The shared presets: typed, defined once, and what their users read."""
from dataclasses import dataclass

import pytest

from errors import DataError
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


def _literals(tree):
    """(line, keys) of every dict literal and every call's keyword names in a module."""
    import ast

    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            yield node.lineno, {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        elif isinstance(node, ast.Call):
            yield node.lineno, {k.arg for k in node.keywords if k.arg}


def shape_and_condition_literals(root):
    """Places outside presets/ that spell out a model shape or the condition <-> packer map."""
    import ast

    from test_layout import parsed, source_files

    bad = []
    for f in source_files(root):
        if f.relative_to(root).parts[0] == "presets":
            continue
        tree = parsed(f)
        for line, keys in _literals(tree):
            if {"depth", "width", "heads", "context"} <= keys:
                bad.append(f"{f.relative_to(root)}:{line}: a model shape")
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value in ("baseline", "original")
                                                  and isinstance(v, ast.Constant) and v.value in ("original", "baseline")
                                                  for k, v in zip(node.keys, node.values)):
                bad.append(f"{f.relative_to(root)}:{node.lineno}: the condition <-> packer map")
    return bad


def test_each_shape_and_the_condition_map_are_defined_once_in_presets(tmp_path):
    from conftest import ROOT

    assert shape_and_condition_literals(ROOT) == []
    (tmp_path / "x.py").write_text('CFG = {"depth": 1, "width": 32, "heads": 2, "context": 64}\n'
                                   'MAP = {"original": "baseline"}\nm = Model(depth=1, width=2, heads=1, context=8)\n')
    assert shape_and_condition_literals(tmp_path) == ["x.py:1: a model shape", "x.py:3: a model shape",
                                                      "x.py:2: the condition <-> packer map"]
