"""What one queue run cost and decided, read from its decision log alone.

Each `train` record carries updates, targets and seconds. A candidate shard that is later
rolled back, the recovery shard trained to judge it (and the one that judged the candidate
reaching the budget, undone once it had), and a branch-check shard are wasted work
(trained, then undone); everything else in the model's final history is accepted
work, plus the final decay. Screening passes are the forward-only screens before
training (one per `train` record that holds a screen).

run_cost is what a run spent, for the compute comparison of the arms: every target it
trained (kept or wasted), the seconds of that training, and the wall time of its queue (from
its start record to its last), optionally only up to a point of its history (arm A at the
budget, where its reference curve continues).
"""
import json

WASTE_KINDS = ("rejected", "recovery", "branch")


def accounting(recs):
    """{"accepted_updates", "accepted_targets", "decay_updates", "decay_targets", "wasted_updates": {...},
    "wasted_targets": {...}, "train_seconds": {...}, "screen_passes", "decisions": {...}, "rejected": [...],
    "trained_targets", "candidates"}"""
    trains = [r for r in recs if r["event"] == "train"]
    wasted_u = dict.fromkeys(WASTE_KINDS, 0)
    wasted_t = dict.fromkeys(WASTE_KINDS, 0)
    wasted_s = dict.fromkeys(WASTE_KINDS, 0.0)
    last_train = {}  # shard -> index in recs of its latest train record
    undone = set()  # indices of train records undone by a rollback
    decisions = {"accept": 0, "flag": 0, "recovered": 0, "reject": 0, "deferred": 0, "quarantined": 0, "returned": 0,
                 "undecided": 0, "branch_checks": 0}
    rejected = []
    for i, r in enumerate(recs):
        ev = r["event"]
        if ev == "train":
            last_train[r["shard"]] = i
            if r.get("role") == "branch":
                undone.add(i)
                _add(wasted_u, wasted_t, wasted_s, "branch", r)
            elif r.get("role") == "candidate" and r.get("flagged"):
                decisions["flag"] += 1
        elif ev == "branch":
            decisions["branch_checks"] += 1
            if r.get("possible") and "updates" in r:  # the branch's own training, logged inside the branch record
                _add(wasted_u, wasted_t, wasted_s, "branch", r)
        elif ev == "rollback":
            sid = r["shard"]
            if sid in last_train:
                undone.add(last_train[sid])
                _add(wasted_u, wasted_t, wasted_s, "rejected", recs[last_train[sid]])
            # the recovery shard trained after the candidate and before this rollback
            for j in range(last_train.get(sid, i), i):
                q = recs[j]
                if q["event"] == "train" and q.get("role") == "recovery" and q.get("tested") == sid:
                    undone.add(j)
                    _add(wasted_u, wasted_t, wasted_s, "recovery", q)
        elif ev == "return_front" and r.get("to") == "reserve":
            # a recovery shard undone without a rollback (the candidate that reached the budget kept alone)
            j = last_train.get(r["shard"])
            if j is not None and j not in undone and recs[j].get("role") == "recovery":
                undone.add(j)
                _add(wasted_u, wasted_t, wasted_s, "recovery", recs[j])
        elif ev == "accept":
            decisions["accept"] += 1
            if r.get("note") == "recovered":
                decisions["recovered"] += 1
        elif ev == "reject":
            decisions["reject"] += 1
            out = r.get("outcome")
            if out in decisions:
                decisions[out] += 1
            rejected.append({"shard": r["shard"], "sources": r.get("sources") or {}, "outcome": out,
                             "position": _position(recs, r["shard"], i)})
        elif ev == "undecided":
            decisions["undecided"] += 1
    kept = [r for i, r in enumerate(recs) if r["event"] == "train" and i not in undone]
    decay = [r for r in recs if r["event"] == "decay"]
    # the decay is either trained after the queue (the decay record's own shards) or inside it
    # (kept train records of phase "decay": shards this run's policy accepted)
    in_q = [r for r in kept if r.get("phase") == "decay"]
    decay_u = sum(t["updates"] for d in decay for t in d.get("trained", [])) + sum(r["updates"] for r in in_q)
    decay_t = sum(t["targets"] for d in decay for t in d.get("trained", [])) + sum(r["targets"] for r in in_q)
    decay_s = sum(t["seconds"] for d in decay for t in d.get("trained", []))
    return {
        "accepted_updates": sum(r["updates"] for r in kept) + decay_u - sum(r["updates"] for r in in_q),
        "accepted_targets": sum(r["targets"] for r in kept if r.get("phase") != "decay"),
        "decay_updates": decay_u, "decay_targets": decay_t, "decay_shards": [r["shard"] for r in in_q]
        or [s for d in decay for s in d.get("shards", [])],
        "wasted_updates": wasted_u, "wasted_targets": wasted_t,
        "train_seconds": {"accepted": sum(r["seconds"] for r in kept) + decay_s, **{f"wasted_{k}": v for k, v in wasted_s.items()}},
        "screen_passes": sum(1 for r in trains if "screen" in r),
        "candidates": sum(1 for r in trains if r.get("role") == "candidate"),
        "decisions": decisions, "rejected": rejected,
        "trained_targets": decay[-1]["history_targets"] if decay else None,
    }


def run_cost(recs, until_targets=None):
    """{"trained_targets", "training_s", "wall_s", "records"}: all training (candidate, recovery, branch-check
    and decay shards, kept or wasted) and the queue's wall time, from the start record to the last record, or
    to the first train record whose history reaches until_targets (trained targets of the model)."""
    start, last = recs[0], recs[0]
    targets, seconds, n = 0, 0.0, 0
    for r in recs[1:]:
        if r["event"] == "train" or (r["event"] == "branch" and r.get("possible") and "targets" in r):
            targets += int(r.get("targets", 0))
            seconds += float(r.get("seconds", 0.0))
            n += 1
        elif r["event"] == "decay":  # the reserved decay after the queue (not the study's in-queue decay)
            targets += sum(int(t["targets"]) for t in r.get("trained", []))
            seconds += sum(float(t["seconds"]) for t in r.get("trained", []))
        last = r
        if until_targets is not None and r["event"] == "train" and r.get("history_targets", 0) >= until_targets:
            break
    return {"trained_targets": targets, "training_s": round(seconds, 3),
            "wall_s": round(float(last.get("time", 0.0)) - float(start.get("time", 0.0)), 3), "records": n}


def _add(u, t, s, kind, r):
    u[kind] += int(r.get("updates", 0))
    t[kind] += int(r.get("targets", 0))
    s[kind] += float(r.get("seconds", 0.0))


def _last_candidate(recs, sid, upto):
    for j in range(upto, -1, -1):
        q = recs[j]
        if q["event"] == "train" and q.get("shard") == sid and q.get("role") == "candidate":
            return j
    return None


def _position(recs, sid, upto):
    """The candidate position (0-based draw index) at which this shard was last judged."""
    j = _last_candidate(recs, sid, upto)
    return None if j is None else recs[j].get("position")


def control_trace(recs):
    """[{"D", "losses", "mark"}]: control losses after every trained shard, in log order, with the decision mark."""
    out = []
    start = recs[0]
    if "losses" in start:
        out.append({"D": start.get("start_targets", 0), "losses": start["losses"], "mark": "start"})
    for i, r in enumerate(recs):
        if r["event"] == "train" and r.get("role") in ("candidate", "recovery") and "losses" in r:
            mark = "flag" if r.get("flagged") else "accept"
            if r.get("role") == "recovery":
                mark = "reject" if r.get("unrecovered") else "recovered"
            out.append({"D": r["history_targets"], "losses": r["losses"], "mark": mark})
        elif r["event"] == "rollback":
            j = _last_candidate(recs, r["shard"], i)
            if j is not None and "ref" in recs[j]:  # back to the state before the candidate: its reference losses
                c = recs[j]
                out.append({"D": c["history_targets"] - c["targets"], "losses": c["ref"], "mark": "rollback"})
        elif r["event"] == "decay":
            ctrl = (r.get("scores") or {}).get("control")
            if ctrl:
                out.append({"D": r["history_targets"], "losses": ctrl, "mark": "decay"})
    return out


def decision_rows(recs):
    """One row per judged candidate shard: identity, sources, screen, per-domain deltas and thresholds,
    the recovery shard's deltas, the decision, rejection history, trained targets, seconds."""
    rows, rejections = [], {}
    for i, r in enumerate(recs):
        if not (r["event"] == "train" and r.get("role") == "candidate"):
            continue
        sid = r["shard"]
        row = {"shard": sid, "sha256": r.get("sha256", ""), "sources": json.dumps(r.get("sources") or {}, sort_keys=True),
               "position": r.get("position"), "screen_score": (r.get("screen") or {}).get("score"),
               "flagged": ",".join(r.get("flagged") or []), "targets": r.get("targets"), "seconds": r.get("seconds"),
               "history_targets": r.get("history_targets")}
        for d, v in sorted((r.get("deltas") or {}).items()):
            row[f"delta_{d}"] = v
        for d, v in sorted((r.get("thresholds") or {}).items()):
            row[f"threshold_{d}"] = v
        decision, outcome = "accept", ""
        for q in recs[i + 1:]:
            if q["event"] == "train" and q.get("role") == "recovery" and q.get("tested") == sid:
                row["recovery_shard"] = q["shard"]
                for d, v in sorted((q.get("deltas") or {}).items()):
                    row[f"recovery_delta_{d}"] = v
            elif q["event"] == "accept" and q.get("shard") == sid:
                decision = "recovered" if q.get("note") == "recovered" else "accept"
                break
            elif q["event"] == "reject" and q.get("shard") == sid:
                decision, outcome = "reject", q.get("outcome") or ""
                rejections[sid] = rejections.get(sid, 0) + 1
                break
            elif q["event"] == "undecided" and q.get("shard") == sid:
                decision = "undecided"
                break
        row.update(decision=decision, outcome=outcome, rejections_so_far=rejections.get(sid, 0))
        rows.append(row)
    return rows
