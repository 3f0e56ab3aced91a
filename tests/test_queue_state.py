"""The queue state's one transition function, record by record, against states written out by
hand: a rotation, a flag, a deferral, a quarantine, a return, a new source, and every
impossible record refused. Fast enough to be the mutation tests of shardqueue/engine/state.py."""
import pytest

from errors import DataError
from shardqueue.engine.state import apply, initial_state


def _walk(st, *recs):
    for r in recs:
        st = apply(st, r)
    return st


def rot(order, fresh_taken, seq=1):
    return {"seq": seq, "event": "rotation", "order": order, "fresh_taken": fresh_taken}


def train(sid, role="candidate", flagged=False):
    return {"event": "train", "shard": sid, "role": role, "flagged": flagged}


def test_initial_state_is_empty_but_for_the_fresh_pool_and_the_reserve():
    st = initial_state(("a", "b"), ("c0", "c1"))
    assert st == {"rotation": 0, "pending": [], "next_rotation": [], "fresh": ["a", "b"], "accepted": [],
                  "quarantined": [], "undecided": [], "rejections": {}, "returns": {}, "flagged": None,
                  "candidates": 0, "sources": [], "reserve": ["c0", "c1"]}


def test_a_rotation_takes_the_carried_shards_and_fresh_ones_in_the_recorded_order():
    st = initial_state(["a", "b", "c", "d"])
    st["next_rotation"] = ["z"]
    new = apply(st, rot(["b", "z", "a"], 2))
    assert new["pending"] == ["b", "z", "a"] and new["next_rotation"] == [] and new["fresh"] == ["c", "d"]
    assert new["rotation"] == 1
    assert st["pending"] == [] and st["fresh"] == ["a", "b", "c", "d"]  # the input is not modified


def test_accept_flag_recover_defer_then_quarantine_and_return():
    st = _walk(initial_state(["a", "b", "c"], ["r0", "r1"]), rot(["a", "b"], 2), train("a"),
               {"event": "accept", "shard": "a"})
    assert st["accepted"] == ["a"] and st["pending"] == ["b"] and st["candidates"] == 1
    st = apply(st, train("b", flagged=True))
    assert st["flagged"] == "b" and st["pending"] == [] and st["candidates"] == 2
    # the recovery shard is the reserve's front, never a candidate; rolled back, it goes back there
    st = apply(st, train("r0", role="recovery"))
    assert st["reserve"] == ["r1"] and st["pending"] == [] and st["fresh"] == ["c"]
    st = _walk(st, {"event": "return_front", "shard": "r0", "to": "reserve"},
               {"event": "reject", "shard": "b", "outcome": "deferred"})
    assert st["reserve"] == ["r0", "r1"] and st["pending"] == []
    assert st["flagged"] is None and st["rejections"] == {"b": 1} and st["next_rotation"] == ["b"]
    assert st["candidates"] == 2  # a recovery shard is not a candidate
    st = _walk(st, rot(["b"], 0, seq=9), train("b", flagged=True),
               {"event": "reject", "shard": "b", "outcome": "quarantined"})
    assert st["quarantined"] == ["b"] and st["rejections"] == {"b": 2} and st["next_rotation"] == []
    assert st["rotation"] == 2
    st = apply(st, {"event": "return", "shard": "b"})
    assert st["quarantined"] == [] and st["returns"] == {"b": 1} and st["next_rotation"] == ["b"]


def test_a_flag_that_recovers_is_cleared_by_its_accept_only():
    st = _walk(initial_state(["a", "b"]), rot(["a", "b"], 2), train("a", flagged=True))
    assert apply(st, {"event": "accept", "shard": "x"})["flagged"] == "a"
    assert apply(st, {"event": "accept", "shard": "a"})["flagged"] is None


def test_returned_by_the_branch_check_goes_to_the_next_rotation_without_a_rejection():
    st = _walk(initial_state(["a"]), rot(["a"], 1), train("a", flagged=True),
               {"event": "reject", "shard": "a", "outcome": "returned"})
    assert st["next_rotation"] == ["a"] and st["rejections"] == {} and st["flagged"] is None


def test_an_accepted_recovery_shard_joins_the_history_and_the_reserves_back():
    st = _walk(initial_state(["a", "b"], ["r0", "r1", "r2"]), rot(["a", "b"], 2), train("a", flagged=True),
               train("r0", role="recovery"), {"event": "accept", "shard": "a", "note": "recovered"},
               {"event": "accept", "shard": "r0", "note": "recovery shard", "role": "recovery"})
    # used again only after r1 and r2; the candidate b is still the queue's front
    assert st["accepted"] == ["a", "r0"] and st["reserve"] == ["r1", "r2", "r0"] and st["pending"] == ["b"]
    assert st["flagged"] is None


def test_undecided_is_recorded_as_such():
    st = _walk(initial_state(["a"]), rot(["a"], 1), train("a", flagged=True), {"event": "undecided", "shard": "a"})
    assert st["undecided"] == ["a"] and st["flagged"] is None and st["rejections"] == {}


def test_a_new_source_joins_the_front_of_the_fresh_shards_only_when_it_passed():
    st = initial_state(["a"])
    ok = apply(st, {"event": "source", "label": "mine", "passed": True, "admitted": ["m0", "m1"]})
    assert ok["fresh"] == ["m0", "m1", "a"] and ok["sources"] == ["mine"]
    bad = apply(st, {"event": "source", "label": "mine", "passed": False, "admitted": ["m0"]})
    assert bad["fresh"] == ["a"] and bad["sources"] == ["mine"]


def test_branch_trains_change_nothing_but_a_copy():
    st = _walk(initial_state(["a"]), rot(["a"], 1))
    assert apply(st, train("a", role="branch")) == st


@pytest.mark.parametrize("recs,needle", [
    ([rot(["a", "x"], 1)], "is not the carried"),
    ([rot(["a"], 1), rot(["b"], 1)], "pending"),
    ([rot(["a", "b"], 2), train("b")], "front of the queue is ['a']"),
    ([train("a")], "front of the queue is []"),
    ([rot(["a", "b"], 2), train("a", flagged=True), train("b", role="recovery")], "front of the reserve is ['r']"),
    ([rot(["a"], 1), train("r", role="recovery")], "the flagged shard is None"),
    ([rot(["a"], 1), train("a"), {"event": "reject", "shard": "a", "outcome": "deferred"}], "flagged shard is None"),
    ([rot(["a"], 1), train("a", flagged=True), {"event": "undecided", "shard": "b"}], "flagged shard is a"),
    ([rot(["a"], 1), train("a", flagged=True), {"event": "reject", "shard": "a", "outcome": "quarantined"}],
     "rejection 1 of a means deferred"),
    ([rot(["a"], 1), {"event": "source", "label": "s", "passed": True, "admitted": []}], "while a rotation is active"),
    ([{"event": "return", "shard": "a"}], "not in quarantine"),
])
def test_impossible_records_are_refused_with_the_reason(recs, needle):
    st = initial_state(["a", "b"], ["r"])
    *ok, last = recs
    st = _walk(st, *ok)
    with pytest.raises(DataError) as e:
        apply(st, {**last, "seq": 7})
    assert needle in str(e.value) and str(e.value).startswith(f"record 7 ({last['event']}): ")


def test_a_source_during_a_rotation_is_refused_with_exactly_this_line():
    st = _walk(initial_state(["a"]), rot(["a"], 1))
    with pytest.raises(DataError) as e:
        apply(st, {"seq": 3, "event": "source", "label": "s", "passed": True, "admitted": []})
    assert str(e.value) == "record 3 (source): a source enters while a rotation is active"


def test_a_returned_shard_goes_to_the_front_of_what_is_pending():
    st = _walk(initial_state(["a", "b", "c"]), rot(["a", "b", "c"], 3), train("a"))
    assert apply(st, {"event": "return_front", "shard": "x"})["pending"] == ["x", "b", "c"]


def test_a_second_rejection_must_be_a_quarantine_and_a_second_return_is_refused():
    st = initial_state(["a"])
    st.update(rejections={"a": 1}, flagged="a")
    with pytest.raises(DataError, match="rejection 2 of a means quarantined"):
        apply(st, {"event": "reject", "shard": "a", "outcome": "deferred"})
    st = initial_state([])
    st.update(quarantined=["a"], returns={"a": 1})
    with pytest.raises(DataError, match="a second return of a"):
        apply(st, {"event": "return", "shard": "a"})
