"""The audit's plan (audit/plan.py): built once from the parsed command line, frozen, the Namespace left as
argparse made it; a preset's topology decided there (ranks x workers, or one packer for the run); the stream
checked for its worker streams once."""
import dataclasses
import re

import numpy as np
import pytest

import audit.run
import audit.topology
from audit.__main__ import parse_args
from audit.plan import plan_of, trace_args
from audit.run import run_audit
from errors import DataError


@pytest.fixture(scope="module")
def lengths_file(tmp_path_factory):
    rng = np.random.default_rng(3)
    f = tmp_path_factory.mktemp("plan") / "L.txt"
    f.write_text("\n".join(map(str, np.maximum(1, rng.lognormal(3.0, 1.2, 2100).astype(np.int64)))) + "\n")
    return f


def _plan(f, *extra):
    return plan_of(parse_args(["--lengths", str(f), "--row-capacity", "65", "--buffer", "16", *extra]))


@pytest.mark.parametrize("extra,streams,split,packers", [
    ([], (1, 1), "document", ("original", "lossless", "segment_first", "random_span")),
    (["--ranks", "2", "--loader-workers", "3"], (2, 3), "document", None),
    (["--pipeline", "nanochat", "--ranks", "2"], (2, 1), "file-group:1024", ("original",)),
    (["--pipeline", "project", "--ranks", "4", "--loader-workers", "2"], (1, 1), "document", ("original",)),
    (["--pipeline", "torchtitan", "--ranks", "2", "--loader-workers", "2", "--split-by", "group:7"], (2, 2),
     "group:7", ("titan_concat",)),
])
def test_the_plan_decides_the_topology_a_preset_makes_of_the_ranks(lengths_file, extra, streams, split, packers):
    p = _plan(lengths_file, *extra)
    t = p.topology
    assert (t.streams_ranks, t.streams_workers) == streams and t.worker_streams == streams[0] * streams[1]
    assert t.split_by == split == t.split.text
    assert p.runs_worker_streams == (t.worker_streams > 1)
    if packers is not None:
        assert p.packers == packers
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.buffer = 3


def test_the_namespace_is_left_as_argparse_made_it(lengths_file, tmp_path):
    args = parse_args(["--lengths", str(lengths_file), "--row-capacity", "65", "--buffer", "16", "--targets",
                       str(300 * 64), "--pipeline", "nanochat", "--ranks", "2", "--permutations", "0", "--no-figures",
                       "--out", str(tmp_path / "o")])
    before = dict(vars(args))
    plan = plan_of(args)
    assert run_audit(plan) == 0
    assert vars(args) == before  # nothing of the preset, the split or the topology written back


def test_the_stream_is_checked_for_its_worker_streams_once(lengths_file, tmp_path, monkeypatch):
    calls = []
    real = audit.topology.check_topology

    def counted(*a):
        calls.append(a)
        return real(*a)

    monkeypatch.setattr(audit.run, "check_topology", counted)
    monkeypatch.setattr(audit.topology, "check_topology", counted)
    plan = _plan(lengths_file, "--targets", str(300 * 64), "--ranks", "2", "--loader-workers", "2",
                 "--permutations", "0", "--no-figures", "--out", str(tmp_path / "o"))
    assert run_audit(plan) == 0
    assert [c[:3] for c in calls] == [(2100, 4, audit.topology.Split(1, ranks=2))]  # and the stream's files


@pytest.mark.parametrize("extra,needle", [
    (["--sweep", "buffer=0", "--pipeline", "nope"], "--sweep buffer=0"),  # a sweep's grid is checked first
    (["--pipeline", "nope", "--buffer", "0"], "--pipeline 'nope'"),  # then the preset, then the numbers
    (["--buffer", "0", "--thresholds", "x"], "--buffer 0"),
    (["--thresholds", "x", "--split-by", "rows"], "--thresholds 'x'"),
    (["--split-by", "rows", "--trace", "nomodule"], "--split-by 'rows'"),
])
def test_the_first_bad_value_is_the_one_named(lengths_file, extra, needle):
    with pytest.raises(DataError, match="^" + re.escape(needle)):
        _plan(lengths_file, *extra)


def test_trace_args_take_pythons_constants_then_numbers_then_text():
    # found by a user: flag=False arrived as the text 'False', which is true
    got = trace_args(["flag=False", "on=True", "x=None", "n=8", "f=1e3", "s=abc", "t=false", "e="])
    assert got == {"flag": False, "on": True, "x": None, "n": 8, "f": 1000.0, "s": "abc", "t": "false", "e": ""}
    assert got["flag"] is False and got["x"] is None and type(got["n"]) is int
    with pytest.raises(DataError, match="^--trace-arg R: given twice; give it once$"):  # the later silently won
        trace_args(["R=2049", "R=100"])
