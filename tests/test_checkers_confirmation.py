"""checkers/verify_confirmation.py: the section 5.4 table against confirmation.json's own totals and the per-row
evidence. A hand-made pair of scores: baseline and random_crop, seed 1, 500 counted targets and 1000 bytes each;
CE 2 ln 2 and 3 ln 2 nats, so BPB 2 ln 2 x 500 / (ln 2 x 1000) = 1.0 and 1.5, perplexity 4 and 8, delta +0.5.
The evidence gives the same by hand: two rows a run, bytes 600 + 400, counted targets 250 + 250, baseline
nats 600 ln 2 + 400 ln 2 = 1000 ln 2 (CE 1000 ln 2 / 500 = 2 ln 2, BPB 1000 ln 2 / (ln 2 x 1000) = 1.0) and
random_crop 900 ln 2 + 600 ln 2 = 1500 ln 2 (CE 3 ln 2, BPB 1.5)."""
import json
import math
import subprocess
import sys

import numpy as np

from checkers.verify_confirmation import main
from conftest import ROOT

LN2 = math.log(2)
TABLE = """## 5.4 Untouched original-style confirmation (UNCONFIRMED)

| Condition | Seed | Development BPB | Development delta | Confirmation BPB | Confirmation delta | CE | Perplexity |
|---|---:|---:|---:|---:|---:|---:|---:|
| baseline | 1 | 1.10000000 | +0.00000000 | 1.00000000 | +0.00000000 | 1.38629436 | 4.00000 |
| random_crop | 1 | 1.20000000 | +0.10000000 | 1.50000000 | +0.50000000 | 2.07944154 | 8.00000 |

## 5.5 Conditional source windows
"""


def files(tmp_path, bpb=1.0, table=TABLE):
    scores = [{"condition": c, "seed": 1, "bpb": b, "ce": ce, "perplexity": ppl, "counted_targets": 500,
               "bytes": 1000, "fingerprint": "f00d", "run": f"{c}_s1"}
              for c, b, ce, ppl in (("baseline", bpb, 2 * LN2, 4.0), ("random_crop", 1.5, 3 * LN2, 8.0))]
    (tmp_path / "confirmation.json").write_text(json.dumps({"status": "x", "scores": scores}))
    (tmp_path / "report.md").write_text("# Evaluation\n\n" + table)
    return [str(tmp_path)]


def evidence(tmp_path, status="x"):
    np.savez(tmp_path / "confirmation_evidence.npz", runs=np.asarray(["baseline_s1", "random_crop_s1"]),
             conditions=np.asarray(["baseline", "random_crop"]), seeds=np.array([1, 1]),
             nats=np.array([[600 * LN2, 400 * LN2], [900 * LN2, 600 * LN2]]), bytes=np.array([[600, 400], [600, 400]]),
             count=np.array([[250, 250], [250, 250]]), status=np.asarray(status))


# the reviewer's consistent edit of the baseline: BPB 1.2, so CE 1.2 x ln 2 x 1000 / 500 = 2.4 ln 2 and
# perplexity 2^2.4; the table rewritten to match (random_crop's delta 1.5 - 1.2 = +0.3)
EDITED = {"bpb": 1.2, "ce": 2.4 * LN2, "perplexity": 2 ** 2.4}
EDITED_TABLE = TABLE.replace("| 1.00000000 | +0.00000000 | 1.38629436 | 4.00000 |",
                             f"| 1.20000000 | +0.00000000 | {2.4 * LN2:.8f} | {2 ** 2.4:.5f} |").replace(
    "| 1.50000000 | +0.50000000 |", "| 1.50000000 | +0.30000000 |")


def edit_baseline(tmp_path):
    conf = json.loads((tmp_path / "confirmation.json").read_text())
    conf["scores"][0].update(EDITED)
    (tmp_path / "confirmation.json").write_text(json.dumps(conf))


def test_the_table_and_scores_as_written_pass(tmp_path, capsys):
    assert main(files(tmp_path)) == 0
    out = capsys.readouterr().out
    assert out.startswith("NOTE  no confirmation_evidence.npz")  # an older output folder: said, not refused
    assert "PASS  table row random_crop seed 1: all four numbers agree" in out and "8 passed, 0 failed" in out  # 1 fingerprint + 2 x 2 scores + 1 count + 2 rows


def test_one_edited_bpb_fails_naming_it(tmp_path, capsys):
    assert main(files(tmp_path, bpb=1.2)) == 1  # the reviewer's edit: one BPB in confirmation.json
    out = capsys.readouterr().out
    assert "FAIL  baseline seed 1: BPB 1.2 vs 1.0 recomputed from CE, targets and bytes (difference 2.00e-01 > 1e-09)" in out
    assert "FAIL  table row baseline seed 1: confirmation BPB 1.00000000, confirmation.json gives 1.20000000" in out
    # random_crop's delta against the edited baseline: 1.5 - 1.2
    assert "FAIL  table row random_crop seed 1: confirmation delta +0.50000000, confirmation.json gives +0.30000000" in out


def test_an_edited_table_cell_or_a_missing_row_fails(tmp_path, capsys):
    assert main(files(tmp_path, table=TABLE.replace("| 8.00000 |", "| 8.00001 |"))) == 1
    assert "FAIL  table row random_crop seed 1: perplexity 8.00001, confirmation.json gives 8.00000" in \
        capsys.readouterr().out
    assert main(files(tmp_path, table="\n".join(ln for ln in TABLE.splitlines() if "random_crop" not in ln))) == 1
    assert "FAIL  report.md's 5.4 table has 1 rows, confirmation.json 2 scores" in capsys.readouterr().out


def test_files_it_cannot_check_are_one_line_exit_2(tmp_path):
    files(tmp_path, table="## 5.5 no confirmation table\n")
    r = subprocess.run([sys.executable, str(ROOT / "checkers" / "verify_confirmation.py"), str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stdout + r.stderr
    assert r.stderr.startswith("error: cannot be checked (IndexError")


def test_scores_and_table_recomputed_from_hand_made_evidence_pass(tmp_path, capsys):
    evidence(tmp_path)
    assert main(files(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "NOTE" not in out and "0 failed" in out
    for line in ("PASS  baseline seed 1: counted targets 500 vs 500 summed from confirmation_evidence.npz",
                 "PASS  random_crop seed 1: bytes 1000 vs 1000 summed from confirmation_evidence.npz",
                 "PASS  random_crop seed 1: BPB 1.5 vs 1.5 recomputed from confirmation_evidence.npz",
                 "PASS  table row random_crop seed 1: confirmation delta +0.50000000 vs +0.500000000000 recomputed"):
        assert line in out, out


def test_a_consistent_edit_passes_its_own_totals_but_fails_the_evidence(tmp_path, capsys):
    files(tmp_path, table=EDITED_TABLE)
    edit_baseline(tmp_path)
    assert main([str(tmp_path)]) == 0  # without the evidence the edit is invisible: the gap this file closes
    capsys.readouterr()
    evidence(tmp_path)
    assert main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL  baseline seed 1: BPB 1.2 vs 1.0" in out and "(difference 2.00e-01 > 1e-09)" in out
    assert f"FAIL  baseline seed 1: CE {2.4 * LN2!r} vs" in out
    assert f"FAIL  baseline seed 1: perplexity {2 ** 2.4!r} vs 4.0" in out
    assert "FAIL  table row baseline seed 1: confirmation BPB 1.20000000 vs 1.000000000000 recomputed" in out
    assert "FAIL  table row random_crop seed 1: confirmation delta +0.30000000 vs +0.500000000000 recomputed" in out
    assert "PASS  random_crop seed 1: CE" in out  # the unedited run still holds


def test_evidence_of_another_pass_or_a_cut_file(tmp_path, capsys):
    files(tmp_path)
    evidence(tmp_path, status="another pass")
    assert main([str(tmp_path)]) == 1
    assert "FAIL  confirmation_evidence.npz's status stamp equals confirmation.json's" in capsys.readouterr().out
    ev = tmp_path / "confirmation_evidence.npz"
    ev.write_bytes(ev.read_bytes()[: ev.stat().st_size // 2])
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("error: cannot be checked"), err
