import argparse
import fcntl
import gc
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # one test process per core (./run.sh test runs two): a second intra-op thread per process
    # would only oversubscribe the cores. Set before any test module imports torch; subprocesses inherit it.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

# Ray reads RAY_AUTH_MODE once, when it is imported: token mode, as a cluster started with `ray start` on a machine
# with ~/.ray/auth_token runs, so that this process can be the driver of tests/test_fanout.py's two-node cluster
# (a local Ray turns token mode on by itself anyway). Set before any test module imports ray.
os.environ.setdefault("RAY_AUTH_MODE", "token")
# No Ray Data usage collection: its poller thread outlives the Ray Data test, keeps asking a Prometheus that is not
# there and logs each failure with its traceback; pytest's log capture formats it, and Python 3.11 parses the
# source line with `ast` to draw the carets, on that thread. Two threads building ASTs at once can fail the other
# one's ast.parse with "SystemError: AST constructor recursion depth mismatch" (CPython gh-106905): it failed
# prepare's parse of the offline corpus in a later test of the same process, once in four suite runs.
os.environ.setdefault("RAY_DATA_USAGE_DISABLED", "1")

ROOT = Path(__file__).resolve().parents[1]  # on sys.path through pyproject's pytest `pythonpath`

from presets.shapes import ModelShape  # noqa: E402
from shardqueue.study import presets as study_presets  # noqa: E402

# Late imports below (torch, the study, the packers): the process that only starts the two test processes
# (xdist's controller) needs none of torch and the study, and imported them for ~3 s before either started.


def pytest_configure(config):
    """In each process that runs tests: freed host memory kept (before any test module imports torch).
    Once, in the process that starts the test processes (or the only one): the compiled loops loaded, or compiled
    and cached when this checkout has no cache yet (about 6 s of CPU), before any test process, Ray worker or
    command line the tests start needs them; else each compiles them on its own, side by side (a cold cache made the
    audit-on-Ray test take 67 s instead of 2). The process that starts the test processes does it on a thread while
    they collect (compile_while_they_collect), and each waits for it at its first use of numba
    (wait_for_compiled_loops)."""
    worker = bool(os.environ.get("PYTEST_XDIST_WORKER"))
    # xdist's controller: it starts test processes (not with --collect-only) and runs no test itself
    controller = (not worker and config.getoption("dist", "no") != "no" and bool(config.getoption("tx", None))
                  and not config.getoption("collectonly"))
    if not worker:
        temp_in_memory()
    if not controller:
        gc.disable()  # while the test modules import (see pytest_collection_finish): they leave next to no garbage
        from training.device import keep_freed_host_memory  # after OMP_NUM_THREADS, which torch reads once

        keep_freed_host_memory()  # as every command line does on CPU: the in-process training runs take half the time
    if controller:
        compile_while_they_collect(config)
    elif not worker:
        compile_loops()


# The tests' temporary folders (tmp_path): in memory where the machine has a /dev/shm with room, not on the disk. A run
# writes about 350 MB in 7,600 files, and the project's atomic writes fsync each one (3,700 calls, 0.45 ms each on
# this VM's disk), which the tests then wait on. Less room than this (a container's 64 MB /dev/shm): pytest's default.
MEMORY = Path("/dev/shm")
MEMORY_ROOM = 1 << 30


def temp_in_memory():
    """pytest's folders under /dev/shm rather than /tmp (PYTEST_DEBUG_TEMPROOT, unless already set): its numbered,
    locked folder per run, so two runs of one checkout never share one. pyproject's tmp_path_retention_* remove a
    passed test's folder and a passed run's, and keep one failed run's for a look."""
    if "PYTEST_DEBUG_TEMPROOT" in os.environ or not MEMORY.is_dir() or not os.access(MEMORY, os.W_OK):
        return
    if shutil.disk_usage(MEMORY).free >= MEMORY_ROOM:
        os.environ["PYTEST_DEBUG_TEMPROOT"] = str(MEMORY)  # read when the folder is made, after this hook


# The lock file the process that starts the test processes holds while it compiles the loops; they inherit its name.
COMPILE_LOCK = "PACKAUDIT_TEST_COMPILE_LOCK"


def compile_while_they_collect(config):
    """compile_loops() on a thread of this process, under an exclusive lock taken before any test process starts.
    Before, this process compiled first and started the test processes after: on a fresh clone one core did the
    compile (about 6 s) while the other waited, and only then did both collect (about 5 s each)."""
    fd, path = tempfile.mkstemp(prefix="packaudit-compile-", suffix=".lock")
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.environ[COMPILE_LOCK] = path

    def compile_then_unlock():
        try:
            compile_loops()  # an error here is printed by the thread and met again by the tests that need the loops
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    thread = threading.Thread(target=compile_then_unlock, name="compile the loops", daemon=True)
    thread.start()

    def clean_up():
        thread.join()
        os.close(fd)
        os.unlink(path)

    config.add_cleanup(clean_up)


def wait_for_compiled_loops():
    """In a test process, at its first use of numba's compiler (a loop loaded from the cache, or compiled): until
    the process that started it has the loops compiled and cached. Its tests run until then: on a fresh clone the
    first ones start a Ray cluster or prepare a corpus while the loops compile, rather than both test processes
    waiting for the compile, which runs on one core (about 4 core-seconds idle, measured 2026-12-07)."""
    path = os.environ.pop(COMPILE_LOCK, None)  # not passed on to the processes the tests start
    if not (path and os.environ.get("PYTEST_XDIST_WORKER")):
        return
    # late: numba's event API, which only a test process of xdist's uses, and only here
    from numba.core import event

    class FirstCompile(event.Listener):
        """Numba announces each entry into its compiler lock (numba/core/compiler_lock.py): the first one waits."""
        lock = path

        def on_start(self, ev):
            lock, self.lock = self.lock, None
            if lock:
                wait_for_unlock(lock)

        def on_end(self, ev):
            pass

    event.register("numba:compiler_lock", FirstCompile())


def wait_for_unlock(path):
    try:
        with open(path) as f:
            fcntl.flock(f, fcntl.LOCK_SH)
    except FileNotFoundError:  # a worker on another machine (--tx ssh=...), or the run is over
        pass


def compile_loops():
    """Every compiled loop the tests run, each signature once: the selection core and its state, the audit's tallies,
    the packers' token copy over the tests' int64 token lists (read-only, and writable as some tests make them) and a
    prepared corpus's read-only uint16 files. A signature missing here is compiled again in every process that meets
    it before one has cached it (a fresh clone's suite compiled the writable int64 copy beside the tests)."""
    import numpy as np

    from audit.compute import replay_packer
    from audit.feed import PassRefills
    from loaders.core import PackerCore
    from loaders.packers import Packer
    from loaders.stream import DocumentStream

    s = DocumentStream.from_lengths(np.arange(1, 40), refill_docs=4)
    core = PackerCore(s, "lossless", 17, 3)
    core.pack_rows(3)
    PackerCore(s, "lossless", 17, 3).load_state_dict(core.state_dict())
    replay_packer(PassRefills(s.lengths, s.refills), "original", 5, 17, 3, ref_length=17)
    docs = [[0] + [1] * (n - 1) for n in (3, 5, 2, 4)]
    for dtype, writable in ((np.int64, False), (np.uint16, False), (np.int64, True)):
        stream = DocumentStream.from_token_lists(docs, 2)
        flat = stream.tokens[0][0].astype(dtype)
        flat.setflags(write=writable)
        stream.tokens = ([flat], *stream.tokens[1:])
        Packer(stream, "original", 4, 2).next_rows(2)


# The files that take longest (their tests' seconds added up, 2 cores, 2026-12-07; those of 2 s and more), first:
# `./run.sh test` hands whole files to its two processes in this order (--no-loadscope-reorder), so that the run ends
# on files of a second or less and neither process waits long for the other. xdist's own order, by number of tests,
# left files like the torchrun pair (2 tests, 18 s) for the end, one process waiting; with only the 13 longest
# listed, a 1.2 s file ran alone at the end (1.3 core-seconds idle).
# A file of a SAME_PROCESS group below sorts at its group's first file, so only that one is listed.
SLOWEST_FIRST = ("test_fanout.py", "test_queue.py", "test_ddp.py", "test_train.py", "test_host_memory.py",
                 "test_audit.py", "test_audit_lengths.py", "test_checkers_cost.py", "test_install.py", "test_eval.py",
                 "test_faults_data.py", "test_faults_eval.py", "test_audit_trace.py", "test_layout.py",
                 "test_loaders.py", "test_loader_core.py", "test_queue_study.py")
# Files that share a costly start go to one process together, at the first file's place in the order above: the
# queue's files one stage-A calibration (`calibrated`, ~4 s), the study's files one micro study (`micro_study`,
# ~6 s) that the fan-out test reruns on Ray, and the files that import torch._dynamo or datasets one import of them:
# those that compile or build flex attention's masks, the optimizer's references, and those that drive TRL,
# torchtune or Megatron-Core (with transformers and sympy: 4.4 s of CPU on top of torch, 2026-12-07), read a corpus
# through datasets or run llm-foundry's, LLaMA-Factory's and axolotl's packing code (transformers, datasets). When
# these were two groups, both processes imported torch._dynamo, inductor and datasets (an import hook recorded each
# file's imports).
SAME_PROCESS = (("test_fanout.py", "test_queue_study_run.py"),
                ("test_layout.py", "test_presets.py"),  # one parse of every source file (test_layout.parsed), ~0.9 s
                ("test_queue.py", "test_queue_owndata.py", "test_queue_measurements.py", "test_queue_branch.py",
                 "test_queue_memory.py", "test_queue_reference.py"),
                ("test_train.py", "test_audit_topology.py", "test_audit_libraries.py", "test_audit_loader_presets.py",
                 "test_cuda_path.py", "test_gpu_check.py", "test_model_safety.py", "test_compiled_cpu.py",
                 "test_optim.py", "test_audit_corpus.py", "test_corpus_readers.py", "test_audit_loaders_megatron.py",
                 "test_audit_loaders_presets.py", "test_audit_loaders_real.py"))
UNIT_OF = {name: group[0] for group in SAME_PROCESS for name in group}


def pytest_collection_finish(session):
    """In each process that runs tests, once every test module is imported: the objects that exist now (torch, numba,
    Ray, the project: millions of them) frozen out of the collector's reach. Each full collection
    scanned them all again, 15 s in the two test processes of a suite run (measured with gc.callbacks,
    2026-12-06); now it scans only what the tests made. train() leaves a caller's freeze in place. The collector
    is off while the modules import (pytest_configure): its full collections then scanned the growing heap over and
    over, about 0.9 s a process, for next to no garbage. Then: a wait for the compiled loops at the first use of
    numba. The collector's thresholds are raised: with the imports frozen, a file's explicit collection before its
    freeze clears its cycles, and the default ones ran ~5,000 young and ~130 full collections in each process, 7 s
    of CPU in the two (gc.callbacks, 2026-12-07), 4.4 s with these."""
    gc.enable()
    gc.set_threshold(10_000, 20, 100)
    freeze_survivors()
    wait_for_compiled_loops()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After a file's last test and its module fixtures' teardown: what the file left alive (libraries its tests
    imported, session fixtures) frozen too, so that the next files' full collections scan only their own objects."""
    yield
    if nextitem is None or nextitem.path != item.path:
        freeze_survivors()


def freeze_survivors():
    gc.collect()  # nothing that is already garbage is frozen with the rest
    gc.freeze()


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    # stable: the rest keep pytest's order; a group's files at its first file's place, in pytest's order
    items.sort(key=lambda item: rank.get(UNIT_OF.get(item.path.name, item.path.name), len(rank)))


@pytest.hookimpl(optionalhook=True)  # xdist's hook: pytest without xdist (-p no:xdist) has no such hook to check
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, with each group of SAME_PROCESS one unit of work (xdist's own scheduler otherwise)."""
    if config.getvalue("dist") != "loadfile":
        return None
    # late: xdist is an optional plugin (the `test` extra); this hook is only called where it is loaded
    from xdist.scheduler import LoadFileScheduling

    class GroupedFiles(LoadFileScheduling):
        def _split_scope(self, nodeid):
            path = nodeid.split("::", 1)[0]
            folder, _, name = path.rpartition("/")
            return f"{folder}/{UNIT_OF[name]}" if name in UNIT_OF else path

    return GroupedFiles(config, log)


# PACKAUDIT_FIXTURE_CACHE (set by `scripts/mutation.py --reuse-fixtures`): a folder the corpus and the
# calibration are built into by the first test session and read from by every later one. Each mutant is a
# new session, and these two fixtures are most of its time; sound only where no mutant reaches prepare or
# stage A, which the script's --help says.
FIXTURE_CACHE = os.environ.get("PACKAUDIT_FIXTURE_CACHE")


def cached_build(name, build, tmp_path_factory):
    """build(folder) into the cache's folder `name` once (a marker file says it finished), or into a
    fresh temporary folder when there is no cache; returns the folder."""
    if not FIXTURE_CACHE:
        d = tmp_path_factory.mktemp(name)
        build(d)
        return d
    d, done = Path(FIXTURE_CACHE) / name, Path(FIXTURE_CACHE) / f"{name}.done"
    if not done.exists():
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        build(d)
        done.touch()
    return d


@pytest.fixture(scope="session")
def hf_datasets():
    """Hugging Face `datasets`, imported by the tests that write its folders rather than at collection: both test
    processes collect every test file, one runs these, and the import (pandas with it) takes 0.8 s."""
    import datasets

    return datasets


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory):
    """A small offline corpus prepared once: 3 shards (2 train + val), vocab 400."""
    import prepare

    def build(d):
        rc = prepare.main(["--data-dir", str(d), "--max-files", "120", "--shards", "3",
                           "--row-group-size", "150", "--vocab-size", "400"])
        assert rc == 0

    return cached_build("data", build, tmp_path_factory)


# the queue's tiny model and calibration settings (the `calibrated` fixture; tests/test_queue.py)
QUEUE_CFG = dict(depth=1, width=32, heads=2, kv_heads=2, context=32, short_window=16, vocab=400, micro_rows=4, accum=1,
                 muon_lr=0.02, updates=1000, eval_batches=2, eval_rows=4)
QUEUE_SETTINGS = dict(shard_tokens=300, warmup_shards=1, sigma_shards=4, held_out_shards=3, candidates=8,
                      decay_shards=1, harmful_shards=1, prose_shards=0, per_domain=4, pool_seed=7)


@pytest.fixture(scope="session")
def calibrated(small_corpus, tmp_path_factory):
    """A real calibration (stage A) on the small corpus, and a copy whose sigma makes the rule
    trigger-happy (every rise over 3e-4 BPB flags), so rejections, deferral and quarantine all occur.
    Here, not in a test file, so that every queue test file run by one process shares one calibration."""
    from shardqueue import api as rq

    built = {}

    def build(d):
        built["rec"] = rq.calibrate(d, None, [f"{k}={v}" for k, v in {**QUEUE_CFG, "data_dir": str(small_corpus)}.items()],
                                    QUEUE_SETTINGS)
        (d.parent / f"{d.name}.rec.json").write_text(json.dumps(built["rec"]))  # for a later session of a cache

    d = cached_build("qcal", build, tmp_path_factory)
    rec = built.get("rec") or json.loads((d.parent / f"{d.name}.rec.json").read_text())
    if FIXTURE_CACHE:  # each session works on its own copy: a test may write beside the calibration
        d = Path(shutil.copytree(d, tmp_path_factory.mktemp("qcal"), dirs_exist_ok=True))
    strict = tmp_path_factory.mktemp("qstrict")
    for p in d.iterdir():
        if p.is_file():
            shutil.copy(p, strict / p.name)
    c = json.loads((strict / "calibration.json").read_text())
    c.update(ok=True, k=3.0, frac=0.5, sigma={x: 1e-4 for x in c["sigma"]})
    (strict / "calibration.json").write_text(json.dumps(c))
    return {"dir": d, "rec": rec, "strict": strict, "data": small_corpus}


# The queue study at a micro setting: two seeds, three arms, a handful of shards of a one-layer model
MICRO_STUDY = study_presets.StudyPreset(
    source="stdlib", shape=ModelShape(depth=1, width=32, heads=2, kv_heads=2, context=32, short_window=16),
    micro_rows=4, accum=1, eval_batches=2, eval_rows=4, train_overrides=(("vocab", 400), ("muon_lr", 0.02)),
    shard_targets=256, budget_shards=2, decay_shards=1, pool_factor=3.0,
    warmup_shards=1, sigma_shards=3, held_out_shards=3, choose_transitions=1, held_out_branch=True,
    checkpoints_per_shard=2, harmful_shards=1, damaged_shards=4, per_domain=3, rotation_shards=4,
    reference_lowest=0.5, reference_cap=2.0, reference_per_doubling=1, seeds=(43, 44), pool_seed=7)


def run_micro_study(out, data, engine="local", curve=False):
    """queue/study.py --preset micro (a preset the caller has put into the study's PRESETS)."""
    from shardqueue.study.run import run_study

    return run_study(argparse.Namespace(preset="micro", out=str(out), data_dir=str(data), dry_run=False, curve=curve,
                                        calibration=None, device="cpu", workers=1, engine=engine, ray_address=None),
                     log=lambda s: None)


@pytest.fixture(scope="session")
def micro_study(small_corpus, tmp_path_factory):
    """One real micro study, run once per process (SAME_PROCESS keeps its two files together): read it, and copy
    it before changing anything."""
    out = tmp_path_factory.mktemp("study")
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(study_presets.PRESETS, "micro", MICRO_STUDY)
        assert run_micro_study(out, small_corpus) == 0
    return {"out": out, "summary": json.loads((out / "summary.json").read_text()), "data": small_corpus}


@pytest.fixture
def python_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    return env


def queue_script(name):
    """A queue command line (queue/NAME.py) loaded as a module, to call its main() in-process
    exactly as `python queue/NAME.py` runs it; queue/ itself is never importable."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"queue_cli_{name}", ROOT / "queue" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def one_line_error(capsys, rc, *needles):
    """A refusal as the command lines promise it: exit status 2, one `error:` line holding every
    needle, no traceback."""
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert rc == 2 and "Traceback" not in err and len(lines) == 1, err
    for n in needles:
        assert n in lines[0], lines[0]
