"""The corpus length pass on Ray Data (--engine ray), or locally: corpus_lengths() with an engine.

On Ray the units that corpus/readers plans (a file, a parquet file's row groups, a byte range of a JSON-lines
file) become a dataset: read (each unit's reader, on a Ray worker), then map_batches the tokenizer, in arrival
order (DataContext's preserve_order), back to this process, which caches each unit as its last row arrives. The
readers, the tokenizer, the BOS policy and the cache are corpus/readers' own, so both engines give the same
lengths in the same order. Every node must see the corpus at the driver's paths.
"""
import contextlib
import logging
import os
import shlex
import sys
from dataclasses import replace

import numpy as np

from corpus.readers import corpus_lengths as local_corpus_lengths
from corpus.readers.encoders import cached_encoder, single_threaded
from corpus.readers.units import LabelCodes, UnitResult, measure, read_unit
from errors import DataError
from fanout.choose import ENGINES
from fanout.probe import Needs
from fanout.ray_connect import check_address, first_line, import_ray, start
from fanout.ray_engine import LOCAL_RAY, LOST_S, ClusterWatch, head_of, probe_nodes
from fanout.task import ClusterLost

LOG = logging.getLogger("ray.data")


def corpus_lengths(paths, tokenizer=None, *, engine="local", workers=None, ray_address=None, ray_verbose=False, **kw):
    """corpus.readers.corpus_lengths on the engine named: local (workers processes) or ray (Ray Data on the
    cluster at ray_address or $RAY_ADDRESS, else a local Ray of its own started here and stopped after;
    ray_verbose: Ray's own logging and the workers' output)."""
    if engine not in ENGINES:
        raise DataError(f"--engine {engine}: expected one of {', '.join(ENGINES)}")
    if engine == "local":
        if ray_address:
            raise DataError(f"--ray-address {ray_address}: applies to --engine ray only")
        return local_corpus_lengths(paths, tokenizer, workers=workers, **kw)
    with ray_data_runner(ray_address, ray_verbose) as run:
        return local_corpus_lengths(paths, tokenizer, runner=run, **kw)


@contextlib.contextmanager
def ray_data_runner(address=None, verbose=False):
    """A runner (corpus/readers/parallel.py) on Ray Data; a Ray started here is stopped at the end, a caller's
    own ray.init (the tests') is used and left running."""
    ray = import_ray()
    flag = "--ray-address" if address else "RAY_ADDRESS"
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        check_address(address, flag)
    owned = not ray.is_initialized()
    if owned:
        start(ray, address, flag, verbose)
    try:
        yield RayDataRunner(ray, address)
    finally:
        if owned:
            ray.shutdown()


class RayDataRunner:
    """Ray Data under the cluster's watch: a head silent for LOST_S while the nodes are asked for or a batch is
    awaited ends the pass in one line (ClusterLost), where Ray Data would wait (past 30 s, 2026-12-07)."""
    engine = "Ray Data"
    workers = None

    def __init__(self, ray, address=None):
        self.ray = ray
        self.where = address or LOCAL_RAY
        self.watch = ClusterWatch(*head_of(ray, address))

    def lost(self):
        return (f"the Ray cluster at {self.where} was lost (its head has not answered for {LOST_S} s) while Ray Data "
                f"read the corpus; once the cluster is back, rerun `{shlex.join(sys.orig_argv)}`")

    def __call__(self, units, settings, todo):
        if not todo:
            return
        # every node reads the units at the driver's absolute paths (a relative one would be the worker's folder's),
        # and first the probe: the checkout and every file, on every node
        units = [absolute(u) for u in units]
        probe_nodes(self.ray, Needs.of(reads=[u.path for u in units]), lambda call: self.watch.call(call, self.lost),
                    self.wait)
        try:
            with ray_data_settings():
                # the dataset's making puts each unit into the object store: a call to the head under Ray Client
                batches = self.watch.call(lambda: self.read(units, settings, todo), self.lost)
                yield from _collect(self.watch.iterate(batches, self.lost), todo)
        except ClusterLost:
            raise
        except Exception as e:
            raise _data_error(e) from None

    @staticmethod
    def read(units, settings, todo):
        """Ray Data's batches of the units in todo: each read on a Ray worker, then tokenized, in arrival order."""
        # late: Ray Data is a part of the optional 'ray' extra that only this engine loads
        import ray.data

        ds = ray.data.from_items([{"unit": i} for i in todo], override_num_blocks=len(todo))
        ds = ds.map_batches(read_stage, batch_size=1, fn_kwargs={"units": units, "settings": settings})
        ds = ds.map_batches(tokenize_stage, batch_size=settings.text_batch,
                            fn_kwargs={"units": units, "settings": settings})
        return ds.iter_batches(batch_size=None, batch_format="numpy")

    def wait(self, ref, deadline):
        """Until ref is ready (ClusterWatch.wait)."""
        self.watch.wait(self.ray, ref, self.lost, deadline)


@contextlib.contextmanager
def ray_data_settings():
    """Ray Data's settings for the pass, and its logger quiet, for the block; as they were afterwards."""
    # late: Ray Data is a part of the optional 'ray' extra that only this engine loads
    import ray.data

    ctx = ray.data.DataContext.get_current()
    saved = ctx.execution_options.preserve_order, ctx.enable_progress_bars, LOG.level
    ctx.execution_options.preserve_order = True  # arrival order: the corpus's order, unit after unit
    ctx.enable_progress_bars = False  # the pass has its own bar
    LOG.setLevel(logging.CRITICAL)  # a worker's bad-input error is ours to say, in one line, not a traceback
    try:
        yield
    finally:
        ctx.execution_options.preserve_order, ctx.enable_progress_bars, level = saved
        LOG.setLevel(level)


def absolute(unit):
    """The unit with its paths made absolute here, on the driver."""
    extra = {k: os.path.abspath(v) if k == "bin" else v for k, v in unit.extra.items()}
    return replace(unit, path=os.path.abspath(unit.path), extra=extra)


def read_stage(batch, units, settings):
    """Ray Data's read: each unit's documents, token data already counted (its BOS applied), text as text."""
    for i in batch["unit"]:
        u = units[int(i)]
        for b in read_unit(u, settings):
            n = b.n
            labels = b.labels if b.labels is not None else [u.label_const] * n
            labels = labels.to_pylist() if hasattr(labels, "to_pylist") else list(labels)
            text = np.array(b.texts if b.texts is not None else [""] * n, dtype=object)
            length = np.full(n, -1, np.int64) if b.texts is not None else measure(b, u, settings).astype(np.int64)
            yield {"unit": np.full(n, int(i), np.int64), "text": text, "length": length,
                   "label": np.array(["" if x is None else x for x in labels], dtype=object),
                   "has_label": np.array([x is not None for x in labels], dtype=bool)}


def tokenize_stage(batch, units, settings):
    """Ray Data's map_batches of the tokenizer: the text rows counted, BOS per the policy."""
    single_threaded()  # one core per task: Ray's tasks are the parallelism
    length = np.array(batch["length"], np.int64)
    todo = length < 0
    if todo.any():
        unit = units[int(batch["unit"][np.flatnonzero(todo)[0]])]
        texts = [str(t) for t in batch["text"][todo]]
        length[todo] = measure(_Texts(texts), unit, settings, cached_encoder(settings.tokenizer))
    return {"unit": batch["unit"], "length": length, "label": batch["label"], "has_label": batch["has_label"]}


class _Texts:
    """A Batch of texts, as units.measure takes it."""

    def __init__(self, texts):
        self.texts = texts


def _collect(batches, todo):
    """(unit index, UnitResult) for each unit of todo, in order, as its last row arrives (a unit with no
    documents sends none: it is done when a later unit's rows arrive, or at the end)."""
    pending = list(todo)
    cur, lengths, labels = None, [], None
    for b in batches:
        units = np.asarray(b["unit"])
        cuts = np.flatnonzero(np.diff(units)) + 1
        for a, z in zip(np.r_[0, cuts], np.r_[cuts, len(units)]):
            u = int(units[a])
            if u != cur:
                if cur is not None:
                    yield cur, _result(lengths, labels)
                    pending.remove(cur)
                while pending and pending[0] != u:  # units before u that sent no rows
                    yield pending.pop(0), UnitResult(np.zeros(0, np.int64), bos_first=None)
                cur, lengths, labels = u, [], LabelCodes()
            lengths.append(np.asarray(b["length"][a:z], np.int64))
            has = np.asarray(b["has_label"][a:z])
            labels.add([str(x) if h else None for x, h in zip(b["label"][a:z], has)])
    if cur is not None:
        yield cur, _result(lengths, labels)
        pending.remove(cur)
    for u in pending:
        yield u, UnitResult(np.zeros(0, np.int64), bos_first=None)


def _result(lengths, labels):
    return UnitResult(np.concatenate(lengths), labels.result(), labels.names, bos_first=None)  # not counted on Ray


def _data_error(e):
    """The DataError a Ray worker raised (Ray Data wraps it), as the one line it was; another failure in one line."""
    seen, x = set(), e
    while x is not None and id(x) not in seen:
        seen.add(id(x))
        cause = getattr(x, "cause", None)  # a RayTaskError holds the worker's exception here
        if isinstance(cause, BaseException):
            x = cause
            continue
        if isinstance(x, DataError):
            return DataError(first_line(x))
        x = x.__cause__ or x.__context__
    return DataError(f"Ray Data length pass failed ({type(e).__name__}: {first_line(e)})")
