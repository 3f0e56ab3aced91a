"""The local length pass: units counted in this process (workers=1) or in a pool of spawned processes, each
result handed back as soon as its unit finishes (the caller caches it then, so an interrupted pass keeps it);
and the progress bar (documents/s, tokens/s, and the time left estimated from the input bytes done).

A runner is any callable run(units, settings, todo) yielding (unit index, UnitResult) for each index in todo, in
any order: local_runner here, fanout/corpus_data.py's on Ray Data.
"""
import multiprocessing
import os
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from console.progress import bar
from corpus.errors import DataError
from corpus.readers.encoders import single_threaded
from corpus.readers.units import count_unit


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
    # spawn, not fork: the caller may hold torch's or tokenizers' threads, which a fork does not survive
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_start) as ex:
        pending = {}
        queue = list(todo)
        try:
            while queue or pending:
                while queue and len(pending) < 2 * workers:  # a few queued per worker: no unit's input held long
                    i = queue.pop(0)
                    pending[ex.submit(count_unit, units[i], settings)] = i
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for f in sorted(done, key=pending.get):
                    i = pending.pop(f)
                    try:
                        r = f.result()
                    except BrokenProcessPool:
                        raise DataError(f"{units[i].path}: a worker process died while counting it (out of memory? "
                                        f"try fewer workers)") from None
                    yield i, r
        finally:  # a failed unit or an interrupted caller: the units not yet started never start
            for f in pending:
                f.cancel()


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
