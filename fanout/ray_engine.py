"""The Ray engine (--engine ray): each Task a Ray task holding the CPUs, GPUs and memory it asks for, on a
running cluster (--ray-address or RAY_ADDRESS) or on a local Ray of its own, started here and stopped at the end.

Before the first task, a probe on every node (probe.py) checks the checkout, the reads, the prepared corpus and
the folders written into. Small tasks (Task.small: the audit's permutations) go out in batches, a few per CPU of
the cluster, where one Ray task each would cost more in Ray's overhead than in work.

A task whose worker process dies (killed, out of memory, its node lost) is run again, up to RETRIES
times: every task the project fans out is a pure function of its arguments and of files the driver
made, or one that skips what a finished earlier attempt left (a study run's study_run.json). An
exception the task itself raises is not retried: it comes back to the driver as the local engine
would raise it. Results come back to the driver in task order. A cluster whose head stops answering
ends the run within seconds in one line (ClusterLost), not after Ray's own minute of retries.

A task runs with the driver's settings of the project's environment variables (CARRIED), never its node's;
PACKAUDIT_DATA is set to a path that names the mistake: the driver passes every data root explicitly.
"""
import contextlib
import math
import os
import queue
import shlex
import socket
import sys
import threading
import time
from pathlib import Path

from console.sizes import size
from errors import DataError
from fanout.probe import Needs, node_report, problem, token_name, token_problem
from fanout.ray_connect import check_address, first_line, import_ray, split_address, start
from fanout.task import ClusterLost, Shared, TaskFailed, check_reads

RETRIES = 3
BATCHES_PER_CPU = 4  # a few batches per CPU: one slow batch does not hold the rest back for long
POLL_S = 0.5  # while a result is awaited, the cluster's head is checked this often (a connect: cheap)
LOST_S = 3  # the head's port closed this long: the cluster is lost (Ray itself waits 60 s, then exits)
PULLED_AHEAD = 2  # elements ClusterWatch.iterate's thread holds ready beyond the one its caller has
PROBE_S = 120  # a node's probe must answer within this (a worker's start and imports, on a busy node)
CARRIED = ("PACKAUDIT_SKIP_HASH",)  # the project's variables a task sees as the driver has them
DATA_ENV = "PACKAUDIT_DATA"
LOCAL_RAY = "a local Ray started here"  # where a RayEngine without an address runs
NOT_READ = "/PACKAUDIT_DATA-is-not-read-on-a-Ray-worker:the-driver-passes-every-data-root"


def driver_env() -> dict:
    return {k: os.environ.get(k) for k in CARRIED}


@contextlib.contextmanager
def as_driver(env):
    """The project's environment variables as the driver had them (CARRIED) for the block, PACKAUDIT_DATA
    pointing nowhere; the worker's own afterwards."""
    keys = (*env, DATA_ENV)
    saved = {k: os.environ.get(k) for k in keys}
    for k, v in {**env, DATA_ENV: NOT_READ}.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def ray_batch(tasks, env):
    """Tasks on a Ray worker, one after another: the paths each reads checked on this node, a shared argument
    fetched once for the batch, then the calls; their results in order."""
    with as_driver(env):
        fetched = {}

        def value(a):
            if isinstance(a, SharedRef):
                key = a.ref.hex()
                if key not in fetched:
                    fetched[key] = a.get()
                return fetched[key]
            return a.get() if isinstance(a, Shared) else a

        out = []
        for t in tasks:
            check_reads(t)
            out.append(t.fn(*map(value, t.args)))
        return out


def probe_nodes(ray, needs, ask, wait):
    """The probe on every node that can run a task, before the first task: one line naming a node that sees
    otherwise than the driver (probe.py). ask(fn) calls fn, a call that waits on the head (ray.nodes, and the first
    submission of a remote function, which stores its definition there), under the cluster's watch; wait(ref,
    deadline) returns when ref is ready, or raises TimeoutError."""
    # late: a part of Ray, the optional 'ray' extra
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n for n in ask(ray.nodes) if n["Alive"] and (n["Resources"].get("CPU") or n["Resources"].get("GPU"))]
    remote = ray.remote(node_report)
    refs = ask(lambda: [remote.options(num_cpus=0, max_retries=0, name="probe", scheduling_strategy=(
        NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))).remote(needs, n["NodeID"]) for n in nodes])
    try:
        check_reports(ray, needs, nodes, refs, wait)
    finally:  # a refusal leaves no probe file behind: the other nodes' probes end (or get 5 s) first
        if needs.writes:
            ray.wait(refs, num_returns=len(refs), timeout=5)
        for w in needs.writes:
            for f in Path(w).glob(f"{token_name(needs, '')}*"):
                f.unlink(missing_ok=True)


def check_reports(ray, needs, nodes, refs, wait):
    """Each node's report against the driver's needs, in node order: the first problem in one line."""
    deadline = time.monotonic() + PROBE_S
    for n, ref in zip(nodes, refs):
        node = f"node {n['NodeManagerAddress']} ({n['NodeID'][:8]})"
        try:
            wait(ref, deadline)
            rep = ray.get(ref)
        except TimeoutError:
            raise DataError(f"{node}: its probe did not answer within {PROBE_S} s (a worker there could not start?): "
                            "start Ray on every node from the project's venv") from None
        except ray.exceptions.RayError as e:
            cause = getattr(e, "cause", None) or e
            raise DataError(f"{node}: the probe failed there ({type(cause).__name__}: {first_line(cause)}): start Ray "
                            f"on every node from the project's venv, with the checkout at {needs.root}") from None
        line = problem(needs, node, rep) or token_problem(needs, node, n["NodeID"])
        if line:
            raise DataError(line)


class SharedRef(Shared):
    """A shared argument in Ray's object store (RayEngine.share): put once, read by each task's worker."""

    def __init__(self, ref):
        self.ref = ref

    def get(self):
        return import_ray().get(self.ref)


def batches(tasks, cpus):
    """Consecutive small tasks of one kind (the same CPUs and GPUs) in batches, about BATCHES_PER_CPU per CPU of
    the cluster; any other task alone."""
    small = sum(t.small for t in tasks)
    size = max(1, math.ceil(small / max(1, cpus * BATCHES_PER_CPU)))
    out = []
    for t in tasks:
        last = out[-1] if out else None
        if (t.small and last and last[0].small and len(last) < size
                and (last[0].cpus, last[0].gpus) == (t.cpus, t.gpus)):
            last.append(t)
        else:
            out.append([t])
    return out


def batch_name(group):
    names = [t.name or "task" for t in group]
    return names[0] if len(names) == 1 else f"{names[0]} to {names[-1]} ({len(names)} tasks)"


class ClusterWatch:
    """Whether the cluster's head (its GCS, or a Ray Client server) still takes a connection: checked at most once
    a POLL_S while a result is awaited; LOST_S without one is a lost cluster. So is a ConnectionError from one of
    Ray's calls: a Ray Client connection that stayed down past its grace period (ray_connect.CLIENT_GRACE_S).

    call() and iterate() watch what would otherwise wait on a lost head with no end of its own: Ray's calls to the
    head (ray.nodes, ray.cluster_resources) wait out a minute of reconnects, and Ray Data's iterator waited on (both
    past 30 s after the test cluster was killed, 2026-12-07). Each runs on a daemon thread, so one still waiting on
    a lost head does not keep the process from ending with its one line."""

    def __init__(self, host, port):
        self.host, self.port = host, port
        self.silent_since = None
        self.last = 0.0

    def call(self, fn, line):
        """fn(), or ClusterLost(line()) once the head has been silent LOST_S while it runs."""
        box = {}

        def ask():
            try:
                box["value"] = fn()
            except BaseException as e:  # noqa: BLE001 - raised again below, in the caller's thread
                box["error"] = e

        thread = threading.Thread(target=ask, name="a call to the Ray head", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(POLL_S)
            if thread.is_alive() and self.lost():
                raise ClusterLost(line())
        if isinstance(box.get("error"), ConnectionError):
            raise ClusterLost(line()) from None
        if "error" in box:
            raise box["error"]
        return box["value"]

    def wait(self, ray, ref, line, deadline=None):
        """Until ref is ready: ClusterLost(line()) when the head stops answering, TimeoutError past the deadline."""
        while True:
            try:
                if ray.wait([ref], timeout=POLL_S if deadline is None else
                            min(POLL_S, max(0.0, deadline - time.monotonic())))[0]:
                    return
            except ConnectionError:
                raise ClusterLost(line()) from None
            if self.lost():
                raise ClusterLost(line())
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError

    def iterate(self, items, line):
        """items' elements in order, pulled on a thread of their own, or ClusterLost(line()) once the head has been
        silent LOST_S while the next is awaited. An error of the iterable is raised here, in the caller's thread.
        The thread keeps at most PULLED_AHEAD elements waiting (a Ray Data batch pins its block in the object store:
        an unbounded queue let a stalled caller's reader fill the store, a review found), and when the caller stops,
        however it stops, the thread closes the iterable and ends."""
        pulled, stop, end = queue.Queue(maxsize=PULLED_AHEAD), threading.Event(), object()

        def hand_over(item):  # False once the caller has stopped
            while not stop.is_set():
                try:
                    pulled.put(item, timeout=POLL_S)
                    return True
                except queue.Full:
                    pass
            return False

        def pull():
            try:
                for x in items:
                    if not hand_over((None, x)):
                        break
                else:
                    hand_over((None, end))
            except BaseException as e:  # noqa: BLE001 - raised again below, in the caller's thread
                hand_over((e, None))
            finally:
                getattr(items, "close", lambda: None)()

        threading.Thread(target=pull, name="a read from the Ray cluster", daemon=True).start()
        try:
            while True:
                try:
                    error, x = pulled.get(timeout=POLL_S)
                except queue.Empty:
                    if self.lost():
                        raise ClusterLost(line()) from None
                    continue
                if isinstance(error, ConnectionError):
                    raise ClusterLost(line()) from None
                if error is not None:
                    raise error
                if x is end:
                    return
                yield x
        finally:
            stop.set()

    def lost(self) -> bool:
        now = time.monotonic()
        if now - self.last < POLL_S:
            return False
        self.last = now
        try:
            socket.create_connection((self.host, self.port), timeout=POLL_S).close()
            self.silent_since = None
        except OSError:
            self.silent_since = self.silent_since or now
        return self.silent_since is not None and now - self.silent_since >= LOST_S


def head_of(ray, address):
    """(host, port) of the cluster's head: its GCS, or the Ray Client server a ray:// address names."""
    if address and "://" in address:
        host, port, _ = split_address(address)
        return host, port
    host, _, port = ray.get_runtime_context().gcs_address.rpartition(":")
    return host.strip("[]"), int(port)


def lost_line(where, tasks, finished) -> str:
    """The one line of a lost cluster: what had finished and is kept, and the command that resumes."""
    kept = [t for t in finished if t.kept]
    head = f"the Ray cluster at {where} was lost (its head has not answered for {LOST_S} s)"
    if not tasks:
        done = "before any task ran"
    elif kept:
        names = ", ".join(t.name for t in kept[:4]) + (f" and {len(kept) - 4} more" if len(kept) > 4 else "")
        done = f"{len(finished)} of {len(tasks)} tasks had finished and are kept ({names}: {kept[0].kept})"
    elif finished:
        done = f"{len(finished)} of {len(tasks)} tasks had finished; their results were held here and are lost"
    else:
        done = f"none of {len(tasks)} tasks had finished"
    return f"{head}: {done}; once the cluster is back, rerun `{shlex.join(sys.orig_argv)}` to resume"


class RayEngine:
    name = "ray"

    def __init__(self, address=None, verbose=False):
        self.ray = import_ray()
        flag = "--ray-address" if address else "RAY_ADDRESS"
        address = address or os.environ.get("RAY_ADDRESS") or None
        if address:
            check_address(address, flag)
        self.owned = not self.ray.is_initialized()  # a caller's own ray.init (the tests') is used and left running
        if self.owned:
            start(self.ray, address, flag, verbose)
        self.where = address or LOCAL_RAY
        self.watch = ClusterWatch(*head_of(self.ray, address))
        self.remote = self.ray.remote(ray_batch)
        self.env = driver_env()
        self.probed = {"checkout": False, "reads": set(), "prepared": set(), "writes": set()}  # probed so far

    @property
    def cluster(self) -> str:
        """The cluster as a line names it."""
        return "the local Ray started here" if self.where == LOCAL_RAY else f"the Ray cluster at {self.where}"

    def in_process(self, n) -> bool:
        return False

    def share(self, value):
        """value as a task argument that many tasks read: put in the object store once, not once per task."""
        return SharedRef(self.ray.put(value))

    def run(self, tasks):
        """Each task's result, in task order, as it is ready; after the nodes' probe, all tasks (small ones in
        batches) are submitted at once and Ray runs as many side by side as the cluster has room for. After a
        failed task the others are left to finish, not cancelled: a finished study run is kept for the rerun,
        and ray.cancel of a task that is just completing crashes the driver in Ray 2.60 (task_manager.cc:
        "Tried to complete task that was not pending"); a Ray started here is stopped at the end anyway."""
        tasks = list(tasks)
        groups, refs, received = [], [], set()
        try:
            self.probe([p for t in tasks for p in t.reads], [p for t in tasks for p in t.prepared],
                       [p for t in tasks for p in t.writes])
            self.check_memory(tasks)
            groups = batches(tasks, self.ask_head(self.ray.cluster_resources).get("CPU", 1))
            # the first submission stores ray_batch's definition on the head: watched too
            refs = self.ask_head(lambda: [self.submit(g) for g in groups])
            for g, r in zip(groups, refs):
                results = self.result(g, r)
                received.add(r)
                yield from results
        except ClusterLost:
            # what had finished: the results received here, and what the cluster still says is ready; a Ray Client
            # that gave up is no longer initialized, and a call now would start a local Ray (Ray's auto-init)
            if refs and self.ray.is_initialized():
                received.update(self.ray.wait(refs, num_returns=len(refs), timeout=0)[0])
            done = [t for g, r in zip(groups, refs) if r in received for t in g]
            raise ClusterLost(lost_line(self.where, tasks, done)) from None

    def submit(self, group):
        # a batch's tasks run one after another in one worker: it holds the most any of them asks
        memory = {"memory": most} if (most := max(t.memory for t in group)) else {}
        return self.remote.options(num_cpus=group[0].cpus, num_gpus=group[0].gpus, max_retries=RETRIES,
                                   name=batch_name(group), **memory).remote(group, self.env)

    def most_memory(self):
        """The `memory` resource of the roomiest live node, in bytes: the most one task may ask of this cluster
        (`ray start --memory`; by default what the node had free when it started, less its object store)."""
        nodes = self.ask_head(self.ray.nodes)
        return max((n["Resources"].get("memory", 0) for n in nodes if n["Alive"]), default=0)

    def check_memory(self, tasks):
        """One line for a task that asks more memory than any node has: Ray would wait for such a node forever."""
        big = max(tasks, key=lambda t: t.memory, default=None)
        if big is None or not big.memory or big.memory <= (most := self.most_memory()):
            return
        raise TaskFailed(f"{big.name or 'a task'}: asks for {size(big.memory)} of memory, more than any node of "
                         f"{self.cluster} has for Ray's tasks (at most {size(most)}, a node's `memory` resource); Ray "
                         "would wait for such a node forever")

    def wait(self, ref, deadline=None):
        """Until ref is ready (ClusterWatch.wait); run() says what had finished."""
        self.watch.wait(self.ray, ref, lambda: lost_line(self.where, (), ()), deadline)

    def ask_head(self, call):
        """call() (one that waits on the cluster's head: ray.nodes, ray.cluster_resources, a remote function's first
        submission), watched as a result is (ClusterWatch.call)."""
        return self.watch.call(call, lambda: lost_line(self.where, (), ()))  # run() says what had finished

    def result(self, group, ref):
        errors = self.ray.exceptions
        name = batch_name(group)
        try:
            self.wait(ref)
            return self.ray.get(ref)
        except errors.RayTaskError as e:  # the task's own exception, raised here as the local engine would
            cause = e.cause
            if isinstance(cause, Exception) and not isinstance(cause, errors.RayError):
                raise cause from None
            raise TaskFailed(f"{name}: {first_line(cause)}") from None
        except errors.RayError as e:  # its worker died past the retries, its node was lost, ...
            raise TaskFailed(f"{name}: failed on Ray after {RETRIES} retries ({type(e).__name__}: {first_line(e)})") \
                from None

    def probe(self, reads=(), prepared=(), writes=()):
        """The nodes' probe (probe_nodes) of what no earlier probe of this engine covered (the checkout always)."""
        new = {k: sorted(set(v) - self.probed[k]) for k, v in (("reads", reads), ("prepared", prepared),
                                                               ("writes", writes))}
        if self.probed["checkout"] and not any(new.values()):
            return
        probe_nodes(self.ray, Needs.of(**new), self.ask_head, self.wait)
        for k, v in new.items():
            self.probed[k].update(v)
        self.probed["checkout"] = True

    def close(self):
        if self.owned:
            self.ray.shutdown()
