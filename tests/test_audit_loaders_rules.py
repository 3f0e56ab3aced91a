"""llm-foundry, LLaMA-Factory and axolotl, whose pins do not install beside this project's, run as rules written
from their code (audit/libraries/foundry.py, llamafactory.py, axolotl.py). Each is audited here on a seeded stream
of documents with long ones, and every partition count, the never-started set and every document's fate are
compared with a reference loader written below from the same library lines, with the audit's accounting written
again in tests/loader_fates.py. The help and the lock name each library's version."""
import json
import re

import numpy as np
import pytest

from audit.__main__ import main as audit_main
from audit.libraries import foundry
from audit.libraries.about import RAN, RULES
from audit.libraries.common import Plan
from audit.libraries.registry import loader_specs
from conftest import ROOT
from loader_fates import account, audit_run, compare, cut

R = 65  # seq_length 64
SEQ = R - 1


@pytest.fixture(scope="module")
def stream(tmp_path_factory):
    """2,400 documents: lognormal around 40 tokens, one in twelve between 100 and 700 (past a row)."""
    rng = np.random.default_rng(52)
    L = np.maximum(1, rng.lognormal(3.4, 0.9, 2400).astype(np.int64))
    L[::12] = rng.integers(100, 700, len(L[::12]))
    f = tmp_path_factory.mktemp("rules") / "L.txt"
    f.write_text("\n".join(map(str, L)) + "\n")
    return L, f


def _arrived(pulled, horizon):
    """Sources pulled when the budget's last row (or the last row made) came out."""
    return pulled[min(horizon, len(pulled)) - 1] if pulled else 0


def _head(pieces, k):
    """The first k tokens of a list of pieces as spans (markers left out), and the pieces left."""
    out, rest, room = [], [], k
    for p in pieces:
        s, a, b = (None, 0, 1) if p is None else p
        take = min(room, b - a)
        if take and s is not None:
            out.append((s, a, a + take))
        room -= take
        if a + take < b:
            rest.append(None if s is None else (s, a + take, b))
    return out, rest


def ref_foundry_concat(L, no_wrap):
    """data.py:160-177: buffer += bos + doc + eos; while len >= max_length: a sample, the rest kept (or dropped)."""
    rows, pulled, buf = [], [], []
    for d, n in enumerate(L.tolist()):
        buf += [(d, 0, n), None]
        while sum(1 if p is None else p[2] - p[1] for p in buf) >= SEQ:
            row, rest = _head(buf, SEQ)
            rows.append(row)
            pulled.append(d + 1)
            buf = [] if no_wrap else rest
    return rows, pulled


def ref_llamafactory(L, batch=1000):
    """pretrain.py:27-53: per map batch, documents + EOS concatenated, cut to whole blocks, the rest dropped."""
    rows, pulled = [], []
    for b0 in range(0, len(L), batch):
        pieces = [p for d in range(b0, min(len(L), b0 + batch)) for p in ((d, 0, int(L[d])), None)]
        full, _rest = cut(pieces, SEQ)
        rows += full
        pulled += [min(len(L), b0 + batch)] * len(full)
    return rows, pulled


def ref_foundry_binpack(L, batch=8, ratio=2.0):
    """packing.py:173-279 per collate call of int(batch * ratio) examples, each with the collator's EOS appended and
    then cut to max_seq_len (collator.py:152-154, 349-352: min(n + 1, SEQ) tokens): longest first, each
    into the first bin with room (a bin taking one moves to the back), new bins while the examples left are just
    enough to give every missing bin one; the `batch` fullest bins out, the rest kept for the next call."""
    per = int(batch * ratio)
    rows, pulled, kept = [], [], []
    for c0 in range(0, len(L), per):
        ex = [(min(int(L[d]) + 1, SEQ), d) for d in range(c0, min(len(L), c0 + per))]
        ex = sorted(ex, key=lambda e: -e[0])  # stable: equal sizes keep their order
        bins = list(kept)
        if len(ex) < batch - len(bins):
            bins += [(size, [d]) for size, d in ex]
        else:
            for i, (size, d) in enumerate(ex):
                if len(ex) - i == max(0, batch - len(bins)):
                    bins.append((size, [d]))
                    continue
                fit = next((k for k, (used, _) in enumerate(bins) if used + size <= SEQ), None)
                if fit is None:
                    bins.append((size, [d]))
                else:
                    used, docs = bins.pop(fit)
                    bins.append((used + size, docs + [d]))
        order = sorted(bins, key=lambda b: -b[0])
        for _, docs in order[:batch]:
            rows.append([(d, 0, min(int(L[d]), SEQ)) for d in docs])
            pulled.append(min(len(L), c0 + per))
        kept = order[batch:]
    return rows, pulled


def ref_chat_template_samples(n):
    """utils/data/utils.py:314-350, trainer.py:200-230: the document whole if 2 <= n <= sequence_len, else none.
    Each sample as (its size, its span of the document)."""
    return [(n, (0, n))] if 2 <= n <= SEQ else []


def ref_completion_samples(n):
    """completion.py:57-58, 86 and prompt_tokenizers.py:81-98: the first 64 x sequence_len tokens, one EOS after
    them when the document is shorter, cut into pieces of sequence_len; a piece of fewer than 2 tokens (a lone
    EOS) dropped by trainer.py:200-230."""
    kept = min(n, 64 * SEQ)
    size = kept + (n < 64 * SEQ)
    return [(min(SEQ, size - i), (i, min(i + SEQ, kept))) for i in range(0, size, SEQ) if size - i >= 2]


def ref_axolotl_bins(L, samples):
    """One epoch: each document's samples, first fit in order into open bins of at most 200 samples
    (multipack.py:60-112)."""
    bins = []  # [room, [(document, span)]]
    for d in range(len(L)):
        for size, span in samples(int(L[d])):
            b = next((b for b in bins if b[0] >= size and len(b[1]) < 200), None)
            if b is None:
                bins.append([SEQ - size, [(d, span)]])
            else:
                b[0] -= size
                b[1].append((d, span))
    return bins


def ref_axolotl(L, horizon, world=1, samples=ref_chat_template_samples, bins=None):
    """Per epoch the same bins (ref_axolotl_bins: every epoch packs the same documents), the last len(bins) mod world
    dropped; epochs until the budget's rows are made."""
    n, rows, pulled, e = len(L), [], [], 0
    bins = ref_axolotl_bins(L, samples) if bins is None else bins
    while len(rows) < horizon:
        usable = len(bins) // world * world
        rows += [[(e * n + d, a, b) for d, (a, b) in b[1] if b > a] for b in bins[:usable]]
        pulled += [(e + 1) * n] * usable
        e += 1
    return rows, pulled, e


@pytest.mark.parametrize("packer, ref", [
    ("foundry_concat", lambda L: ref_foundry_concat(L, False)),
    ("foundry_no_wrap", lambda L: ref_foundry_concat(L, True)),
    ("llamafactory_pt", ref_llamafactory),
    ("foundry_binpack", ref_foundry_binpack),
])
def test_a_streaming_rule_gives_the_fates_its_library_lines_give(stream, tmp_path, packer, ref):
    L, f = stream
    rows, pulled = ref(L)
    horizon = len(rows) * 3 // 4  # past the first map batch, collate call or window: its losses are in the budget
    s, fates = audit_run(audit_main, f, tmp_path / packer, packer, R, horizon * SEQ)
    assert s["rows"] == horizon and s["how"].startswith("rule from ")
    fate, counts = account(L, rows, horizon, _arrived(pulled, horizon))
    compare(s, fates, fate, counts)
    # BinPackCollator re-pads every bin to max_seq_len (packing.py repad): the rest of each budget row is padding;
    # the concatenating writers fill every row. A document shorter than the row keeps the collator's EOS after it
    eos = [sum(1 for d, _, b in row if b == L[d] < SEQ) for row in rows[:horizon]]
    pad = (sum(SEQ - e - sum(b - a for _, a, b in row) for e, row in zip(eos, rows))
           if packer == "foundry_binpack" else 0)
    assert s["row_capacity"] == SEQ and s["trace"]["padding"] == pad and (pad > 0) == (packer == "foundry_binpack")
    assert s["padding_share"] == pytest.approx(pad / (horizon * SEQ))


def test_binpack_appends_the_collators_eos_before_it_packs():
    """Hand-worked, max_seq_len 8, one bin a call of two examples: d0 (4 tokens) and d1 (3) become 5 and 4 with their
    EOS, too many for one bin (without the EOS they share one): d0's bin comes out, d1's is kept. The next call's d2
    (5 with EOS) fits no kept bin and opens one; d3 (4) fills d1's bin to 8, which comes out; d2's is never
    trained."""
    docs = [np.arange(16, 20), np.arange(20, 23), np.arange(23, 27), np.arange(27, 30)]
    plan = Plan(2, np.array([4, 3, 4, 3]), args={"device_batch_size": 1, "packing_ratio": 2.0})
    rows = [r.tolist() for r in foundry.binpack(9, plan)(iter(docs))]
    assert rows == [[16, 17, 18, 19, 2, 0, 0, 0], [20, 21, 22, 2, 27, 28, 29, 2]]
    assert plan.facts["packing_ratio_from"] == "--loader-arg" and plan.facts["eos"] == "appended"
    default = Plan(2, np.array([4, 3, 4, 3]))
    foundry.binpack(9, default)
    assert default.facts["packing_ratio"] == 2.0 and "not llm-foundry's" in default.facts["packing_ratio_from"]


def test_llamafactory_trains_the_same_blocks_every_epoch(stream, tmp_path):
    """The dataset is mapped once: a second epoch is the first pass's blocks again, over the documents' second
    arrivals. A map batch that ran on across the pass boundary (documents 2,000-2,399, then 0-599 of the next pass)
    cut other blocks and lost other documents' tails."""
    L, f = stream
    one, pulled_one = ref_llamafactory(L)
    n, horizon = len(L), len(one) + len(one) // 2  # half into the second epoch
    rows = [[(e * n + d, a, b) for d, a, b in row] for e in range(2) for row in one]
    pulled = [e * n + p for e in range(2) for p in pulled_one]
    s, fates = audit_run(audit_main, f, tmp_path / "lf", "llamafactory_pt", R, horizon * SEQ)
    assert s["rows"] == horizon and s["passes_started"] == 2
    fate, counts = account(L, rows, horizon, _arrived(pulled, horizon), passes=2)
    compare(s, fates, fate, counts)


@pytest.mark.parametrize("world", [1, 3])
@pytest.mark.parametrize("packer", ["axolotl_chat_template", "axolotl_completion"])
def test_axolotl_packs_its_samples_and_drops_the_bins_short_of_the_ranks(stream, tmp_path, world, packer):
    L, f = stream
    samples = ref_completion_samples if packer == "axolotl_completion" else ref_chat_template_samples
    bins = ref_axolotl_bins(L, samples)  # the reference's first fit, once: its cost grows with documents x bins
    horizon = len(ref_axolotl(L, 1, world, samples, bins)[0]) * 3 // 2  # half into a second epoch, packed again
    rows, pulled, epochs = ref_axolotl(L, horizon, world, samples, bins)
    s, fates = audit_run(audit_main, f, tmp_path / "ax", packer, R, horizon * SEQ, "--loader-arg", f"world_size={world}")
    assert epochs == 2 and s["passes_started"] == 2 and s["loader"]["epochs"] == 2
    fate, counts = account(L, rows, horizon, _arrived(pulled, horizon), passes=2)
    compare(s, fates, fate, counts)
    if packer == "axolotl_chat_template":
        assert (fate[L > SEQ] == "dropped").all()  # drop_long_seq: never packed, in any epoch


def test_axolotl_completion_cuts_raw_text_into_pieces_by_hand(tmp_path):
    # sequence_len 4 (R = 5), so raw text is truncated at 64 x 4 = 256 tokens. The samples, in order:
    # d0 (6): [0-3], [4 5 EOS]; d1 (3): [0 1 2 EOS]; d2 (258): 64 pieces of 4 (no EOS: it reached 256), 2 tokens
    # lost; d3 (4): [0-3] and a lone EOS, which the length filter (>= 2) drops; d4 (1): [0 EOS].
    # First fit: [d0 0-3], [d0 4-5 EOS] (room 1), [d1 EOS], 64 bins of d2, [d3], and d4's 2 fit no open bin: 69 rows
    L = np.array([6, 3, 258, 4, 1])
    f = tmp_path / "L.txt"
    f.write_text("\n".join(map(str, L)) + "\n")
    s, fates = audit_run(audit_main, f, tmp_path / "ax", "axolotl_completion", 5, 69 * 4, "--passes", "1")
    assert s["rows"] == 69 and s["tokens_arrived"] == 272
    assert (s["emitted"], s["discarded"], s["buffered"]) == (270, 2, 0)
    assert (s["sources_started"], s["sources_never_started"]) == (5, 0)
    assert list(fates["fate"]) == ["whole", "whole", "partial", "whole", "whole"]


def test_the_help_and_the_lock_name_each_librarys_version(capsys):
    with pytest.raises(SystemExit):
        audit_main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    lock = (ROOT / "requirements-audit.lock").read_text()
    for lib, v in RAN.items():
        assert f"{lib} {v}" in text and re.search(rf"^{lib}=={re.escape(v)}$", lock, re.M), lib
    for lib, v in RULES.items():
        assert f"{lib} {v}" in text and f"{lib}==" not in lock, lib
    assert "run a rule written here from that code, not the code" in text
    specs = loader_specs()
    rules = [n for n, s in specs.items() if not s.library]
    assert rules == ["foundry_concat", "foundry_no_wrap", "foundry_binpack", "llamafactory_pt", "axolotl_completion",
                     "axolotl_chat_template"]
    assert all(specs[n].how.startswith("rule from ") and specs[n].how.endswith("not its code") for n in rules)


def test_axolotl_capped_at_the_passes_given_is_short_because_its_input_ended(stream, tmp_path):
    """Under --passes its epochs stop at the passes given, its iterator never read to the end: every line says its
    input ended (they once said it stopped yielding rows)."""
    L, f = stream
    one = len(ref_axolotl(L, 1, 1, ref_completion_samples)[0])
    s, _ = audit_run(audit_main, f, tmp_path / "ax", "axolotl_completion", R, 3 * one * SEQ, "--passes", "1")
    assert s["rows"] == one and s["loader"]["capped_by_passes"] == 1
    row = json.loads((tmp_path / "ax" / "comparison.json").read_text())["packers"]["axolotl_completion"]
    md = (tmp_path / "ax" / "report.md").read_text()
    assert row["input_ended"] and "its input ended first" in md and "stopped yielding rows" not in md
    # a rule's decisions are said to be the rule's: axolotl itself never ran
    assert ("- **axolotl_completion**: the rule written from its code decided (the library itself did not run): "
            f"sequence len: {SEQ}; world size: 1;") in md
