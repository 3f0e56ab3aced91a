"""The update's record (loss sum and microbatch fingerprints, one collective) by hand."""
import torch

from training.trainer import pack_update, unpack_updates

BITS_1_5 = 0x3FF8000000000000  # float64 1.5: sign 0, exponent 1023, mantissa .1
BITS_0_25 = 0x3FD0000000000000  # float64 0.25: exponent 1021


def test_a_rank_packs_its_loss_bits_then_its_fingerprints():
    rec = pack_update(torch.tensor(1.5, dtype=torch.float64), [torch.tensor(7), torch.tensor(-3)])
    assert rec.dtype == torch.int64 and rec.tolist() == [BITS_1_5, 7, -3]


def test_records_of_all_ranks_unpack_in_rank_order():
    rows = torch.tensor([[BITS_1_5, 7, -3], [BITS_0_25, 1, 2]], dtype=torch.int64)
    assert unpack_updates(rows) == (1.75, [[7, -3], [1, 2]])
    assert unpack_updates(rows[:1]) == (1.5, [[7, -3]])
