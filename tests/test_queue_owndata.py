"""Your own data (issue 18, section 4): a parquet corpus made here is prepared and accepted by
the audit, training and the queue; the queue uses its own domains file, takes a new source
in at a rotation boundary, accepts, rejects and reconstructs from its log; ClimbMix keeps
per-document labels; `dose` takes the damage as an argument or a parquet of bad documents."""
import json
import shutil
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import one_line_error, queue_script
from test_queue import CFG, SETTINGS

from shardqueue import api as rq
from shardqueue.checks.replay import reconstruct_folder
from shardqueue.engine.log import read_log
from shardqueue.world.rotation import build_rotation

cli = queue_script("run_queue")


def _texts(small_corpus):
    """Real documents to dress up as someone's own data: the small corpus's raw training texts."""
    rec = json.loads((small_corpus / "stdlib" / "prepared.json").read_text())
    raw = small_corpus / "stdlib" / "raw"
    return [t for n in rec["train_shards"] for t in pq.read_table(raw / n, columns=["text"]).column("text").to_pylist()]


@pytest.fixture(scope="module")
def own(small_corpus, tmp_path_factory):
    """Two input files with a `body` column and a `site` label column, prepared as a parquet corpus."""
    import prepare

    d = tmp_path_factory.mktemp("own")
    texts = _texts(small_corpus)
    n = len(texts) // 2
    for k, part in enumerate((texts[:n], texts[n:-120])):
        sites = ["docs" if "def test" not in t else "tests" for t in part]
        pq.write_table(pa.table({"body": part, "site": sites, "id": list(range(len(part)))}), d / f"in{k}.parquet")
    # a new source for --add-source: held-back documents in a file of their own
    pq.write_table(pa.table({"text": texts[-120:]}), d / "new.parquet")
    data = d / "data"
    rc = prepare.main(["--source", "parquet", "--input", str(d / "in0.parquet"), str(d / "in1.parquet"),
                       "--text-column", "body", "--source-column", "site", "--data-dir", str(data), "--shards", "3",
                       "--row-group-size", "150", "--vocab-size", "400"])
    assert rc == 0
    (d / "domains.json").write_text(json.dumps({
        "control": {"doc_pages": {"labels": ["docs"]}, "test_pages": {"labels": ["tests"], "match": "def test"}},
        "selection": {"any_page": {"documents": "odd"}}}))
    return {"dir": d, "data": data}


def test_prepare_refuses_bad_parquet_input_in_one_line(own, tmp_path, capsys):
    import prepare

    base = ["--source", "parquet", "--data-dir", str(tmp_path / "x"), "--vocab-size", "400"]
    for extra, needle in ((["--input", str(own["dir"] / "in0.parquet"), "--text-column", "nope"], "no column 'nope'"),
                          (["--input", str(tmp_path / "none.parquet")], "not found"),
                          ([], "needs --input")):
        assert prepare.main(base + extra) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err


def test_a_file_that_is_not_parquet_is_told_what_is_read_and_a_json_lines_file_how_to_convert_it(tmp_path, capsys):
    """Before: `x.jsonl: not a readable parquet file (ArrowInvalid)`, and nothing said what to give instead."""
    import shlex
    import subprocess
    import sys

    import prepare

    texts = ["first document", "second document"]
    (tmp_path / "x.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    (tmp_path / "y.txt").write_text("plain text\n")
    base = ["--source", "parquet", "--data-dir", str(tmp_path / "data")]
    one_line_error(capsys, prepare.main(base + ["--input", str(tmp_path / "y.txt")]),
                   "y.txt: not a readable parquet file (ArrowInvalid); the documents are read from parquet files (a "
                   "table with a column of texts)")
    rc = prepare.main(base + ["--input", str(tmp_path / "x.jsonl")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1 and "; convert JSON lines first: python -c " in err, err
    command = shlex.split(err.split("first: ", 1)[1])
    subprocess.run([sys.executable, *command[1:]], check=True)  # the line's own command, as printed
    assert pq.read_table(tmp_path / "x.parquet").column("text").to_pylist() == texts
    assert not (tmp_path / "data" / "parquet" / "raw").exists()


def test_a_parquet_corpus_keeps_its_labels_and_the_audit_and_training_accept_it(own, tmp_path):
    from audit.__main__ import main as audit_main
    from corpus.layout import Layout
    from shardqueue.world.rotation import source_labels
    from train import train
    from training.config import resolve_config

    labels = source_labels(Layout(own["data"], "parquet"), "train")
    assert set(labels) == {"docs", "tests"}
    assert audit_main(["--source", "parquet", "--data-dir", str(own["data"]), "--targets", str(100 * 128),
                       "--row-capacity", "129", "--buffer", "40", "--permutations", "1", "--packers", "original",
                       "--out", str(tmp_path / "audit"), "--no-csv", "--no-figures"]) == 0
    cfg = resolve_config(None, [f"{k}={v}" for k, v in {
        **CFG, "source": "parquet", "data_dir": str(own["data"]), "updates": 3, "accum": 1}.items()])
    res = train(cfg, tmp_path / "train", log=lambda m: None)
    assert res["official"]["bpb"] > 0


def test_the_queue_runs_on_own_data_with_own_domains_and_a_new_source(own, tmp_path):
    cal = tmp_path / "cal"
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({**CFG, "source": "parquet", "data_dir": str(own["data"])}))
    args = ["calibrate", "--config", str(cfg), "--out", str(cal), "--domains", str(own["dir"] / "domains.json")] + \
        [x for k, v in {**SETTINGS, "harmful_shards": 1}.items() for x in (f"--{k.replace('_', '-')}", str(v))]
    assert cli.main(args) in (0, 1)  # 1: no grid point passed; the strict copy below decides anyway
    c = json.loads((cal / "calibration.json").read_text())
    assert set(c["sigma"]) == {"doc_pages", "test_pages"}  # the file's control domains, no built-in one
    pool = json.loads((cal / "pool.json").read_text())
    assert set(pool["overlap_13gram"]) == {"doc_pages", "test_pages", "any_page"}
    # a trigger-happy rule (every rise over 3e-4 BPB flags), so the run both accepts and rejects
    c.update(ok=True, k=3.0, frac=0.5, sigma={x: 1e-4 for x in c["sigma"]})
    (cal / "calibration.json").write_text(json.dumps(c))
    out = tmp_path / "run"
    # a budget of four or five shards (300 to 450 targets each): the new source's shards come first at the first
    # boundary, and the trigger-happy rule rejects, defers and quarantines within the first two rotations; a budget
    # of 10 ** 9 walked the whole pool (40 trainings where this one makes 9)
    assert cli.main(["run", "--out", str(out), "--calibration", str(cal), "--rotation-shards", "3",
                     "--budget-targets", "1500", "--add-source", f"fresh={own['dir'] / 'new.parquet'}"]) in (0, 1)
    recs = read_log(out / "decisions.jsonl")
    events = {r["event"] for r in recs}
    assert {"accept", "reject"} <= events
    src = [r for r in recs if r["event"] == "source"]
    added = json.loads((out / "added_sources.json").read_text())["sources"][0]
    assert len(src) == 1 and src[0]["label"] == "fresh" and src[0]["calibration_shards"] == added["calibration"]
    first = next(r for r in recs if r["event"] == "rotation")
    assert src[0]["seq"] < first["seq"]  # checked and calibrated at the first boundary, before any rotation
    assert not set(added["calibration"]) & {r["shard"] for r in recs if r["event"] == "train"}
    if src[0]["passed"]:
        assert set(added["shards"]) & {r["shard"] for r in recs if r["event"] == "train"}
    # one size: at least a shard's tokens, under one more document's worth (at most half a shard)
    assert all(300 <= x["tokens"] < 450 for x in added["shard_records"]) and "left_over_documents" in added
    assert reconstruct_folder(out, out=lambda s: None) == 0
    # the log names the run's sources: without added_sources.json their shards are unknown
    shutil.move(out / "added_sources.json", tmp_path / "aside.json")
    assert reconstruct_folder(out, out=lambda s: None) == 1


def test_add_source_refuses_bad_names_in_one_line(calibrated, tmp_path, capsys):
    rc = cli.main(["run", "--out", str(tmp_path / "r"), "--calibration", str(calibrated["strict"]),
                   "--add-source", "no-path-given"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "NAME=PATH" in err[0]


def test_a_domains_file_with_a_bad_rule_is_one_line(tmp_path):
    from errors import DataError
    from shardqueue.world.domains import load_domains

    p = tmp_path / "d.json"
    for spec, needle in (({"control": {}}, "non-empty"), ({"control": {"a": {"labelz": ["x"]}}}, "keys among"),
                         ({"control": {"a": {}}, "selection": {"a": {}}}, "named twice"),
                         ({"control": {"a": {"match": "("}}}, "regular expression"),
                         # a string, which a rule would match as a substring ("l" in "legal" and "changelog")
                         ({"control": {"a": {"labels": "code"}}}, 'labels must be a list of strings \\(got "code"\\)'),
                         ({"control": {"a": {"registers": [1]}}}, "registers must be a list of strings")):
        p.write_text(json.dumps(spec))
        with pytest.raises(DataError, match=needle):
            load_domains(p)


def test_climbmix_documents_keep_per_document_labels(tmp_path):
    from types import SimpleNamespace

    from shardqueue.world.rotation import source_labels

    code = "import os\n\ndef f(x):\n    return x + 1\n\nclass A:\n    pass\n"
    prose = "The queue trains one shard at a time and measures held-out losses after each."
    pq.write_table(pa.table({"text": [code, prose]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"text": [prose, code], "cluster_id": [3, 7]}), tmp_path / "b.parquet")
    lay = SimpleNamespace(raw=tmp_path, prepared=lambda: {"source": "climbmix", "train_shards": ["a.parquet", "b.parquet"],
                                                          "val_shard": "b.parquet"})
    # no label column: each document's register; a cluster column: the file's own label
    assert source_labels(lay) == ["climbmix:code", "climbmix:prose", "climbmix:3", "climbmix:7"]


def test_documents_left_over_after_the_last_full_shard_make_no_double_size_shard():
    """Issue 28: shards of one size. Lengths 6, 5 | 4, 7 | 3, 2 at 10 tokens a shard: two shards of 11
    tokens; the last two documents (5 tokens) are left over, not joined to the second shard (16)."""
    lengths = np.array([6, 5, 4, 7, 3, 2])
    stream = SimpleNamespace(lengths=lengths, n=6, name="toy", doc_tokens=lambda i: np.full(lengths[i], i + 10))
    m = build_rotation(stream, ["a"] * 6, 10, 0, docs=range(6))
    assert [s["docs"] for s in m["shards"]] == [[[0, 2]], [[2, 4]]] and [s["tokens"] for s in m["shards"]] == [11, 11]
    assert m["left_over_documents"] == 2 and sorted(m["order"]) == ["s0000", "s0001"]


@pytest.mark.parametrize("harm", ["mojibake", "parquet"])
def test_dose_takes_the_damage_as_an_argument(calibrated, tmp_path, harm):
    from shardqueue.study.dose import dose_response

    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"text": ["zzzz qqqq " * 40, "xq" * 300]}), bad)
    rec = dose_response(tmp_path / "d", calibrated["dir"], trials=1, fractions=(0.5,), log=lambda s: None, harm=harm,
                        harm_parquet=bad if harm == "parquet" else None)
    t = rec["rows"][0]["trials"][0]
    assert rec["harm"] == harm and t["harmful_targets"] == round(0.5 * t["targets"])
    assert f"harm: {harm}" in (tmp_path / "d" / "dose.md").read_text()


def test_dose_md_calls_the_clean_doses_rejections_false_rejections():
    """A helper's corpus of several registers: its 0% dose (clean shards) was rejected in every trial, where stage A
    measured 0 of 12; dose.md now says that those are false rejections, beside stage A's rate."""
    from shardqueue.study.dose import dose_md

    def row(f, rejected):
        return {"fraction": f, "realised_share": f, "flag_rate": rejected, "reject_rate": rejected,
                "mean_max_rise_over_threshold": 1.0}

    rec = {"harm": "cipher", "harm_parquet": None, "trials": 2, "rows": [row(0.0, 1.0), row(0.5, 1.0)]}
    calib = {"k": 2.5, "frac": 0.5, "false_rejections": 0, "transitions": 12}
    assert dose_md(rec, calib)[-1].startswith("At the 0% dose every trial is a clean shard: its rejection rate, 1.00, "
                                              "is a false-rejection rate, against the 0/12 stage A measured")
    assert dose_md({**rec, "rows": [row(0.0, 0.0), row(0.5, 1.0)]}, calib)[-1].startswith("| 50% |")


def test_a_source_added_on_resume_enters_at_the_next_boundary(calibrated, own, tmp_path, tmp_path_factory,
                                                              monkeypatch):
    from shardqueue.engine.runner import Runner
    from test_queue_reference import reference_runs

    out, calls, real = tmp_path / "cut", {"n": 0}, Runner.train_shard

    def dying(self, sid, *a, **k):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return real(self, sid, *a, **k)

    def stopping(self, sid, *a, **k):
        # the resumed run, stopped at its first training once the source's record is in the log: where the source
        # entered is decided by then (run on, the strict rule quarantined the pool to its end: 29 more trainings)
        if self.state["sources"] and not self._owed:
            raise KeyboardInterrupt
        return real(self, sid, *a, **k)

    monkeypatch.setattr(Runner, "train_shard", dying)
    with pytest.raises(KeyboardInterrupt):
        rq.run(out, calibrated["strict"], rq.RunPlan(rotation_shards=3), log=lambda s: None, report=False)
    monkeypatch.setattr(Runner, "train_shard", stopping)
    at = read_log(out / "decisions.jsonl")[-1]["queue"]["rotation"]
    with pytest.raises(KeyboardInterrupt):
        rq.run(out, calibrated["strict"], rq.RunPlan(rotation_shards=3), resume=True, log=lambda s: None,
               report=False, add_sources=[f"late={own['dir'] / 'new.parquet'}"])
    recs = read_log(out / "decisions.jsonl")
    src = next(r for r in recs if r["event"] == "source")
    before = [r for r in recs if r["event"] == "rotation" and r["seq"] < src["seq"]]
    assert len(before) == at  # not inside the rotation that was running, but at the boundary after it
    assert reconstruct_folder(out, out=lambda s: None) == 0
    from errors import DataError

    # a finished run takes no new source, one added on an earlier resume beside it or not: the strict run the queue's
    # reference keeps (made once), copied, then with the source this run attached
    done = tmp_path / "done"
    shutil.copytree(reference_runs(calibrated, tmp_path_factory)["copy"] / "queue", done)
    with pytest.raises(DataError, match="has finished"):
        rq.run(done, calibrated["strict"], resume=True, log=lambda s: None, report=False,
               add_sources=[f"later={own['dir'] / 'new.parquet'}"])
    for f in out.glob("added_sources.json*"):
        shutil.copy(f, done / f.name)
    assert (done / "added_sources.json").exists()
    with pytest.raises(DataError, match="has finished"):
        rq.run(done, calibrated["strict"], resume=True, log=lambda s: None, report=False,
               add_sources=[f"later={own['dir'] / 'new.parquet'}"])


def test_new_sources_checked_before_a_fresh_run_leave_the_world_for_the_real_attach(calibrated, own, tmp_path):
    """run --fresh checks its --add-source files before it moves the earlier run aside (check_new), then attaches them
    for real: the check must leave the world as it was, or the real attach refuses a second source of that name."""
    from errors import DataError
    from shardqueue.calibration import open_calibration
    from shardqueue.world import sources

    _, world, pool, _ = open_calibration(calibrated["strict"])
    stream, labels = world.stream, world.labels_all
    good = f"late={own['dir'] / 'new.parquet'}"
    sources.check_new(world, pool, [good])
    assert world.stream is stream and world.labels_all is labels
    _, rec = sources.attach(world, pool, *sources.parse(good), 1)
    assert rec["label"] == "late" and rec["documents"] > 0
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet\n")
    stream, labels = world.stream, world.labels_all
    with pytest.raises(DataError, match="not a readable parquet file"):
        sources.check_new(world, pool, [f"other={own['dir'] / 'new.parquet'}", f"junk={junk}"])
    assert world.stream is stream and world.labels_all is labels  # the first, good one undone too


def test_the_study_calibrates_on_own_data_and_domains(own, tmp_path):
    import argparse
    from dataclasses import replace

    from shardqueue.study.run import stage_a
    from conftest import MICRO_STUDY as MICRO

    p = replace(MICRO, source="parquet", damaged_shards=0)
    a = argparse.Namespace(calibration=None, data_dir=str(own["data"]), device="cpu",
                           domains=str(own["dir"] / "domains.json"))
    cfg, world, pool, calib, _ = stage_a(a, p, tmp_path, rq, lambda s: None)
    assert cfg.source == "parquet" and set(world.sets["control"]) == {"doc_pages", "test_pages"}
    assert set(world.labels) == {"docs", "tests"} and pool["calibration_source"] in {"docs", "tests"}


def test_the_study_gives_its_model_and_harmful_shard_the_corpus_vocabulary(own, tmp_path, capsys):
    """A corpus prepared with a small vocabulary (400) under a preset whose model has prepare.py's default 8,192:
    the study's model takes the corpus's vocabulary, and the planted cipher shard permutes that vocabulary, so every
    token of it has a byte length to score it with (before: ids up to 8,191, an IndexError at its first screen)."""
    import argparse
    from dataclasses import replace

    from conftest import MICRO_STUDY as MICRO

    from shardqueue.engine.packing import shard_tokens
    from shardqueue.study.run import stage_a, with_corpus_vocab
    from shardqueue.world.pool import pool_roles
    from shardqueue.world.rotation import shard_docs

    said = []
    p = with_corpus_vocab(replace(MICRO, source="parquet", damaged_shards=0, train_overrides=(("muon_lr", 0.02),)),
                          own["data"], said.append)
    assert said == ["model vocabulary 400: the prepared corpus's tokenizer's (the preset's model has 8,192)"]
    # --dry-run with --source plans that model too (before: --source was ignored, the plan the 8,192 model's)
    from shardqueue.study.presets import PRESETS, model_size

    assert queue_script("study").main(["--preset", "tiny", "--source", "parquet", "--data-dir", str(own["data"]),
                                       "--out", str(tmp_path / "dry"), "--dry-run"]) == 0
    n = model_size(PRESETS["tiny"].with_source("parquet").with_vocab(400))[0]
    assert f"preset tiny: {n:,} parameters" in capsys.readouterr().out and not (tmp_path / "dry").exists()
    a = argparse.Namespace(calibration=None, data_dir=str(own["data"]), device="cpu", domains=None)
    cfg, world, pool, _, _ = stage_a(a, p, tmp_path, rq, lambda s: None)
    assert cfg.vocab == world.vocab == len(world.token_bytes) == 400
    harmful = [s for s in pool["shards"] if pool_roles(pool).get(s["id"]) == "harmful"]
    tokens = np.concatenate([shard_tokens(world.stream, shard_docs(s)) for s in harmful])
    assert harmful and 0 <= tokens.min() and tokens.max() < 400


def test_calibrate_refuses_a_model_vocabulary_other_than_the_corpus_in_one_line_and_makes_no_folder(own, tmp_path,
                                                                                                  capsys):
    from conftest import one_line_error

    (tmp_path / "cfg.json").write_text(json.dumps(CFG))
    rc = cli.main(["calibrate", "--config", str(tmp_path / "cfg.json"), "--set", "source=parquet",
                   f"data_dir={own['data']}", "vocab=8192", "--out", str(tmp_path / "q")])
    one_line_error(capsys, rc, "a vocabulary of 400, the model's config 8,192", "--set vocab=400")
    assert not (tmp_path / "q").exists()


@pytest.fixture(scope="module")
def short_own(small_corpus, tmp_path_factory):
    """A researcher's corpus too small for the tiny preset's stage A: 400 documents in 4 equal labels, as a new user's
    probe had it (each label holds about a quarter of what one source must)."""
    import prepare

    d = tmp_path_factory.mktemp("short_own")
    texts = [t for t in _texts(small_corpus) if 200 < len(t) < 2000][:400]
    labels = ["weather", "sport", "food", "news"] * (len(texts) // 4)
    pq.write_table(pa.table({"text": texts[:len(labels)], "label": labels}), d / "four.parquet")
    assert prepare.main(["--source", "parquet", "--input", str(d / "four.parquet"), "--source-column", "label",
                         "--data-dir", str(d / "data"), "--shards", "3", "--vocab-size", "400"]) == 0
    return d / "data"


def _source_sizes_by_hand(data, shard_tokens):
    """Stage A's source (the commonest label), its training documents, those at most half a shard, their tokens,
    read here from the prepared files (the corpus holds no copy of a validation text: prepare keeps one of each)."""
    from collections import Counter

    from loaders.stream import open_split

    rec = json.loads((data / "parquet" / "prepared.json").read_text())
    labels = [x for n in rec["train_shards"]
              for x in pq.read_table(data / "parquet" / "raw" / n, columns=["source"]).column("source").to_pylist()]
    lengths = open_split(data, "parquet", "train").lengths
    src = Counter(labels).most_common(1)[0][0]
    mine = np.array(labels) == src
    short = mine & (lengths <= shard_tokens // 2)
    return src, int(mine.sum()), int(short.sum()), int(lengths[short].sum())


def test_a_source_too_small_for_stage_a_says_what_it_has_and_what_the_plan_needs(short_own, tmp_path, capsys):
    """Before: `source 'weather' has too few documents for 21 calibration shards`, and `study.py --dry-run --source
    parquet` printed a plan with status 0. The line now gives the source's documents and tokens and the tokens stage
    A draws; the dry run reads them from the prepared corpus and refuses the same plan (status 2, after the plan)."""
    from shardqueue.study.presets import PRESETS, queue_settings

    s = queue_settings(PRESETS["tiny"])
    src, docs, short, tokens = _source_sizes_by_hand(short_own, s.shard_tokens)
    n = s.warmup_shards + s.sigma_shards + s.held_out_shards + 1
    need = -(-n * s.shard_tokens * 5 // 4)
    assert tokens < need
    said = (f"source {src!r} has too few documents for {n} calibration shards: stage A's source (the commonest of 4 "
            f"labels) has {docs:,} training documents, {short:,} of them at most half a shard long "
            f"({s.shard_tokens // 2:,} tokens)")
    held = f"holding {tokens:,} tokens; the calibration draws {need:,} ({n} shards of {s.shard_tokens:,} tokens"
    study = queue_script("study")
    rc = study.main(["--preset", "tiny", "--source", "parquet", "--data-dir", str(short_own), "--dry-run"])
    printed, err = capsys.readouterr()
    assert rc == 2 and "preset tiny:" in printed and "Traceback" not in err, err
    assert err.splitlines() == [f"error: {said}, {held}, and a quarter over, as whole documents); give more "
                                "documents of that source, or fewer or smaller shards"], err
    rc = study.main(["--preset", "tiny", "--source", "parquet", "--data-dir", str(short_own), "--out",
                     str(tmp_path / "s")])
    one_line_error(capsys, rc, said + " and no copy of a validation text, " + held)
    (tmp_path / "cfg.json").write_text(json.dumps({**CFG, "source": "parquet", "data_dir": str(short_own)}))
    rc = cli.main(["calibrate", "--config", str(tmp_path / "cfg.json"), "--out", str(tmp_path / "q"),
                   *(f"--{k.replace('_', '-')}={getattr(s, k)}" for k in ("shard_tokens", "warmup_shards",
                                                                          "sigma_shards", "held_out_shards"))])
    one_line_error(capsys, rc, said + " and no copy of a validation text, " + held)


def test_a_study_refused_at_its_first_check_leaves_no_folder(short_own, tmp_path, capsys):
    """A study refused once it had made its --out (stage A's refusal of the corpus) left that folder behind, empty."""
    rc = queue_script("study").main(["--preset", "tiny", "--source", "parquet", "--data-dir", str(short_own),
                                     "--out", str(tmp_path / "s")])
    one_line_error(capsys, rc, "has too few documents for 21 calibration shards")
    assert not (tmp_path / "s").exists()


def test_a_data_folder_of_another_source_says_which_it_holds_and_the_flag_to_give(own, tmp_path, capsys):
    """Before, a parquet study's data folder given without --source (the preset's stdlib) was answered with
    `corpus not prepared (run prepare --source stdlib --data-dir ...)`: wrong advice for a folder holding a parquet
    corpus. The line names the source it holds and the flag; calibrate names its --set."""
    study = queue_script("study")
    said = (f"{own['data'] / 'stdlib' / 'prepared.json'}: no stdlib corpus prepared; {own['data']} holds a prepared "
            "parquet corpus: give")
    for extra in ([], ["--dry-run", "--source", "stdlib"]):
        rc = study.main(["--preset", "tiny", "--data-dir", str(own["data"]), "--out", str(tmp_path / "s"), *extra])
        one_line_error(capsys, rc, said + " --source parquet to use it")
    (tmp_path / "cfg.json").write_text(json.dumps({**CFG, "data_dir": str(own["data"])}))
    rc = cli.main(["calibrate", "--config", str(tmp_path / "cfg.json"), "--out", str(tmp_path / "q")])
    one_line_error(capsys, rc, said + " --set source=parquet to use it")
    assert not (tmp_path / "s").exists() and not (tmp_path / "q").exists()


def test_a_prose_shard_that_cannot_be_planted_is_said_when_calibrating():
    """The prose shard is drawn from documents labelled exactly 'prose': a corpus of other labels plants none, and one
    calibrated on 'prose' plants its own register. Both are said under the calibrate line; a planted one is not."""
    from shardqueue.calibration import describe_calibration, prose_note
    from shardqueue.settings import QueueSettings

    s = QueueSettings(prose_shards=1)
    none = {"roles": {"c0": "calibration", "s0": "candidate"}, "calibration_source": "docs"}
    planted = {"roles": {"c0": "calibration", "r0": "prose"}, "calibration_source": "docs"}
    assert prose_note(s, none).startswith("no document is labelled 'prose': the prose shard")
    assert "own register" in prose_note(s, {**planted, "calibration_source": "prose"})
    assert prose_note(s, planted) == "" == prose_note(QueueSettings(prose_shards=0), none)
    rec = {"k": 2.5, "frac": 0.5, "false_rejections": 0, "transitions": 12, "upper95": 0.221, "sigma": {"docs": 0.01}}
    assert describe_calibration(rec, prose_note(s, none)).splitlines()[1] == f"note: {prose_note(s, none)}"
    assert len(describe_calibration(rec, prose_note(s, planted)).splitlines()) == 1
