"""The rollback shard queue: rotation manifests, the rule, rollback, deferral, quarantine, log, resume."""
import json
import sys

import numpy as np
import pytest
import torch

from conftest import ROOT

sys.path.insert(0, str(ROOT / "queue"))  # queue/ is a folder of scripts, never a package shadowing `queue`

from control_domains import build_controls, measure  # noqa: E402
from decision_log import read_log, reconstruct  # noqa: E402
from rejection_rule import calibrate, false_rejections, rises  # noqa: E402
from run_queue import QueueRunner, return_from_quarantine  # noqa: E402
from shard_rotation import build_rotation, load_rotation, save_rotation, shard_docs, source_labels  # noqa: E402

from corpus.errors import DataError  # noqa: E402
from corpus.layout import Layout  # noqa: E402
from corpus.tokenizer import load_token_bytes  # noqa: E402
from loaders.stream import open_split  # noqa: E402
from training.config import resolve_config  # noqa: E402


def test_standard_library_queue_still_wins():
    import queue

    assert hasattr(queue, "Queue") and "site-packages" not in queue.__file__ and "/queue/" not in queue.__file__


@pytest.fixture(scope="module")
def world(small_corpus):
    lay = Layout(small_corpus, "stdlib")
    train = open_split(small_corpus, "stdlib", "train")
    labels = source_labels(lay, "train")
    val = open_split(small_corpus, "stdlib", "val")
    controls = build_controls(val, source_labels(lay, "val"), 32, per_domain=8)
    cfg = resolve_config(None, [f"{k}={v}" for k, v in dict(
        depth=1, width=32, heads=2, kv_heads=2, context=32, short_window=16, vocab=400, micro_rows=8, accum=1, muon_lr=0.01,
        updates=1000, buffer=20, data_dir=str(small_corpus)).items()])
    return {"lay": lay, "train": train, "labels": labels, "controls": controls, "cfg": cfg,
            "tb": load_token_bytes(lay.tokenizer)}


def test_rotation_is_document_aligned_hashed_and_frozen(world, tmp_path):
    train, labels = world["train"], world["labels"]
    docs = list(range(0, train.n, 2))
    m = build_rotation(train, labels, 3000, seed=5, docs=docs)
    covered = sorted(i for s in m["shards"] for i in shard_docs(s))
    assert covered == docs
    assert all(s["tokens"] >= 3000 for s in m["shards"])
    assert all(sum(s["sources"].values()) == s["documents"] for s in m["shards"])
    assert m == build_rotation(train, labels, 3000, seed=5, docs=docs)
    assert m["order"] != build_rotation(train, labels, 3000, seed=6, docs=docs)["order"]
    save_rotation(tmp_path / "r.json", m)
    assert load_rotation(tmp_path / "r.json", train)["order"] == m["order"]
    text = (tmp_path / "r.json").read_text()
    (tmp_path / "r.json").write_text(text.replace(m["order"][0], m["order"][1], 1))
    with pytest.raises(DataError, match="does not match the frozen"):
        load_rotation(tmp_path / "r.json")
    m["shards"][0]["sha256"] = "0" * 64
    save_rotation(tmp_path / "r2.json", m)
    with pytest.raises(DataError, match="SHA256 differs"):
        load_rotation(tmp_path / "r2.json", train)


def test_rule_and_calibration_on_constructed_sequences():
    sigma = {"a": 0.1, "b": 0.1}
    assert rises({"a": 1.0, "b": 1.0}, {"a": 1.31, "b": 1.29}, sigma, 3) == ["a"]
    # shard 2 rises and recovers after shard 3 (both accepted); shard 4 rises and stays up after
    # shard 5 (rejected; 5 only served as its recovery test) -> 1 rejection among 4 judged shards
    L = [{"a": 1.0}, {"a": 0.95}, {"a": 1.4}, {"a": 1.0}, {"a": 1.5}, {"a": 1.45}]
    assert false_rejections(L, {"a": 0.1}, 3) == pytest.approx(1 / 4)
    assert false_rejections(L, {"a": 0.2}, 3) == 0.0
    rng = np.random.default_rng(0)
    walk = [{"a": float(x), "b": float(y)} for x, y in np.cumsum(rng.normal(0, 0.01, (30, 2)), axis=0) + 3]
    c = calibrate(walk)
    assert c["sigma"]["a"] == pytest.approx(np.std(np.diff([w["a"] for w in walk]), ddof=1))
    assert c["k"] == 3.0 and c["false_rejection_rates"][3.0] < 0.05


def test_reconstruct_rejects_an_impossible_log():
    with pytest.raises(ValueError, match="takes b but the front is"):
        reconstruct(["a", "b"], [{"seq": 1, "event": "take", "shard": "b"}])


def _runner(world, out, poison="P", offset=5.0, warm=True):
    """A real tiny model on real shards, warmed up on two shards first; the measurement adds a
    persistent rise while the current (not rolled back) history holds the poison shard, so
    its rejection is certain while every other decision comes from real losses."""
    train, labels = world["train"], world["labels"]
    m = build_rotation(train, labels, 1500, seed=11, docs=range(0, 90))
    warmup, m["shards"] = m["shards"][:2], m["shards"][2:7]
    for k, sh in enumerate(m["shards"]):
        sh["id"] = poison if k == 2 else f"s{k:04d}"
    m["order"] = [sh["id"] for sh in m["shards"]]  # s0000 s0001 P s0003 s0004
    calib = {"k": 3.0, "sigma": {d: 1.0 for d in world["controls"]}}

    def measured(model, history):
        real = measure(model, world["controls"], world["tb"], "cpu")
        return {d: v + (offset if poison in history else 0.0) for d, v in real.items()}

    r = QueueRunner(world["cfg"], train, {**m, "shards": m["shards"] + warmup}, world["controls"], world["tb"], calib,
                    out, measure_fn=measured, log=lambda s: None)
    if warm:
        for k, sh in enumerate(warmup):
            sh["id"] = f"w{k}"
            r.shards[sh["id"]] = sh
            r.train_shard(sh["id"])
        r.history = []
    return r


def test_rejected_shard_is_rolled_back_exactly_deferred_then_quarantined(world, tmp_path):
    r = _runner(world, tmp_path)
    seen = []
    orig = r.train_shard
    r.train_shard = lambda sid: (seen.append(sid), orig(sid))[1]
    dlog = r.run(accept_budget=10)
    events = read_log(tmp_path / "decisions.jsonl")
    # the intended sequence: P flagged, s0003 tests recovery, rollback, s0003 back to the front, P deferred;
    # rotation 2 holds P alone; flagged again with nothing to test recovery -> quarantined
    assert seen == ["s0000", "s0001", "P", "s0003", "s0003", "s0004", "P"]
    rejects = [(e["shard"], e["outcome"]) for e in events if e["event"] == "reject"]
    assert rejects == [("P", "deferred"), ("P", "quarantined")]
    assert r.state["accepted"] == ["s0000", "s0001", "s0003", "s0004"] and r.state["quarantined"] == ["P"]
    # the rollback returns to the update count of the state accepted just before P
    rb = next(e for e in events if e["event"] == "rollback")
    assert rb["to_step"] == sum(r.updates_for(s) for s in ("w0", "w1", "s0000", "s0001"))
    st = reconstruct([s for s in r.manifest["order"]], events)
    assert {k: st[k] for k in ("pending", "next_rotation", "quarantined", "accepted")} == \
           {k: events[-1]["queue"][k] for k in ("pending", "next_rotation", "quarantined", "accepted")}
    assert all("sha256" in e for e in events if e.get("shard"))
    # one return from quarantine, and only one
    assert return_from_quarantine(tmp_path, "P") == 0
    assert read_log(tmp_path / "decisions.jsonl")[-1]["event"] == "return"
    with pytest.raises(DataError, match="not in quarantine"):
        return_from_quarantine(tmp_path, "P")
    assert dlog.seq == events[-1]["seq"]


def test_rollback_restores_parameters_bitwise(world, tmp_path):
    r = _runner(world, tmp_path)
    states = {}
    orig_checkpoint = r.checkpoint

    def spy(seq):
        orig_checkpoint(seq)
        states[tuple(r.history)] = {k: v.clone() for k, v in r.trainer.model.state_dict().items()}

    r.checkpoint = spy
    orig_restore = r.restore
    restored = []

    def restore_spy(snap):
        orig_restore(snap)
        restored.append({k: v.clone() for k, v in r.trainer.model.state_dict().items()})

    r.restore = restore_spy
    r.run(accept_budget=10)
    before_p = states[("s0000", "s0001")]  # the state accepted just before P
    first = restored[0]
    assert all(torch.equal(first[k], before_p[k]) for k in before_p)


def test_interrupted_queue_resumes_to_the_same_end(world, tmp_path):
    full = _runner(world, tmp_path / "full")
    full.run(accept_budget=10)
    cut = _runner(world, tmp_path / "cut")
    calls = {"n": 0}
    orig = cut.train_shard

    def dying(sid):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return orig(sid)

    cut.train_shard = dying
    with pytest.raises(KeyboardInterrupt):
        cut.run(accept_budget=10)
    again = _runner(world, tmp_path / "cut")
    again.run(accept_budget=10, resume=True)
    assert again.state == full.state
    a, b = full.trainer.model.state_dict(), again.trainer.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    ev_full = [(e["event"], e.get("shard")) for e in read_log(tmp_path / "full" / "decisions.jsonl")]
    ev_cut = [(e["event"], e.get("shard")) for e in read_log(tmp_path / "cut" / "decisions.jsonl")]
    assert ev_full == ev_cut


def test_cli_end_to_end_with_real_measurements(world, small_corpus, tmp_path):
    from run_queue import main as queue_main

    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({**world["cfg"].to_dict(), "data_dir": str(small_corpus)}))
    common = ["--config", str(cfg), "--out", str(tmp_path / "q"), "--shard-tokens", "1500"]
    assert queue_main(["calibrate", *common, "--calibration-shards", "4", "--warmup-shards", "1"]) == 0
    calib = json.loads((tmp_path / "q" / "calibration.json").read_text())
    assert set(calib["sigma"]) == set(world["controls"]) and calib["k"] >= 3.0
    assert queue_main(["run", *common, "--accept", "3", "--poison", "1", "--decay-updates", "2"]) == 0
    events = read_log(tmp_path / "q" / "decisions.jsonl")
    assert events[0]["event"] == "start" and events[-1]["event"] == "done"
    assert any(e["event"] == "decay" for e in events)
    assert queue_main(["reconstruct", "--out", str(tmp_path / "q")]) == 0
    man = load_rotation(tmp_path / "q" / "rotation.json")
    assert any(s["id"].startswith("p") for s in man["shards"])
    assert not set(calib["used_documents"]) & {i for s in man["shards"] for i in shard_docs(s)}
