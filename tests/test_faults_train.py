"""Training faults, one test per class: each bad input is one clear line (exit 2, no
traceback) or a correct result; nothing is silently wrong, nothing lost. Real tiny
checkpoints, real token files."""
import json
import math
import shutil

import pytest

import train as train_cli
from errors import DataError
from corpus.runlock import folder_lock
from train import train
from training.checkpoint import newest_good_checkpoint
from training.config import resolve_config

BASE = dict(depth=2, width=32, heads=2, kv_heads=2, context=32, short_window=16, vocab=400, micro_rows=4,
            accum=2, updates=4, eval_batches=2, eval_rows=4, buffer=40, prefetch=0, checkpoint_every=2,
            keep_checkpoints=3)


def args(data, **kw):
    return [f"{k}={v}" for k, v in {**BASE, "data_dir": data, **kw}.items()]


def cfg_of(data, **kw):
    return resolve_config(None, args(data, **kw))


@pytest.fixture(scope="module")
def finished(small_corpus, tmp_path_factory):
    """A finished tiny run with checkpoints at 2 and 4."""
    out = tmp_path_factory.mktemp("finished")
    train(cfg_of(small_corpus), out, log=lambda m: None)
    return out


def run_cli(capsys, argv):
    rc = train_cli.main(argv)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def one_line_error(rc, err, *needles):
    assert rc == 2 and "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def strict_json(path):
    def bad(c):
        raise AssertionError(f"{path}: {c} in JSON")
    return json.loads(path.read_text(), parse_constant=bad)


def test_resume_under_another_config_is_refused_naming_the_keys(small_corpus, finished, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    (run / "summary.json").unlink()  # as if killed during the final evaluation
    for kw, key in (({"seed": 44}, "seed"), ({"updates": 6}, "updates"), ({"width": 64}, "width"),
                    ({"loader": "lossless"}, "loader")):
        rc, _, err = run_cli(capsys, args(small_corpus, **kw) + ["--out", str(run), "--resume"])
        one_line_error(rc, err, "refusing to resume", key)
    # the official score's population may not differ: its BPB would be on other rows than the run's others
    for kw in ({"eval_batches": 1}, {"eval_rows": 2}):
        rc, _, err = run_cli(capsys, args(small_corpus, **kw) + ["--out", str(run), "--resume"])
        key = next(iter(kw))
        assert rc == 2 and err == (f"error: {run / 'ckpt_000004.pt'}: written under another config; refusing to resume "
                                   f"(differs in {key}); {key} set the rows the official score is on, and a resumed "
                                   f"run keeps its own\n"), err
    # run-time keys may differ: device, checkpoint_every; the resumed run then finishes
    rc, out, err = run_cli(capsys, args(small_corpus, checkpoint_every=1, device="cpu") + ["--out", str(run), "--resume"])
    assert rc == 0, err
    summary = strict_json(run / "summary.json")
    assert summary["config"]["checkpoint_every"] == 1 and summary["official"]["eval_targets"] == 2 * 4 * 32


@pytest.mark.parametrize("bad,needle", [
    (dict(data_dir="NODATA"), "corpus not prepared"),
    (dict(vocab=500), "config vocab 500 != prepared tokenizer vocab 400"),
    (dict(train_shards="nope"), "config key 'train_shards': nope not among the training shards"),
], ids=["data_dir", "vocab", "train_shards"])
def test_overwrite_with_a_config_that_cannot_start_leaves_the_earlier_run_in_place(small_corpus, finished, tmp_path,
                                                                                    capsys, bad, needle):
    # a helper's rerun: --overwrite with a typo'd data_dir moved the finished run aside to OUT.replaced-1, then
    # refused the config; --out was left empty, and a --resume after it would have started again at update 0
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != ".lock"}
    bad = {k: str(tmp_path / "nodata") if v == "NODATA" else v for k, v in bad.items()}
    rc, _, err = run_cli(capsys, args(small_corpus, **bad) + ["--out", str(run), "--overwrite"])
    one_line_error(rc, err, needle)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != ".lock"} == before
    assert not list(tmp_path.glob("run.replaced-*"))


def test_ctrl_c_says_what_is_kept_and_how_to_resume(small_corpus, tmp_path, capsys, monkeypatch):
    real = train_cli.checkpoint

    def ctrl_c_after_the_first(out, cfg, ident, tr, loader, progress, *rest):  # Ctrl-C once update 2 is saved
        real(out, cfg, ident, tr, loader, progress, *rest)
        raise KeyboardInterrupt

    run = tmp_path / "run"
    argv = args(small_corpus) + ["--out", str(run), "--overwrite"]
    with monkeypatch.context() as m:
        m.setattr(train_cli, "checkpoint", ctrl_c_after_the_first)
        rc, _, err = run_cli(capsys, argv)
    again = " ".join(args(small_corpus)) + f" --out {run} --resume"
    assert rc == 130 and "Traceback" not in err
    assert err.splitlines()[-1] == (f"interrupted: training stopped; {run} keeps its log and checkpoints up to "
                                    f"ckpt_000002.pt; continue with: python train.py {again}")
    rc, out, err = run_cli(capsys, again.split())  # the command it gives continues the run
    assert rc == 0 and f"resumed from {run / 'ckpt_000002.pt'} at update 2" in out, err

def test_resume_into_a_folder_that_does_not_exist_is_one_line_and_an_empty_start_is_said(small_corpus, tmp_path,
                                                                                          capsys):
    """A mistyped --out with --resume once started a fresh run there without a word."""
    rc, _, err = run_cli(capsys, args(small_corpus) + ["--out", str(tmp_path / "typo"), "--resume", "--dry-run"])
    assert rc == 0  # a dry run builds nothing: not refused
    rc, _, err = run_cli(capsys, args(small_corpus) + ["--out", str(tmp_path / "typo"), "--resume"])
    assert rc == 2 and err.strip() == (f"error: --resume: {tmp_path / 'typo'} does not exist, so there is no run to "
                                       "continue; check --out, or leave out --resume to start a run there")
    assert not (tmp_path / "typo").exists()
    started = tmp_path / "started"  # a run stopped before its first checkpoint left its log
    started.mkdir()
    (started / "train_log.jsonl").write_text("")
    rc, out, err = run_cli(capsys, args(small_corpus) + ["--out", str(started), "--resume"])
    assert rc == 0 and f"resume: {started} holds no usable checkpoint; starting at update 0" in out


def test_second_process_on_the_same_folder_is_refused(small_corpus, tmp_path, capsys):
    with folder_lock(tmp_path / "busy", "a test"):
        rc, _, err = run_cli(capsys, args(small_corpus) + ["--out", str(tmp_path / "busy")])
    import os

    one_line_error(rc, err, "in use by another process", f"pid {os.getpid()}")
    assert not (tmp_path / "busy" / "train_log.jsonl").exists()


def test_resume_on_a_finished_run_changes_nothing_and_no_json_holds_nan(small_corpus, finished, capsys):
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in finished.iterdir() if p.name != ".lock"}
    rc, out, err = run_cli(capsys, args(small_corpus) + ["--out", str(finished), "--resume"])
    assert rc == 0 and "already finished" in out, (out, err)
    after = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in finished.iterdir() if p.name != ".lock"}
    assert after == before
    for p in finished.glob("*.json"):
        strict_json(p)
    for line in (finished / "train_log.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in train_log.jsonl"))
    assert math.isfinite(strict_json(finished / "summary.json")["final_train_loss"])


def test_final_train_loss_survives_a_kill_during_the_final_evaluation(small_corpus, finished, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    want = strict_json(run / "summary.json")["final_train_loss"]
    (run / "summary.json").unlink()  # the final checkpoint exists; nothing is left to train
    res = train(cfg_of(small_corpus), run, resume=True, log=lambda m: None)
    assert res["final_train_loss"] == want and strict_json(run / "summary.json")["final_train_loss"] == want


@pytest.mark.parametrize("bad,needle", [
    (["updates=0"], "'updates'"), (["updates=-3"], "'updates'"), (["heads=0"], "'heads'"),
    (["micro_rows=0"], "'micro_rows'"), (["accum=0"], "'accum'"), (["eval_batches=0"], "'eval_batches'"),
    (["muon_lr=nan"], "'muon_lr'"), (["window_pattern=SXL"], "'window_pattern'"), (["attention=fast"], "'attention'"),
])
def test_bad_values_are_one_line_even_for_dry_run(capsys, bad, needle):
    rc, _, err = run_cli(capsys, bad + ["--dry-run"])
    one_line_error(rc, err, needle)


def test_bad_config_files_are_one_line(tmp_path, capsys):
    (tmp_path / "list.json").write_text("[1, 2]")
    rc, _, err = run_cli(capsys, ["--config", str(tmp_path / "list.json"), "--dry-run"])
    one_line_error(rc, err, "list.json", "JSON object")
    (tmp_path / "nan.json").write_text('{"muon_lr": NaN}')  # Python's json reads NaN; checked on load
    rc, _, err = run_cli(capsys, ["--config", str(tmp_path / "nan.json"), "--dry-run"])
    one_line_error(rc, err, "nan.json", "'muon_lr'")


def test_truncated_token_file_is_named(small_corpus, tmp_path, capsys):
    data = tmp_path / "data"
    shutil.copytree(small_corpus, data)
    victim = sorted((data / "stdlib" / "tokens").glob("*.tokens.bin"))[0] if (data / "stdlib").exists() else \
        sorted(data.rglob("*.tokens.bin"))[0]
    victim.write_bytes(victim.read_bytes()[:-10])
    rc, _, err = run_cli(capsys, args(data) + ["--out", str(tmp_path / "run")])
    one_line_error(rc, err, victim.name, "truncated")


def test_truncated_checkpoint_sidecar_falls_back_to_the_previous_checkpoint(small_corpus, finished, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    side = run / "ckpt_000004.json"
    side.write_text(side.read_text()[:15])
    msgs = []
    path, payload = newest_good_checkpoint(run, log=msgs.append)
    assert path.name == "ckpt_000002.pt" and payload["step"] == 2
    assert any("ckpt_000004.json" in m and "sidecar" in m for m in msgs)
    (run / "summary.json").unlink()
    res = train(cfg_of(small_corpus), run, resume=True, log=msgs.append)
    assert res["final_train_loss"] == strict_json(finished / "summary.json")["final_train_loss"]
    with pytest.raises(DataError):
        resolve_config(None, ["keep_checkpoints=0"])


def test_a_run_refused_before_it_starts_leaves_no_empty_folder(tmp_path, capsys):
    """run_six --data-dir <missing> once left an empty OUT/baseline_s43 behind."""
    out = tmp_path / "six" / "baseline_s43"
    rc, _, err = run_cli(capsys, args(tmp_path / "NODATA") + ["--out", str(out)])
    assert rc == 2 and "corpus not prepared" in err and not (tmp_path / "six").exists()  # nor the folder above it
