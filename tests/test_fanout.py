"""The fan-out engines (fanout/): --engine ray gives the local engine's results value for value (the audit at
2 ranks x 2 loader workers with its permutations, the micro queue study that test_queue_study_run checks), a task whose Ray
worker dies is run again to the undisturbed result, and bad input is one line. The tests share one local Ray
(seconds to start): the engine finds it running, uses it and leaves it running."""
import errno
import json
import multiprocessing
import os
import signal
import shutil
import socket
import sys
import threading
import time

import numpy as np
import pytest
import ray
from conftest import MICRO_STUDY as MICRO
from conftest import ROOT, one_line_error, queue_script, run_micro_study
from fanout_tasks import dies_once, fails_first
from test_main_job import MICRO as SIX_MICRO

import audit.events as events
from audit.__main__ import main as audit_main
from audit.pipeline import StreamInput
from audit.topology import share_counts, shares
from comparison import run_six
from corpus.errors import DataError
from fanout import Task, TaskFailed, open_engine
from presets import six as six_runs
from shardqueue.study import presets

R, B = 65, 16
# what differs between two runs of the same work: wall times, dates, the folders they ran in
TIMES = ("timing", "provenance", "folder", "date", "overhead_vs_kept_training", "folder_bytes", "peak_memory_mib",
         "loader_wait_share", "mfu")


@pytest.fixture(scope="module")
def local_ray():
    # tests/ on the workers' path too (the tasks of tests/fanout_tasks.py), through the environment the local Ray's
    # workers inherit: a runtime_env would make Ray start workers of its own for it beside the one it starts anyway
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
        # one Ray worker: the suite already runs a process per core, and each Ray worker pays its own torch import
        ray.init(num_cpus=1, include_dashboard=False)
    yield
    ray.shutdown()


def timeless(v):
    """v without its wall times (keys naming seconds or wall time, or ending in _s), dates and memory peaks."""
    if isinstance(v, dict):
        return {k: timeless(x) for k, x in v.items()
                if k not in TIMES and not any(w in k for w in ("wall", "second")) and not k.endswith("_s")}
    if isinstance(v, list):
        return [timeless(x) for x in v]
    return v


def _lengths(n=2000, seed=3):
    rng = np.random.default_rng(seed)
    return np.maximum(1, rng.lognormal(3.0, 1.2, n).astype(np.int64))


def test_the_audit_on_ray_equals_the_local_audit_at_two_ranks_by_two_workers(local_ray, tmp_path):
    f = tmp_path / "L.txt"
    f.write_text("\n".join(map(str, _lengths())) + "\n")
    argv = ["--lengths", str(f), "--row-capacity", str(R), "--buffer", str(B), "--targets", str(301 * (R - 1)),
            "--packers", "original,concat_chunk", "--permutations", "3", "--no-figures", "--ranks", "2",
            "--loader-workers", "2"]
    assert audit_main(argv + ["--out", str(tmp_path / "local")]) == 0
    assert audit_main(argv + ["--out", str(tmp_path / "ray"), "--engine", "ray"]) == 0
    local, on_ray = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("local", "ray"))
    topo = local["topology"]
    assert topo["worker_streams"] == 4 and set(topo["packers"]) == {"original", "concat_chunk"}
    # four different worker streams: an engine that mixed up their order would not give the same list
    assert len({json.dumps(c) for c in topo["packers"]["original"]["workers"]}) == 4
    assert len(set(local["permutations"]["delays"])) > 1  # permutations in task order: a mix-up would show
    assert timeless(on_ray) == timeless(local)
    assert (tmp_path / "ray" / "report.md").read_text() == (tmp_path / "local" / "report.md").read_text()
    assert not list(tmp_path.glob("ray/.*-work"))  # the workers' scratch is gone


def test_the_queue_study_on_ray_equals_the_local_study(local_ray, micro_study, tmp_path, monkeypatch):
    monkeypatch.setitem(presets.PRESETS, "micro", MICRO)
    # stage A runs in the driver under either engine: the Ray study starts from a copy of the local one's
    shutil.copytree(micro_study["out"] / "stage_a", tmp_path / "ray" / "stage_a")
    assert run_micro_study(tmp_path / "ray", micro_study["data"], engine="ray") == 0
    on_ray = json.loads((tmp_path / "ray" / "summary.json").read_text())
    assert {r["name"] for r in on_ray["runs"]} == {f"{a}_s{s}" for a in "ABC" for s in (43, 44)}
    assert timeless(on_ray) == timeless(micro_study["summary"])


def test_run_six_on_ray_equals_run_six_in_this_process(local_ray, small_corpus, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(six_runs.PRESETS, "tiny", SIX_MICRO)  # the configs are resolved in the driver
    monkeypatch.setattr(six_runs, "SEEDS", (43,))
    for kind in ("local", "ray"):
        assert run_six.main(["--data-dir", str(small_corpus), "--out", str(tmp_path / kind), "--engine", kind]) == 0
    local, on_ray = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("local", "ray"))
    assert [r["name"] for r in on_ray] == ["baseline_s43", "random_crop_s43", "segmented_s43"]
    assert timeless(on_ray) == timeless(local)
    lines = [ln.split(":")[0] for ln in capsys.readouterr().out.splitlines() if ": official BPB " in ln]
    assert lines == [r["name"] for r in local] * 2, lines  # each run's result line, printed by the driver


def test_a_task_whose_ray_worker_dies_is_run_again_to_the_undisturbed_result(local_ray, tmp_path):
    L = _lengths(400)
    stream = StreamInput("s", "lengths", L, np.append(np.arange(0, len(L), 32), len(L)))
    (tmp_path / "work").mkdir()
    args = (shares(stream, 2, refill_docs=32)[1], "original", 40, R, B, tmp_path / "work", 1)
    undisturbed = share_counts(*args)
    marker = tmp_path / "attempted"
    with open_engine("ray") as engine:
        got = list(engine.run([Task(dies_once, (str(marker), *args), name="dies once")]))
    assert marker.exists() and got == [undisturbed] and undisturbed["sources_arrived"] > 0


def test_a_task_error_comes_back_as_the_local_engine_raises_it_and_the_other_ray_tasks_finish(local_ray, tmp_path):
    for kind in ("local", "ray"):
        done = tmp_path / kind
        done.mkdir()
        with open_engine(kind) as engine, pytest.raises(DataError) as e:
            list(engine.run([Task(fails_first, (i, str(done)), name=f"t{i}") for i in range(6)]))
        assert type(e.value) is DataError and str(e.value) == "task 0: bad input"
    assert not list((tmp_path / "local").iterdir())  # in this process: one after another, stopped at the first error
    # on Ray the others are left to finish (a finished study run is kept for the rerun), none cancelled
    deadline = time.monotonic() + 20
    while len(list((tmp_path / "ray").iterdir())) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(p.name for p in (tmp_path / "ray").iterdir()) == ["1", "2", "3", "4", "5"]
    with open_engine("ray") as engine:
        assert list(engine.run([Task(fails_first, (i,)) for i in (1, 2)])) == [1, 2]


def test_a_shared_argument_is_one_object_in_rays_store_that_every_task_reads(local_ray):
    with open_engine("ray") as engine:
        ref = engine.share(np.arange(5))
        assert isinstance(ref.ref, ray.ObjectRef)  # put once: the tasks below carry the reference, not the array
        assert list(engine.run([Task(np.sum, (ref,)), Task(np.max, (ref,))])) == [10, 4]


def test_a_shared_argument_of_a_local_pool_is_one_file_that_every_task_reads():
    with open_engine("local", 2) as engine:
        lengths, meta = engine.share(np.arange(5)), {"k": [1, 2]}
        assert engine.share(meta) is meta  # not an array: pickled with each task, as before, never read from a file
        folder = engine.folder
        assert sorted(p.name for p in folder.iterdir()) == ["0.npy"]  # written once, here
        assert Task(np.sum, (lengths,))() == 10  # read by the task
    assert not folder.exists()  # removed with the engine
    with open_engine("local") as engine:  # in this process: the value itself, nothing written
        v = np.arange(3)
        assert engine.share(v) is v and engine.folder is None


def test_a_node_that_cannot_read_the_corpus_fails_in_one_line_naming_node_and_path(local_ray, tmp_path):
    missing = tmp_path / "no-corpus"
    with open_engine("ray") as engine, pytest.raises(TaskFailed) as e:
        list(engine.run([Task(os.getpid, name="arms_b_c seed 43", reads=(str(missing),))]))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("arms_b_c seed 43: node ") and socket.gethostname() in msg
    assert f"cannot read {missing}" in msg


def _study_cli(out, *extra):
    # an unprepared data folder: an engine that let bad input through stops there at once, not after a study
    return queue_script("study").main(["--preset", "tiny", "--out", str(out), "--data-dir", str(out.parent / "none"),
                                       *extra])


def _audit_cli(tmp_path, *extra):
    f = tmp_path / "L.txt"
    f.write_text("5\n9\n3\n7\n")
    return audit_main(["--lengths", str(f), "--row-capacity", "4", "--ranks", "2", "--permutations", "0",
                       "--no-figures", "--out", str(tmp_path / "o"), *extra])


def test_engine_ray_without_ray_installed_names_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as where it is not installed
    one_line_error(capsys, _study_cli(tmp_path / "s", "--engine", "ray"), "--engine ray needs Ray",
                   "the 'ray' extra", "requirements-ray.lock")
    assert not (tmp_path / "s").exists()
    one_line_error(capsys, _audit_cli(tmp_path, "--engine", "ray"), "the 'ray' extra")
    assert not (tmp_path / "o").exists()
    rc = run_six.main(["--engine", "ray", "--out", str(tmp_path / "six")])
    one_line_error(capsys, rc, "the 'ray' extra")
    assert not (tmp_path / "six").exists()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_ray_address_is_one_line_within_seconds(tmp_path, capsys):
    port = _free_port()  # nothing listens there
    t0 = time.monotonic()
    one_line_error(capsys, _study_cli(tmp_path / "s", "--engine", "ray", "--ray-address", f"127.0.0.1:{port}"),
                   f"--ray-address 127.0.0.1:{port}: no Ray cluster answers there")
    assert time.monotonic() - t0 < 30 and not (tmp_path / "s").exists()
    one_line_error(capsys, _audit_cli(tmp_path, "--engine", "ray", "--ray-address", "nowhere"),
                   "--ray-address nowhere: expected HOST:PORT")
    one_line_error(capsys, _audit_cli(tmp_path, "--ray-address", f"127.0.0.1:{port}"), "applies to --engine ray only")


def test_an_address_that_answers_but_is_no_ray_cluster_is_one_line(tmp_path, capsys):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def answer_http1():  # what a web server (the dashboard's port) answers to the gRPC hello
        conn, _ = srv.accept()
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        conn.close()

    th = threading.Thread(target=answer_http1, daemon=True)
    th.start()
    port = srv.getsockname()[1]
    t0 = time.monotonic()
    one_line_error(capsys, _audit_cli(tmp_path, "--engine", "ray", "--ray-address", f"127.0.0.1:{port}"),
                   "something answers there but it is no Ray cluster")
    assert time.monotonic() - t0 < 30
    th.join(5)
    srv.close()


@pytest.mark.parametrize("cli", ["study", "audit", "run_six"])
def test_an_unknown_engine_is_refused_by_argparse(cli, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        {"study": lambda: _study_cli(tmp_path / "s", "--engine", "dask"),
         "audit": lambda: _audit_cli(tmp_path, "--engine", "dask"),
         "run_six": lambda: run_six.main(["--engine", "dask"])}[cli]()
    assert e.value.code == 2 and "invalid choice: 'dask'" in capsys.readouterr().err


def test_an_audit_whose_tally_fails_mid_stream_in_a_ray_driver_ends_in_one_line_within_seconds(
        local_ray, tmp_path, monkeypatch, capsys):
    # ray.init() made this process a driver whose SIGTERM handler raises SystemExit; the forked core inherits it.
    # The disk fills up at the third events chunk while the core, far ahead, is blocked on a full pipe
    assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None), "Ray installed no SIGTERM handler here"
    written, cores = [], []

    def disk_fills_up(self, rec, labels=None):
        written.append(len(rec))
        if len(written) == 3:
            time.sleep(1)  # a slow disk's last write: the core, ahead, fills the pipe and waits on it
            cores.extend(c for c in multiprocessing.active_children() if c.name == "audit-core")
            raise OSError(errno.ENOSPC, "No space left on device", str(self.parquet_path))
        return real_write(self, rec, labels)

    real_write = events.EventSink.write
    monkeypatch.setattr(events.EventSink, "write", disk_fills_up)
    # 100,573 rows: the core is forked (compute.FORK_MIN_ROWS), its chunks of 4,096 rows are 300 KB each
    np.savetxt(tmp_path / "lengths.txt", _lengths(200_000), fmt="%d")
    children, t0 = set(multiprocessing.active_children()), time.monotonic()
    rc = audit_main(["--lengths", str(tmp_path / "lengths.txt"), "--row-capacity", str(R), "--buffer", str(B),
                     "--packers", "original", "--permutations", "0", "--out", str(tmp_path / "out")])
    assert time.monotonic() - t0 < 10 and len(written) == 3 and cores
    one_line_error(capsys, rc, "No space left on device", "needs free disk space")
    assert set(multiprocessing.active_children()) <= children
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lengths.txt"]  # no output, no .new- folder, no lock


def test_every_engine_implements_the_engine_protocol():
    """The study, run_six and the audit are written against fanout.Engine: each engine has its members, with the
    protocol's parameters (an engine that drifts from it fails here, not in the middle of a study on a cluster)."""
    import inspect

    from fanout import Engine
    from fanout.local import LocalEngine
    from fanout.ray_engine import RayEngine

    members = {m for m in vars(Engine) if not m.startswith("_")} | set(Engine.__annotations__)
    assert members == {"name", "in_process", "share", "run", "close"}
    for cls in (LocalEngine, RayEngine):
        assert members <= set(dir(cls)), (cls, members - set(dir(cls)))
        for m in members - {"name"}:
            assert list(inspect.signature(getattr(cls, m)).parameters) == \
                list(inspect.signature(getattr(Engine, m)).parameters), (cls, m)
