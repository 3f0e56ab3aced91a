"""A two-node Ray cluster on this machine, as a researcher starts one: `ray start --head`, then a second raylet
with `ray start --address`, one CPU each. For tests/test_fanout.py's module fixture.

Everything it starts is its own: a temporary folder of its own (--temp-dir: no other Ray on this machine finds
it through /tmp/ray, and `ray stop`, which stops every Ray of the machine, is never used), ports picked free,
and each `ray start --block` in a process group of its own, which stop() ends by its id (every Ray process a
node starts stays in its group).
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))  # the venv's own `ray` command
START_S = 90  # both raylets up, on a machine busy with other test processes
NODE_MEMORY = 256 * 1024 ** 2  # each node's `memory` resource, what its tasks may ask for in all (test_fanout's tests)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_flags():
    """A node's own ports, all free now, and its small size: one CPU, the smallest object store, NODE_MEMORY."""
    # no log monitor: the tests' driver takes no worker output (log_to_driver=False), and it is a process less to start
    flags = ["--block", "--num-cpus", "1", "--disable-usage-stats", "--node-ip-address", "127.0.0.1",
             "--object-store-memory", str(80 * 1024 * 1024), "--include-log-monitor", "false",
             "--memory", str(NODE_MEMORY)]
    for f in ("--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
              "--dashboard-agent-grpc-port", "--metrics-export-port", "--runtime-env-agent-port"):
        flags += [f, str(free_port())]
    return flags


class TwoNodeRay:
    """launch(env, cwd): the head and a second raylet started, both with the environment `env` (what their workers
    inherit) and the working folder `cwd`, returning at once; wait(): until the head answers; address (HOST:PORT),
    client_port (its Ray Client server); stop()."""

    def __init__(self):
        # short: Ray's socket paths under it must stay within the 107 bytes a Unix socket's name may have
        self.root = Path(tempfile.mkdtemp(prefix="pa-ray-", dir="/tmp"))
        self.temp = self.root / "ray"  # where a driver with RAY_TMPDIR=root would look for a running cluster
        self.nodes = []
        self.port = self.client_port = None

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def launch(self, env, cwd):
        self.port, self.client_port = free_port(), free_port()
        self.start_node(["--head", "--port", str(self.port), "--ray-client-server-port", str(self.client_port),
                         "--include-dashboard", "false", "--dashboard-port", str(free_port())], env, cwd, "head")
        # at once: the second node's `ray start` retries the head's address until it answers
        self.start_node(["--address", self.address], env, cwd, "node")
        return self

    def restart_second_node(self, env, cwd):
        """The second node started once more if its `ray start` has ended without joining: Ray gives a raylet a fixed
        30 s to register with the head ("The current node timed out during startup"), and once, in the first suite of
        a session on a busy machine, it took longer. Once only: a node that fails twice is the test's failure."""
        if self.nodes[1].poll() is None or len(self.nodes) > 2:
            return False
        self.start_node(["--address", self.address], env, cwd, "node-again")
        return True

    def wait(self):
        deadline = time.monotonic() + START_S
        while not self.answers():
            if time.monotonic() > deadline or self.nodes[0].poll() is not None:
                raise RuntimeError(f"the test cluster's head did not start: {self.log('head')}")
            time.sleep(0.2)
        return self

    def start_node(self, flags, env, cwd, name):
        log = open(self.root / f"{name}.log", "w")
        self.nodes.append(subprocess.Popen([RAY, "start", "--temp-dir", str(self.temp), *flags, *node_flags()],
                                           env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True))
        log.close()

    def answers(self):
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def log(self, name):
        return (self.root / f"{name}.log").read_text()[-2000:]

    def kill(self, sig=signal.SIGKILL):
        """Every process of both nodes at once: the cluster is lost, as when its machines go."""
        for p in self.nodes:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self):
        """Both nodes ended (SIGTERM, then SIGKILL after 2 s: nothing of theirs is kept) and their folder removed."""
        self.kill(signal.SIGTERM)
        deadline = time.monotonic() + 2
        for p in self.nodes:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        self.kill(signal.SIGKILL)  # whatever of the groups is left (a worker slow to end)
        for p in self.nodes:
            p.wait()
        deadline = time.monotonic() + 10
        while any(self.alive(p.pid) for p in self.nodes) and time.monotonic() < deadline:
            time.sleep(0.1)  # the groups' last processes gone: none writes its logs into the folder removed below
        shutil.rmtree(self.root, ignore_errors=True)

    @staticmethod
    def alive(group):
        try:
            os.killpg(group, 0)
            return True
        except ProcessLookupError:
            return False
