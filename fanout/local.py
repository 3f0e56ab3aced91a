"""The local engine, the default: every task in this process one after another, or, with workers > 1,
in a pool of that many spawned processes side by side (spawn: torch is not fork-safe once its thread
pool exists). The pool is started at the first run() that needs it and kept until close(): an audit's
worker streams and then its permutations go to the same processes, which import the project once (about
0.6 s of CPU each). Results come back in task order either way."""
import multiprocessing
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from console.shutdown import skip_final_collections
from fanout.task import Shared


class SharedFile(Shared):
    """A shared array written once to a file that every pool process reads memory-mapped (the processes share
    its pages), where a pool would otherwise pickle it into every task."""

    def __init__(self, path):
        self.path = str(path)

    def get(self):
        return np.load(self.path, mmap_mode="r", allow_pickle=False)


class LocalEngine:
    name = "local"

    def __init__(self, workers=1):
        self.workers = workers
        self.folder = None  # the shared arguments' files, made at the first share() and removed by close()
        self.pool = None  # the spawned processes, started at the first run() that needs them, ended by close()

    def in_process(self, n) -> bool:
        """True when n tasks would run in this very process: a caller may then hand them what cannot be
        pickled (a log function)."""
        return self.workers <= 1 or n <= 1

    def share(self, value):
        """value as a task argument that many tasks read: in this process the value itself, for a pool a file."""
        if self.workers <= 1 or not isinstance(value, np.ndarray) or value.dtype.hasobject:
            return value  # only plain arrays go to a file (no pickle to read back); anything else is pickled per task
        if self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix="fanout-shared-"))
        path = self.folder / f"{len(list(self.folder.iterdir()))}.npy"  # one file per share() call
        np.save(path, value, allow_pickle=False)
        return SharedFile(path)

    def probe(self, reads=(), prepared=(), writes=()):
        """Nothing to check: the pool's processes are this machine's, with this process's checkout and folders."""

    def run(self, tasks):
        """Each task's result, in task order, as it is ready."""
        tasks = list(tasks)
        if self.in_process(len(tasks)):
            for t in tasks:  # lazily: a caller that prints after each result prints as today
                yield t()
            return
        if self.pool is None:
            # each process ends as a command line does: no last scans of the objects its imports made (about
            # 0.4 s of CPU each, once torch is imported)
            self.pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                            initializer=skip_final_collections)
        futures = [self.pool.submit(t) for t in tasks]
        try:
            for f in futures:
                yield f.result()
        finally:  # a failed task or a caller that stops early: the tasks not yet started never start
            for f in futures:
                f.cancel()

    def close(self):
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
            self.pool = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
