"""The branch check of a first-rotation rejection: from the pre-shard state, branches that tell the training
phase from the shard or its source, each restored bitwise; the policy's branch judge (policy/measured.py)
says which rose as much as the shard did and what that blames.

clean: first a reserve shard (calibration source, clean); if it rises in every flagged domain as the shard
did, the phase is blamed and the shard returned. If not, another shard of the shard's own source is
branched on too, to name what the rejection blames: "source" when it rises, "shard" when not; the rejection
counts either way. literal (the proposal's check): only the same-source branch; its rise returns the shard.
"""
from shardqueue.world.rotation import main_source


def branch_check(runner, sid, flagged):
    """The branches of rejected shard sid, recorded; "returned" when they blame the phase, else None (the
    rejection counts)."""
    judge, shards, st = runner.policy.branch_check, runner.shards, runner.state
    src = main_source(shards[sid])
    sibs = [s for s in st["pending"] + st["fresh"] + st["next_rotation"]
            if s != sid and main_source(shards[s]) == src]
    branches, rose = [], {}
    if judge.mode == "clean":
        branches.append(runner.branch_on(st["reserve"][0], "clean", flagged))
        rose["clean"] = branches[-1]["rose"]
    elif not sibs:
        runner.record("branch", shard=sid, possible=False, mode=judge.mode, source=src,
                      note=f"no other shard of source {src!r} is left in the pool")
        return None
    if not rose.get("clean") and sibs:  # a clean rise already blames the phase, whatever the source does
        branches.append(runner.branch_on(sibs[0], "source", flagged))
        rose["source"] = branches[-1]["rose"]
    verdict = judge.verdict(rose.get("clean"), rose.get("source"))
    total = {k: sum(b[k] for b in branches) for k in ("updates", "targets")}
    runner.record("branch", shard=sid, possible=True, mode=judge.mode, source=src, branches=branches,
                  verdict=verdict, **total, seconds=round(sum(b["seconds"] for b in branches), 3),
                  params_sha256=runner.rollback["params_sha256"])
    return "returned" if verdict == "phase" else None
