"""Engine: what every fan-out engine does, so that a caller (the study, run_six, the audit's worker streams)
is written once against it and never against one engine. LocalEngine (local.py) and RayEngine
(ray_engine.py) implement it; open_engine (choose.py) gives one."""
from typing import Iterable, Iterator, Protocol

from fanout.task import Task


class Engine(Protocol):
    name: str  # local or ray (choose.ENGINES)

    def in_process(self, n: int) -> bool:
        """True when n tasks would run in this very process: a caller may then hand them what cannot be
        pickled (a log function)."""

    def share(self, value):
        """value as a task argument that many tasks read (a Shared, or the value itself)."""

    def probe(self, reads=(), prepared=(), writes=()) -> None:
        """Before any compute: every node sees the driver's checkout, these paths, prepared corpora and written
        folders as the driver does, or one line naming the node (Ray; nothing to check for local processes).
        run() probes what its tasks name and no earlier probe covered."""

    def run(self, tasks: Iterable[Task]) -> Iterator:
        """Each task's result, in task order, as it is ready."""

    def close(self) -> None:
        """Release what the engine holds (a pool's shared files, a Ray started here)."""
