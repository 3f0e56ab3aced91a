"""Frozen protocols and SHA256 manifests: written, verified, and refused when broken."""
import ast
import shutil
import subprocess
import time

import pytest

from conftest import ROOT, one_line_error
from errors import DataError
from corpus.layout import Layout
from eval.runs import find_runs
from eval.plan import evaluation_plan
from manifests.__main__ import main as manifest_main
from manifests.__main__ import verify_manifest
from protocols.protocol import check_before_confirmation, load_protocol, write_protocol
from train import train
from training.checkpoint import code_sha256
from training.config import resolve_config


@pytest.fixture(scope="module")
def two_runs(small_corpus, tmp_path_factory):
    runs = tmp_path_factory.mktemp("proto_runs")
    base = dict(depth=1, width=32, heads=2, kv_heads=2, context=32, short_window=16, vocab=400, micro_rows=2,
                accum=1, updates=2, eval_batches=2, eval_rows=2, buffer=40, data_dir=str(small_corpus))
    for seed in (43, 44):
        cfg = resolve_config(None, [f"{k}={v}" for k, v in {**base, "seed": seed, "name": f"baseline_s{seed}"}.items()])
        train(cfg, runs / f"baseline_s{seed}", log=lambda m: None)
    return runs


def _protocol(small_corpus, runs_dir):
    runs = find_runs(runs_dir)
    rec = Layout(small_corpus, "stdlib").prepared()
    return {"name": "test", "frozen_at_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "runs": {r[0].name: r[1].config for r in runs},
            "evaluation": evaluation_plan("stdlib", 100, 32, 2, 2),
            "corpus": {"source": "stdlib", "shards_sha256": rec["shards_sha256"], "tokenizer_sha256": rec["tokenizer_sha256"]},
            "code_sha256": code_sha256()}


def test_protocol_checks_pass_then_refuse_each_broken_condition(small_corpus, two_runs, tmp_path):
    lay = Layout(small_corpus, "stdlib")
    path = tmp_path / "protocol.json"
    write_protocol(path, _protocol(small_corpus, two_runs))
    proto = load_protocol(path)
    msgs = []
    check_before_confirmation(proto, find_runs(two_runs), lay, log=msgs.append)
    assert "official checks complete" in msgs[0]

    # the file changed after freezing
    path.write_text(path.read_text().replace('"test"', '"tampered"'))
    with pytest.raises(DataError, match="does not match the frozen"):
        load_protocol(path)
    # a run's config is not the protocol's
    p2 = _protocol(small_corpus, two_runs)
    p2["runs"]["baseline_s44"]["seed"] = 45
    write_protocol(path, p2)
    with pytest.raises(DataError, match="config differs from the protocol in seed"):
        check_before_confirmation(load_protocol(path), find_runs(two_runs), lay, log=msgs.append)
    # a run missing from the folder
    write_protocol(path, _protocol(small_corpus, two_runs))
    with pytest.raises(DataError, match="are not the protocol's"):
        check_before_confirmation(load_protocol(path), find_runs(two_runs)[:1], lay, log=msgs.append)
    # the official check was made on another checkpoint
    copy = tmp_path / "runs"
    shutil.copytree(two_runs, copy)
    shutil.copy(copy / "baseline_s43" / "official_rows.parquet", copy / "baseline_s44" / "official_rows.parquet")
    with pytest.raises(DataError, match="not made on ckpt_000002.pt"):
        check_before_confirmation(load_protocol(path), find_runs(copy), lay, log=msgs.append)
    # the official check has not finished
    (copy / "baseline_s44" / "official_rows.parquet").unlink()
    with pytest.raises(DataError, match="has not finished"):
        check_before_confirmation(load_protocol(path), find_runs(copy), lay, log=msgs.append)


def test_eval_cli_refuses_confirmation_without_a_valid_protocol(small_corpus, two_runs, tmp_path, capsys):
    from eval.__main__ import main as eval_main

    path = tmp_path / "protocol.json"
    p = _protocol(small_corpus, two_runs)
    p["corpus"]["tokenizer_sha256"] = "0" * 64
    write_protocol(path, p)
    rc = eval_main(["--runs", str(two_runs), "--out", str(tmp_path / "ev"), "--protocol", str(path), "--device", "cpu"])
    assert rc == 2 and "corpus or tokenizer differ" in capsys.readouterr().err
    assert not (tmp_path / "ev").exists()  # nothing scored


def test_manifest_round_trip_detects_changes_and_matches_sha256sum(tmp_path):
    d = tmp_path / "ckpts"
    d.mkdir()
    for i in range(3):
        (d / f"ckpt_{i}.pt").write_bytes(bytes([i]) * 1000)
    (d / "other.txt").write_text("x")
    assert manifest_main(["write", str(d), "--glob", "ckpt_*.pt", "--out", str(d / "m.sha256")]) == 0
    lines = [ln for ln in (d / "m.sha256").read_text().splitlines() if not ln.startswith("#")]
    assert len(lines) == 3 and all(ln.split("  ")[1].startswith("ckpt_") for ln in lines)
    assert "# covers: . glob ckpt_*.pt" in (d / "m.sha256").read_text()  # other.txt is outside the glob
    assert subprocess.run(["sha256sum", "-c", "m.sha256"], cwd=d, capture_output=True).returncode == 0
    assert verify_manifest(d / "m.sha256", log=lambda m: None)
    (d / "ckpt_1.pt").write_bytes(b"changed")
    msgs = []
    assert not verify_manifest(d / "m.sha256", log=msgs.append)
    assert any("MISMATCH  ckpt_1.pt" in m for m in msgs)
    (d / "ckpt_2.pt").unlink()
    assert manifest_main(["verify", str(d / "m.sha256")]) == 1


def test_manifest_write_refuses_an_out_that_is_a_folder_before_hashing(tmp_path, capsys, monkeypatch):
    import manifests.__main__ as manifests_cli

    (tmp_path / "ckpt_0.pt").write_bytes(b"a checkpoint")
    monkeypatch.setattr(manifests_cli, "sha256_file", lambda p: pytest.fail("hashed before --out was checked"))
    rc = manifest_main(["write", str(tmp_path / "ckpt_0.pt"), "--out", str(tmp_path)])
    one_line_error(capsys, rc, f"--out {tmp_path}: is a folder, not a file")
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt_0.pt"]


def test_code_manifest_lists_tracked_code(tmp_path):
    assert manifest_main(["write", "--code", "--out", str(tmp_path / "code.sha256")]) == 0
    names = [ln.split("  ", 1)[1] for ln in (tmp_path / "code.sha256").read_text().splitlines()]
    assert any(n.endswith("loaders/core.py") for n in names) and any(n.endswith("train.py") for n in names)


def test_a_protocol_frozen_before_the_ranked_set_was_declared_ranks_its_own_seed_43_runs():
    from eval.plan import complete_plan

    old = evaluation_plan("stdlib", 100, 128, 8, 16)
    del old["ranking"], old["stream_checks"]
    names = ["baseline_s43", "baseline_s44", "segmented_s43", "random_crop_s43"]
    plan, notes = complete_plan(old, names, 8, 16, 1000)
    assert plan["ranking"]["population"] == ["baseline_s43", "random_crop_s43", "segmented_s43"]
    assert plan["ranking"]["reference"] == "baseline_s43" and len(notes) == 2
    assert plan["stream_checks"]["conf"]["max_source_len"] == 129  # R
    assert plan["stream_checks"]["dev"]["max_source_len"] == 256 and plan["stream_checks"]["dev"]["rows"] == 128
    fresh = evaluation_plan("stdlib", 100, 2048, 64, 160, run_names=names)
    assert fresh["stream_checks"]["dev"]["max_source_len"] == 4096 and fresh["stream_checks"]["conf"]["max_source_len"] == 2049
    assert complete_plan(fresh, [], 64, 160, 1000) == (fresh, [])


def _project_files_imported_from(entry):
    """Every project file reachable from entry by imports (anywhere in a file, late ones included): an
    import graph read from the source, independent of the list code_sha256 keeps."""
    todo, seen = [ROOT / entry], set()
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        for n in ast.walk(ast.parse(f.read_text())):
            if isinstance(n, ast.Import):
                names = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
                names = [n.module] + [f"{n.module}.{a.name}" for a in n.names]
            else:
                continue
            for parts in (m.split(".") for m in names):
                todo += [p for p in (ROOT.joinpath(*parts).with_suffix(".py"), ROOT.joinpath(*parts) / "__init__.py")
                         if p.exists()]
    return {str(p.relative_to(ROOT)) for p in seen}


@pytest.mark.parametrize("entry", ["train.py", "eval/__main__.py", "eval/official.py"])
def test_the_hashed_code_is_all_the_code_that_trains_and_scores(entry):
    # a checkpoint and a frozen protocol record these hashes, and the gate names every file that changed since:
    # a scorer left out of the list could be edited after the freeze unnoticed. console/ only formats progress
    # bars and usage lines (no number passes through it), so an edit there need not stop a resume.
    want = {f for f in _project_files_imported_from(entry) if not f.startswith("console/")}
    assert want - set(code_sha256()) == set()
    # prepare.py is imported by neither, but it writes the tokens every run reads: its hash is kept too
    assert "prepare.py" in code_sha256()
