"""main.py as a whole: a rerun skips finished work, an interrupted stage resumes to the same results.

The cheapest stages that show both are train (run_six: finished runs are not trained
again, an interrupted one resumes from its newest checkpoint) and freeze (frozen once).
The tiny preset is shrunk to a micro model and one seed (three runs) for the test; the
stage code is the main job's own.
"""
import json

import pytest

import main as main_job
import train as train_module
from conftest import one_line_error
from presets import six as six_runs
from training.config import resolve_config

MICRO = dict(source="stdlib", depth=1, width=32, heads=2, kv_heads=2, context=16, short_window=8, vocab=400,
             micro_rows=2, accum=1, updates=4, eval_batches=1, eval_rows=2, buffer=20, max_source_len=320,
             checkpoint_every=2, prefetch=0)
CUT = "random_crop_s43"  # the run interrupted after update 3 (its newest checkpoint is update 2)


@pytest.fixture
def micro(monkeypatch):
    monkeypatch.setitem(six_runs.PRESETS, "tiny", MICRO)
    monkeypatch.setattr(six_runs, "SEEDS", (43,))


def _files(folder):
    """Every file under folder (locks aside): bytes and modification time."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.name.endswith(".lock")}


def test_interrupted_stage_resumes_and_a_rerun_skips_everything(small_corpus, micro, tmp_path, monkeypatch, capsys):
    out = tmp_path / "main"
    argv = ["--data-dir", str(small_corpus), "--out", str(out), "--stages", "train,freeze"]
    real_train = train_module.train

    def killed(cfg, out_dir, resume=False, stop_after=None, log=print, **kw):
        if cfg.name == CUT:
            real_train(cfg, out_dir, resume, stop_after=3, log=log, **kw)
            raise KeyboardInterrupt  # as if killed after update 3, one update past the checkpoint
        return real_train(cfg, out_dir, resume, stop_after, log, **kw)

    monkeypatch.setattr(train_module, "train", killed)
    assert main_job.main(argv) == 130  # run_six's line, then the job's: the command that goes on is the job's
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("interrupted: stopped in stage train; finished stages are skipped; rerun `python main.py")
    monkeypatch.setattr(train_module, "train", real_train)
    assert not (out / "protocol.json").exists()  # freeze never ran on an unfinished stage
    capsys.readouterr()

    assert main_job.main(argv) == 0
    text = capsys.readouterr().out
    assert "baseline_s43: already finished" in text and f"resumed from {out / 'train' / CUT}" in text
    assert "no SUMMARY.md yet" in text and "read " not in text.splitlines()[-1]  # no summary stage: none to read

    # the resumed run equals one that was never interrupted
    ref = tmp_path / "ref"
    (c,) = [c for c in six_runs.configs("tiny") if c["name"] == CUT]
    cfg = resolve_config(None, [f"{k}={v}" for k, v in c.items()] + [f"data_dir={small_corpus}"])
    want = real_train(cfg, ref, log=lambda m: None)
    got = json.loads((out / "train" / CUT / "summary.json").read_text())
    for key in ("bpb", "ce", "counted_targets", "bytes", "fingerprint"):
        assert got["official"][key] == want["official"][key], key
    assert got["final_train_loss"] == want["final_train_loss"]
    losses = [json.loads(x)["loss"] for x in (out / "train" / CUT / "train_log.jsonl").read_text().splitlines()]
    assert losses == [json.loads(x)["loss"] for x in (ref / "train_log.jsonl").read_text().splitlines()]

    # a second run skips everything: no file is rewritten, not even with the same bytes
    # (table.md, results.json and the curves are rebuilt from the finished runs, byte for byte)
    before = _files(out)
    assert main_job.main(argv) == 0
    text = capsys.readouterr().out
    assert text.count("already finished") == 3 and "protocol already frozen" in text
    after = _files(out)
    assert set(after) == set(before)
    for name, (data, mtime) in before.items():  # stage_times.json too: a skipped stage keeps its earlier time
        assert after[name][0] == data, name
        if not name.startswith("train/") or "/" in name[len("train/"):]:
            assert after[name][1] == mtime, name  # run folders, protocol and manifest: not touched at all


def test_an_out_folder_that_cannot_be_made_is_refused_before_any_stage(tmp_path, monkeypatch, capsys):
    ran = []
    monkeypatch.setitem(main_job.STAGE_RUNS, "prepare", ("offline corpus", lambda *a: ran.append(a) or 0))
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    rc = main_job.main(["--out", str(blocker / "x"), "--stages", "prepare"])
    one_line_error(capsys, rc, str(blocker / "x"), f"{blocker} is not a folder")
    assert not ran


def test_the_queue_stage_states_a_harmful_shard_let_through_and_goes_on(tmp_path, monkeypatch, capsys):
    """The queue stage's run let its planted harmful shard through: a result, printed on its own line (SUMMARY.md's
    queue headline counts it), after which the stage reconstructs and re-executes the run as always; not a failed
    stage (before: an `error:` line and status 1, the run's checks skipped)."""
    from shardqueue import api
    from shardqueue.checks import reexecute, replay

    checked = []
    monkeypatch.setattr(api, "calibrate", lambda *a, **k: {"ok": True})
    monkeypatch.setattr(api, "describe_calibration", lambda rec: "calibrated")
    monkeypatch.setattr(api, "run", lambda *a, **k: "summary")
    monkeypatch.setattr(api, "describe_run", lambda summary, out: ("accepted 6 shards", "result: h0000 got through"))
    monkeypatch.setattr(replay, "reconstruct_folder", lambda q: checked.append("reconstruct") or 0)
    monkeypatch.setattr(reexecute, "reexecute_folder", lambda q, device: checked.append("re-execute") or 0)
    assert main_job.run_queue_stage(tmp_path / "queue", None) == 0
    assert checked == ["reconstruct", "re-execute"]
    printed = capsys.readouterr()
    assert "\nresult: h0000 got through\n" in printed.out and "error" not in printed.err
