"""The local length pass: units counted in this process (workers=1), or in a thread of it and workers - 1
spawned processes, each result handed back as soon as its unit finishes (the caller caches it then, so an
interrupted pass keeps it); and the progress bar (documents/s, tokens/s, and the time left from the input bytes).

A runner is any callable run(units, settings, todo) yielding (unit index, UnitResult) for each index in todo, in
any order: local_runner here, fanout/corpus_data.py's on Ray Data.
"""
import multiprocessing
import os
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from console.progress import bar
from corpus.readers.encoders import single_threaded
from corpus.readers.units import count_unit
from errors import DataError


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS has no affinity call
        return os.cpu_count() or 1


def local_runner(workers):
    def run(units, settings, todo):
        if workers <= 1 or len(todo) <= 1:
            for i in todo:
                yield i, count_unit(units[i], settings)
            return
        yield from _pool(units, settings, todo, min(workers, len(todo)))
    run.workers = workers
    return run


def _worker_start():
    single_threaded()  # each worker one core: the pool is the parallelism


def _pool(units, settings, todo, workers):
    """A thread of this process and workers - 1 spawned processes count the units: the thread starts at once,
    while the processes are still starting (spawning one costs about half a second of imports), so N workers
    keep N cores busy with N - 1 starts. The tokenizers and Arrow let go of the GIL while they work."""
    # spawn, not fork: the caller may hold torch's or tokenizers' threads, which a fork does not survive
    ctx = multiprocessing.get_context("spawn")
    queue, pending, stop = list(todo), {}, threading.Event()
    here = ThreadPoolExecutor(1, thread_name_prefix="corpus-lengths")
    there = ProcessPoolExecutor(workers - 1, mp_context=ctx, initializer=_worker_start)
    try:
        while queue or pending:
            for depth in (1, 2):  # one unit running on every worker first, then one queued behind each
                for ex, n, args in ((here, 1, (stop,)), (there, workers - 1, ())):
                    while queue and sum(e is ex for _, e in pending.values()) < depth * n:
                        i = queue.pop(0)
                        pending[ex.submit(count_unit, units[i], settings, *args)] = (i, ex)
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for f in sorted(done, key=lambda f: pending[f][0]):
                yield from _finished(f, pending.pop(f)[0], units)
    finally:  # a failed unit or an interrupted caller: the units not yet started never start, the thread stops
        stop.set()
        for f in pending:
            f.cancel()
        here.shutdown(wait=True)
        there.shutdown(wait=True, cancel_futures=True)


def _finished(future, i, units):
    try:
        r = future.result()
    except BrokenProcessPool:
        raise DataError(f"{units[i].path}: a worker process died while counting it (out of memory? try fewer "
                        f"workers)") from None
    yield i, r


class Progress:
    """tqdm over the input bytes (its ETA), with documents/s and tokens/s beside it."""

    def __init__(self, total_bytes, enabled=True):
        self.bar = bar(total=total_bytes, unit="B", unit_scale=True, desc="corpus lengths", disable=not enabled,
                       leave=False)
        self.t0, self.docs, self.tokens = time.perf_counter(), 0, 0

    def add(self, nbytes, docs, tokens):
        self.docs += docs
        self.tokens += tokens
        dt = max(time.perf_counter() - self.t0, 1e-9)
        self.bar.set_postfix_str(f"{self.docs / dt:,.0f} docs/s, {self.tokens / dt:,.0f} tokens/s", refresh=False)
        self.bar.update(nbytes)

    def close(self):
        self.bar.close()
