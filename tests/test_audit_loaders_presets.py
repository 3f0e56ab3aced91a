"""--pipeline grain, llamafactory, axolotl at 2 ranks x 2 DataLoader workers: Grain gives
every worker of every rank its own packer, so each worker stream's counts equal a one-stream audit of its share
(every fourth document); LLaMA-Factory and axolotl make one packing for the run, so the preset's audit is the
one-stream audit (axolotl's with its bins dealt to the 2 ranks). --pipeline foundry, whose conversion has no ranks
and deals whole files, is tested in tests/test_audit_loader_presets.py. --pipeline megatron is tested beside Megatron's
loaders (tests/test_audit_loaders_megatron.py), where megatron-core is imported anyway."""
import json

import numpy as np
import pytest

from audit.__main__ import main as audit_main
from audit.topology import SUMMED, rows_per_stream

R, B = 65, 8
ROWS = 400


@pytest.fixture(scope="module")
def lengths(tmp_path_factory):
    rng = np.random.default_rng(21)
    L = np.maximum(1, rng.lognormal(3.0, 1.0, 3000).astype(np.int64))
    L[::13] = rng.integers(100, 400, len(L[::13]))
    d = tmp_path_factory.mktemp("loader-presets")
    (d / "L.txt").write_text("\n".join(map(str, L)) + "\n")
    return L, d


def _audit(f, out, rows, *extra):
    assert audit_main(["--lengths", str(f), "--row-capacity", str(R), "--buffer", str(B), "--targets",
                       str(rows * (R - 1)), "--permutations", "0", "--no-figures", "--out", str(out), *extra]) == 0
    return json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize("preset, packer, extra", [
    ("grain", "grain_first_fit", ["--loader-arg", "bins=3", "--loader-arg", "truncation=off"]),  # each worker's own
])
def test_per_worker_presets_equal_one_stream_audits_of_the_shares(lengths, tmp_path, preset, packer, extra):
    L, d = lengths
    s = _audit(d / "L.txt", tmp_path / preset, ROWS, "--pipeline", preset, "--ranks", "2", "--loader-workers", "2",
               *extra)
    topo = s["topology"]
    assert s["pipeline"]["owner"] == "worker" and topo["worker_streams"] == 4 and list(topo["packers"]) == [packer]
    shares = rows_per_stream(ROWS, 4)
    for w in range(4):  # worker stream w: documents w, w + 4, ... (rank w mod 2, worker w // 2)
        f = tmp_path / f"share{w}.txt"
        f.write_text("\n".join(map(str, L[w::4])) + "\n")
        one = _audit(f, tmp_path / f"one{w}", shares[w], "--packers", packer, *extra)["packers"][packer]
        got = topo["packers"][packer]["workers"][w]
        assert {k: got[k] for k in SUMMED} == {k: one[k] for k in SUMMED}, w
        assert got["documents"]["by_fate"] == one["documents"]["by_fate"], w
    fates = topo["packers"][packer]["fates_file"]
    assert (tmp_path / preset / fates).is_file()


@pytest.mark.parametrize("preset, packer, extra", [
    ("llamafactory", "llamafactory_pt", []),
    ("axolotl", "axolotl_completion", ["--loader-arg", "world_size=2"]),
])
def test_one_packing_presets_are_the_one_stream_audit(lengths, tmp_path, preset, packer, extra):
    _L, d = lengths
    s = _audit(d / "L.txt", tmp_path / preset, ROWS, "--pipeline", preset, "--ranks", "2", "--loader-workers", "2")
    assert "topology" not in s and s["pipeline"]["owner"] == "stream" and list(s["packers"]) == [packer]
    one = _audit(d / "L.txt", tmp_path / "one", ROWS, "--packers", packer, *extra)["packers"][packer]
    got = s["packers"][packer]
    assert {k: got[k] for k in SUMMED} == {k: one[k] for k in SUMMED}
    assert got["documents"]["by_fate"] == one["documents"]["by_fate"]
    if preset == "axolotl":  # the preset deals the bins to its 2 ranks
        assert s["pipeline"]["loader_args"] == {"world_size": 2} and got["loader"]["world_size"] == 2
