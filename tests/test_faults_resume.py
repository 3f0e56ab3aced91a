"""Resume only the run it was, and never a mixed folder (issue 20): another corpus, changed
code, a folder that holds a run, a torn log line, leftover temporary files; equal runs write
equal checkpoint bytes."""
import json
import shutil

import pytest
from conftest import one_line_error

import train as train_cli
import training.checkpoint as checkpoint
from eval.official import main as official_main
from train import train
from training.config import resolve_config

BASE = dict(depth=1, width=32, heads=2, kv_heads=2, context=32, short_window=16, vocab=400, micro_rows=2,
            accum=1, updates=2, eval_batches=1, eval_rows=2, buffer=40, prefetch=0, checkpoint_every=1,
            keep_checkpoints=3)


def args(data, **kw):
    return [f"{k}={v}" for k, v in {**BASE, "data_dir": data, **kw}.items()]


def quiet(m):
    pass


@pytest.fixture(scope="module")
def finished(small_corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "run"
    train(resolve_config(None, args(small_corpus)), out, log=quiet)
    return out


@pytest.fixture
def unfinished(finished, tmp_path):
    """The finished run as if killed during its final scoring: resume has work to do."""
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    (run / "summary.json").unlink()
    (run / "official_rows.parquet").unlink()
    return run



@pytest.fixture
def other_corpus(small_corpus, tmp_path):
    """A corpus whose prepared record names another build (what a different prepare gives)."""
    data = tmp_path / "other"
    shutil.copytree(small_corpus, data)
    rec_path = data / "stdlib" / "prepared.json"
    rec = json.loads(rec_path.read_text())
    rec["build_id"] = "0" * 64
    rec_path.write_text(json.dumps(rec))
    return data


def test_resume_and_official_score_on_another_corpus_are_refused(unfinished, other_corpus, capsys):
    rc = train_cli.main(args(other_corpus) + ["--out", str(unfinished), "--resume"])
    one_line_error(capsys, rc, "another prepared corpus", "build_id")
    rc = official_main([str(unfinished / "ckpt_000002.pt"), "--data-dir", str(other_corpus), "--device", "cpu"])
    one_line_error(capsys, rc, "another prepared corpus", "build_id")
    assert not (unfinished / "summary.json").exists()


def test_resume_under_changed_code_is_refused_unless_allowed_and_then_recorded(unfinished, small_corpus, capsys,
                                                                              monkeypatch):
    real = checkpoint.code_sha256()
    monkeypatch.setattr(checkpoint, "code_sha256", lambda: {**real, "train.py": "f" * 64})
    rc = train_cli.main(args(small_corpus) + ["--out", str(unfinished), "--resume"])
    one_line_error(capsys, rc, "code changed", "train.py", "--allow-code-change")
    rc = train_cli.main(args(small_corpus) + ["--out", str(unfinished), "--resume", "--allow-code-change"])
    assert rc == 0
    summary = json.loads((unfinished / "summary.json").read_text())
    assert summary["allowed_code_changes"] == [{"step": 2, "files": ["train.py"]}]


def test_a_new_run_into_a_folder_holding_a_run_is_refused_or_moves_it_aside(finished, small_corpus, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    before = (run / "summary.json").read_bytes()
    rc = train_cli.main(args(small_corpus, seed=44) + ["--out", str(run)])
    one_line_error(capsys, rc, "already holds a run", "--overwrite")
    assert (run / "summary.json").read_bytes() == before
    rc = train_cli.main(args(small_corpus, seed=44) + ["--out", str(run), "--overwrite"])
    assert rc == 0
    aside = tmp_path / "run.replaced-1"
    assert (aside / "summary.json").read_bytes() == before and (aside / "ckpt_000002.pt").exists()
    assert json.loads((run / "summary.json").read_text())["seed"] == 44


def test_a_torn_last_log_line_is_dropped_and_leftover_temporaries_removed(unfinished, small_corpus, finished):
    log_path = unfinished / "train_log.jsonl"
    log_path.write_text(log_path.read_text() + '{"step": 3, "loss": 2.5')  # killed mid-write
    tmp = unfinished / ".ckpt_000003.pt.k2j4.tmp"
    tmp.write_bytes(b"\0" * 1000)
    res = train(resolve_config(None, args(small_corpus)), unfinished, resume=True, log=quiet)
    assert res["final_train_loss"] == json.loads((finished / "summary.json").read_text())["final_train_loss"]
    assert log_path.read_text() == (finished / "train_log.jsonl").read_text()
    assert not tmp.exists()


def test_equal_runs_write_equal_checkpoint_files(finished, small_corpus, tmp_path):
    import random

    import numpy as np

    random.random(), np.random.rand()  # whatever state the process is in, the run seeds its own
    again = tmp_path / "again"
    train(resolve_config(None, args(small_corpus)), again, log=quiet)
    for name in ("ckpt_000001.pt", "ckpt_000002.pt"):
        assert (again / name).read_bytes() == (finished / name).read_bytes(), name
