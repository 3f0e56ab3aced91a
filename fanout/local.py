"""The local engine, the default: every task in this process one after another, or, with workers > 1,
in a pool of that many spawned processes side by side (spawn: torch is not fork-safe once its thread
pool exists). Results come back in task order either way."""
import multiprocessing
from concurrent.futures import ProcessPoolExecutor


class LocalEngine:
    name = "local"

    def __init__(self, workers=1):
        self.workers = workers

    def in_process(self, n) -> bool:
        """True when n tasks would run in this very process: a caller may then hand them what cannot be
        pickled (a log function)."""
        return self.workers <= 1 or n <= 1

    def share(self, value):
        """value as a task argument that many tasks read (here: the value itself; a pool pickles it per task)."""
        return value

    def run(self, tasks):
        """Each task's result, in task order, as it is ready."""
        tasks = list(tasks)
        if self.in_process(len(tasks)):
            for t in tasks:  # lazily: a caller that prints after each result prints as today
                yield t()
            return
        with ProcessPoolExecutor(min(self.workers, len(tasks)), mp_context=multiprocessing.get_context("spawn")) as ex:
            futures = [ex.submit(t.fn, *t.args) for t in tasks]
            try:
                for f in futures:
                    yield f.result()
            finally:  # a failed task or a caller that stops early: the tasks not yet started never start
                for f in futures:
                    f.cancel()

    def close(self):
        pass
