"""The packer core (loaders/core.py) on a stream small enough to pack by hand: its events, the
buffer with its sequence numbers, the row count, its saved state, and the exact refusal lines."""
import numpy as np
import pytest

from loaders.core import CROP, FIT, PackerCore
from loaders.stream import DocumentStream


def _stream():
    # lengths 3, 5, 2, 4; two documents per refill
    docs = [[0] + [1] * (n - 1) for n in (3, 5, 2, 4)]
    return DocumentStream.from_token_lists(docs, 2)


def test_two_rows_packed_by_hand_and_the_state_between_them():
    core = PackerCore(_stream(), "original", 4, 2)
    ev = core.pack_rows(1).tolist()
    # refill 1 brings 3 (seq 0) and 5 (seq 1); 3 fits the row of 4; the buffer is below B = 2, so refill 2 brings
    # 2 (seq 2) and 4 (seq 3); nothing fits the last slot, so the shortest (2) is cropped to 1, discarding 1
    assert ev == [(0, 0, 3, 0, FIT, 0), (2, 0, 1, 1, CROP, 0)]
    assert core.rows_done == 1 and core.next_seq == 4
    assert core.buffered() == [(1, 1, 0, 0, 5), (3, 3, 0, 0, 4)]
    st = core.state_dict()
    assert st["buffer"].shape == (2, 5) and st["buffer"].tolist() == [[1, 1, 0, 0, 5], [3, 3, 0, 0, 4]]
    assert {k: st[k] for k in st if k not in ("buffer", "rng")} == {
        "packer": "original", "R": 4, "B": 2, "seed": 314159265, "stream_n": 4, "next_seq": 4, "pass_idx": 1,
        "refill_idx": 0, "arrived_docs": 4, "added_bos": 0, "rows_done": 1}
    assert core.pack_rows(1).tolist() == [(3, 0, 4, 0, FIT, 0)] and core.rows_done == 2  # 4 fills the second row exactly


@pytest.mark.parametrize("args,message", [
    (("shortest", 4, 2), "unknown packer 'shortest'; choose one of original, lossless, segment_first, random_span"),
    (("original", 1, 2), "row capacity must be >= 2 and buffer size >= 1"),
    (("original", 4, 0), "row capacity must be >= 2 and buffer size >= 1"),
])
def test_bad_settings_are_refused_with_one_line(args, message):
    with pytest.raises(ValueError) as e:
        PackerCore(_stream(), *args)
    assert str(e.value) == message


def test_a_state_for_another_row_capacity_is_refused_with_one_line():
    st = PackerCore(_stream(), "original", 4, 2).state_dict()
    with pytest.raises(ValueError) as e:
        PackerCore(_stream(), "original", 5, 2).load_state_dict(st)
    assert str(e.value) == "loader state is for R=4, this loader has 5"
    assert isinstance(st["buffer"], np.ndarray)
