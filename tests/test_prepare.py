"""prepare.py: offline corpus, tokenizer, token files, census, bad input, determinism."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import prepare
from corpus import bench as tokenizer_bench
from errors import DataError
from corpus.layout import Layout
from corpus.pretokenize import TokenShard, refill_boundaries
from corpus.shards import iter_row_group_texts, open_shard
from corpus.stdlib_corpus import build_stdlib_corpus, split_module, stdlib_files
from corpus.tokenizer import SPECIAL_TOKENS, bos_id, load_encoding, load_token_bytes
from loaders.stream import open_split

from conftest import ROOT, one_line_error


def test_pretokenized_equals_on_the_fly_encoding(small_corpus):
    lay = Layout(small_corpus, "stdlib")
    enc = load_encoding(lay.tokenizer)
    bos = bos_id(enc)
    n_checked = 0
    for name in lay.shard_names("train") + lay.shard_names("val"):
        sh = TokenShard(lay.tokens, name)
        i = 0
        for _, texts in iter_row_group_texts(lay.raw / f"{name}.parquet"):
            for t in texts:
                assert sh.doc(i).tolist() == [bos] + enc.encode_ordinary(t)
                i += 1
        assert i == len(sh.offsets) - 1
        n_checked += i
    assert n_checked > 500


def test_stream_yields_shards_in_order_with_row_group_refills(small_corpus):
    lay = Layout(small_corpus, "stdlib")
    s = open_split(small_corpus, "stdlib", "train")
    shards = [TokenShard(lay.tokens, n) for n in lay.shard_names("train")]
    flat = [sh.doc(i).tolist() for sh in shards for i in range(len(sh.offsets) - 1)]
    assert [s.doc_tokens(i).tolist() for i in range(s.n)] == flat
    sizes = np.diff(s.refills)
    assert sizes.max() == 128 and (sizes < 128).any()  # 150-row groups: slices of 128 and 22
    rr = open_split(small_corpus, "stdlib", "val", row_range=(10, 300), exclude=[20, 21])
    val = TokenShard(lay.tokens, lay.shard_names("val")[0])
    keep = [i for i in range(10, 300) if i not in (20, 21)]
    assert [rr.doc_tokens(j).tolist() for j in range(rr.n)] == [val.doc(i).tolist() for i in keep]


def test_refill_boundaries_respect_row_groups():
    assert refill_boundaries([300, 50]).tolist() == [0, 128, 256, 300, 350]
    assert refill_boundaries([128, 1]).tolist() == [0, 128, 129]


def test_tokenizer_round_trip_and_token_bytes(small_corpus):
    lay = Layout(small_corpus, "stdlib")
    enc = load_encoding(lay.tokenizer)
    assert enc.n_vocab == 400
    assert [enc.encode_single_token(s) for s in SPECIAL_TOKENS] == [396, 397, 398, 399]
    for text in ["def f(x):\n    return x ** 2  # ünïcödé ✓\n", "Hello, world! 12345 678", "\t\n  \r\n"]:
        assert enc.decode(enc.encode_ordinary(text)) == text
    tb = load_token_bytes(lay.tokenizer)
    assert tb[396:].tolist() == [0, 0, 0, 0]
    assert all(tb[i] == len(enc.decode([i]).encode("utf-8")) for i in range(396))


def test_rerun_does_no_work(small_corpus, capsys):
    rc = prepare.main(["--data-dir", str(small_corpus), "--max-files", "120", "--shards", "3",
                       "--row-group-size", "150", "--vocab-size", "400"])
    assert rc == 0
    assert "nothing to do" in capsys.readouterr().out


def test_same_seed_gives_byte_identical_shards(tmp_path):
    build_stdlib_corpus(tmp_path / "a", n_shards=2, max_files=25, log=lambda m: None)
    build_stdlib_corpus(tmp_path / "b", n_shards=2, max_files=25, log=lambda m: None)
    for name in ("shard_00000.parquet", "shard_00001.parquet", "manifest.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    build_stdlib_corpus(tmp_path / "c", n_shards=2, max_files=25, seed=1, log=lambda m: None)
    assert (tmp_path / "a" / "shard_00000.parquet").read_bytes() != (tmp_path / "c" / "shard_00000.parquet").read_bytes()


def test_split_module_cuts_at_top_level_statements():
    src = '"""doc."""\nimport os\n\n# about f\n@dec\ndef f():\n    """f doc"""\n    return 1\n\n\nclass C:\n    x = 1\n'
    docs = [t for _, t in split_module(src)]
    assert docs == ['"""doc."""\nimport os\n', "# about f\n@dec\ndef f():\n    \"\"\"f doc\"\"\"\n    return 1\n",
                    "class C:\n    x = 1\n"]
    assert "".join(docs).replace("\n", "") == src.replace("\n", "")  # nothing lost but blank lines


def _write(path, table):
    pq.write_table(table, path)
    return path


def test_the_library_walk_finds_what_rglob_finds_outside_the_installed_packages(tmp_path):
    """stdlib_files never enters site-packages; against rglob, which walks everything, filtered afterwards."""
    root = tmp_path / "lib"
    for rel in ("os.py", "json/__init__.py", "json/tool.py", "json/x.pyc", "lib2to3/site-packages/inner.py",
                "site-packages/pkg/mod.py", "dist-packages/mod.py", "pydoc_data/topics.py", "pydoc_data/other.py",
                ".hidden.py", "README"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x = 1\n")
    (root / "linked").symlink_to(root / "json", target_is_directory=True)  # not entered by either walk
    (root / "alias.py").symlink_to(root / "os.py")
    reference = sorted((f.relative_to(root) for f in root.rglob("*.py")
                        if f.relative_to(root).parts[0] not in ("site-packages", "dist-packages")
                        and f.relative_to(root).as_posix() != "pydoc_data/topics.py"), key=lambda p: p.as_posix())
    assert [p.as_posix() for p in reference] == [".hidden.py", "alias.py", "json/__init__.py", "json/tool.py",
                                                  "lib2to3/site-packages/inner.py", "os.py", "pydoc_data/other.py"]
    assert list(stdlib_files(root)) == reference


def test_bad_shards_give_one_line_errors(tmp_path):
    bad = tmp_path / "corrupt.parquet"
    bad.write_bytes(b"PAR1 this is not parquet")
    notext = _write(tmp_path / "notext.parquet", pa.table({"body": ["a"]}))
    empty = _write(tmp_path / "empty.parquet", pa.table({"text": pa.array([], pa.string())}))
    nonutf = _write(tmp_path / "nonutf.parquet", pa.table({"text": pa.array([b"ok", b"bad \xff\xfe"], pa.binary())}))
    cases = [(bad, "not a readable parquet"), (notext, "no 'text' column"), (empty, "empty shard"),
             (nonutf, "not valid UTF-8"), (tmp_path / "missing.parquet", "not found")]
    for path, msg in cases:
        with pytest.raises(DataError) as e:
            open_shard(path)
            list(iter_row_group_texts(path))
        text = str(e.value)
        assert msg in text and str(path.name) in text and "\n" not in text


def test_prepare_cli_reports_bad_input_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "prepare.py"), "--source", "climbmix", "-n", "1",
                        "--data-dir", str(tmp_path), "--base-url", "http://127.0.0.1:9/none"],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 2
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and "--source stdlib" in last and "Traceback" not in r.stderr


def test_help_explains_every_option():
    r = subprocess.run([sys.executable, str(ROOT / "prepare.py"), "--help"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0
    for opt in ("--source", "--data-dir", "--train-shards", "--vocab-size", "--threads", "--shards", "--seed"):
        assert opt in r.stdout


def test_queue_folder_never_shadows_the_standard_library():
    r = subprocess.run([sys.executable, "-c", "import queue; print(queue.__file__)"], capture_output=True,
                       text=True, cwd=ROOT)
    import sysconfig

    assert r.stdout.strip().startswith(sysconfig.get_paths()["stdlib"])
    import queue

    assert queue.__file__.startswith(sysconfig.get_paths()["stdlib"])


@pytest.mark.parametrize("args,needle", [(["--threads", "0"], "--threads 0: must be at least 1"),
                                         (["--shards", "-1"], "--shards -1: must be at least 1")])
def test_the_tokenizer_benchmark_refuses_bad_counts_in_one_line(tmp_path, capsys, args, needle):
    one_line_error(capsys, tokenizer_bench.main(args + ["--data-dir", str(tmp_path)]), needle)


def _own_texts(n=120, seed=3):
    """n distinct texts of made-up words: enough for a vocabulary of 300."""
    rng = np.random.default_rng(seed)
    words = ["".join(rng.choice(list("abcdefghijklmnop"), size=k)) for k in rng.integers(2, 9, size=400)]
    return [" ".join(rng.choice(words, size=int(m))) for m in rng.integers(5, 80, size=n)]


@pytest.mark.parametrize("bad,needle", [
    (["--text-column", "txt"], "no column 'txt' (--text-column; columns: text, source)"),
    (["--source-column", "src"], "no column 'src' (--source-column"),
    (["--input", "EMPTY"], "0 non-empty distinct documents in the input; at least --shards 3 needed"),
], ids=["text-column", "source-column", "no-documents"])
def test_a_bad_parquet_input_leaves_the_corpus_prepared_before_it_as_it_was(tmp_path, capsys, bad, needle):
    # found by a new user: a typo'd --text-column on a data root prepared before deleted its shards and its
    # prepared.json (`corpus not prepared` for the audit after), where the error said only the column was wrong
    good = _write(tmp_path / "docs.parquet", pa.table({"text": _own_texts(), "source": ["a", "b"] * 60}))
    empty = _write(tmp_path / "empty.parquet", pa.table({"text": pa.array([], pa.string())}))
    base = ["--source", "parquet", "--input", str(good), "--data-dir", str(tmp_path / "data"), "--shards", "3",
            "--vocab-size", "300"]
    argv = base + [str(empty) if a == "EMPTY" else a for a in bad]
    # the same mistake in a first prepare: no empty data root is left behind (it was: data/parquet/)
    one_line_error(capsys, prepare.main(argv), needle)
    assert not (tmp_path / "data").exists()
    assert prepare.main(base) == 0
    root = tmp_path / "data" / "parquet"
    before = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert (root / "prepared.json") in [root / p for p in before]
    capsys.readouterr()
    one_line_error(capsys, prepare.main(argv), needle)
    after = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert after == before
    assert prepare.main(base) == 0 and "nothing to do" in capsys.readouterr().out


def _files(root):
    return {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_too_many_stdlib_shards_or_too_large_a_vocabulary_leave_the_corpus_prepared_before_it_as_it_was(tmp_path,
                                                                                                        capsys):
    """A helper's reruns on one small stdlib root prepared with 4 shards and a vocabulary of 300:
    - --shards 1000 deleted its shards, build.json and prepared.json, then stopped at 'empty shard (0 documents)';
      the document count is known before any write;
    - --vocab-size 65536 deleted prepared.json and the tokenizer's trained_on.json before training refused it, so
      the good command after retrained the tokenizer.
    Each leaves every file as it was, and the good command after them does no work."""
    base = ["--source", "stdlib", "--max-files", "20", "--data-dir", str(tmp_path), "--shards", "4",
            "--vocab-size", "300"]
    assert prepare.main(base) == 0
    root = tmp_path / "stdlib"
    before = _files(root)
    assert Path("prepared.json") in before
    capsys.readouterr()
    for flag, value, needle in (
            ("--shards", "1000", "non-empty distinct documents in the corpus; at least --shards 1000"),
            ("--vocab-size", "65536", "corpus too small for a vocabulary of 65536")):
        argv = list(base)
        argv[argv.index(flag) + 1] = value
        one_line_error(capsys, prepare.main(argv), needle)
        assert _files(root) == before, flag
    assert prepare.main(base) == 0 and "nothing to do" in capsys.readouterr().out
