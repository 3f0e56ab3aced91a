"""Each integrity guard of docs/reliability.md, with a case that passes only while the guard is there.

- PACKAUDIT_SKIP_HASH is ignored by the protocol freeze and the protocol check (they always hash);
- the offline corpus refuses validation documents that also occur in training;
- atomic JSON writes refuse NaN and Infinity and leave the previous file as it was;
- freeze and run_six as command lines: a frozen protocol whose hash and corpus record hold,
  one-line refusals with exit status 2.
"""
import json
import math
import shutil
import pytest

from corpus.atomic import atomic_write_json
from corpus.layout import Layout
from errors import DataError


@pytest.fixture
def data(small_corpus, tmp_path):
    d = tmp_path / "data"
    shutil.copytree(small_corpus, d)
    return d


def _flip_token_byte(data):
    """Change one byte of a validation token file: same size, offsets intact, so only a SHA256 sees it."""
    lay = Layout(data, "stdlib")
    path = lay.tokens / f"{lay.shard_names('val')[0]}.tokens.bin"
    b = bytearray(path.read_bytes())
    b[101] ^= 0x01
    path.write_bytes(bytes(b))
    return path


def test_freeze_and_the_protocol_check_hash_even_when_hashing_is_skipped(data, tmp_path, monkeypatch, capsys):
    from comparison.freeze import main as freeze_main
    from protocols.protocol import check_before_confirmation, load_protocol

    proto_path = tmp_path / "protocol.json"
    assert freeze_main(["--preset", "tiny", "--data-dir", str(data), "--out", str(proto_path)]) == 0
    proto = load_protocol(proto_path)
    proto["runs"] = {}  # no runs: the check goes straight on to the corpus
    lay = Layout(data, "stdlib")
    check_before_confirmation(proto, [], lay, log=lambda m: None)  # intact corpus: passes
    altered = _flip_token_byte(data)
    monkeypatch.setenv("PACKAUDIT_SKIP_HASH", "1")
    with pytest.raises(DataError, match=f"{altered.name}: SHA256"):
        check_before_confirmation(proto, [], lay, log=lambda m: None)
    capsys.readouterr()
    assert freeze_main(["--preset", "tiny", "--data-dir", str(data), "--out", str(tmp_path / "p2.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error: ") and f"{altered.name}: SHA256" in err
    assert not (tmp_path / "p2.json").exists()


def test_validation_documents_in_training_are_refused_on_the_offline_corpus(data):
    import prepare

    lay = Layout(data, "stdlib")
    rec = lay.prepared()
    train_names, val_name = rec["train_shards"], rec["val_shard"]
    assert prepare._disjointness(lay, train_names, val_name, "stdlib") == []  # a clean build passes
    # a "validation" shard that is one of the training shards: every row overlaps (mixed builds)
    with pytest.raises(DataError, match="validation documents also occur in the training shards"):
        prepare._disjointness(lay, train_names, train_names[0], "stdlib")
    # ClimbMix has natural duplicates: recorded, not refused
    rows = prepare._disjointness(lay, train_names, train_names[0], "climbmix")
    assert len(rows) > 0 and rows == sorted(rows)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_atomic_json_refuses_non_finite_values_and_keeps_the_old_file(tmp_path, bad):
    path = tmp_path / "result.json"
    atomic_write_json(path, {"bpb": 1.25})
    before = path.read_bytes()
    with pytest.raises(ValueError):
        atomic_write_json(path, {"bpb": 1.25, "nested": [0.5, bad]})
    assert path.read_bytes() == before and json.loads(before) == {"bpb": 1.25}
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]  # no temp file left behind


def test_freeze_command_line_writes_a_protocol_that_verifies(small_corpus, tmp_path, capsys):
    import hashlib

    from comparison.freeze import main as freeze_main

    out = tmp_path / "protocol.json"
    assert freeze_main(["--preset", "tiny", "--data-dir", str(small_corpus), "--out", str(out), "--replicates", "7"]) == 0
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    assert f"SHA256 {digest}" in capsys.readouterr().out
    assert (tmp_path / "protocol.json.sha256").read_text() == f"{digest}  protocol.json\n"
    proto = json.loads(out.read_text())
    assert sorted(proto["runs"]) == sorted(f"{c}_s{s}" for c in ("baseline", "random_crop", "segmented") for s in (43, 44))
    assert proto["evaluation"]["replicates"] == 7
    rec = Layout(small_corpus, "stdlib").prepared()
    assert proto["corpus"]["files"] == rec["files"] and proto["corpus"]["build_id"] == rec["build_id"]
    # a frozen protocol (perhaps already cited by a confirmation) is replaced only when asked
    frozen = out.read_bytes()
    rc = freeze_main(["--preset", "tiny", "--data-dir", str(small_corpus), "--out", str(out), "--replicates", "8"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err == (f"error: {out}: a protocol is already frozen there; pass --overwrite to replace it, "
                               "or choose another --out")
    assert out.read_bytes() == frozen
    assert freeze_main(["--preset", "tiny", "--data-dir", str(small_corpus), "--out", str(out), "--replicates", "8",
                        "--overwrite"]) == 0
    assert json.loads(out.read_text())["evaluation"]["replicates"] == 8
    # a folder, or another file, at --out: named as what it is, not as a frozen protocol (both once were)
    rc = freeze_main(["--preset", "tiny", "--data-dir", str(small_corpus), "--out", str(tmp_path)])
    assert rc == 2 and capsys.readouterr().err.strip() == f"error: --out {tmp_path}: is a folder, not a file"
    (tmp_path / "table.md").write_text("| a |\n")
    rc = freeze_main(["--preset", "tiny", "--data-dir", str(small_corpus), "--out", str(tmp_path / "table.md")])
    assert rc == 2 and "another file is there (no .sha256 beside it: not a frozen protocol)" in capsys.readouterr().err


@pytest.mark.parametrize("module,args,needle", [
    ("freeze", ["--out", "P.json", "--replicates", "0"], "--replicates must be >= 1"),
    ("freeze", ["--out", "P.json", "--rank", "baseline_s43,nonesuch"], "unknown: nonesuch"),
    ("freeze", ["--out", "BLOCKER/p.json"], "BLOCKER is not a folder"),
    ("run_six", ["depth=abc"], "config key 'depth'"),
    ("run_six", ["--data-dir", "NOWHERE"], "corpus not prepared"),
])
def test_protocol_command_lines_refuse_in_one_line(small_corpus, tmp_path, capsys, module, args, needle):
    from comparison import freeze, run_six

    (tmp_path / "blocker").write_text("")  # a file where a folder is needed
    args = [a.replace("P.json", str(tmp_path / "p.json")).replace("NOWHERE", str(tmp_path / "none"))
            .replace("BLOCKER", str(tmp_path / "blocker")) for a in args]
    if "--data-dir" not in args:
        args += ["--data-dir", str(small_corpus)]
    if module == "run_six":
        args = ["--out", str(tmp_path / "six"), *args]
    rc = {"freeze": freeze.main, "run_six": run_six.main}[module](args)
    err = capsys.readouterr().err.strip()
    needle = needle.replace("BLOCKER", str(tmp_path / "blocker"))
    assert rc == 2 and "\n" not in err and err.startswith("error: ") and needle in err, (rc, err)
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("override", ["loader=lossless", "seed=45", "name=x", "loader=baseline"])
def test_run_six_refuses_an_override_of_what_the_six_differ_by(tmp_path, capsys, override):
    """loader=lossless trained all six on lossless under the names baseline / random_crop / segmented."""
    from comparison import run_six

    # no corpus there: without the refusal the runs would stop at once, naming the missing corpus instead
    rc = run_six.main(["--out", str(tmp_path / "six"), "--data-dir", str(tmp_path / "none"), override])
    assert rc == 2
    assert capsys.readouterr().err == (
        f"error: override '{override}': the six runs differ by name, loader, seed, and an override applies to all "
        f"six; to train one run otherwise: python train.py --config protocols/configs/tiny/NAME.json {override}\n")
    assert not (tmp_path / "six").exists()  # refused before any run folder, let alone training
