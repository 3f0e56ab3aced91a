"""The queue's state and the one function that changes it: apply(state, record).

The runner changes its state only through `apply`, and `reconstruct` replays the log
through the same function, so a log is a complete account of the queue.

State: rotation (number), pending (the current rotation, front first), next_rotation
(deferred and returned shards waiting for the next boundary), fresh (pool shards not yet
in any rotation, in pool order), accepted, quarantined, undecided, rejections and returns
per shard, flagged (the shard waiting for its recovery check, or None), candidates
(how many candidate shards were trained: the random policy's draw position), reserve
(shards of the calibration source that recovery checks and clean branches draw on, front
first: never a candidate, so a harmful shard can never test another's recovery).

A recovery shard is the reserve's front. Rolled back, it goes back to that front (the
model never kept it); accepted, it joins the model's history and goes to the reserve's
back, so it is trained again only once every other reserve shard has been used.
"""
import copy

from errors import DataError


def initial_state(fresh, reserve=()):
    return {"rotation": 0, "pending": [], "next_rotation": [], "fresh": list(fresh), "accepted": [], "quarantined": [],
            "undecided": [], "rejections": {}, "returns": {}, "flagged": None, "candidates": 0, "sources": [],
            "reserve": list(reserve)}


def _fail(rec, msg):
    raise DataError(f"record {rec.get('seq')} ({rec.get('event')}): {msg}")


def apply(state, rec):
    """New state after one record (the input is not modified); raises DataError on an impossible record."""
    st = copy.deepcopy(state)
    ev, sid = rec["event"], rec.get("shard")
    if ev == "rotation":
        carried, taken = list(st["next_rotation"]), st["fresh"][: rec["fresh_taken"]]
        if sorted(rec["order"]) != sorted(carried + taken):
            _fail(rec, f"rotation order {rec['order']} is not the carried {carried} plus fresh {taken}")
        if st["pending"]:
            _fail(rec, f"a new rotation starts while {st['pending']} are pending")
        st.update(pending=list(rec["order"]), next_rotation=[], fresh=st["fresh"][rec["fresh_taken"]:],
                  rotation=st["rotation"] + 1)
    elif ev == "train" and rec["role"] == "recovery":
        if st["flagged"] is None or st["reserve"][:1] != [sid]:
            _fail(rec, f"tests recovery with {sid} but the flagged shard is {st['flagged']} and the front of the "
                       f"reserve is {st['reserve'][:1]}")
        st["reserve"].pop(0)
    elif ev == "train" and rec["role"] == "candidate":
        if not st["pending"] or st["pending"][0] != sid:
            _fail(rec, f"trains {sid} but the front of the queue is {st['pending'][:1]}")
        st["pending"].pop(0)
        st["candidates"] += 1
        if rec["flagged"]:
            st["flagged"] = sid
    elif ev == "accept":
        st["accepted"].append(sid)
        if st["flagged"] == sid:
            st["flagged"] = None
        if rec.get("role") == "recovery":  # kept in the history: used again only after every other reserve shard
            st["reserve"].append(sid)
    elif ev == "return_front":
        (st["reserve"] if rec.get("to") == "reserve" else st["pending"]).insert(0, sid)
    elif ev in ("reject", "undecided"):
        if st["flagged"] != sid:
            _fail(rec, f"decides {sid} but the flagged shard is {st['flagged']}")
        st["flagged"] = None
        if ev == "undecided":
            st["undecided"].append(sid)
        elif rec["outcome"] == "returned":  # the branch check blamed the training phase
            st["next_rotation"].append(sid)
        else:
            st["rejections"][sid] = st["rejections"].get(sid, 0) + 1
            want = "deferred" if st["rejections"][sid] == 1 else "quarantined"
            if rec["outcome"] != want:
                _fail(rec, f"outcome {rec['outcome']} but rejection {st['rejections'][sid]} of {sid} means {want}")
            (st["next_rotation"] if want == "deferred" else st["quarantined"]).append(sid)
    elif ev == "source":  # a new source admitted at a rotation boundary joins the rotation being composed
        if st["pending"]:
            _fail(rec, "a source enters while a rotation is active")
        st["sources"].append(rec["label"])
        if rec["passed"]:
            st["fresh"] = list(rec["admitted"]) + st["fresh"]
    elif ev == "return":
        if sid not in st["quarantined"]:
            _fail(rec, f"returns {sid}, which is not in quarantine")
        if st["returns"].get(sid, 0) >= 1:
            _fail(rec, f"a second return of {sid}")
        st["quarantined"].remove(sid)
        st["returns"][sid] = 1
        st["next_rotation"].append(sid)
    return st
