"""checkers/verify_confirmation.py: the section 5.4 table against confirmation.json's own totals. A hand-made
pair of scores: baseline and random_crop, seed 1, 500 counted targets and 1000 bytes each; CE 2 ln 2 and
3 ln 2 nats, so BPB 2 ln 2 x 500 / (ln 2 x 1000) = 1.0 and 1.5, perplexity 4 and 8, delta +0.5."""
import json
import math
import subprocess
import sys

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


def test_the_table_and_scores_as_written_pass(tmp_path, capsys):
    assert main(files(tmp_path)) == 0
    out = capsys.readouterr().out
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
    r = subprocess.run([sys.executable, "-I", "-S", str(ROOT / "checkers" / "verify_confirmation.py"), str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stdout + r.stderr
    assert r.stderr.startswith("error: cannot be checked (IndexError")
