"""The paper's values live once, in findings/paper_values.json; REPRODUCE.md must quote the same."""
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _leaves(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not k.startswith("_"):
                yield from _leaves(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _leaves(v, path + (str(i),))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield path, obj


def _numbers_in(text):
    """Every number written in the text, thousands separators removed, as a float."""
    out = set()
    for m in re.finditer(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?", text):
        try:
            out.add(float(m.group(0).replace(",", "")))
        except ValueError:
            pass
    return out


def _written(v, numbers):
    # a value counts as quoted when REPRODUCE.md writes it exactly, or (for counts in millions
    # such as 12.99 M targets) as the same number of millions to the digits the paper gives
    return any(abs(n - v) <= 1e-12 * max(1.0, abs(v)) or abs(n * 1e6 - v) < 0.5 for n in numbers)


def test_reproduce_quotes_every_paper_value():
    values = json.loads((ROOT / "findings" / "paper_values.json").read_text())
    numbers = _numbers_in((ROOT / "REPRODUCE.md").read_text())
    missing = [".".join(p) + f" = {v}" for p, v in _leaves(values) if not _written(v, numbers)]
    assert not missing, "REPRODUCE.md lacks these paper values: " + "; ".join(missing)


def test_detector_catches_an_altered_value(tmp_path):
    # the check above must be able to fail: a value REPRODUCE.md does not contain is reported
    numbers = _numbers_in((ROOT / "REPRODUCE.md").read_text())
    assert not _written(0.99370936, numbers)  # the paper's baseline BPB with its last digit changed
    assert _written(0.99370935, numbers)
