"""A flagged shard's recovery step: the reserve's front shard trained after it, measured and judged by the
policy. Recovered, the shard is accepted with its recovery shard, except the candidate whose acceptance reaches
the budget, accepted alone (accept_recovered). Unrecovered, it is rolled back bitwise, branch-checked in the
first rotation (branch_check.py), deferred or quarantined (and then inspected). Where no recovery shard can be
trained (the reserve is empty, or the in-queue decay has no update left), it is rolled back undecided."""
from shardqueue.engine.branch_check import branch_check
from shardqueue.world.inspection import inspect_shard


def reaches_budget(runner, sid):
    """Whether accepting this candidate ends the stable phase: its tokens bring the accepted ones to the budget."""
    budget = runner.plan.budget_targets
    return (budget is not None and runner.decay_start is None and not runner.stable_ended
            and runner.accepted_tokens() + runner.shards[sid]["tokens"] >= budget)


def untestable(runner):
    """Why the flagged shard's recovery cannot be tested, or None. In the in-queue decay a candidate that took
    the decay's last updates leaves its recovery shard none: trained 0 updates, the model unchanged, it would
    find every flagged domain still risen and reject the shard on no measurement at all."""
    if not runner.state["reserve"]:
        return "no shard left to test recovery with"
    if runner.decay_start is not None and runner.decay_left() <= 0:
        return "no decay update left to test recovery with"
    return None


def recovery_step(runner):
    """The recovery test of the flagged shard and its decision, committed."""
    r, sid = runner, runner.state["flagged"]
    flagged = r.flag_info["flagged"]
    why = untestable(r)
    if why:  # neither kept nor rejected: rolled back, and decided by no test
        r.restore(r.rollback)
        r.record("rollback", shard=sid, to_step=r.step, params_sha256=r.rollback["params_sha256"])
        r.record("undecided", shard=sid, note=why)
        r.commit()
        return
    rec_sid = r.state["reserve"][0]  # never a candidate (state.py)
    # kept for the candidate that reaches the budget: accepted, it ends the stable phase without its recovery shard
    candidate_state = r.snapshot() if reaches_budget(r, sid) else None
    scr = r.screen(rec_sid)
    info = r.train_shard(rec_sid)
    after = r.measure()
    still = r.policy.unrecovered(r.ref, r.flag_info["losses"], flagged, after)
    frac, k = r.calib.get("frac", 0.0), r.calib.get("k", 0.0)
    r.measured(rec_sid, "recovery", info, after, screen=scr, tested=sid, unrecovered=still, flagged=[],
               limits={d: frac * k * r.calib["sigma"][d] for d in flagged if d in r.calib.get("sigma", {})})
    if not still:
        accept_recovered(r, sid, rec_sid, after, candidate_state)
        return
    got = r.restore(r.rollback)
    r.record("rollback", shard=sid, to_step=r.step, params_sha256=got)
    r.record("return_front", shard=rec_sid, to="reserve")
    outcome = None
    if r.policy.branch_check and r.plan.branch_check and r.state["rotation"] == 1 and not r.state["rejections"].get(sid):
        outcome = branch_check(r, sid, flagged)
    if outcome is None:
        outcome = "deferred" if not r.state["rejections"].get(sid) else "quarantined"
    r.record("reject", shard=sid, outcome=outcome, flagged=flagged, unrecovered=still)
    if outcome == "quarantined":
        path, cause = inspect_shard(r.world, r.pool, r.state["rejections"], r.out, sid)
        r.record("inspect", shard=sid, report=path, cause_found=cause)
    r.commit()


def accept_recovered(runner, sid, rec_sid, after, candidate_state=None):
    """A flagged shard that recovered is accepted with its recovery shard. The candidate that reaches the budget
    (candidate_state: the state it left) is accepted alone: its recovery shard, trained only to judge it, is
    undone and returns to the reserve's front, its training wasted, as a rolled-back recovery shard's is. Kept,
    it would end the stable phase up to two shards past the budget, where a run whose last candidate was not
    flagged ends less than one shard past it (the study's arms must train equal budgets)."""
    r = runner
    if candidate_state is None:
        r.ref = after
        r.record("accept", shard=sid, note="recovered")
        r.record("accept", shard=rec_sid, note="recovery shard", role="recovery")
    else:
        r.restore(candidate_state)
        r.ref = dict(r.flag_info["losses"])  # the state kept is the one the candidate left
        r.record("return_front", shard=rec_sid, to="reserve", note="undone: the budget is reached")
        r.record("accept", shard=sid, note="recovered")
    r.commit()
