"""What a fan-out runs: one picklable call, what it asks of a worker, and the paths it must read there.

A Ray cluster places a task on any node with the CPUs and GPUs it asks for; the task can only work
where that node sees the same checkout and prepared corpus as the driver. `reads` names those
paths, so a node that lacks one fails in one line naming the node and the path, not deep in a run;
`prepared` and `writes` are what the Ray engine's probe checks on every node before the first task
(probe.py). Every path is absolute: the driver resolves it, a worker's own folder or environment never does.
"""
import os
import socket
from dataclasses import dataclass
from typing import Callable

from errors import DataError


class TaskFailed(DataError):
    """A task could not run or finish on its worker (its node lacks a path, its worker died past the
    retries): the message names the task, unlike an error the task itself raised."""


class ClusterLost(TaskFailed):
    """The cluster's head stopped answering: the run ends in one line saying what had finished and is kept."""


@dataclass(frozen=True)
class Task:
    """fn(*args) on a worker; fn and args are pickled (fn a module-level function) unless the engine runs
    the task in this very process. cpus, gpus and memory are what the task holds while it runs."""
    fn: Callable
    args: tuple = ()
    name: str = ""
    cpus: float = 1
    gpus: float = 0
    memory: int = 0  # bytes at its peak, where the caller knows them: on Ray a node runs only what its memory holds
    reads: tuple = ()  # absolute paths the task reads on its node
    prepared: tuple = ()  # prepared corpus folders (DATA/SOURCE): every node must read the driver's build id there
    writes: tuple = ()  # absolute folders the task writes into and the driver reads back: storage every node shares
    kept: str = ""  # what a finished task leaves that a rerun reuses; "": its result lives in the driver only
    small: bool = False  # milliseconds of work: an engine may send it in a batch with its neighbours

    def __call__(self):
        return self.fn(*(a.get() if isinstance(a, Shared) else a for a in self.args))


class Shared:
    """A task argument that many tasks read, made once by an engine's share() (a file, an object in Ray's
    store); the task reads the value on its worker: Task.__call__ calls get()."""

    def get(self):
        raise NotImplementedError


def gpus_for(device, world=1) -> int:
    """The GPUs a task on `device` holds: one per process of its world on CUDA, none on the CPU."""
    return world if str(device).startswith("cuda") else 0


def check_reads(task, node=None):
    """Every path the task reads exists and is readable on this node, or one line naming node and path."""
    for p in task.reads:
        if not os.access(p, os.R_OK):
            where = node or socket.gethostname()
            raise TaskFailed(f"{task.name or 'a task'}: node {where} cannot read {p}: every node must see the "
                            "prepared corpus and the checkout at the driver's paths")
