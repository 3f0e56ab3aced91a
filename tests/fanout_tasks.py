"""Tasks for tests/test_fanout.py that Ray workers import by name: a module of their own, so a worker does
not import the test file (and torch through it) to run them."""
import os
import time
from pathlib import Path

from audit.topology import share_counts
from console import shutdown
from errors import DataError


def dies_once(marker, *args):
    """share_counts, but its first attempt kills its own worker process, as an out-of-memory kill would."""
    if not os.path.exists(marker):
        Path(marker).touch()
        os._exit(1)
    return share_counts(*args)


def fails_first(i, done=None):
    """Task 0 raises the way a run refuses bad input; the others take a moment, leave a mark in `done` and
    return their number."""
    if i == 0:
        raise DataError("task 0: bad input")
    time.sleep(0.05)
    if done:
        Path(done, str(i)).touch()
    return i


def ends_without_final_collections():
    """Whether this process's exit will freeze its heap first (console/shutdown.py), and its pid."""
    return shutdown._registered, os.getpid()


def assigned_memory():
    """The `memory` resource Ray gave the task running this."""
    import ray  # late: the other tasks here run on the local engine too
    return ray.get_runtime_context().get_assigned_resources().get("memory")
