"""The packers researchers train with, audited by running the libraries themselves (the
'audit-libs' extra, which the README's test command installs): a hand-worked stream through
TRL's pack_dataset and OLMo-core's packed dataset gives the events worked out by hand, and on
a larger stream every emission the trace reports is where the library's own rows hold it."""
import json
import logging
import os

import numpy as np
import pytest

from audit.__main__ import main as audit_main
from audit.adapters import BOS, EOS, FIRST_ID, PAD, SPECS, _skips_cpp_extensions, installed
from audit.compute import trace_packer
from audit.events import EventSink, read_events
from audit.feed import PassRefills
from audit.trace import TracerDocs, row_tokens

# the loaders of audit/libraries/ (built with a Plan) have their own agreement tests (tests/test_audit_loaders_*.py)
LIBRARY_PACKERS = [n for n, s in SPECS.items() if s.library and not s.planned and s.audit is None]
HAND = np.array([5, 9, 2, 4, 30])  # the stream of the hand-worked examples, R = 8


def _trace(name, lengths, rows, R, tmp_path, refill=128):
    spec = SPECS[name]
    bounds = np.append(np.arange(0, len(lengths), refill), len(lengths))
    return trace_packer(spec.build(R, 4, tmp_path / name), PassRefills(lengths, bounds, max_passes=1), name, rows,
                        spec.row_capacity(R), 4, FIRST_ID, BOS, PAD, why_not=spec.why_not)


def test_trl_and_olmo_are_installed_for_the_suite():
    # CI installs the extra: these adapters must run here, not be skipped
    for name in ("trl_bfd", "trl_bfd_split", "trl_wrapped", "olmo_truncate", "olmo_fragment"):
        assert installed(SPECS[name]), name


@pytest.mark.parametrize("name, want", [
    # best-fit decreasing over the batch after truncating to 8: [s1 0-7], [s4 0-7], [s0, s2], [s3]
    ("trl_bfd", dict(emitted=16, discarded=1 + 22, buffered=5 + 2 + 4, sources_started=2, crop_events=2)),
    # split into pieces of 8 first: s1 -> 8+1, s4 -> 8+8+8+6; the two full pieces come first
    ("trl_bfd_split", dict(emitted=16, discarded=0, buffered=34, sources_started=2, crop_events=2)),
    # concatenate and chunk: [s0 0-4, s1 0-2], [s1 3-8, s2 0-1]: s1 and s0..s2 started
    ("trl_wrapped", dict(emitted=16, discarded=0, buffered=34, sources_started=3, crop_events=1)),
    # OLMo: the same best-fit decreasing, over the whole file, truncation to 8
    ("olmo_truncate", dict(emitted=16, discarded=23, buffered=11, sources_started=2, crop_events=2)),
    ("olmo_fragment", dict(emitted=16, discarded=0, buffered=34, sources_started=2, crop_events=2)),
])
def test_hand_worked_stream_through_the_library(tmp_path, name, want):
    s = _trace(name, HAND, 2, 8, tmp_path)
    assert s["tokens_arrived"] == 50 and s["sources_arrived"] == 5 and s["partition_holds"]
    assert {k: s[k] for k in want} == want


@pytest.mark.parametrize("name, want", [
    # sequence length 2048 (the largest power of two <= 2049); s0 truncated to 2048, best-fit decreasing:
    # [s0 0-2047], [s2, s3] + 448 pad, [s1] + 1048 pad
    ("olmo_truncate", dict(emitted=2048 + 1600 + 1000, discarded=3000 - 2048, buffered=0, sources_started=4,
                           crop_events=1)),
    # s0 fragmented to 2048 + 952: [s0 0-2047], [s2, s3] + 448 pad, [s1, s0 2048-2999] + 96 pad
    ("olmo_fragment", dict(emitted=5600, discarded=0, buffered=0, sources_started=4, crop_events=1)),
])
def test_olmo_at_the_default_capacity_packs_instances_of_2048_and_no_row_longer_than_r(tmp_path, name, want):
    lengths, R = np.array([3000, 1000, 1500, 100]), 2049
    assert SPECS[name].row_capacity(R) == 2048
    rows = _library_rows(name, lengths, R, tmp_path)
    assert [len(r) for r in rows] == [2048, 2048, 2048]  # OLMo pads every instance to its sequence length
    s = _trace(name, lengths, 3, R, tmp_path)
    assert s["partition_holds"] and {k: s[k] for k in want} == want
    assert s["trace"]["padding"] == 3 * 2048 - want["emitted"] and s["trace"]["row_tokens"] == 3 * 2048


@pytest.mark.parametrize("name, rows, want", [
    # text completion at R = 8: each document + EOS cut to 7 tokens, so s1 (8) and s2 (9) train their first 7 and
    # lose the rest (1 + 2 tokens); split across packs of 8:
    # [s0 0-2 E, s1 0-3], [s1 4-6, s2 0-4], [s2 5-6, s3 0-1 E, 3 pad]
    ("torchtune_text", [[0, 1, 2, "E", 3, 4, 5, 6], [7, 8, 9, 11, 12, 13, 14, 15], [16, 17, 20, 21, "E", "P", "P", "P"]],
     dict(rows=3, emitted=3 + 7 + 7 + 2, discarded=1 + 2, buffered=0, padding=3, started=4, whole=2)),
    # chat: each document + EOS cut to 8 tokens, the last made EOS (s1, s2 keep 7), packed whole:
    # [s0 0-2 E, 4 pad], [s1 0-6 E], [s2 0-6 E], [s3 0-1 E, 5 pad]
    ("torchtune_chat", [[0, 1, 2, "E", "P", "P", "P", "P"], [3, 4, 5, 6, 7, 8, 9, "E"], [11, 12, 13, 14, 15, 16, 17, "E"],
                        [20, 21, "E", "P", "P", "P", "P", "P"]],
     dict(rows=4, emitted=3 + 7 + 7 + 2, discarded=1 + 2, buffered=0, padding=4 + 5, started=4, whole=2)),
])
def test_torchtune_trains_the_head_of_a_long_document_as_its_tokenizer_cuts_it(tmp_path, name, rows, want):
    # lengths 3, 8, 9, 2: tracer tokens 0-2, 3-10, 11-19, 20-21 (written above as offsets from FIRST_ID), E = EOS,
    # P = padding
    lengths = np.array([3, 8, 9, 2])
    ids = [[{"E": EOS, "P": PAD}[v] if isinstance(v, str) else FIRST_ID + v for v in row] for row in rows]
    assert [r.tolist() for r in _library_rows(name, lengths, 8, tmp_path)] == ids
    s = _trace(name, lengths, want["rows"], 8, tmp_path)
    assert s["partition_holds"] and s["sources_never_started"] == 0
    got = dict(rows=s["rows"], emitted=s["emitted"], discarded=s["discarded"], buffered=s["buffered"],
               padding=s["trace"]["padding"], started=s["sources_started"], whole=s["sources_fully_emitted"])
    assert got == want


def _library_rows(name, lengths, R, tmp_path):
    """The library's own rows for the tracer documents, without the trace's decoding."""
    spec = SPECS[name]
    bounds = np.append(np.arange(0, len(lengths), 128), len(lengths))
    docs = TracerDocs(PassRefills(lengths, bounds, max_passes=1), FIRST_ID)
    return [row_tokens(r) for r in spec.build(R, 4, tmp_path / "direct")(docs)]


@pytest.mark.parametrize("name", [n for n in LIBRARY_PACKERS if installed(SPECS[n])])
def test_every_traced_emission_is_where_the_library_put_it(tmp_path, name):
    rng = np.random.default_rng(2)
    lengths = rng.integers(1, 50, 150)
    lengths[::13] = rng.integers(70, 200, len(lengths[::13]))
    R = 64
    rows = _library_rows(name, lengths, R, tmp_path)
    horizon = len(rows) * 2 // 3
    spec = SPECS[name]
    sink = EventSink(tmp_path, name)
    bounds = np.append(np.arange(0, len(lengths), 128), len(lengths))
    s = trace_packer(spec.build(R, 4, tmp_path / "t"), PassRefills(lengths, bounds, max_passes=1), name, horizon,
                     spec.row_capacity(R), 4, FIRST_ID, BOS, PAD, sink=sink)
    sink.close()
    ev = read_events(tmp_path / f"events_{name}.parquet")
    starts = FIRST_ID + np.concatenate([[0], np.cumsum(lengths)[:-1]])
    covered = [np.zeros(len(r), bool) for r in rows[:horizon]]
    for e in ev:
        r = rows[e["row"]]
        o = e["row_offset"] + e["lead_bos"]
        ids = starts[e["source_id"]] + e["span_start"] + np.arange(e["emitted"] - e["lead_bos"])
        assert np.array_equal(r[o:o + len(ids)], ids), (name, e)
        covered[e["row"]][e["row_offset"]:e["row_offset"] + e["emitted"]] = True
    for r, c in zip(rows[:horizon], covered):
        assert np.all((r < FIRST_ID) | c), name  # every tracer token of the budget's rows is in an event
    assert s["partition_holds"] and s["rows"] == horizon
    assert s["emitted"] + s["trace"]["padding"] + s["trace"]["other_inserted"] == sum(len(r) for r in rows[:horizon])


def test_only_torchaos_note_on_its_cpp_extensions_is_dropped():
    def rec(msg):
        return logging.LogRecord("torchao", logging.WARNING, __file__, 1, msg, None, None)
    assert not _skips_cpp_extensions(rec("Skipping import of cpp extensions due to incompatible torch version 2.13"))
    assert _skips_cpp_extensions(rec("any other warning"))


@pytest.mark.parametrize("name", ["torchtune_text", "titan_concat"])
def test_the_libraries_own_bar_and_end_of_data_warning_stay_out_of_the_audits_output(tmp_path, capfd, caplog, name):
    # torchtune draws "Packing dataset" with tqdm on stderr; torchtitan warns on the root logger at the stream's end
    caplog.set_level(logging.WARNING)
    s = _trace(name, HAND, 2, 8, tmp_path)
    assert s["partition_holds"]
    err = capfd.readouterr().err
    assert "Packing dataset" not in err and "run out of data" not in err
    assert not [r for r in caplog.records if "run out of data" in r.getMessage()]


def test_a_library_packer_that_stops_short_of_the_budget_is_said_so_everywhere(tmp_path, capsys):
    # a corpus of long documents read once (--passes 1): TRL's bfd packs each document once, truncated to R, and
    # the original packer crops the shortest, so both run out of rows long before the budget (the paper's share of
    # one pass of the corpus's tokens). On a stream that wraps (the default) they read on until they make it
    rng = np.random.default_rng(4)
    f = tmp_path / "lengths.txt"
    np.savetxt(f, rng.integers(20, 400, 300), fmt="%d")
    out = tmp_path / "out"
    assert audit_main(["--lengths", str(f), "--row-capacity", "65", "--buffer", "8", "--packers", "original,trl_bfd",
                       "--passes", "1", "--permutations", "0", "--no-figures", "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    trl, orig = s["packers"]["trl_bfd"], s["packers"]["original"]
    for p in (orig, trl):
        assert not p["budget_reached"] and p["budget_rows"] == s["rows"] and p["rows"] < s["rows"] // 2
    assert trl["targets"] == trl["rows"] * 64
    report = (out / "report.md").read_text()
    verdict = report.strip().splitlines()[-1]
    assert f"**trl_bfd** stopped after {trl['rows']:,} of the {s['rows']:,} rows" in report
    assert "Not every packer reached the budget" in verdict
    assert f"original {orig['rows']:,} (" in verdict and f"trl_bfd {trl['rows']:,} (" in verdict
    comp = (out / "comparison.json").read_text()
    for text in (report, comp, capsys.readouterr().out):
        assert "same budget" not in text


def test_olmo_packs_the_tracers_one_file_in_one_worker_and_keeps_a_users_setting(tmp_path, monkeypatch):
    """OLMo-core packs each source file in a process pool of one worker per core unless OLMO_DATA_PREP_WORKERS says
    otherwise; the tracer writes one file, so every other worker was a fork that ran nothing. The pool's size is
    recorded as OLMo-core asks for it, and the variable is as it was afterwards."""
    import concurrent.futures as futures

    import audit.adapters as adapters

    asked, real = [], futures.ProcessPoolExecutor

    class Recording(real):
        def __init__(self, max_workers=None, *args, **kwargs):
            asked.append(max_workers)
            super().__init__(max_workers, *args, **kwargs)

    monkeypatch.setattr(futures, "ProcessPoolExecutor", Recording)
    monkeypatch.delenv("OLMO_DATA_PREP_WORKERS", raising=False)
    docs = [np.arange(FIRST_ID, FIRST_ID + n) for n in (5, 40, 3)]
    rows = list(adapters.olmo("truncate", 17, tmp_path / "a")(iter(docs)))
    assert asked == [1] and rows and "OLMO_DATA_PREP_WORKERS" not in os.environ
    monkeypatch.setenv("OLMO_DATA_PREP_WORKERS", "2")  # the user's own choice is theirs
    list(adapters.olmo("truncate", 17, tmp_path / "b")(iter(docs)))
    assert asked == [1, 2] and os.environ["OLMO_DATA_PREP_WORKERS"] == "2"
