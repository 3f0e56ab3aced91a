"""The Ray engine (--engine ray): each Task a Ray task holding the CPUs and GPUs it asks for, on a
running cluster (--ray-address or RAY_ADDRESS) or on a Ray started here and stopped at the end.

A task whose worker process dies (killed, out of memory, its node lost) is run again, up to RETRIES
times: every task the project fans out is a pure function of its arguments and of files the driver
made, or one that skips what a finished earlier attempt left (a study run's study_run.json). An
exception the task itself raises is not retried: it comes back to the driver as the local engine
would raise it. Results come back to the driver in task order.
"""
import os
import socket
from pathlib import Path

from corpus.errors import DataError
from fanout.task import Shared, TaskFailed, check_reads

EXTRA = "pip install -e '.[ray]', or pip install -r requirements-ray.lock"
RETRIES = 3
CONNECT_S = 10  # an address must take a connection within this, and answer the gRPC hello within ANSWER_S:
ANSWER_S = 5  # ray.init itself waits a minute or more where nothing listens
ROOT = Path(__file__).resolve().parents[1]  # the checkout, put on every worker's import path


def import_ray():
    """The ray module, or one line naming the extra to install."""
    try:
        # late: an optional dependency (the 'ray' extra); the local engine and --help never load it
        import ray
    except ImportError:
        raise DataError(f"--engine ray needs Ray, which is not installed: install the 'ray' extra ({EXTRA})") from None
    return ray


def check_address(address, flag="--ray-address"):
    """HOST:PORT answers within CONNECT_S + ANSWER_S seconds and speaks gRPC, as a Ray cluster's GCS does, or one line
    saying what is wrong ('auto' and 'local' are Ray's own words and are left to it). ray.init itself waits
    a minute or more where nothing listens, and on a port that is no GCS (the dashboard's) for ever."""
    if address in ("auto", "local"):
        return
    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not (sep and host and port.isdigit()):
        raise DataError(f"{flag} {address}: expected HOST:PORT, the address `ray start --head` prints, or auto")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_S) as sock:
            grpc = os.environ.get("RAY_USE_TLS", "0") not in ("0", "") or speaks_http2(sock)
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise DataError(f"{flag} {address}: no Ray cluster answers there ({why}); start its head with "
                        "`ray start --head`, or leave the address out for a local Ray") from None
    if not grpc:
        raise DataError(f"{flag} {address}: something answers there but it is no Ray cluster (no gRPC); give the "
                        "address `ray start --head` prints (port 6379 by default; the dashboard's 8265 is not it)")


# the HTTP/2 client preface and an empty SETTINGS frame: a gRPC server answers with its own SETTINGS frame
HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def speaks_http2(sock) -> bool:
    """The peer answers the HTTP/2 preface with a SETTINGS frame (frame type 4) within ANSWER_S seconds."""
    sock.settimeout(ANSWER_S)
    sock.sendall(HTTP2_HELLO)
    head = b""
    try:
        while len(head) < 9:
            chunk = sock.recv(9 - len(head))
            if not chunk:
                break
            head += chunk
    except socket.timeout:
        return False
    return len(head) == 9 and head[3] == 4


def first_line(e) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def start(ray, address, flag):
    """ray.init: join the cluster at `address`, or start a local Ray on this machine's cores."""
    path = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    kw = {"runtime_env": {"env_vars": {"PYTHONPATH": os.pathsep.join(path)}}}
    if address:
        kw["address"] = address
    else:
        kw["include_dashboard"] = False
    try:
        ray.init(**kw)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as e:
        where = f"{flag} {address}" if address else "a local Ray"
        raise DataError(f"{where}: Ray could not start or connect ({type(e).__name__}: {first_line(e)})") from None


def ray_task(task):
    """A task on a Ray worker: the paths it reads checked on this node, then the call."""
    check_reads(task)
    return task()


class SharedRef(Shared):
    """A shared argument in Ray's object store (RayEngine.share): put once, read by each task's worker."""

    def __init__(self, ref):
        self.ref = ref

    def get(self):
        return import_ray().get(self.ref)


class RayEngine:
    name = "ray"

    def __init__(self, address=None):
        self.ray = import_ray()
        flag = "--ray-address" if address else "RAY_ADDRESS"
        address = address or os.environ.get("RAY_ADDRESS") or None
        if address:
            check_address(address, flag)
        self.owned = not self.ray.is_initialized()  # a caller's own ray.init (the tests') is used and left running
        if self.owned:
            start(self.ray, address, flag)
        self.remote = self.ray.remote(ray_task)

    def in_process(self, n) -> bool:
        return False

    def share(self, value):
        """value as a task argument that many tasks read: put in the object store once, not once per task."""
        return SharedRef(self.ray.put(value))

    def run(self, tasks):
        """Each task's result, in task order, as it is ready; all tasks are submitted at once and Ray runs as
        many side by side as the cluster has room for. After a failed task the others are left to finish, not
        cancelled: a finished study run is kept for the rerun, and ray.cancel of a task that is just
        completing crashes the driver in Ray 2.60 (task_manager.cc: "Tried to complete task that was not
        pending"); a Ray started here is stopped at the end anyway."""
        tasks = list(tasks)
        refs = [self.remote.options(num_cpus=t.cpus, num_gpus=t.gpus, max_retries=RETRIES, name=t.name or "task")
                .remote(t) for t in tasks]
        for t, r in zip(tasks, refs):
            yield self.result(t, r)

    def result(self, task, ref):
        errors = self.ray.exceptions
        try:
            return self.ray.get(ref)
        except errors.RayTaskError as e:  # the task's own exception, raised here as the local engine would
            cause = e.cause
            if isinstance(cause, Exception) and not isinstance(cause, errors.RayError):
                raise cause from None
            raise TaskFailed(f"{task.name or 'a task'}: {first_line(cause)}") from None
        except errors.RayError as e:  # its worker died past the retries, its node was lost, ...
            raise TaskFailed(f"{task.name or 'a task'}: failed on Ray after {RETRIES} retries "
                            f"({type(e).__name__}: {first_line(e)})") from None

    def close(self):
        if self.owned:
            self.ray.shutdown()
