"""The queue's measurements (issue 18, section 3): dose trials independent of each other,
dose shards with the exact stated harmful share, a token-order check that can fire, and a
pool that does not run dry. The calibrated tiny world comes from tests/test_queue.py."""
import hashlib
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import one_line_error, queue_script

from shardqueue import api as rq
from shardqueue.study.dose import dose_response, exact_mix
from shardqueue.world import corpus_view as world_module
from shardqueue.world.inspection import MEASURES, Z_LIMIT, in_other_references, inspect_shard, judged
from shardqueue.world.rotation import shard_docs, shard_record


def test_exact_mix_has_the_stated_share_of_harmful_targets():
    harm = [np.array([1, 91, 92, 93, 94]), np.array([1, 95, 96])]
    clean = [np.array([1, 11, 12, 13, 14, 15]), np.array([1, 21, 22, 23, 24, 25])]
    tokens, n = exact_mix(harm, clean, total=12, fraction=0.25)
    # 0.25 x 12 = 3 harmful targets: the start of the first bad document, then 9 clean ones
    assert n == 3 and tokens.tolist() == [1, 91, 92, 1, 11, 12, 13, 14, 15, 1, 21, 22]
    tokens, n = exact_mix(harm, clean, total=12, fraction=0.5)
    assert n == 6 and tokens.tolist() == [1, 91, 92, 93, 94, 1, 1, 11, 12, 13, 14, 15]
    assert exact_mix(harm, clean, 7, 1.0)[1] == 7 and exact_mix(harm, clean, 7, 0.0)[1] == 0


def test_a_dose_trial_does_not_depend_on_the_trials_before_it(calibrated, tmp_path):
    quiet = dict(log=lambda s: None)
    alone = dose_response(tmp_path / "a", calibrated["dir"], trials=1, fractions=(0.5,), **quiet)
    after = dose_response(tmp_path / "b", calibrated["dir"], trials=1, fractions=(1.0, 0.5), **quiet)
    t_alone, t_after = alone["rows"][0]["trials"][0], after["rows"][1]["trials"][0]
    # the same shard, dose and start state: bit-identical, whatever ran before
    assert t_alone["max_rise_over_threshold"] == t_after["max_rise_over_threshold"]
    pool = json.loads((calibrated["dir"] / "pool.json").read_text())
    total = next(s["tokens"] for s in pool["shards"] if s["id"] == t_alone["shard"])
    assert t_alone["targets"] == total and t_alone["harmful_targets"] == round(0.5 * total)
    assert after["rows"][0]["realised_share"] == 1.0
    assert "realised share" in (tmp_path / "a" / "dose.md").read_text()


def _inspector(calibrated, shuffle=None):
    """The calibrated world and pool that inspect_shard reads; `shuffle`: a shard whose documents get their
    tokens (after BOS) put in a seeded random order."""
    from loaders.stream import DocumentStream

    cfg, world, pool, calib = rq.open_calibration(calibrated["dir"])
    shards = {s["id"]: s for s in pool["shards"]}
    if shuffle:
        s = world.stream
        arrays, which, starts = s.tokens
        arrays = [np.array(a) for a in arrays]  # writable copies
        rng = np.random.default_rng(0)
        for i in shard_docs(shards[shuffle]):
            a, b = starts[i] + 1, starts[i] + s.lengths[i]
            arrays[which[i]][a:b] = rng.permutation(arrays[which[i]][a:b])
        world.stream = DocumentStream(s.lengths, s.refills, (arrays, which, starts), bos=s.bos, name=s.name)
    return world, pool


def test_the_token_order_check_fires_on_a_reordered_shard_only(calibrated, tmp_path):
    pool = json.loads((calibrated["dir"] / "pool.json").read_text())
    sid = next(s for s in pool["order"] if not s.startswith("h"))
    _, cause = inspect_shard(*_inspector(calibrated), {}, tmp_path / "clean", sid)
    rep = json.loads((tmp_path / "clean" / "inspection" / f"{sid}.json").read_text())
    z = rep["measures"]["unseen_bigrams"]["z"]
    assert not cause and not rep["causes"] and abs(z) < 4, z
    _, cause = inspect_shard(*_inspector(calibrated, shuffle=sid), {}, tmp_path / "shuffled", sid)
    rep = json.loads((tmp_path / "shuffled" / "inspection" / f"{sid}.json").read_text())
    assert cause and any(c.startswith("token order") for c in rep["causes"]), rep["causes"]
    assert rep["measures"]["unseen_bigrams"]["z"] > 4, rep["measures"]["unseen_bigrams"]


def test_a_shard_copying_another_is_named_a_duplicate_against_the_clean_shards(calibrated, tmp_path):
    """A shard made of another pool shard's very documents: every document is found in another shard,
    where no clean shard has one; the report names duplicates, with the clean mean and spread beside it."""
    world, pool = _inspector(calibrated)
    src = next(s for s in pool["order"] if not s.startswith("h"))
    copy = shard_record(world.stream, world.labels_all, shard_docs(next(s for s in pool["shards"] if s["id"] == src)),
                        "x0000")
    pool = {**pool, "shards": pool["shards"] + [copy]}  # a shard of the pool, not a candidate of its order
    _, cause = inspect_shard(world, pool, {}, tmp_path / "dup", "x0000")
    rep = json.loads((tmp_path / "dup" / "inspection" / "x0000.json").read_text())
    m = rep["measures"]["exact_duplicates"]
    assert src in rep["clean_reference"] and "x0000" not in rep["clean_reference"]
    assert m["value"] == 1.0 and m["clean_mean"] == 0.0 and m["over_limit"] and cause
    assert any(c.startswith("duplicates: exact duplicates 1 against clean 0") for c in rep["causes"]), rep["causes"]
    assert set(rep["measures"]) == {name for name, _, _ in MEASURES}
    assert {m["cause"] for m in rep["measures"].values()} >= {"source mix", "language", "register", "duplicates",
                                                              "benchmark overlap", "boilerplate"}


def test_a_measure_is_judged_against_the_clean_spread_not_a_fixed_limit():
    names = [name for name, _, _ in MEASURES]
    counts = {"documents": 40, "characters": 10 ** 6, "tokens": 10 ** 6, "bigrams": 10 ** 6, "lines": 10 ** 6,
              "set 13-grams": 10 ** 6}
    # clean unigram KL 1.2, 1.3, 1.4 (mean 1.3, sd 0.1): 1.8 is z = 5, a cause; 1.5 (over any fixed 1.0) is z = 2
    for kl, z, cause in ((1.8, 5.0, True), (1.5, 2.0, False)):
        v = {n: [0.0, 0.0, 0.0, 0.0] for n in names}
        v["unigram_kl"] = [kl, 1.2, 1.3, 1.4]
        got = judged(v, counts)["unigram_kl"]
        assert got["clean_mean"] == pytest.approx(1.3) and got["clean_sd"] == pytest.approx(0.1)
        assert got["z"] == pytest.approx(z) and got["over_limit"] == cause and Z_LIMIT == 4.0
    # one duplicated document of 40 where no clean shard had one: one document (1/40) is the spread's floor,
    # so z = 1; five of 40 are z = 5
    for share, z in ((1 / 40, 1.0), (5 / 40, 5.0)):
        v = {n: [0.0, 0.0, 0.0] for n in names}
        v["exact_duplicates"] = [share, 0.0, 0.0]
        assert judged(v, counts)["exact_duplicates"]["z"] == pytest.approx(z)
    # found in a reference list other than one's own: the inspected list is checked against all references
    got = in_other_references([np.array([1, 2, 9, 9]), np.array([1, 3, 3]), np.array([3, 4])])
    assert [g.tolist() for g in got] == [[True, False, False, False], [False, True, True], [True, False]]


def test_a_run_to_the_end_of_its_pool_leaves_no_judged_shard_undecided(calibrated, tmp_path_factory):
    from shardqueue.engine.log import read_log
    from test_queue_reference import reference_runs

    # the trigger-happy rule flags nearly every shard and quarantines until the candidates run out: the strict run
    # the reference keeps (made once per process) never reaches its budget (asserted first), so it walks the pool to
    # its end as a run of unlimited budget would: the budget only ends a run (compared record for record with such a
    # run when this test was moved onto the reference's run, 2026-12-07; only budget_targets differed)
    made = reference_runs(calibrated, tmp_path_factory)
    summary, recs = made["summaries"]["queue"], read_log(made["copy"] / "queue" / "decisions.jsonl")
    assert summary.accepted_tokens < recs[0]["budget_targets"] and summary.quarantined
    assert not summary.undecided and not [r for r in recs if r["event"] == "undecided"]
    assert summary.accepted and summary.final.official > 0


def test_the_main_jobs_pool_is_sized_for_its_budget():
    import main
    from shardqueue.api import candidates_for_budget

    # 24,000 targets in shards of at least 1,500 tokens: 16 accepted shards, plus 3 spare
    assert candidates_for_budget(24000, 1500) == 19 and candidates_for_budget(1501, 1500) == 5
    s = main.queue_stage_settings()
    assert main.QUEUE_BUDGET == 24000 and s.shard_tokens == 1500 and s.candidates == 19


def test_dose_trials_draw_different_documents_from_the_file(calibrated, tmp_path):
    """Each trial takes its bad documents in its own seeded order, none twice; what it trained is those
    documents' tokens, recomputed here from the file with the corpus tokenizer."""
    texts = [f"record {k}: " + " ".join(f"zq{k}x{j}" for j in range(8)) for k in range(30)]
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"text": texts}), bad)
    rec = dose_response(tmp_path / "d", calibrated["dir"], trials=2, fractions=(0.5,), log=lambda s: None,
                        harm="parquet", harm_parquet=bad)
    trials = rec["rows"][0]["trials"]
    _, world, _, _ = rq.open_calibration(calibrated["dir"])
    for t in trials:
        drawn = t["harmful_documents"]
        assert len(drawn) == len(set(drawn)) > 1 and drawn != list(range(len(drawn)))  # not the file's start
        toks = np.concatenate([[world.bos] + world.enc.encode_ordinary(texts[i]) for i in drawn]).astype(np.int64)
        assert len(toks) >= t["harmful_targets"] > len(toks) - len(world.enc.encode_ordinary(texts[drawn[-1]])) - 1
        assert hashlib.sha256(toks[: t["harmful_targets"]].tobytes()).hexdigest() == t["harmful_sha256"]
    assert set(trials[0]["harmful_documents"]) != set(trials[1]["harmful_documents"])


def test_a_bad_file_too_small_for_a_dose_is_refused_in_one_line(calibrated, tmp_path, capsys):
    small = tmp_path / "two_words.parquet"
    pq.write_table(pa.table({"text": ["two words"]}), small)
    rc = queue_script("run_queue").main(["dose", "--out", str(tmp_path / "d"), "--calibration", str(calibrated["dir"]),
                                         "--harm", "parquet", "--harm-parquet", str(small), "--trials", "1"])
    one_line_error(capsys, rc, str(small), "never repeated")
    assert not (tmp_path / "d" / "dose.json").exists()


def test_a_world_opened_again_reuses_its_sets_until_the_corpus_is_prepared_anew(calibrated, monkeypatch):
    """The held-out sets are built once per process and prepared corpus (a queue run opens its world many times),
    each world gets its own copy, and another build of the corpus is read again."""
    built = []
    real = world_module.build_sets
    monkeypatch.setattr(world_module, "build_sets", lambda *a, **k: built.append(1) or real(*a, **k))
    world_module._held_out_sets.cache_clear()
    first, again = (rq.open_calibration(calibrated["dir"])[1] for _ in range(2))
    assert len(built) == 1 and first.excluded_sha == again.excluded_sha
    dom = sorted(first.sets["control"])[0]
    assert np.array_equal(first.sets["control"][dom]["x"], again.sets["control"][dom]["x"])
    first.sets["control"][dom]["x"][0, 0] += 1  # one world's change is not the other's
    assert not np.array_equal(first.sets["control"][dom]["x"], again.sets["control"][dom]["x"])
    real_prepared = world_module.Layout.prepared
    monkeypatch.setattr(world_module.Layout, "prepared", lambda lay: {**real_prepared(lay), "build_id": "rebuilt"})
    rq.open_calibration(calibrated["dir"])
    assert len(built) == 2


def test_the_screen_measures_the_pool_sample_once_per_parameter_state(monkeypatch):
    """A rollback returns the model to parameters the pool sample was already measured at: its BPB is read back, not
    measured again (states A, B, A, B, C: three measurements of the pool, five of the shards)."""
    from shardqueue.engine import screen as screen_module

    monkeypatch.setattr(screen_module, "params_sha256", lambda model: model)  # the trainer's "model" is its state
    measured = []

    def bpb(self, trainer, x, y):
        measured.append((trainer.model, x))
        return {"A": 1.0, "B": 2.0, "C": 3.0}[trainer.model] + (0.5 if x == "shard" else 0.0)

    monkeypatch.setattr(screen_module.Screen, "_bpb", bpb)
    monkeypatch.setattr(screen_module.Screen, "pool_rows", lambda self: ("pool", None))
    screen = screen_module.Screen(world=None, pool=None, rows=lambda sid: ("shard", None))
    got = [screen(type("Trainer", (), {"model": state})(), "s1") for state in "ABABC"]
    assert [m for m in measured if m[1] == "pool"] == [("A", "pool"), ("B", "pool"), ("C", "pool")]
    assert len([m for m in measured if m[1] == "shard"]) == 5
    assert [g["pool_bpb"] for g in got] == [1.0, 2.0, 1.0, 2.0, 3.0] and all(g["score"] == 0.5 for g in got)
