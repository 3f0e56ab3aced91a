"""The queue's measurements (issue 18, section 3): dose trials independent of each other,
dose shards with the exact stated harmful share, a token-order check that can fire, and a
pool that does not run dry. The calibrated tiny world comes from tests/test_queue.py."""
import json

import numpy as np
from test_queue import calibrated  # noqa: F401  (the session fixture: a real stage A on the small corpus)

from shardqueue.dose import dose_response, exact_mix


def test_exact_mix_has_the_stated_share_of_harmful_targets():
    harm = [np.array([1, 91, 92, 93, 94]), np.array([1, 95, 96])]
    clean = [np.array([1, 11, 12, 13, 14, 15]), np.array([1, 21, 22, 23, 24, 25])]
    tokens, n = exact_mix(harm, clean, total=12, fraction=0.25)
    # 0.25 x 12 = 3 harmful targets: the start of the first bad document, then 9 clean ones
    assert n == 3 and tokens.tolist() == [1, 91, 92, 1, 11, 12, 13, 14, 15, 1, 21, 22]
    tokens, n = exact_mix(harm, clean, total=12, fraction=0.5)
    assert n == 6 and tokens.tolist() == [1, 91, 92, 93, 94, 1, 1, 11, 12, 13, 14, 15]
    assert exact_mix(harm, clean, 7, 1.0)[1] == 7 and exact_mix(harm, clean, 7, 0.0)[1] == 0


def test_a_dose_trial_does_not_depend_on_the_trials_before_it(calibrated, tmp_path):  # noqa: F811
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


def _inspector(calibrated, out, shuffle=None):  # noqa: F811
    """What inspect_shard reads of a runner, over the calibrated world; `shuffle`: a shard whose
    documents get their tokens (after BOS) put in a seeded random order."""
    from types import SimpleNamespace

    from loaders.stream import DocumentStream
    from shardqueue import api as rq
    from shardqueue.rotation import shard_docs

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
    return SimpleNamespace(world=world, shards=shards, pool=pool, out=out, state={"rejections": {}})


def test_the_token_order_check_fires_on_a_reordered_shard_only(calibrated, tmp_path):  # noqa: F811
    from shardqueue.inspection import inspect_shard

    pool = json.loads((calibrated["dir"] / "pool.json").read_text())
    sid = next(s for s in pool["order"] if not s.startswith("h"))
    _, cause = inspect_shard(_inspector(calibrated, tmp_path / "clean"), sid)
    rep = json.loads((tmp_path / "clean" / "inspection" / f"{sid}.json").read_text())
    assert not cause and not rep["causes"] and abs(rep["unseen_bigram_z"]) < 4, rep["unseen_bigram_z"]
    _, cause = inspect_shard(_inspector(calibrated, tmp_path / "shuffled", shuffle=sid), sid)
    rep = json.loads((tmp_path / "shuffled" / "inspection" / f"{sid}.json").read_text())
    assert cause and any(c.startswith("token order") for c in rep["causes"]), rep["causes"]
    assert rep["unseen_bigram_z"] > 4, rep["unseen_bigram_z"]


def test_a_run_to_the_end_of_its_pool_leaves_no_judged_shard_undecided(calibrated, tmp_path):  # noqa: F811
    from shardqueue import api as rq
    from shardqueue.log import read_log

    # the trigger-happy rule flags nearly every shard; an unlimited budget walks the pool to its end
    summary = rq.run(tmp_path / "dry", calibrated["strict"], budget_targets=10 ** 9, log=lambda s: None, report=False)
    recs = read_log(tmp_path / "dry" / "decisions.jsonl")
    assert not summary["undecided"] and not [r for r in recs if r["event"] == "undecided"]
    assert summary["accepted"] and summary["final"]["official"] > 0


def test_the_main_jobs_pool_is_sized_for_its_budget():
    import main
    from shardqueue.api import candidates_for_budget

    # 24,000 targets in shards of at least 1,500 tokens: 16 accepted shards, plus 3 spare
    assert candidates_for_budget(24000, 1500) == 19 and candidates_for_budget(1501, 1500) == 5
    s = main.queue_stage_settings()
    assert main.QUEUE_BUDGET == 24000 and s.shard_tokens == 1500 and s.candidates == 19
