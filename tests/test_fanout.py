"""The fan-out engines (fanout/): --engine ray gives the local engine's results value for value (the audit at
2 ranks x 2 loader workers with its permutations, the micro queue study that test_queue_study_run checks), a task whose Ray
worker dies is run again to the undisturbed result, and bad input is one line.

The Ray tests share one two-node cluster on this machine (tests/ray_cluster.py: `ray start --head` and a second
raylet, one CPU each), started once for the module, with this process its driver: the engine finds Ray running,
uses it and leaves it running. Its nodes' workers run in a folder of their own with a PACKAUDIT_DATA of their
own, neither the driver's: a task that read a path relative to its folder or the project's environment fails.
The test that loses the cluster comes last."""
import contextlib
import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import psutil
import pytest
import ray
from conftest import MICRO_STUDY as MICRO
from conftest import ROOT, one_line_error, queue_script
from fanout_tasks import assigned_memory, dies_once, ends_without_final_collections, fails_first
from ray_cluster import NODE_MEMORY, RAY, TwoNodeRay
from test_corpus_readers import corpus, one_line, run, shards  # noqa: F401 - corpus and shards: fixtures used below
from test_main_job import MICRO as SIX_MICRO

import audit.compute as compute
import audit.events as events
import fanout.probe as probe
from audit.__main__ import main as audit_main
from audit.pipeline import StreamInput
from audit.topology import share_counts, shares
from comparison import run_six
from errors import DataError
from fanout import Task, TaskFailed, open_engine
import fanout.corpus_data as corpus_data
from corpus.readers.settings import Unit
from fanout.corpus_data import RayDataRunner
from fanout.local import LocalEngine
from fanout.corpus_data import corpus_lengths as engine_corpus_lengths
from fanout.task import check_reads
import fanout.ray_connect as ray_connect
import fanout.ray_engine as ray_engine
from fanout.ray_engine import ClusterLost, ClusterWatch, RayEngine, as_driver, batches, lost_line
from presets import six as six_runs
from shardqueue.study import presets
from shardqueue.study.run import run_study

R, B = 65, 16
# what differs between two runs of the same work: wall times, dates, the folders they ran in
TIMES = ("timing", "provenance", "folder", "date", "overhead_vs_kept_training", "folder_bytes", "peak_memory_mib",
         "loader_wait_share", "mfu")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    """The two-node cluster, and this process its driver (ray.init with its address, as the engine joins one). The
    local micro study that the study test compares with runs here while the raylets start (each takes seconds)."""
    nodes = tmp_path_factory.mktemp("raylets")  # the nodes' working folder: never the driver's
    # tests/ on the workers' path too (the tasks of tests/fanout_tasks.py): the engine adds the checkout only to a Ray
    # it starts itself, and here the test's own Ray is used
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
           "PACKAUDIT_DATA": str(nodes / "not-the-drivers-data")}
    env.pop("RAY_ADDRESS", None)
    token = Path.home() / ".ray" / "auth_token"  # what the head reads: made as a local Ray would make it (once)
    if env.get("RAY_AUTH_MODE") == "token" and not token.exists():
        subprocess.run([RAY, "get-auth-token", "--generate"], capture_output=True, env=env, timeout=60)
    c = TwoNodeRay()
    try:
        c.launch(env, nodes)
        if any("micro_study" in item.fixturenames for item in request.session.items):  # a test of this run needs it
            request.getfixturevalue("micro_study")
        c.wait()
        ray.init(address=c.address, logging_level="WARNING", log_to_driver=False)
        deadline = time.monotonic() + 90
        while sum(n["Alive"] for n in ray.nodes()) < 2:  # the second raylet joins a few seconds after the head
            assert time.monotonic() < deadline, c.log("node") + (c.log("node-again") if len(c.nodes) > 2 else "")
            if c.restart_second_node(env, nodes):
                print(f"note: the second node ended without joining; started again. Its log: {c.log('node')}")
            time.sleep(0.2)
        yield SimpleNamespace(address=c.address, client_port=c.client_port, nodes_cwd=nodes, ray=c)
    finally:
        ray.shutdown()
        c.stop()


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


def test_the_audit_on_ray_equals_the_local_audit_at_two_ranks_by_two_workers(cluster, tmp_path):
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


def test_the_study_on_two_nodes_reads_the_drivers_data_root_writes_into_its_folder_and_equals_the_local_study(
        cluster, micro_study, tmp_path, monkeypatch):
    """As a researcher runs it: PACKAUDIT_DATA set on the driver (the nodes have another), a relative --out from
    the driver's own working folder (the raylets work in another)."""
    monkeypatch.setitem(presets.PRESETS, "micro", MICRO)
    driver = tmp_path / "driver"
    out = driver / "rel" / "study"
    # stage A runs in the driver under either engine: the Ray study starts from a copy of the local one's, as a
    # stage A made with PACKAUDIT_DATA records it (no data root of its own): each run must be handed the driver's
    shutil.copytree(micro_study["out"] / "stage_a", out / "stage_a")
    cfg = json.loads((out / "stage_a" / "config.json").read_text())
    (out / "stage_a" / "config.json").write_text(json.dumps({**cfg, "data_dir": ""}))
    monkeypatch.setenv("PACKAUDIT_DATA", str(micro_study["data"]))
    monkeypatch.chdir(driver)
    args = Namespace(preset="micro", out="rel/study", data_dir=None, dry_run=False, curve=False, calibration=None,
                     device="cpu", workers=1, engine="ray", ray_address=cluster.address, verbose=False)
    assert run_study(args, log=lambda s: None) == 0
    on_ray = json.loads((out / "summary.json").read_text())
    assert {r["name"] for r in on_ray["runs"]} == {f"{a}_s{s}" for a in "ABC" for s in (43, 44)}
    assert timeless(on_ray) == timeless(micro_study["summary"])
    assert not list(cluster.nodes_cwd.iterdir())  # nothing written where the raylets work
    assert not list(out.glob(".fanout-probe-*"))  # the probe's token files, read back and removed


def test_run_six_on_ray_equals_run_six_in_this_process(cluster, small_corpus, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(six_runs.PRESETS, "tiny", SIX_MICRO)  # the configs are resolved in the driver
    monkeypatch.setattr(six_runs, "SEEDS", (43,))
    for kind in ("local", "ray"):
        assert run_six.main(["--data-dir", str(small_corpus), "--out", str(tmp_path / kind), "--engine", kind]) == 0
    local, on_ray = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("local", "ray"))
    assert [r["name"] for r in on_ray] == ["baseline_s43", "random_crop_s43", "segmented_s43"]
    assert timeless(on_ray) == timeless(local)
    lines = [ln.split(":")[0] for ln in capsys.readouterr().out.splitlines() if ": official BPB " in ln]
    assert lines == [r["name"] for r in local] * 2, lines  # each run's result line, printed by the driver


def test_two_workers_and_ray_data_give_one_workers_lengths_in_its_order(cluster, corpus, shards, tmp_path):
    """tests/test_corpus_readers.py's corpus and shards: one worker, two, and Ray Data on this file's cluster (a Ray
    the tests started, never one that happens to run on this machine; here rather than a local Ray of its own, which
    cost ~6 s to start and stop for this test alone). Ray Data is used as the tests' ray.init left it."""
    k = len(corpus.texts) // 4
    one = run([shards], corpus.tok)
    assert one.lengths.tolist() == [c + 1 for c in corpus.counts[:4 * k]]
    assert len(one.provenance["units"]) == 4  # one unit per file (small row groups run together)
    two = run([shards], corpus.tok, workers=2)
    assert "2 workers" in two.message
    (tmp_path / "latin.jsonl").write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n')
    assert ray.is_initialized()
    on_ray = engine_corpus_lengths([shards], corpus.tok, engine="ray", progress=False)
    with pytest.raises(DataError) as e:  # a Ray worker's bad-input error arrives as its one line
        engine_corpus_lengths([tmp_path / "latin.jsonl"], corpus.tok, engine="ray", progress=False)
    assert one_line(e, "latin.jsonl", "line 2", "not UTF-8").startswith(str(tmp_path))
    assert ray.is_initialized()  # the caller's own Ray is left running
    assert "Ray Data" in on_ray.message
    for r in (two, on_ray):
        for f in ("lengths", "labels", "doc_file", "doc_row"):
            assert getattr(r, f).tolist() == getattr(one, f).tolist(), f


def test_a_task_whose_ray_worker_dies_is_run_again_to_the_undisturbed_result(cluster, tmp_path):
    L = _lengths(400)
    stream = StreamInput("s", "lengths", L, np.append(np.arange(0, len(L), 32), len(L)))
    (tmp_path / "work").mkdir()
    args = (shares(stream, 2, refill_docs=32)[1], "original", 40, R, B, tmp_path / "work", 1)
    undisturbed = share_counts(*args)
    marker = tmp_path / "attempted"
    with open_engine("ray") as engine:
        got = list(engine.run([Task(dies_once, (str(marker), *args), name="dies once")]))
    assert marker.exists() and got == [undisturbed] and undisturbed["sources_arrived"] > 0


def test_a_task_error_comes_back_as_the_local_engine_raises_it_and_the_other_ray_tasks_finish(cluster, tmp_path):
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


def test_a_task_asks_its_node_for_its_memory_and_one_no_node_holds_is_one_line_before_it_is_sent(cluster, tmp_path,
                                                                                                    capsys):
    mib = 1024 ** 2
    with open_engine("ray", address=cluster.address) as engine:
        assert engine.most_memory() == NODE_MEMORY
        assert list(engine.run([Task(assigned_memory, name="m", memory=200 * mib)])) == [200 * mib]
        with pytest.raises(TaskFailed) as e:  # Ray would wait for a node with room forever
            list(engine.run([Task(assigned_memory, name="small"), Task(assigned_memory, name="big",
                                                                         memory=300 * mib)]))
    assert str(e.value) == (f"big: asks for 300.0 MB of memory, more than any node of the Ray cluster at "
                            f"{cluster.address} has for Ray's tasks (at most 256.0 MB, a node's `memory` resource); "
                            "Ray would wait for such a node forever")
    # the audit's replays: 500,000 places and as many arrivals x 630 bytes = 315,000,000 bytes = 300.4 MB a replay
    f = _lengths_file(tmp_path)
    one_line_error(capsys, audit_main(["--lengths", str(f), "--row-capacity", str(R), "--buffer", "500000",
                                       "--permutations", "2", "--no-figures", "--engine", "ray", "--ray-address",
                                       cluster.address, "--out", str(tmp_path / "o")]),
                   "--buffer 500,000 needs about 300.4 MB of memory a replay, more than any node of the Ray cluster at "
                   f"{cluster.address} has for Ray's tasks (at most 256.0 MB")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["L.txt"]


def test_the_audits_replays_ask_for_a_replays_memory_and_other_packers_for_none(tmp_path, monkeypatch):
    asked, run = [], LocalEngine.run

    def recording(self, tasks):
        tasks = list(tasks)
        asked.extend((t.name, t.memory) for t in tasks)
        return run(self, tasks)

    monkeypatch.setattr(LocalEngine, "run", recording)
    # --passes 1 on 400 documents: 400 arrivals of the 1,000 places, 1,000 x 310 + 400 x 320 = 438,000 bytes
    assert audit_main(["--lengths", str(_lengths_file(tmp_path)), "--row-capacity", str(R), "--buffer", "1000",
                       "--passes", "1", "--packers", "original,concat_chunk", "--permutations", "1", "--ranks", "2",
                       "--no-figures", "--no-fates", "--out", str(tmp_path / "o")]) == 0
    assert sorted(asked) == sorted([("original worker stream 0", 438_000), ("original worker stream 1", 438_000),
                                    ("concat_chunk worker stream 0", 0), ("concat_chunk worker stream 1", 0),
                                    ("stream as it is", 438_000), ("permutation 0", 438_000)])


def test_a_shared_argument_is_one_object_in_rays_store_that_every_task_reads(cluster):
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


def _pool_processes():
    pids = set()
    for p in psutil.Process().children():
        try:
            if any("spawn_main" in a for a in p.cmdline()):
                pids.add(p.pid)
        except psutil.Error:  # a child of another kind that ended meanwhile
            pass
    return pids


def test_a_local_pool_serves_every_run_of_its_engine_and_ends_with_it():
    """An audit's worker streams and then its permutations go to the same processes: each imports the project once,
    and ends as a command line does (no last scans of its objects at exit)."""
    before = _pool_processes()
    with open_engine("local", 2) as engine:
        assert len(list(engine.run([Task(os.getpid)] * 4))) == 4
        pool = _pool_processes() - before
        assert len(pool) == 2  # started at the first run, and still there after it
        ends = list(engine.run([Task(ends_without_final_collections)] * 4))
        assert all(registered for registered, _ in ends) and {pid for _, pid in ends} <= pool  # the same processes
        assert _pool_processes() - before == pool
    assert not _pool_processes() - before  # ended with the engine


def _node_labels():
    """How a line names each node of the cluster: its address and the start of its id."""
    return [f"node {n['NodeManagerAddress']} ({n['NodeID'][:8]})" for n in ray.nodes() if n["Alive"]]


def test_a_node_that_cannot_read_the_corpus_is_refused_in_one_line_naming_node_and_path(cluster, tmp_path):
    missing = tmp_path / "no-corpus"
    with open_engine("ray") as engine, pytest.raises(DataError) as e:
        list(engine.run([Task(os.getpid, name="arms_b_c seed 43", reads=(str(missing),))]))
    msg = str(e.value)
    assert "\n" not in msg and any(msg.startswith(f"{node} cannot read") for node in _node_labels()), msg
    assert f"cannot read {missing}" in msg  # by the probe, before the task: its name is not the subject
    # on the node itself, each task checks its reads again (a node that joins after the probe)
    with pytest.raises(TaskFailed) as e:
        check_reads(Task(os.getpid, name="arms_b_c seed 43", reads=(str(missing),)))
    assert str(e.value).startswith("arms_b_c seed 43: node ") and socket.gethostname() in str(e.value)


def test_a_node_at_another_commit_is_refused_in_one_line_before_any_compute(cluster, small_corpus, tmp_path,
                                                                            monkeypatch, capsys):
    """The probe's comparison, with the driver's own commit made another (one checkout serves both nodes here)."""
    monkeypatch.setitem(presets.PRESETS, "micro", MICRO)
    real = probe.checkout_identity()
    monkeypatch.setattr(probe, "checkout_identity", lambda root=None: {**real, "commit": "1" * 40})
    out = tmp_path / "study"
    rc = queue_script("study").main(["--preset", "micro", "--out", str(out), "--data-dir", str(small_corpus),
                                     "--engine", "ray", "--ray-address", cluster.address])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and any(line.startswith(f"error: {node}: its checkout {ROOT} is at commit {real['commit'][:12]}")
                           for node in _node_labels()), line
    assert f"is at {probe.described(real)}; the driver's is at {probe.described({**real, 'commit': '1' * 40})}: " \
        "check out the driver's commit" in line
    assert not out.exists()  # no stage A, no run, no file, no folder: nothing computed or written


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


def _lengths_file(tmp_path, n=400):
    f = tmp_path / "L.txt"
    f.write_text("\n".join(map(str, _lengths(n).tolist())) + "\n")  # as np.savetxt(fmt="%d") writes it, 6x as fast
    return f


def _audit_process(tmp_path, *extra, env=None, out="o", docs=400):
    """`python -m audit` in a process of its own (its own Ray state): a small audit whose permutations fan out."""
    argv = [sys.executable, "-m", "audit", "--lengths", str(_lengths_file(tmp_path, docs)), "--row-capacity", str(R),
            "--buffer", str(B), "--packers", "original", "--no-figures", "--no-fates", "--out", str(tmp_path / out),
            *extra]
    return subprocess.Popen(argv, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _one_error_line(err):
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_the_ray_client_port_and_a_missing_token_mode_are_one_line_each_within_seconds(cluster, tmp_path, monkeypatch,
                                                                                      capsys):
    t0 = time.monotonic()
    client = f"127.0.0.1:{cluster.client_port}"
    one_line_error(capsys, _audit_cli(tmp_path, "--engine", "ray", "--ray-address", client),
                   f"--ray-address {client}: this is a Ray Client port", f"ray://{client}")
    one_line_error(capsys, _audit_cli(tmp_path, "--engine", "ray", "--ray-address", f"ray://{cluster.address}"),
                   "a cluster's own address", f"give {cluster.address} without ray://")
    monkeypatch.delenv("RAY_AUTH_MODE")  # a driver whose shell never exported it (Ray's own default)
    one_line_error(capsys, _audit_cli(tmp_path, "--engine", "ray", "--ray-address", cluster.address),
                   "the cluster asks for a token", "export RAY_AUTH_MODE=token", "~/.ray/auth_token")
    assert time.monotonic() - t0 < 30 and not (tmp_path / "o").exists()


def test_a_token_the_cluster_refuses_is_one_line_within_seconds(cluster, tmp_path):
    # a process of its own: Ray reads the token once per process, and this one holds the right one
    t0 = time.monotonic()
    proc = _audit_process(tmp_path, "--permutations", "2", "--engine", "ray", "--ray-address", cluster.address,
                          env={"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "not-the-heads-token"})
    _, err = proc.communicate(timeout=60)
    line = _one_error_line(err)
    assert proc.returncode == 2 and time.monotonic() - t0 < 30, (proc.returncode, err)
    assert "the cluster refused this machine's token (RAY_AUTH_MODE=token, the token from RAY_AUTH_TOKEN)" in line
    assert not (tmp_path / "o").exists()


def test_engine_ray_without_an_address_starts_its_own_ray_beside_a_running_cluster_and_stops_it(cluster, tmp_path):
    """In a process of its own, the engine every command's --engine ray opens (choose.open_engine). The cluster's
    temporary folder is where a Ray started with RAY_TMPDIR=its parent looks for a running one (ray_current_cluster,
    as `ray start` leaves it in /tmp/ray): a bare ray.init() would join it."""
    temp = cluster.ray.temp
    assert (temp / "ray_current_cluster").exists()
    before = {p.name for p in temp.glob("session_2*")}
    code = ("import os, ray\nfrom fanout import Task, open_engine\nwith open_engine('ray') as e:\n"
            "    print(ray.get_runtime_context().gcs_address, *e.run([Task(os.getpid)]))")
    got = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "RAY_TMPDIR": str(cluster.ray.root),
                              "RAY_ADDRESS": ""})
    assert got.returncode == 0, got.stderr
    own = {p.name for p in temp.glob("session_2*")} - before
    assert len(own) == 1, (before, own)  # a Ray of its own, in a session of its own
    assert got.stdout.split()[0] != cluster.address and len(got.stdout.split()) == 2, got.stdout
    session = own.pop()
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if any(session in a for a in p.info["cmdline"] or [])]
    assert not left, left  # and stopped at the end: none of its processes is left


def test_small_tasks_go_out_in_batches_sized_to_the_clusters_cpus():
    small = [Task(os.getpid, name=f"permutation {i}", small=True) for i in range(201)]
    big = Task(os.getpid, name="worker stream 0")
    assert [len(g) for g in batches(small, 2)] == [26] * 7 + [19]  # 4 batches per CPU
    assert [len(g) for g in batches(small[:3], 8)] == [1, 1, 1]
    got = batches([big, *small[:10], big, *small[10:12]], 1)  # a large task alone, in its place
    assert [len(g) for g in got] == [1, 3, 3, 3, 1, 1, 2] and got[5][0] is big


def test_the_lost_cluster_line_says_what_finished_what_is_kept_and_the_command_that_resumes(monkeypatch):
    monkeypatch.setattr(sys, "orig_argv", ["python", "queue/study.py", "--out", "my runs"])
    runs = [Task(os.getpid, name=f"arms_b_c seed {s}", kept="their runs' study_run.json in --out") for s in (43, 44)]
    line = lost_line("10.0.0.1:6379", runs, runs[:1])
    assert line.startswith("the Ray cluster at 10.0.0.1:6379 was lost (its head has not answered for 3 s): ")
    assert "1 of 2 tasks had finished and are kept (arms_b_c seed 43: their runs' study_run.json in --out)" in line
    assert line.endswith("rerun `python queue/study.py --out 'my runs'` to resume")
    perms = [Task(os.getpid, name=f"permutation {i}", small=True) for i in range(5)]
    assert "3 of 5 tasks had finished; their results were held here and are lost" in lost_line("a", perms, perms[:3])
    assert "none of 5 tasks had finished" in lost_line("a", perms, [])
    assert "was lost (its head has not answered for 3 s): before any task ran; once" in lost_line("a", [], [])
    assert issubclass(ClusterLost, DataError)


def test_a_head_that_stops_answering_during_a_call_to_it_is_a_lost_cluster_not_rays_minute(monkeypatch):
    """ray.nodes(), ray.cluster_resources() and a remote function's first submission (which stores its definition on
    the head) wait out Ray's minute of reconnects once the head is gone: the lost cluster test met it, once in several
    suite runs, a kill between the packers and the permutations' probe. Each goes through RayEngine.ask_head, watched
    as a result is. Here on an engine whose head's port is closed and whose Ray never answers the call the case
    names; the watch's seconds are shortened."""
    monkeypatch.setattr(ray_engine, "POLL_S", 0.05)
    monkeypatch.setattr(ray_engine, "LOST_S", 0.3)
    never = threading.Event()
    asked = []

    def no_answer(name, answer=None):
        def call(*a, **k):  # Ray's call, waiting as long as the test lets it
            asked.append(name)
            if not never.wait(10):
                pytest.fail(f"{name} was called without the watch")  # the engine waited on it 10 s
            return answer
        return call

    def remote(answers):  # ray.remote(fn) and Engine.remote: .options(...).remote(...)
        return SimpleNamespace(options=lambda **k: SimpleNamespace(remote=answers))

    node = {"Alive": True, "Resources": {"CPU": 1.0}, "NodeID": "ab" * 28, "NodeManagerAddress": "10.0.0.2"}
    cases = {"ray.nodes()": (False, dict(nodes=no_answer("ray.nodes()"))),
             "the probe's submission": (False, dict(nodes=lambda: [node], remote=lambda fn: remote(
                 no_answer("the probe's submission")))),
             "ray.cluster_resources()": (True, dict(cluster_resources=no_answer("ray.cluster_resources()"))),
             "the tasks' submission": (True, dict(cluster_resources=lambda: {"CPU": 1.0}))}
    engine = RayEngine.__new__(RayEngine)  # no ray.init: only what run() and probe() touch
    engine.where, engine.watch, engine.env = "10.0.0.1:6379", ClusterWatch("127.0.0.1", _free_port()), {}
    engine.remote = remote(no_answer("the tasks' submission"))
    try:
        for call, (checkout_probed, fake) in cases.items():
            engine.ray = SimpleNamespace(**fake)
            engine.probed = {"checkout": checkout_probed, "reads": set(), "prepared": set(), "writes": set()}
            t0 = time.monotonic()
            with pytest.raises(ClusterLost) as e:
                list(engine.run([Task(os.getpid, name="t")]))
            assert time.monotonic() - t0 < 3 and asked[-1] == call, (time.monotonic() - t0, asked)
            line = str(e.value)
            assert line.startswith("the Ray cluster at 10.0.0.1:6379 was lost") and "none of 1 tasks" in line, line
    finally:
        never.set()
    # a head that answers: the call's value, or its own error, as if called here
    monkeypatch.setattr(ClusterWatch, "lost", lambda self: False)
    assert engine.ask_head(lambda: {"CPU": 2.0}) == {"CPU": 2.0}
    with pytest.raises(KeyError, match="no such node"):
        engine.ask_head(lambda: {}["no such node"])


def test_a_ray_client_that_gives_up_is_a_lost_cluster_in_seconds_and_starts_no_local_ray(monkeypatch):
    """Through Ray Client (ray://) a dropped connection is retried inside each of Ray's calls, for 30 s by default,
    and then the call raises ConnectionError ("Client is shutting down."), which the audit's command line took for a
    failed file (2026-12-07, the test cluster killed under a ray:// audit: 30 s, then `error: a file: ConnectionError;
    needs a working file system`). The engine gives the client 3 s and calls the ConnectionError a lost cluster; the
    client, no longer initialized, is asked nothing more (Ray's auto-init would start a local Ray), and what had come
    back is what had finished. Measured the same day on the test cluster: the line 5.7 s after the kill, status 2."""
    def init(**kw):
        seen.append(os.environ.get(ray_connect.CLIENT_GRACE_ENV))

    seen, fake = [], SimpleNamespace(init=init)
    for name in (ray_connect.FLUSH_ENV, ray_connect.CLIENT_GRACE_ENV):  # start() sets them: as they were, after
        monkeypatch.setenv(name, "")  # (delenv of an unset variable records nothing to put back)
        monkeypatch.delenv(name)
    ray_connect.start(fake, "127.0.0.1:6379", "--ray-address")  # a driver of the cluster: Ray's own reconnects
    monkeypatch.delenv(ray_connect.CLIENT_GRACE_ENV, raising=False)
    ray_connect.start(fake, "ray://127.0.0.1:10001", "--ray-address")
    monkeypatch.setenv(ray_connect.CLIENT_GRACE_ENV, "20")  # the user's own choice is kept
    ray_connect.start(fake, "ray://127.0.0.1:10001", "--ray-address")
    assert seen == [None, "3", "20"]

    def wait(refs, timeout=None, num_returns=1):
        assert num_returns == 1, "the client that gave up was asked again"
        if refs == ["t1"]:
            raise ConnectionError("Client is shutting down.")
        return refs, []

    engine = RayEngine.__new__(RayEngine)  # no ray.init: only what run() touches
    engine.where, engine.watch, engine.env = "ray://10.0.0.1:10001", ClusterWatch("127.0.0.1", _free_port()), {}
    engine.probed = {"checkout": True, "reads": set(), "prepared": set(), "writes": set()}
    engine.remote = SimpleNamespace(options=lambda **k: SimpleNamespace(remote=lambda group, env: group[0].name))
    engine.ray = SimpleNamespace(cluster_resources=lambda: {"CPU": 1.0}, wait=wait, get=lambda ref: [f"{ref} done"],
                                 is_initialized=lambda: False, exceptions=ray.exceptions)
    got = []
    with pytest.raises(ClusterLost) as e:
        for x in engine.run([Task(os.getpid, name=f"t{i}", kept="its study_run.json") for i in range(3)]):
            got.append(x)
    assert got == ["t0 done"]
    assert str(e.value).startswith("the Ray cluster at ray://10.0.0.1:10001 was lost (its head has not answered for "
                                   "3 s): 1 of 3 tasks had finished and are kept (t0: its study_run.json)"), str(e.value)
    # the head's calls and Ray Data's reads: the same ConnectionError, the same lost cluster
    watch, line = ClusterWatch("127.0.0.1", _free_port()), lambda: "lost"

    def gave_up():
        raise ConnectionError("Client is shutting down.")

    def batches_then_gave_up():
        yield 1
        gave_up()

    with pytest.raises(ClusterLost, match="^lost$"):
        watch.call(gave_up, line)
    got = []
    with pytest.raises(ClusterLost, match="^lost$"):
        got.extend(watch.iterate(batches_then_gave_up(), line))
    assert got == [1]


def test_a_ray_client_session_the_head_does_not_open_is_one_line_naming_its_logs(monkeypatch):
    """ray.init through ray:// raises ConnectionAbortedError("Initialization failure from server:" and the server's
    traceback) when the head's Ray Client server opens no session for the driver: said as that, with the traceback's
    last line and, where that does not name them, the head's logs; not as Ray's first line, which ends in a colon."""
    def refusing(text):
        def init(**kw):
            raise ConnectionAbortedError(text)
        return SimpleNamespace(init=init)

    for name in (ray_connect.FLUSH_ENV, ray_connect.CLIENT_GRACE_ENV):  # start() sets them: as they were, after
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    where = "ray://10.0.0.1:10001"
    logs = ("; the head's Ray logs say more (ray_client_server*.err in its session folder, /tmp/ray/session_latest/logs "
            "by default)")
    proxy = ("RuntimeError: Proxy failed to Connect to backend! Check `ray_client_server.err` and "
             "`ray_client_server_23000.err` on the head node of the cluster for the relevant logs. By default these "
             "are located at /tmp/ray/session_latest/logs.")
    for text, why, hint in (
            ("Initialization failure from server:\n", "it gave no reason", logs),
            ("Initialization failure from server:\r\n  \r\nTraceback (most recent call last):\r\n  File \"x\"\r\n"
             "TimeoutError: runtime env agent\r\n \r\n", "TimeoutError: runtime env agent", logs),
            ("Initialization failure from server:\nTraceback (most recent call last):\n  File \"proxier.py\"\n"
             f"{proxy}\n", proxy, "")):  # the proxy's own line names the logs: not said twice
        with pytest.raises(DataError) as e:
            ray_connect.start(refusing(text), where, "--ray-address")
        assert str(e.value) == (f"--ray-address {where}: the head's Ray Client server opened no session for this "
                                f"driver ({why}){hint}; a rerun may connect")
    with pytest.raises(DataError) as e:  # the same error from a cluster's own address is Ray's, as before
        ray_connect.start(refusing("reset"), "10.0.0.1:6379", "--ray-address")
    assert str(e.value) == ("--ray-address 10.0.0.1:6379: Ray could not start or connect (ConnectionAbortedError: "
                            "reset)")


def test_a_head_that_stops_answering_while_ray_data_reads_the_corpus_is_a_lost_cluster(monkeypatch, tmp_path):
    """The corpus length pass on Ray Data under the same watch: asking for the nodes, and awaiting each batch of the
    read. Ray Data's own iterator waited past 30 s after the test cluster was killed mid-read (2026-12-07); a batch
    that does come is passed on, and the read's own error is raised as it was."""
    monkeypatch.setattr(ray_engine, "POLL_S", 0.05)
    monkeypatch.setattr(ray_engine, "LOST_S", 0.3)
    monkeypatch.setattr(corpus_data, "ray_data_settings", contextlib.nullcontext)
    monkeypatch.setattr(sys, "orig_argv", ["python", "-m", "audit", "--engine", "ray"])
    never = threading.Event()
    closed = SimpleNamespace(gcs_address=f"127.0.0.1:{_free_port()}")  # a head that does not answer
    units = [Unit(0, 0, "jsonl", str(tmp_path / "a.jsonl"))]

    def pass_of(nodes, read):
        fake = SimpleNamespace(get_runtime_context=lambda: closed, nodes=nodes, remote=lambda fn: None)
        runner = RayDataRunner(fake, "10.0.0.1:6379")
        monkeypatch.setattr(runner, "read", read)
        return runner(units, None, [0])

    def waits(*a):  # Ray's wait, as long as the test lets it (a call made without the watch fails the test)
        never.wait(10)
        return []

    def batches_then_waits(*a):
        yield {"unit": np.zeros(2, np.int64), "length": np.array([3, 4]), "label": np.array(["", ""], dtype=object),
               "has_label": np.zeros(2, bool)}
        waits()

    def fails(*a):
        raise DataError("a.jsonl: line 2: not UTF-8")
        yield

    try:
        for nodes, read in ((waits, fails), (lambda: [], batches_then_waits)):
            t0 = time.monotonic()
            with pytest.raises(ClusterLost) as e:
                list(pass_of(nodes, read))
            assert time.monotonic() - t0 < 3, time.monotonic() - t0
            assert str(e.value) == ("the Ray cluster at 10.0.0.1:6379 was lost (its head has not answered for 3 s) "
                                    "while Ray Data read the corpus; once the cluster is back, rerun "
                                    "`python -m audit --engine ray`")
    finally:
        never.set()
    monkeypatch.setattr(ray_engine.ClusterWatch, "lost", lambda self: False)  # a head that answers
    with pytest.raises(DataError, match="^a.jsonl: line 2: not UTF-8$"):
        list(pass_of(lambda: [], fails))

    def slow_batches(*a):  # slower than the watch's polls: each is waited for and handed on, in order
        for lengths in ([3, 4], [5]):
            time.sleep(0.12)
            n = len(lengths)
            yield {"unit": np.zeros(n, np.int64), "length": np.array(lengths), "has_label": np.zeros(n, bool),
                   "label": np.array([""] * n, dtype=object)}

    (unit, result), = pass_of(lambda: [], slow_batches)
    assert unit == 0 and result.lengths.tolist() == [3, 4, 5]


def test_a_watched_iterator_reads_ahead_a_little_and_is_closed_when_its_caller_stops(monkeypatch):
    """ClusterWatch.iterate's thread holds at most PULLED_AHEAD elements ready (a Ray Data batch pins its block in
    the object store), and closes the iterable once the caller stops."""
    monkeypatch.setattr(ray_engine, "POLL_S", 0.02)
    pulled, closed = [], threading.Event()

    def endless():
        try:
            while True:
                pulled.append(len(pulled))
                yield pulled[-1]
        finally:
            closed.set()

    watch = ClusterWatch("127.0.0.1", _free_port())
    monkeypatch.setattr(ClusterWatch, "lost", lambda self: False)
    read = watch.iterate(endless(), lambda: "lost")
    assert next(read) == 0 and next(read) == 1
    time.sleep(0.3)
    assert len(pulled) <= 2 + ray_engine.PULLED_AHEAD + 1, len(pulled)  # taken, queued, and one in the thread's hand
    read.close()
    assert closed.wait(2)  # the thread saw the caller stop, closed the iterable and ended


def test_a_task_sees_the_drivers_project_variables_never_its_nodes(monkeypatch):
    monkeypatch.setenv("PACKAUDIT_DATA", "/the/nodes/own")
    monkeypatch.setenv("PACKAUDIT_SKIP_HASH", "1")
    with as_driver({"PACKAUDIT_SKIP_HASH": None}):
        assert "PACKAUDIT_SKIP_HASH" not in os.environ and "not-read-on-a-Ray-worker" in os.environ["PACKAUDIT_DATA"]
    assert os.environ["PACKAUDIT_DATA"] == "/the/nodes/own" and os.environ["PACKAUDIT_SKIP_HASH"] == "1"


def test_the_probes_comparison_names_the_node_and_what_differs(tmp_path):
    me = {"commit": "a" * 40, "changes": "", "files": 0}
    needs = probe.Needs(str(ROOT), me, (), ((str(tmp_path / "stdlib"), "b1"),), (str(tmp_path),), "t")
    ok = {"root": str(ROOT), "checkout": me, "unreadable": [], "builds": {str(tmp_path / "stdlib"): "b1"},
          "wrote": {str(tmp_path): "x"}}
    assert probe.problem(needs, "node n", ok) is None
    dirty = {**ok, "checkout": {**me, "changes": "d1", "files": 2}}
    assert "at commit aaaaaaaaaaaa, 2 uncommitted changes (d1); the driver's is at commit aaaaaaaaaaaa, clean" in \
        probe.problem(needs, "node n", dirty)
    assert "records build b2, the driver's records b1" in probe.problem(
        needs, "node n", {**ok, "builds": {str(tmp_path / "stdlib"): "b2"}})
    assert "node n cannot write in" in probe.problem(needs, "node n", {**ok, "wrote": {str(tmp_path): "!Read-only"}})
    assert probe.problem(needs, "node n", {**ok, "root": "/elsewhere"}).startswith(
        "node n imports the project from /elsewhere")
    # a token file the driver does not see: --out is no shared storage
    assert "but the driver cannot see it" in probe.token_problem(needs, "node n", "abc")


@pytest.mark.parametrize("cli", ["study", "audit", "run_six"])
def test_an_unknown_engine_is_refused_by_argparse(cli, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        {"study": lambda: _study_cli(tmp_path / "s", "--engine", "dask"),
         "audit": lambda: _audit_cli(tmp_path, "--engine", "dask"),
         "run_six": lambda: run_six.main(["--engine", "dask"])}[cli]()
    assert e.value.code == 2 and "invalid choice: 'dask'" in capsys.readouterr().err


def test_an_audit_whose_tally_fails_mid_stream_in_a_ray_driver_ends_in_one_line_within_seconds(
        cluster, tmp_path, monkeypatch, capsys):
    # ray.init() made this process a driver whose SIGTERM handler raises SystemExit (the forked core that once
    # inherited it is gone, issue 51). The disk fills up at the second events chunk: one line, no output, no lock
    assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None), "Ray installed no SIGTERM handler here"
    written = []

    def disk_fills_up(self, rec, labels=None):
        written.append(len(rec["source_id"]) if isinstance(rec, dict) else len(rec))
        if len(written) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.parquet_path))
        return real_write(self, rec, labels)

    real_write = events.EventSink.write
    monkeypatch.setattr(events.EventSink, "write", disk_fills_up)
    monkeypatch.setattr(compute, "CHUNK_EVENTS", 1 << 14)  # a few chunks of this stream's 250,000 events
    lengths = _lengths_file(tmp_path, 200_000)
    t0 = time.monotonic()
    rc = audit_main(["--lengths", str(lengths), "--row-capacity", str(R), "--buffer", str(B),
                     "--packers", "original", "--permutations", "0", "--out", str(tmp_path / "out")])
    assert time.monotonic() - t0 < 10 and len(written) == 2
    one_line_error(capsys, rc, "No space left on device", "needs free disk space")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["L.txt"]  # no output, no .new- folder, no lock


def test_every_engine_implements_the_engine_protocol():
    """The study, run_six and the audit are written against fanout.Engine: each engine has its members, with the
    protocol's parameters (an engine that drifts from it fails here, not in the middle of a study on a cluster)."""
    import inspect

    from fanout import Engine
    from fanout.local import LocalEngine
    from fanout.ray_engine import RayEngine

    members = {m for m in vars(Engine) if not m.startswith("_")} | set(Engine.__annotations__)
    assert members == {"name", "in_process", "share", "probe", "run", "close"}
    for cls in (LocalEngine, RayEngine):
        assert members <= set(dir(cls)), (cls, members - set(dir(cls)))
        for m in members - {"name"}:
            assert list(inspect.signature(getattr(cls, m)).parameters) == \
                list(inspect.signature(getattr(Engine, m)).parameters), (cls, m)


def test_an_audit_ended_by_sigterm_leaves_no_folder_and_no_lock(tmp_path, capsys):
    """In this process, the signal sent by a thread of its own once the audit writes; SIGHUP takes the same way."""
    def not_caught(signum, frame):  # what the default action would do, without ending the test's process
        raise RuntimeError("SIGTERM not caught by the audit")

    def send_once_writing():
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".o.new-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGTERM)

    saved = signal.signal(signal.SIGTERM, not_caught)
    try:
        th = threading.Thread(target=send_once_writing, daemon=True)
        th.start()
        rc = audit_main(["--lengths", str(_lengths_file(tmp_path, 150_000)), "--row-capacity", str(R), "--buffer",
                         str(B), "--packers", "original", "--no-figures", "--no-fates", "--out", str(tmp_path / "o"),
                         "--permutations", "3000"])
        th.join(5)
    finally:
        signal.signal(signal.SIGTERM, saved)
    assert rc == 130 and "interrupted: nothing written" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["L.txt"]  # no output, no .new- folder, no lock


def test_a_lost_cluster_ends_the_audit_within_15_s_in_one_line_or_by_rays_own_exit_and_a_rerun_runs(cluster, tmp_path,
                                                                                                   capsys):
    """Last in this file: the module's cluster is killed here (this process leaves it first, or Ray's core would end
    this process a minute later). Two endings, as a driver's own Ray node goes with the cluster or not:
    - the engine's: its watch finds the head silent for 3 s; one line naming the cluster and the rerun, status 2,
      no folder, no lock;
    - Ray's own: the driver's core worker ends the process the moment it touches its node's object store once that
      is gone (exit_on_connection_failure, set for every core worker's store client in Ray's core_worker_process.cc);
      status 1, Ray's line in the driver's log, the lock and the unfinished folder left behind.
    Which comes first depends on what the driver does at the kill (Ray's, once in about 15 suite runs on 2026-12-06).
    Either way the rerun runs and leaves the output alone."""
    ray.shutdown()
    # a stream long enough that its permutations (batched) take the cluster tens of seconds: the kill comes first
    # PYTHONFAULTHANDLER: an audit that outlives the wait below is ended with SIGABRT, and prints where it waited
    proc = _audit_process(tmp_path, "--permutations", "3000", "--engine", "ray", "--ray-address", cluster.address,
                          docs=150_000, env={"PYTHONFAULTHANDLER": "1"})
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".o.new-*")):  # the audit has begun: its folder is being written
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()  # a late start is not waited out: its 3,000 permutations would run for minutes
            raise AssertionError(f"the audit ended or had not begun after 120 s: {proc.communicate()}")
        time.sleep(0.1)
    time.sleep(1)  # into the permutations
    cluster.ray.kill()  # both nodes' every process, at once
    t0 = time.monotonic()
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # ended here, with its threads' stacks, not left running beside later tests
        proc.send_signal(signal.SIGABRT)
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        raise AssertionError(f"the audit still ran 60 s after its cluster was lost; its stderr ends:\n{err[-6000:]}")
    took = time.monotonic() - t0
    assert took < 15, (took, err)
    if proc.returncode == 1:  # Ray's own exit: its line goes to the driver's log (to stderr at times), ours never
        assert "Traceback" not in err and "error:" not in err and not (tmp_path / "o").exists(), err
    else:
        line = _one_error_line(err)
        assert proc.returncode == 2, (proc.returncode, err)
        assert f"error: the Ray cluster at {cluster.address} was lost" in line and "rerun `" in line
        assert "--permutations 3000" in line
        assert sorted(p.name for p in tmp_path.iterdir()) == ["L.txt"]  # no output, no .new- folder, no lock
    left = sorted(p.name for p in tmp_path.glob(".o.new-*"))  # Ray's ending leaves its unfinished folder
    # the same audit, rerun here on the local engine: nothing left is in its way, and nothing of it stays
    assert audit_main(["--lengths", str(tmp_path / "L.txt"), "--row-capacity", str(R), "--buffer", str(B), "--packers",
                       "original", "--no-figures", "--no-fates", "--out", str(tmp_path / "o"), "--permutations", "3"]) == 0
    said = capsys.readouterr().out
    assert all(f"note: removed {name}" in said for name in left)  # the rerun says what it cleared
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["permutations"]["count"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["L.txt", "o"]
