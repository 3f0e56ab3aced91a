"""Bad input is one line and exit status 2 (issue 20, "Bad input"): model shapes the model
cannot build, a boolean where a number belongs, a read-only output folder; and key=value
overrides are accepted wherever they stand among train.py's options."""
import json

import pytest
from conftest import one_line_error

import train as train_cli
from eval.official import main as official_main
from manifests.__main__ import main as manifest_main
from train import train
from training.config import resolve_config

TINY = ["depth=1", "context=32", "short_window=16", "vocab=400"]



@pytest.mark.parametrize("shape,needle", [
    (["width=2", "heads=1", "kv_heads=1"], "'width'"),  # narrower than the value-embedding gate's 32 channels
    (["width=6", "heads=1", "kv_heads=1"], "'width'"),
    (["width=66", "heads=2", "kv_heads=2"], "head dimension"),  # 33: rotary embeddings need an even one
])
def test_model_shapes_the_model_cannot_run_are_refused_at_resolution(capsys, shape, needle):
    rc = train_cli.main(TINY + shape + ["--dry-run"])
    one_line_error(capsys, rc, needle)


def test_a_boolean_is_not_a_number(tmp_path, capsys):
    for key, value in (("muon_lr", True), ("updates", False), ("weight_decay", False)):
        cfg = tmp_path / f"{key}.json"
        cfg.write_text(json.dumps({key: value}))
        rc = train_cli.main(["--config", str(cfg), "--dry-run"])
        one_line_error(capsys, rc, f"'{key}'", "boolean")


def test_overrides_are_accepted_after_the_options(capsys):
    rc = train_cli.main(TINY + ["--out", "/nonexistent/x", "width=64", "--dry-run", "updates=7"])
    assert rc == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert '"width": 64' in printed and '"updates": 7' in printed


def test_unwritable_outputs_and_a_full_disk_are_one_line_naming_the_path(small_corpus, tmp_path, capsys,
                                                                          monkeypatch):
    import errno

    import corpus.atomic

    tiny = TINY + ["width=32", "heads=2", "kv_heads=2", "micro_rows=2", "accum=1", "updates=1", "eval_batches=1",
                   "eval_rows=2", "buffer=40", "prefetch=0", f"data_dir={small_corpus}"]
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    rc = train_cli.main(tiny + ["--out", str(blocker / "run")])  # a folder cannot be made inside a file
    one_line_error(capsys, rc, str(blocker / "run"), "needs")
    run = tmp_path / "run"
    train(resolve_config(None, tiny), run, log=lambda m: None)

    def full(fd):  # what a full disk answers when the written data is flushed
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(corpus.atomic.os, "fsync", full)
    rc = official_main([str(run / "ckpt_000001.pt"), "--device", "cpu", "--out", str(tmp_path / "rows.parquet")])
    one_line_error(capsys, rc, "rows.parquet", "free disk space")
    rc = manifest_main(["write", str(run), "--out", str(tmp_path / "m.sha256")])
    one_line_error(capsys, rc, "m.sha256", "free disk space")
    rc = train_cli.main(tiny + ["--out", str(tmp_path / "run2")])
    one_line_error(capsys, rc, "run2", "free disk space")
    import prepare

    rc = prepare.main(["--data-dir", str(tmp_path / "data"), "--max-files", "30", "--shards", "3"])
    one_line_error(capsys, rc, str(tmp_path / "data"), "free disk space")
    assert not list(tmp_path.glob("*.tmp")) and not list((tmp_path / "run2").glob(".*.tmp"))
