"""Microbatches for training: (inputs, targets) int64 tensors from a Packer.

The global row sequence is fixed by the packer. Global microbatch m holds rows
m*rows : (m+1)*rows; rank r of W trains the microbatches with m % W == r, so W ranks
together see exactly the single-process sequence and an audit holds for any world size.
Every rank runs the (cheap) selection core for all microbatches and materializes tokens
only for its own.

state_dict() describes the position after the last microbatch handed to the caller, also
when a background thread has produced further ones, so a checkpoint resumes exactly.
"""
import copy
import queue as std_queue  # the standard library's queue (the repo's queue/ folder has no __init__)
import threading

import torch

from loaders.packers import materialize


class MicrobatchLoader:
    def __init__(self, packer, rows, rank=0, world=1, device="cpu", prefetch=0):
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} outside world size {world}")
        self.packer, self.rows, self.rank, self.world = packer, rows, rank, world
        self.device = torch.device(device)
        self.prefetch = prefetch
        self.micro_idx = 0  # next global microbatch index
        self._state = self._snapshot()
        self._q = None
        self._thread = None
        self._stop = threading.Event()

    def _snapshot(self):
        return {"packer": copy.deepcopy(self.packer.state_dict()), "micro_idx": self.micro_idx}

    def _produce(self):
        """Next own microbatch as a CPU array, plus the state right after it."""
        p = self.packer
        while self.micro_idx % self.world != self.rank:
            p.next_raw(self.rows)
            self.micro_idx += 1
        raw = p.next_raw(self.rows)
        self.micro_idx += 1
        rows = materialize(raw, p.stream, p.R)
        # only a prefetch thread runs ahead of the consumer; without one the live state is the consumer's
        return rows, (self._snapshot() if self.prefetch > 0 else None)

    def _to_tensors(self, rows):
        t = torch.from_numpy(rows)
        if self.device.type == "cuda":
            t = t.pin_memory().to(self.device, non_blocking=True)
        return t[:, :-1], t[:, 1:]

    def _worker(self):
        try:
            while not self._stop.is_set():
                item = self._produce()
                while not self._stop.is_set():
                    try:
                        self._q.put(item, timeout=0.1)
                        break
                    except std_queue.Full:
                        continue
        except BaseException as e:  # surfaced in the consumer
            self._q.put(e)

    def __iter__(self):
        return self

    def __next__(self):
        if self.prefetch <= 0:
            rows, st = self._produce()
        else:
            if self._thread is None:
                self._q = std_queue.Queue(maxsize=self.prefetch)
                self._thread = threading.Thread(target=self._worker, daemon=True)
                self._thread.start()
            item = self._q.get()
            if isinstance(item, BaseException):
                raise item
            rows, st = item
        if st is not None:
            self._state = st
        return self._to_tensors(rows)

    def state_dict(self):
        if self.prefetch <= 0:
            return self._snapshot()
        return copy.deepcopy(self._state)

    def load_state_dict(self, st):
        self.close()
        self.packer.load_state_dict(st["packer"])
        self.micro_idx = int(st["micro_idx"])
        self._state = copy.deepcopy(st)

    def close(self):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread, self._q = None, None
            self._stop.clear()
            # the producer ran ahead; rewind to what the consumer has seen
            self.packer.load_state_dict(self._state["packer"])
            self.micro_idx = self._state["micro_idx"]
