"""The comparison behind `reconstruct --execute` on hand-made records: what it compares bitwise,
what within a tolerance, what it leaves out and how it names the first difference (issue 30).
The re-execution itself runs on a real queue in test_queue.py."""
import math

from records.provenance import machine
from shardqueue.checks.reexecute import compare_records, made_on_this_machine


def rec(seq=4, **kw):
    base = {"seq": seq, "event": "train", "shard": "s0001", "targets": 371, "train_loss": 4.5,
            "losses": {"code": 5.25, "prose": 4.75}, "flagged": [], "time": 100.0, "seconds": 0.1,
            "prev_sha256": "a" * 64, "spent": {"updates": 3, "targets": 371, "seconds": 0.1}}
    return {**base, **kw}


def diff(logged, made, tolerance=0.0, hashes=True):
    d = compare_records(logged, made, tolerance, hashes).difference
    return None if d is None else (d.seq, d.event, d.field, d.logged, d.made)


def test_equal_records_agree_and_the_largest_difference_is_zero():
    cmp = compare_records([rec(3), rec(4)], [rec(3), rec(4)])
    assert cmp.difference is None and cmp.largest == (0.0, None, None)


def test_one_bit_of_a_loss_is_a_difference_bitwise_and_within_a_tolerance_not():
    up = math.nextafter(4.75, 5.0)  # the next float after 4.75: one bit in the last place
    made = rec(losses={"code": 5.25, "prose": up})
    assert diff([rec()], [made]) == (4, "train", "losses.prose", 4.75, up)
    cmp = compare_records([rec()], [made], tolerance=1e-3)
    assert cmp.difference is None and cmp.largest == (up - 4.75, 4, "losses.prose")
    assert diff([rec()], [rec(train_loss=4.5 + 2e-3)], tolerance=1e-3) == (4, "train", "train_loss", 4.5, 4.502)


def test_counts_and_decisions_are_exact_whatever_the_tolerance():
    assert diff([rec()], [rec(targets=372)], tolerance=10.0) == (4, "train", "targets", 371, 372)
    assert diff([rec()], [rec(flagged=["code"])], tolerance=10.0) == (4, "train", "flagged (length)", 0, 1)
    assert diff([rec()], [rec(shard="s0002")], tolerance=10.0) == (4, "train", "shard", "s0001", "s0002")
    assert diff([rec()], [rec(targets=371.0)]) == (4, "train", "targets", 371, 371.0)  # an int is not a float


def test_the_first_difference_in_log_order_then_field_order_is_named():
    logged = [rec(3), rec(4), rec(5)]
    made = [rec(3), rec(4, train_loss=9.0, losses={"code": 1.0, "prose": 4.75}), rec(5, targets=1)]
    assert diff(logged, made) == (4, "train", "losses.code", 5.25, 1.0)  # "losses" sorts before "train_loss"


def test_wall_times_chain_hashes_and_the_machine_are_not_compared():
    made = rec(time=999.0, seconds=7.0, prev_sha256="b" * 64, machine={"cpu": "another"},
               spent={"updates": 3, "targets": 371, "seconds": 8.0})
    assert diff([rec()], [made]) is None
    made = rec(spent={"updates": 4, "targets": 371, "seconds": 8.0})  # beside a wall time, a count still counts
    assert diff([rec()], [made]) == (4, "train", "spent.updates", 3, 4)


def test_parameter_hashes_are_compared_only_when_asked():
    a, b = rec(event="accept", params_sha256="0" * 64), rec(event="accept", params_sha256="1" * 64)
    assert diff([a], [b]) == (4, "accept", "params_sha256", "0" * 64, "1" * 64)
    assert diff([a], [b], tolerance=1e-3, hashes=False) is None


def test_a_missing_field_or_record_is_named():
    made = rec()
    del made["train_loss"]
    assert diff([rec()], [made]) == (4, "train", "train_loss", 4.5, "<absent>")
    assert diff([rec(3), rec(4)], [rec(3)]) == (4, "train", "(the whole record)", "train",
                                                "none: the re-execution ended before it")
    assert diff([rec(3)], [rec(3), rec(4, event="accept")]) == (4, "accept", "(the whole record)",
                                                                  "none: the log ends before it", "accept")


def test_bitwise_only_where_every_process_of_the_run_ran():
    here = machine("cpu")
    other = {**here, "cpu": "another processor"}
    start, resumed = {"event": "start", "machine": here}, {"event": "resumed", "machine": here}
    assert made_on_this_machine([start, rec(), resumed], "cpu")
    assert not made_on_this_machine([start, rec(), {**resumed, "machine": other}], "cpu")
    assert not made_on_this_machine([{"event": "start"}], "cpu")  # an older log names no machine
