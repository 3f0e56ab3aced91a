"""Loading a file never runs code (issue 20, "Security"): a crafted checkpoint and a crafted
tokenizer, each with a sidecar that matches it, are refused, and their payload (creating a
marker file) never runs. A tokenizer folder from another build is refused by the prepared
corpus's record although its own sidecar matches."""
import base64
import hashlib
import json
import os
import pickle
import shutil

import pytest
import torch
from conftest import one_line_error

import train as train_cli
from errors import DataError
from corpus.layout import Layout
from corpus.tokenizer import RECORD, load_encoding, load_token_bytes
from corpus.verify import file_record
from eval.official import main as official_main
from train import train
from training.config import resolve_config

BASE = dict(depth=1, width=32, heads=2, kv_heads=2, context=32, short_window=16, vocab=400, micro_rows=2,
            accum=1, updates=2, eval_batches=1, eval_rows=2, buffer=40, prefetch=0, checkpoint_every=1)


class Payload:
    """Unpickling this creates the marker file: what a crafted file would do with a shell command."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def args(data):
    return [f"{k}={v}" for k, v in {**BASE, "data_dir": data}.items()]



def test_a_crafted_checkpoint_with_a_matching_sidecar_is_refused_unrun(small_corpus, tmp_path, capsys):
    run = tmp_path / "run"
    train(resolve_config(None, args(small_corpus)), run, stop_after=1, log=lambda m: None)
    ckpt = run / "ckpt_000001.pt"
    marker = tmp_path / "marker"
    buf = tmp_path / "crafted.pt"
    torch.save({"step": 1, "config": {}, "evil": Payload(marker)}, buf)
    data = buf.read_bytes()
    ckpt.write_bytes(data)
    ckpt.with_suffix(".json").write_text(json.dumps({"step": 1, "sha256": hashlib.sha256(data).hexdigest(),
                                                     "bytes": len(data)}))
    rc = official_main([str(ckpt), "--device", "cpu"])
    one_line_error(capsys, rc, "ckpt_000001.pt", "refused")
    assert not marker.exists()
    rc = train_cli.main(args(small_corpus) + ["--out", str(run), "--resume"])
    assert not marker.exists()
    # the crafted checkpoint is reported and skipped; there is no earlier one, so the run starts over
    assert rc == 0 and "refused without running it" in capsys.readouterr().out


def _resign(tok_dir):
    """Rewrite the tokenizer's own sidecar so it matches whatever the files now hold (the
    pickled tokenizer.pkl too, where one lies there: the form an older version loaded)."""
    names = [n for n in ("tokenizer.pkl", "tokenizer.json", "token_bytes.npy") if (tok_dir / n).exists()]
    (tok_dir / RECORD).write_text(json.dumps({n: file_record(tok_dir / n) for n in names}))


def test_a_crafted_tokenizer_with_matching_records_is_refused_unrun(small_corpus, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(small_corpus, data)
    lay = Layout(data, "stdlib")
    marker = tmp_path / "marker"
    crafted = pickle.dumps(Payload(marker))
    (lay.tokenizer / "tokenizer.pkl").write_bytes(crafted)  # the old file name: never read
    (lay.tokenizer / "tokenizer.json").write_bytes(crafted)
    _resign(lay.tokenizer)
    rec = json.loads(lay.record.read_text())  # even the corpus record is made to agree
    rec["files"]["tokenizer/tokenizer.json"] = file_record(lay.tokenizer / "tokenizer.json")
    lay.record.write_text(json.dumps(rec))
    try:
        load_encoding(lay.tokenizer)
    except DataError as e:
        assert "not a valid tokenizer file" in str(e)
    assert not marker.exists()
    with pytest.raises(DataError, match="not a valid tokenizer file"):
        load_encoding(lay.tokenizer)


def test_a_tokenizer_from_another_build_is_refused_by_the_corpus_record(small_corpus, tmp_path, capsys):
    data = tmp_path / "data"
    shutil.copytree(small_corpus, data)
    lay = Layout(data, "stdlib")
    path = lay.tokenizer / "tokenizer.json"
    d = json.loads(path.read_text())
    # another build's tokenizer: same format and size, two merged tokens in the other order
    toks = d["tokens_base64"]
    toks[300], toks[301] = toks[301], toks[300]
    assert base64.b64decode(toks[300]) != base64.b64decode(toks[301])
    path.write_text(json.dumps(d))
    _resign(lay.tokenizer)  # its own sidecar matches
    with pytest.raises(DataError, match="not the tokenizer prepared.json records"):
        load_encoding(lay.tokenizer)
    with pytest.raises(DataError, match="not the tokenizer prepared.json records"):
        load_token_bytes(lay.tokenizer)
    rc = train_cli.main(args(data) + ["--out", str(tmp_path / "run")])
    one_line_error(capsys, rc, "tokenizer.json", "prepared.json")
