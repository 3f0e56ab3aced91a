"""The audit under a loader topology: N ranks x M DataLoader workers, one packer per worker stream.

Each of the W = N*M worker streams reads its own share of the documents (`--split-by`),
runs its own packer with its own buffer, and gets an equal share of the budget's rows:
ranks step together and a DataLoader takes batches from its workers in turn. When the rows
do not divide, the first (rows mod W) streams get one row more. Each share is audited by
the single-stream audit (audit/pipeline.py audit_packer), unchanged; this module only
splits the stream and adds the per-worker tallies up. The (packer, worker stream) audits are
independent: they go through the fan-out engine (fanout/: in this process by default, or as
Ray tasks), and come back in order.
"""
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
import pyarrow.parquet as pq

from audit.fate_table import FATES
from audit.pipeline import StreamInput, audit_packer
from audit.strata import stratum_labels
from audit.tally import exposure_rows, label_rows
from errors import DataError
from fanout import Task
from fanout.local import LocalEngine
from loaders.core import PACKERS

# per-worker counts that add up across worker streams
SUMMED = ("rows", "targets", "sources_arrived", "tokens_arrived", "bos_added", "emitted", "discarded", "buffered",
          "sources_started", "sources_never_started", "sources_longer_than_R_arrived", "sources_longer_than_R_started")


@dataclass(frozen=True)
class Split:
    """--split-by parsed: groups of `group` documents dealt round-robin to the worker streams, either across the whole
    stream or restarted at the first group of every file (per_file; group None: whole files, file f to stream f mod W,
    f the file's place in the stream's list of files). hf: HF datasets' streaming IterableDataset under
    split_dataset_by_node and a DataLoader (hf_streams), whose deal depends on the ranks: bound with for_ranks."""
    group: int | None = 1
    per_file: bool = False
    hf: bool = False
    ranks: int = 1  # the ranks of the worker streams (only the hf deal reads it)

    @property
    def text(self):
        if self.hf:
            return "hf-iterable"
        if self.per_file:
            return "file" if self.group is None else f"file-group:{self.group}"
        return "document" if self.group == 1 else f"group:{self.group}"

    def for_ranks(self, ranks):
        """The split for worker streams of `ranks` ranks (stream w: rank w mod ranks, worker w // ranks)."""
        return replace(self, ranks=ranks)


def as_split(split):
    """A Split, from a Split or a group size (the callers that deal groups across the stream)."""
    return split if isinstance(split, Split) else Split(int(split))


def parse_split(text):
    """--split-by: 'document', 'group:G', 'file-group:G' (G documents a group), 'file' or 'hf-iterable' -> a Split."""
    if text in ("document", "file"):
        return Split(None if text == "file" else 1, text == "file")
    if text == "hf-iterable":
        return Split(None, True, hf=True)
    kind, sep, g = text.partition(":")
    if kind in ("group", "file-group") and sep:
        try:
            G = int(g)
        except ValueError:
            G = 0
        if G >= 1:
            return Split(G, kind == "file-group")
    raise DataError(f"--split-by {text!r}: expected 'document', 'group:G', 'file-group:G' (G a positive integer), "
                    "'file' or 'hf-iterable'")


def worker_of(n, W, group=1):
    """The worker stream of each of n documents: consecutive groups of `group` dealt round-robin."""
    return (np.arange(n, dtype=np.int64) // group) % W


def place_in_file(file_of):
    """Each document's place among its own file's documents, in stream order (a file's documents need not be
    consecutive in the stream)."""
    file_of = np.asarray(file_of, dtype=np.int64)
    order = np.argsort(file_of, kind="stable")
    f = file_of[order]
    first = np.flatnonzero(np.r_[True, f[1:] != f[:-1]])  # where each file's run starts in the sorted order
    place = np.empty(len(f), np.int64)
    place[order] = np.arange(len(f)) - np.repeat(first, np.diff(np.r_[first, len(f)]))
    return place


def streams_of(n, W, split=1, file_of=None, files=None):
    """The worker stream of each document under a split: a per-file split reads the files (file_of, one per
    document), as a loader that opens each file and deals its groups, or the files themselves, from the start.
    files: the stream's count of files, those without a document included (file_count; the hf deal counts them)."""
    split = as_split(split)
    if not split.per_file:
        return worker_of(n, W, split.group)
    file_of = np.asarray(file_of, dtype=np.int64)
    if split.hf:
        return hf_streams(file_of, split.ranks, W // split.ranks, files)
    if split.group is None:
        return file_of % W
    return (place_in_file(file_of) // split.group) % W


def hf_streams(file_of, ranks, workers, files=None):
    """The worker stream of each document as HF datasets deals a streaming IterableDataset's files (its shards) under
    split_dataset_by_node(rank, ranks) and a DataLoader of `workers` workers (datasets 4.7.0 iterable_dataset.py):
    - files a multiple of ranks: rank r keeps files r, r+N, ... (:2510-2517), and worker k of M the rank's files
      k, k+M, ... (:2440-2450): file f to rank f mod N, worker (f // N) mod M, that is stream f mod N*M;
    - otherwise every rank reads every file (StepExamplesIterable, :2518-2528) and the worker split goes through it
      (:647-652): worker k reads files k, k+M, ..., and rank r keeps documents r, r+N, ... of that worker's stream.
    Stream w is rank w mod N, worker w // N. files: the count of files (shards), an empty one included: a file of no
    row is a shard to HF (one with no row group; pyarrow's write_table gives an empty table a row group of 0 rows,
    which HF's streaming parquet reader refuses), and it moves the deal when it is last: files [3, 4, 0] rows over 2
    ranks are 3 shards, not a multiple of 2, so each rank keeps every other document. Default: the largest index + 1
    (a trailing empty file not seen)."""
    f = np.asarray(file_of, dtype=np.int64)
    if files is None:
        files = int(f.max()) + 1 if len(f) else 0
    if files % ranks == 0:
        return f % (ranks * workers)
    worker = f % workers
    place = np.empty(len(f), np.int64)  # each document's place in its worker's stream (the stream is in file order)
    for k in range(workers):
        mine = np.flatnonzero(worker == k)
        place[mine] = np.arange(len(mine))
    return place % ranks + ranks * worker


def share_sizes(n, W, group=1, file_of=None, files=None):
    """The documents of each worker stream's share, as worker_of deals them, without a value per document: the full
    groups round-robin, then the last, partial one to the next stream (a per-file split counts its deal)."""
    split = as_split(group)
    if split.per_file:
        return np.bincount(streams_of(n, W, split, file_of, files), minlength=W).tolist()
    group = split.group
    full, rest = divmod(n, group)
    return [full // W * group + group * (w < full % W) + rest * (w == full % W) for w in range(W)]


def worker_streams(ranks, workers):
    """The worker streams of N ranks x M loader workers when each runs a packer of its own: the one place the
    product is taken (the plan's topology, the frontier's configurations, this module)."""
    return ranks * workers


def check_topology(n, W, group=1, file_of=None, files=None, chosen_by=""):
    """Every worker stream needs at least one document of the pass (a loader would leave the rest idle). files: the
    stream's count of files (file_count), empty ones included. chosen_by: said after the split where the user did not
    give it (" (--pipeline nanochat's deal)")."""
    split = as_split(group)
    if split.per_file and file_of is None:
        raise DataError(f"--split-by {split.text}{chosen_by}: this stream has no files to deal (lengths given as an array): "
                        "use 'document' or 'group:G'")
    if split.per_file:
        reached = int(np.count_nonzero(share_sizes(n, W, split, file_of, files)))
        if reached < W:
            _, per = np.unique(file_of, return_counts=True)
            groups = int((-(-per // split.group)).sum()) if split.group is not None else 0
            what = (f"{max(len(per), files or 0):,} file(s)" if split.group is None else
                    f"{groups:,} group{'s' if groups != 1 else ''} of {split.group} documents (counted in each file)")
            fix = ("HF datasets stops the DataLoader workers that get no file: give fewer --loader-workers, or "
                   "more files" if split.hf else
                   "that is the loader's own deal: give fewer worker streams" if chosen_by else
                   "give --split-by document or group:G to deal documents, or hf-iterable for HF datasets' deal")
            raise DataError(f"--split-by {split.text}{chosen_by}: {W} worker streams but {what} reach only {reached} of them: "
                            f"every worker stream needs a share; {fix}")
        return
    groups = -(-n // split.group)
    if groups < W:
        what = "documents" if split.group == 1 else f"groups of {split.group} documents"
        raise DataError(f"{W} worker streams but only {groups:,} {what}: every worker stream needs a share")


def split_note(stream, group):
    """One line where a per-file split meets a stream of one file (a length file, a synthetic stream): the files
    restart nothing, so file-group:G deals as group:G does."""
    split = as_split(group)
    if split.per_file and split.group is not None and stream.index is not None and len(stream.index.files) == 1:
        return (f"note: --split-by {split.text} over one file ({stream.index.files[0]}): the whole stream is dealt "
                f"as group:{split.group}")
    return None


def file_of(stream):
    """The stream's file of each document (None where it has no index: a per-file split refuses it)."""
    return None if stream.index is None else stream.index.file_of


def file_count(stream):
    """The stream's count of files, those that hold no document included (None where it has no index)."""
    return None if stream.index is None else len(stream.index.files)


def shares(stream, W, group=1, refill_docs=128):
    """The W worker streams' shares, in arrival order, each refilled `refill_docs` documents at a time
    (the worker's own packer reads its own iterator; the stream's refill boundaries belong to the whole)."""
    who = streams_of(stream.n, W, group, file_of(stream), file_count(stream))
    out = []
    for w in range(W):
        idx = np.flatnonzero(who == w)
        L = stream.lengths[idx]
        refills = np.append(np.arange(0, len(L), refill_docs), len(L))
        labels = None if stream.labels is None else np.asarray(stream.labels, dtype=object)[idx]
        index = None if stream.index is None else stream.index.subset(idx)
        out.append(StreamInput(f"{stream.name}[worker {w}]", stream.kind, L, refills, labels, index, stream.passes,
                               loader_args=stream.loader_args))  # each worker's loader has the run's settings
    return out


def rows_per_stream(rows, W):
    """An equal share of the rows; the first (rows mod W) streams get one row more."""
    return [rows // W + (w < rows % W) for w in range(W)]


def worker_counts(s):
    """What summary.json keeps of one worker stream's audit of one packer."""
    if "refused" in s:
        return {"refused": s["refused"]}
    out = {k: s[k] for k in SUMMED}
    out["by_label"], out["position_exposure"] = s["by_label"], s["position_exposure"]
    out["partition_holds"] = s["partition_holds"]
    out["budget_reached"] = s.get("budget_reached", True)  # its share of the rows, or its input ended first
    out["proposition_held"] = s["protected"]["proposition_held"]
    out["protected_size"] = s["protected"]["size"]
    out["documents"] = s.get("documents")
    if "rows_out_of_order" in s:  # a traced packer's (audit/trace.py out_of_order)
        out["rows_out_of_order"], out["out_of_order_first"] = s["rows_out_of_order"], s["out_of_order_first"]
    return out


def merge(per_worker):
    """Merged totals over the worker streams (a refusal anywhere leaves the packer unmerged)."""
    refused = [c["refused"] for c in per_worker if "refused" in c]
    if refused:
        return {"refused": refused[0]}
    out = {k: sum(c[k] for c in per_worker) for k in SUMMED}
    out["by_label"] = merge_labels([c["by_label"] for c in per_worker])
    out["position_exposure"] = merge_exposure([c["position_exposure"] for c in per_worker])
    out["partition_holds"] = all(c["partition_holds"] for c in per_worker)
    docs = [c.get("documents") for c in per_worker]
    out["documents"] = None if any(d is None for d in docs) else merge_documents(docs)
    held = [c["proposition_held"] for c in per_worker]
    # held only where every worker stream held it; a violation anywhere is the run's, even beside streams where
    # the Proposition does not apply (None)
    out["proposition_held"] = None if None in held and False not in held else all(held)
    if any("rows_out_of_order" in c for c in per_worker):
        out["rows_out_of_order"] = sum(c.get("rows_out_of_order", 0) for c in per_worker)
        out["out_of_order_first"] = next(({**c["out_of_order_first"], "worker_stream": w}
                                          for w, c in enumerate(per_worker) if c.get("out_of_order_first")), None)
    return out


LABEL_COUNTS = ("docs", "tokens", "emitted", "discarded", "buffered", "started")  # a label's counts that add up


def merge_documents(parts):
    """The worker streams' document counts (audit/fate_table.py) added up: the shares are disjoint."""
    out = {k: sum(p[k] for p in parts) for k in ("documents", "arrivals")}
    for k in ("by_fate", "tokens_by_fate", "longer_than_R", "own_tokens"):
        out[k] = {f: sum(p[k][f] for p in parts) for f in parts[0][k]}
    for k, key in (("by_stratum", "stratum"), ("by_label", "label")):
        by = {}
        for p in parts:
            for g in p[k]:
                m = by.setdefault(g[key], {f: 0 for f in FATES})
                for f in FATES:
                    m[f] += g[f]
        order = stratum_labels() if key == "stratum" else sorted(by)
        out[k] = [{key: name, **by[name]} for name in order if name in by]
    return out


def merge_labels(tables):
    """Per-label coverage over the worker streams: counts summed by label, the longest never started the
    largest; the table made from the sums by the one-stream table's own definitions (audit/tally.py label_rows)."""
    by = {}
    for t in tables:
        for d in t:
            m = by.setdefault(d["label"], {**{k: 0 for k in LABEL_COUNTS}, "longest_never_started": 0})
            for k in LABEL_COUNTS:
                m[k] += d[k]
            m["longest_never_started"] = max(m["longest_never_started"], d["longest_never_started"] or 0)
    return label_rows(by)


def merge_exposure(tables):
    """Position exposure over the worker streams: each stratum's arrived and emitted tokens per tenth summed; the
    table made from the sums by the one-stream table's own definition (audit/tally.py exposure_rows)."""
    strata, arrived, emitted = stratum_labels(), None, None
    for t in tables:
        for e in t:
            if arrived is None:  # the tenths of a source, as the one-stream tables have them
                arrived, emitted = (np.zeros((len(strata), len(e["arrived_tokens"])), np.int64) for _ in range(2))
            k = strata.index(e["stratum"])
            arrived[k] += np.asarray(e["arrived_tokens"], np.int64)
            emitted[k] += np.asarray(e["emitted_tokens"], np.int64)
    return [] if arrived is None else exposure_rows(arrived, emitted)


def share_counts(share, packer, rows, R, B, work, w, user=None, fates=True):
    """One worker stream's audit of one packer, as summary.json keeps it. Its events are scratch (the
    one-stream events are kept): in work/.topology-W-work, which the audit removes with its other scratch,
    or, on a Ray node that does not see `work`, in a temporary folder removed at once (its document counts are
    kept; only its fate table is lost with the folder). fates=False (--no-fates): no fate table is made, and
    with it no document counts."""
    if Path(work).is_dir():
        d = Path(work) / f".topology-{w}-work"
        d.mkdir(exist_ok=True)
        out = worker_counts(audit_packer(share, packer, rows, R, B, d, False, user, fates=fates))
        if (d / f"fates_{packer}.parquet").exists():  # the driver gathers the worker streams' fates from here
            out["fates_file"] = str(d / f"fates_{packer}.parquet")
        return out
    with tempfile.TemporaryDirectory(prefix=f"topology-{w}-") as d:
        # the fate table is counted here too: the merged document counts must not depend on which node ran it
        return worker_counts(audit_packer(share, packer, rows, R, B, Path(d), False, user, fates=fates))


def check_rows(rows, W):
    """Each worker stream needs a row of the budget: one line otherwise (the command line asks before any packer
    runs)."""
    if rows < W:
        raise DataError(f"budget of {rows:,} rows is fewer than the {W} worker streams: each needs a row")


def audit_topology(stream, packers, rows, R, B, work, ranks, workers, group=1, refill_docs=128, user=None,
                   engine=None, fates=True, memory=0):
    """summary.json's 'topology': each worker stream's counts and the merged totals, per packer.
    engine: the fan-out engine (fanout/) the (packer, worker stream) audits go through; default, in this
    process one after another. fates=False (--no-fates): no worker stream makes a fate table. memory: the bytes a
    replay of the paper's packers holds at most (Task.memory; a library packer's are not known)."""
    W = worker_streams(ranks, workers)  # the stream was checked for W shares (check_topology) when it was read
    check_rows(rows, W)
    parts, share_rows = shares(stream, W, group, refill_docs), rows_per_stream(rows, W)
    Path(work).mkdir(parents=True, exist_ok=True)
    tasks = [Task(share_counts, (share, p, r, R, B, work, w, user, fates), name=f"{p} worker stream {w}",
                  memory=memory if p in PACKERS else 0)
             for p in packers for w, (share, r) in enumerate(zip(parts, share_rows))]
    got = iter((engine or LocalEngine()).run(tasks))
    per = {}
    for p in packers:
        counts = [next(got) for _ in range(W)]
        per[p] = {"workers": counts, "merged": merge(counts)}
        files = [c.pop("fates_file", None) for c in counts]
        if all(files):
            per[p]["fates_file"] = write_stream_fates(files, Path(work) / f"fates_{p}_streams.parquet").name
    docs = [int(s.n) for s in parts]
    hf = {"hf_later_passes": hf_moved_streams(per, ranks, docs, file_count(stream))} if as_split(group).hf else {}
    return {"ranks": ranks, "loader_workers": workers, "worker_streams": W,
            "split_by": as_split(group).text, "refill_docs": refill_docs,
            "rows_per_stream": share_rows, "documents_per_stream": docs, **hf, "packers": per}


def hf_moved_streams(per, ranks, docs, files):
    """Per packer, the worker streams that read past their first pass where HF datasets would deal the files anew.
    The audit repeats a stream's first-pass share, in order; a loader that re-loops a streaming HF dataset with
    set_epoch (torchtitan 0.3.0) has HF shuffle the files by the epoch first (datasets 4.7.0
    iterable_dataset.py:2503-2505). The epochs a rank reaches: its stream's re-loops with one loader worker; with
    several, their re-loops added up, as they share one epoch counter that each advances (a tensor in shared memory,
    iterable_dataset.py:2183-2192, set in place at :3500-3501): the most it can reach."""
    moved = {}
    for p, c in per.items():
        if any("refused" in w for w in c["workers"]):  # a packer that refused the stream read nothing
            continue
        reloops = [-(-w["sources_arrived"] // n) - 1 for w, n in zip(c["workers"], docs)]
        epochs = [sum(reloops[r::ranks]) for r in range(ranks)]
        moved[p] = [w for w, k in enumerate(reloops) if k > 0 and reshuffles(files, epochs[w % ranks])]
    return moved


def reshuffles(files, epochs):
    """Whether HF's re-loop moves any of `files` shards at one of epochs 1..epochs: it shuffles the list of files with
    np.random.default_rng(epoch) (datasets 4.7.0 utils/sharding.py:76-92), which leaves one file as it is at every
    epoch, and two to four files at some (two at epochs 1 and 2)."""
    for e in range(1, epochs + 1):
        order = list(range(files))
        np.random.default_rng(e).shuffle(order)
        if order != sorted(order):
            return True
    return False


def write_stream_fates(files, path):
    """The worker streams' fate tables as one, in the corpus's document order, with each document's worker stream
    (its arrival numbers, first_arrival and last_arrival, count within that stream). The shares are read whole: memory holds one packer's table for the corpus (a worker stream's own audit follows
    its buffer)."""
    parts = []
    for w, f in enumerate(files):
        t = pq.read_table(f)
        parts.append(t.append_column("worker_stream", pa.array(np.full(t.num_rows, w, np.int32))))
    t = pa.concat_tables(parts, promote_options="permissive")
    t = t.take(pa.compute.sort_indices(t, [("doc", "ascending")]))
    pq.write_table(t, path, compression="zstd")
    return path


def topology_ok(topo):
    """The partition adds up and the Proposition holds (where it applies) in every worker stream (None: no topology)."""
    for p in (topo or {}).get("packers", {}).values():
        for c in p["workers"]:
            if "refused" not in c and (not c["partition_holds"] or c["proposition_held"] is False):
                return False
    return True
