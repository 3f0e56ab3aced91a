"""Every committed training config is exactly what protocols/generate_configs.py writes today (from presets/six.py)."""
import json
from pathlib import Path

import pytest

from conftest import one_line_error
from presets.six import PRESETS, configs
from protocols.generate_configs import main as generate_main

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_committed_configs_equal_the_generator(preset):
    folder = ROOT / "protocols" / "configs" / preset
    want = {c["name"]: c for c in configs(preset)}
    have = {p.stem: json.loads(p.read_text()) for p in folder.glob("*.json")}
    assert set(have) == set(want), f"{folder}: regenerate with protocols/generate_configs.py --preset {preset}"
    for name in want:
        assert have[name] == want[name], f"{folder / name}.json differs from the generator's output"


def test_tiny_configs_carry_the_regime_settings():
    # the committed tiny configs must train the setting the audit calls in regime (B = 20, the 320-token filter)
    c = json.loads((ROOT / "protocols" / "configs" / "tiny" / "baseline_s43.json").read_text())
    assert (c["buffer"], c["max_source_len"]) == (20, 320)


def test_an_out_folder_that_cannot_be_made_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    rc = generate_main(["--preset", "tiny", "--out", str(blocker / "x")])
    one_line_error(capsys, rc, str(blocker / "x"), "not a folder")
