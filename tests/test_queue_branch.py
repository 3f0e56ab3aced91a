"""The branch check that tells the source from the training phase, and recovery that a harmful
shard cannot provide (issue 28, items 4, 5 and 11; issue 31's first-rotation branch check).

A uniformly harmful source (two shards through harmful.py's cipher) is rejected by the clean
branch check where the proposal's literal check returns it, on a real tiny model; the rest
runs on scripted control losses (training only counts targets), so each decision is placed
exactly where the rule puts it. The calibrated tiny world comes from tests/test_queue.py."""
import pytest

from errors import DataError
from shardqueue import api as rq
from shardqueue.calibration import calibrated_state
from shardqueue.checks.replay import check_branch, check_records_strictly
from shardqueue.engine import recovery as queue_recovery
from shardqueue.engine.log import DecisionLog, read_log
from shardqueue.engine.runner import Runner
from shardqueue.engine.training import one_thread
from shardqueue.checks.run_summary import deferred_pending
from shardqueue.world.harmful import with_harmful_copies
from shardqueue.world.rotation import main_source, shard_docs, shard_record

BASE = 5.0  # the scripted start loss of every domain
SECONDS = 0.1234567  # every scripted shard's training time (a branch record rounds their sum)
SCREEN = {"shard_bpb": 0.0, "pool_bpb": 0.0, "score": 0.0}  # the scripted screen: a forward pass nothing here reads


@pytest.fixture(scope="module")
def world(calibrated):
    return rq.open_calibration(calibrated["dir"])


def with_mode(calib, mode):
    """The calibration with its branch-check setting (a typed queue setting) set to mode."""
    return {**calib, "plan": {**calib["plan"], "settings": {**calib["plan"]["settings"], "branch_check": mode}}}


class Stop(Exception):
    pass


def scripted(world, out, script, mode="clean", stop=None, replay=True, **kw):
    """A runner whose training only counts targets and whose control losses are scripted:
    script(runner, shard, phase) is the rise over the reference in units of k * sigma_d (a number:
    every domain alike; a dict: per domain, 0 for the others); phase is candidate, recovery, or the branch's kind (clean, source). stop(runner)
    ends the run before the next candidate. replay: check the log as `reconstruct` does (not where
    the script edits the queue's state behind the log's back)."""
    cfg, w, pool, calib = world
    calib = with_mode(calib, mode)
    r = Runner(cfg, w, pool, calib, out, rq.RunPlan(**kw), log=lambda s: None)
    now = {"branch": None, "last": None}

    def train_shard(sid, *a, **k):
        now["last"] = (sid, now["branch"] or ("recovery" if r.state["flagged"] else "candidate"))
        n = r.shards[sid]["tokens"]
        r.step, r.targets = r.step + 1, r.targets + n
        r.spent["updates"] += 1
        r.spent["targets"] += n
        return {"train_loss": 0.0, "updates": 1, "targets": n, "seconds": SECONDS}

    def measure(model):
        if now["last"] is None:
            return {d: BASE for d in calib["sigma"]}
        rise = script(r, *now["last"])
        rise = rise if isinstance(rise, dict) else dict.fromkeys(r.ref, rise)  # a number: every domain alike
        return {d: r.ref[d] + rise.get(d, 0.0) * calib["k"] * calib["sigma"][d] for d in r.ref}

    def branch_on(b, kind, flagged):
        now["branch"] = kind
        try:
            return Runner.branch_on(r, b, kind, flagged)
        finally:
            now["branch"] = None

    def candidate_step():
        if stop and stop(r):
            raise Stop
        Runner.candidate_step(r)

    r.train_shard, r.measure_fn, r.branch_on, r.candidate_step = train_shard, measure, branch_on, candidate_step
    r.screen = lambda sid: dict(SCREEN)
    try:
        with one_thread():
            r.run()
    except Stop:
        pass
    recs = read_log(out / "decisions.jsonl")
    if replay:  # the log replays: its states, the rule's flags and recoveries, the branch verdicts
        check_records_strictly(recs, pool, calib, out)
    return r, recs


def first_source(r, sid):
    return main_source(r.shards[sid])  # pinned by hand in test_main_source_is_the_largest_share_not_the_last_name


# (mode, rise of the clean branch, rise of the same-source branch) -> (verdict, outcome, branches trained);
# the flagged shard rose 2 x k * sigma_d and its recovery left it 1.5 x (over frac = 0.5 of the threshold)
@pytest.mark.parametrize("mode,clean,source,verdict,outcome,kinds", [
    ("clean", 2.0, 2.0, "phase", "returned", ["clean"]),   # a clean shard rises as much: the phase
    ("clean", 2.0, 0.0, "phase", "returned", ["clean"]),
    ("clean", 0.0, 2.0, "source", "deferred", ["clean", "source"]),  # only the source rises: rejected
    ("clean", 0.0, 0.0, "shard", "deferred", ["clean", "source"]),
    ("clean", 0.9, 2.0, "source", "deferred", ["clean", "source"]),  # under the threshold is not "as much"
    ("clean", {"comments": 2.0}, 2.0, "source", "deferred", ["clean", "source"]),  # one flagged domain of five
    ("literal", 0.0, 2.0, "phase", "returned", ["source"]),  # the proposal's check: a same-source rise excuses
    ("literal", 2.0, 0.0, "shard", "deferred", ["source"]),
])
def test_the_branch_check_blames_the_phase_only_when_its_branch_rises_as_much(world, tmp_path, mode, clean, source,
                                                                           verdict, outcome, kinds):
    flagged = {}

    def script(r, sid, phase):
        if phase == "candidate" and not flagged:
            if any(first_source(r, s) == first_source(r, sid) for s in r.state["pending"] + r.state["fresh"]):
                flagged["sid"] = sid  # the first candidate with a sibling of its source left to branch on
                return 2.0
        if phase == "recovery":
            return 1.5
        return {"clean": clean, "source": source}.get(phase, 0.0)

    r, recs = scripted(world, tmp_path / "q", script, mode, stop=lambda r: bool(r.state["next_rotation"]))
    branch = next(x for x in recs if x["event"] == "branch")
    reject = next(x for x in recs if x["event"] == "reject")
    assert branch["shard"] == reject["shard"] == flagged["sid"] and branch["mode"] == mode
    assert [b["kind"] for b in branch["branches"]] == kinds and branch["verdict"] == verdict
    assert reject["outcome"] == outcome
    pool = world[2]
    front = next(x for x in recs if x["event"] == "return_front")["shard"]  # the reserve's front once more
    for b in branch["branches"]:  # the clean branch trains a reserve shard; the other, a candidate of the source
        assert (b["shard"] in pool["reserve"]) == (b["kind"] == "clean")
        assert b["kind"] != "clean" or b["shard"] == front
        if b["kind"] == "source":
            assert first_source(r, b["shard"]) == first_source(r, flagged["sid"]) and b["shard"] != flagged["sid"]
    # every branch was rolled back: the state after the check is the pre-shard one
    assert branch["params_sha256"] == next(x for x in recs if x["event"] == "rollback")["params_sha256"]


def test_main_source_is_the_largest_share_not_the_last_name():
    assert main_source({"sources": {"library": 14, "test": 9}}) == "library"
    assert main_source({"sources": {"prose": 3, "library": 3, "test": 1}}) == "prose"  # a tie: the first listed


def test_the_literal_check_with_no_other_shard_of_the_source_counts_the_rejection(world, tmp_path):
    """The proposal's check has nothing to branch on when the flagged shard's source has no other shard
    left: it says so in a branch record, and the rejection counts (deferred)."""
    flagged = {}

    def script(r, sid, phase):
        if phase == "candidate" and not flagged:
            flagged["sid"], src = sid, first_source(r, sid)
            for key in ("pending", "fresh", "next_rotation"):  # the source's other shards are gone from the pool
                r.state[key] = [s for s in r.state[key] if s == sid or first_source(r, s) != src]
            return 2.0
        return 1.5 if phase == "recovery" else 0.0

    r, recs = scripted(world, tmp_path / "q", script, "literal", stop=lambda r: bool(r.state["rejections"]), replay=False)
    branch = next(x for x in recs if x["event"] == "branch")
    reject = next(x for x in recs if x["event"] == "reject")
    src = first_source(r, flagged["sid"])
    assert (branch["shard"], branch["possible"], branch["mode"], branch["source"]) == (flagged["sid"], False, "literal", src)
    assert branch["note"] == f"no other shard of source {src!r} is left in the pool" and "branches" not in branch
    assert (reject["shard"], reject["outcome"]) == (flagged["sid"], "deferred") and r.state["rejections"] == {flagged["sid"]: 1}


def test_the_branch_check_runs_for_first_rotation_rejections_only(world, tmp_path):
    """Issue 31: the first candidate of rotation 1 and a fresh one of rotation 2 are each rejected for
    the first time, and a clean branch would rise as much each time. Only the rotation-1 rejection is
    branch-checked (and returned); the rotation-2 one is deferred without a branch."""
    marks = {}

    def script(r, sid, phase):
        if phase == "candidate":
            rot = r.state["rotation"]
            if rot in (1, 2) and rot not in marks and sid not in marks.values():
                marks[rot] = sid
            return 2.0 if marks.get(rot) == sid else 0.0
        return 1.5 if phase == "recovery" else 2.0  # recovery leaves it up; a clean branch rises as much

    r, recs = scripted(world, tmp_path / "q", script, rotation_shards=3, stop=lambda r: bool(r.state["rejections"]))
    rot_of = {}
    for x in recs:
        if x["event"] in ("branch", "reject"):
            rot_of.setdefault(x["shard"], []).append((x["event"], x["queue"]["rotation"], x.get("outcome")))
    assert rot_of[marks[1]] == [("branch", 1, None), ("reject", 1, "returned")]
    assert rot_of[marks[2]] == [("reject", 2, "deferred")]
    assert r.state["rejections"] == {marks[2]: 1}


def test_recovery_is_tested_on_the_reserve_never_on_a_candidate(world, tmp_path):
    """Every flag is tested on the reserve's front, rolled-back recovery shards go back to that front,
    and accepted ones to its back; no candidate is ever a recovery shard."""
    n = {"flags": 0}

    def script(r, sid, phase):
        if phase == "candidate":
            n["flags"] += 1
            return 2.0 if n["flags"] <= 4 else 0.0
        if phase == "recovery":  # the first two flags recover, the next two do not
            return 0.0 if n["flags"] <= 2 else 1.5
        return 0.0

    r, recs = scripted(world, tmp_path / "q", script, branch_check=False, stop=lambda r: n["flags"] >= 5)
    reserve = world[2]["reserve"]
    used = [x["shard"] for x in recs if x["event"] == "train" and x["role"] == "recovery"]
    # recovered twice (r0 then r1 join the history and the back), then r2 tested twice, rolled back each time
    assert used == [reserve[0], reserve[1], reserve[2], reserve[2]]
    assert r.state["reserve"] == reserve[2:] + reserve[:2]
    accepted_recovery = [x["shard"] for x in recs if x["event"] == "accept" and x.get("role") == "recovery"]
    assert accepted_recovery == reserve[:2] and set(reserve[:2]) <= set(r.state["accepted"])
    assert not set(used) & {x["shard"] for x in recs if x["event"] == "train" and x["role"] == "candidate"}


def test_a_uniformly_harmful_source_is_rejected_by_the_clean_check_and_returned_by_the_literal_one(calibrated,
                                                                                                  tmp_path):
    """Two shards of one cipher source (harmful.py: every shard damaged alike), on the real tiny model
    from the calibrated state: the first is flagged, its recovery shard is a reserve shard (not its
    harmful sibling, the queue's next front), and it stays up. The literal check branches on the
    sibling, sees the same rise and returns the shard; the clean check's reserve branch does not rise,
    so the rejection counts.

    sigma_d is set to 0.02 BPB (k = 3): from this state the pool's clean shards and the reserve move
    the code domains by under 0.05 and the cipher raises them by 0.10 to 0.24 (the tiny calibration's
    own sigma, 0.25 to 0.3 from warm-up transitions, would flag nothing)."""
    cfg, w, pool, calib = rq.open_calibration(calibrated["dir"])
    ordinary = [s for s in pool["shards"] if s["id"] in pool["order"] and not s["id"].startswith("h")]
    docs = shard_docs(ordinary[0]) + shard_docs(ordinary[1])
    # the pool's own cipher (its seed) over two more shards' documents: the same source as h0000
    w.stream, w.labels_all, copies = with_harmful_copies(w.stream, w.labels_all, docs, pool["seed"] + 7, cfg.vocab)
    half = len(shard_docs(ordinary[0]))
    harm = [shard_record(w.stream, w.labels_all, copies[:half], "h0100"),
            shard_record(w.stream, w.labels_all, copies[half:], "h0101")]
    pool = {**pool, "shards": pool["shards"] + harm}
    outcomes = {}
    for mode in ("literal", "clean"):
        rule = {"k": 3.0, "frac": 0.5, "sigma": {d: 0.02 for d in calib["sigma"]}}
        r = Runner(cfg, w, pool, {**with_mode(calib, mode), **rule}, tmp_path / mode, log=lambda s: None)
        r.start_from(calibrated_state(calibrated["dir"], calib))
        r.dlog = DecisionLog(tmp_path / mode / "decisions.jsonl")
        r.ref = r.measure_fn(r.trainer.model)
        r.state.update(rotation=1, pending=["h0100", "h0101"] + ordinary_ids(pool, 2), fresh=[])
        with one_thread():  # as api.run: the tiny model's matmuls are far slower on two threads
            r.candidate_step()
            r.recovery_step()
        recs = read_log(tmp_path / mode / "decisions.jsonl")
        cand = next(x for x in recs if x["event"] == "train" and x["role"] == "candidate")
        recovery = next(x for x in recs if x["event"] == "train" and x["role"] == "recovery")
        branch = next(x for x in recs if x["event"] == "branch")
        assert cand["shard"] == "h0100" and cand["flagged"], cand["deltas"]
        assert recovery["shard"] == pool["reserve"][0] and recovery["unrecovered"]
        assert r.state["pending"][0] == "h0101"  # the sibling was not used up as a recovery shard
        outcomes[mode] = (next(x for x in recs if x["event"] == "reject")["outcome"], branch["verdict"],
                          {b["kind"]: b["rose"] for b in branch["branches"]})
    assert outcomes["literal"] == ("returned", "phase", {"source": True})
    assert outcomes["clean"] == ("deferred", "source", {"clean": False, "source": True})


def ordinary_ids(pool, n):
    return [s for s in pool["order"] if not s.startswith(("h", "r"))][2:2 + n]


def test_deferred_pending_lists_every_deferred_shard_still_waiting():
    """A shard deferred in rotation 1 whose rotation 2 began but never reached it is still waiting,
    as is one returned by the branch check to the next rotation; a deferred shard judged since is not."""
    def q(pending, nxt):
        return {"pending": pending, "next_rotation": nxt}

    recs = [{"event": "start", "queue": q([], [])},
            {"event": "reject", "shard": "a", "outcome": "deferred", "queue": q(["x"], ["a"])},
            {"event": "reject", "shard": "b", "outcome": "deferred", "queue": q(["x"], ["a", "b"])},
            {"event": "rotation", "queue": q(["c", "a", "b"], [])},
            {"event": "accept", "shard": "c", "queue": q(["a", "b"], [])},
            {"event": "accept", "shard": "a", "queue": q(["b"], [])},
            {"event": "reject", "shard": "d", "outcome": "returned", "queue": q(["b", "e"], ["d"])}]
    # e is fresh (never judged), a was accepted: neither is waiting after a deferral
    assert deferred_pending(recs) == ["b", "d"]


def test_reconstruct_checks_a_branch_records_rises_and_verdict_against_the_rule():
    """Hand-worked: reference 1.0, sigma 0.1, k 2 (threshold 0.2), flagged domain a."""
    def rec(verdict, clean_loss, clean_rose, source_loss=None, source_rose=None, mode="clean"):
        b = [{"kind": "clean", "shard": "c", "losses": {"a": clean_loss}, "deltas": {"a": clean_loss - 1.0},
              "rose": clean_rose}]
        if source_loss is not None:
            b.append({"kind": "source", "shard": "s", "losses": {"a": source_loss}, "deltas": {"a": source_loss - 1.0},
                      "rose": source_rose})
        return {"mode": mode, "branches": b if mode == "clean" else b[1:], "verdict": verdict}

    args = ({"a": 1.0}, {"a": 0.1}, 2.0, ["a"])
    assert check_branch(rec("phase", 1.25, True), *args, "clean", "r") == "phase"
    assert check_branch(rec("source", 1.1, False, 1.3, True), *args, "clean", "r") == "source"
    assert check_branch(rec("phase", 1.1, False, 1.3, True, mode="literal"), *args, "literal", "r") == "phase"
    for bad, needle in ((rec("phase", 1.15, True), "rose True is not what the rule gives"),
                        (rec("shard", 1.1, False, 1.3, True), "verdict shard is not what the branches give"),
                        (rec("phase", 1.25, True), "a clean branch check in a run started with literal")):
        with pytest.raises(DataError, match=needle):
            check_branch(bad, *args, "literal" if "literal" in needle else "clean", "r")


@pytest.mark.parametrize("clean, source, verdict, outcome, edited", [
    (2.0, 0.0, "phase", "returned", "deferred"),  # the phase was blamed: rejecting it is refused
    (0.0, 2.0, "source", "deferred", "returned"),  # the source was blamed: returning it is refused
])
def test_reconstruct_refuses_a_rejection_outcome_that_its_branch_verdict_does_not_give(world, tmp_path, clean, source,
                                                                                    verdict, outcome, edited):
    """The first candidate with a sibling of its source rises 2 x k * sigma_d and stays 1.5 x after
    recovery; a clean branch rising as much blames the phase (the shard is returned), only the
    source's branch rising blames the source (deferred). The log cut after its reject record replays;
    with the outcome swapped it is refused, naming the record, the outcome and the verdict."""
    flagged = {}

    def script(r, sid, phase):
        if phase == "candidate" and not flagged:
            if any(first_source(r, s) == first_source(r, sid) for s in r.state["pending"] + r.state["fresh"]):
                flagged["sid"] = sid
                return 2.0
        if phase == "recovery":
            return 1.5
        return {"clean": clean, "source": source}.get(phase, 0.0)

    _, recs = scripted(world, tmp_path / "q", script, stop=lambda r: bool(r.state["next_rotation"]))
    i = next(j for j, x in enumerate(recs) if x["event"] == "reject")
    assert next(x for x in recs if x["event"] == "branch")["verdict"] == verdict and recs[i]["outcome"] == outcome
    pool, calib = world[2], with_mode(world[3], "clean")
    check_records_strictly(recs[:i + 1], pool, calib, tmp_path / "q")  # the cut log replays as it is
    swapped = recs[:i] + [{**recs[i], "outcome": edited}]  # the last record: nothing chains to it
    with pytest.raises(DataError, match=f"^record {recs[i]['seq']} \\(reject\\): outcome {edited} after a branch "
                                        f"verdict {verdict}$"):
        check_records_strictly(swapped, pool, calib, tmp_path / "q")


def test_a_rejection_and_a_recovery_record_what_happened_field_by_field(world, tmp_path):
    """The first candidate rises 2 x k * sigma_d in every domain and stays 1.5 x after its recovery
    shard (over frac = 0.5): rolled back, branch-checked (neither branch rises: the shard is blamed),
    deferred. The next candidate rises alike and recovers (0): both it and its recovery shard are
    accepted. The scripted training moves no parameter, so every parameter hash is the start's."""
    n = {"candidates": 0}

    def script(r, sid, phase):
        if phase == "candidate":
            n["candidates"] += 1
            return 2.0 if n["candidates"] <= 2 else 0.0
        if phase == "recovery":
            return 1.5 if n["candidates"] == 1 else 0.0
        return 0.0

    r, recs = scripted(world, tmp_path / "q", script, stop=lambda r: n["candidates"] >= 2 and not r.state["flagged"])
    calib, start = world[3], recs[0]
    first = next(x for x in recs if x["event"] == "train" and x["role"] == "candidate")
    sid, domains = first["shard"], sorted(calib["sigma"])
    events = [(x["event"], x.get("shard"), x.get("role")) for x in recs if x["event"] not in ("start", "rotation")]
    rec0, rec1 = world[2]["reserve"][:2]
    second = [x["shard"] for x in recs if x["event"] == "train" and x["role"] == "candidate"][1]
    branch_shards = [b["shard"] for b in next(x for x in recs if x["event"] == "branch")["branches"]]
    assert events == [("train", sid, "candidate"), ("train", rec0, "recovery"), ("rollback", sid, None),
                      ("return_front", rec0, None), ("branch", sid, None), ("reject", sid, None),
                      ("train", second, "candidate"), ("train", rec0, "recovery"), ("accept", second, None),
                      ("accept", rec0, "recovery")]
    by = {(x["event"], x.get("shard"), x.get("role")): x for x in recs}
    recovery = next(x for x in recs if x["event"] == "train" and x["role"] == "recovery")
    assert recovery["tested"] == sid and recovery["flagged"] == [] and recovery["screen"] == SCREEN
    assert sorted(recovery["unrecovered"]) == domains == sorted(first["flagged"])
    assert recovery["limits"] == {d: calib["frac"] * calib["k"] * calib["sigma"][d] for d in domains}
    # rolled back to the step before the candidate (the start's: it was the first) and its parameters
    rollback = by[("rollback", sid, None)]
    assert (rollback["to_step"], rollback["params_sha256"]) == (start["start_step"], start["params_sha256"])
    branch = by[("branch", sid, None)]
    assert (branch["possible"], branch["source"], branch["verdict"]) == (True, main_source(r.shards[sid]), "shard")
    assert branch["updates"] == 2 and branch["targets"] == sum(r.shards[b]["tokens"] for b in branch_shards)
    assert branch["seconds"] == round(2 * SECONDS, 3) == 0.247 and branch["params_sha256"] == start["params_sha256"]
    assert by[("reject", sid, None)]["outcome"] == "deferred"
    assert by[("accept", second, None)]["note"] == "recovered" and by[("accept", rec0, "recovery")]["note"] == "recovery shard"
    assert rec1 == r.state["reserve"][0]  # the accepted recovery shard went to the reserve's back


def test_random_rejection_keeps_its_flag_through_a_recovery_the_rule_would_pass(world, tmp_path):
    """Arm C's policy: a drawn rejection is not judged by the rule; its recovery shard is trained and
    the shard rejected whatever the losses do (here every loss stays at the reference)."""
    r, recs = scripted(world, tmp_path / "q", lambda r, sid, phase: 0.0, policy="random", reject_rate=0.999999,
                       branch_check=False, stop=lambda r: bool(r.state["rejections"]))
    recovery = next(x for x in recs if x["event"] == "train" and x["role"] == "recovery")
    reject = next(x for x in recs if x["event"] == "reject")
    assert recovery["unrecovered"] == reject["unrecovered"] == ["random"] == reject["flagged"]
    assert reject["shard"] == recovery["tested"] and reject["outcome"] == "deferred"


def test_a_flag_with_no_reserve_shard_left_is_rolled_back_and_left_undecided(world, tmp_path):
    """Unreachable through run() (a candidate starts only while the reserve holds a shard, and the
    reserve never shrinks), but recovery_step says what it did if a state ever lacks one."""
    def script(r, sid, phase):
        r.state["reserve"] = []
        return 2.0

    r, recs = scripted(world, tmp_path / "q", script, stop=lambda r: r.state["candidates"] >= 1, replay=False)
    sid = next(x for x in recs if x["event"] == "train")["shard"]
    rollback, undecided = (next(x for x in recs if x["event"] == e) for e in ("rollback", "undecided"))
    assert (rollback["shard"], rollback["to_step"], rollback["params_sha256"]) == (sid, 0, recs[0]["params_sha256"])
    assert (undecided["shard"], undecided["note"]) == (sid, "no shard left to test recovery with")
    assert r.step == 0 and [x["event"] for x in recs][-2:] == ["rollback", "undecided"]


def test_a_second_rejection_quarantines_the_shard_and_inspects_it(world, tmp_path, monkeypatch):
    """One shard rises 2 x k * sigma_d whenever it is trained and never recovers: deferred in
    rotation 1, quarantined in rotation 2 (with its inspection record); nothing else is rejected.
    The inspection itself (tests/test_queue.py) is replaced by its answer: seconds of n-grams here."""
    monkeypatch.setattr(queue_recovery, "inspect_shard",
                        lambda world, pool, rejections, out, sid: (f"inspect_{sid}.md", rejections.get(sid) == 2))
    bad = {}

    def script(r, sid, phase):
        if phase == "candidate":
            bad.setdefault("sid", sid)
            return 2.0 if sid == bad["sid"] else 0.0
        return 1.5 if phase == "recovery" else 0.0

    r, recs = scripted(world, tmp_path / "q", script, branch_check=False, rotation_shards=3,
                       stop=lambda r: bool(r.state["quarantined"]))
    rejects = [(x["shard"], x["outcome"], x["queue"]["rotation"]) for x in recs if x["event"] == "reject"]
    assert rejects == [(bad["sid"], "deferred", 1), (bad["sid"], "quarantined", 2)]
    inspect = recs[-1]
    assert (inspect["event"], inspect["shard"], inspect["report"], inspect["cause_found"]) == (
        "inspect", bad["sid"], f"inspect_{bad['sid']}.md", True)
    assert r.state["quarantined"] == [bad["sid"]] and r.state["rejections"] == {bad["sid"]: 2}
