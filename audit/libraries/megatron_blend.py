"""Megatron-Core's BlendedDataset (megatron-core 0.16.1) over datasets of tracer documents: one dataset per
label of the stream (each --corpus input is one), drawn by --loader-arg weights.

What its code does (megatron/core/datasets/, megatron-core 0.16.1): with weights, each dataset's GPTDataset is
built for ceil(ceil(budget * weight) * (1 + surplus)) samples, surplus 0.005 (blended_megatron_dataset_builder.py:
176-181, 571-577); the blend is sum(ceil(budget * weight)) samples long (:193-196) and takes, sample after sample,
the dataset whose drawn count lags its weight most (helpers.cpp:77-135, build_blending_indices), each dataset's
samples in its own shuffled order. Without weights, each dataset is one epoch and the blend draws by dataset
size, at most their sum (:197-209). Every dataset has its own epochs, 80% rule and shuffle (audit/libraries/
megatron.py), so one dataset may be read three times while another is read once.

The audit therefore traces one stream laid out as Megatron reads it: the corpus's pass (every document's first
epoch), then each later epoch of each dataset that builds one; document d's k-th epoch is its arrival k. The
fate table is folded back to one row per document. The report's 'loader' block gives per dataset its weight,
the samples built, drawn by the budget and in all (the 0.5% surplus is built and never drawn), the epochs built
against the epochs its target alone would need, the documents started and never drawn, and its share of the
emitted tokens against its weight.
"""
import dataclasses
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from audit.fate_table import FateTable
from audit.libraries.args import value
from audit.libraries.common import FIRST_ID, Spec
from audit.libraries.megatron import (SampleIds, build, check_splits, config, epochs, megatron, samples_in,
                                     write_dataset)
from audit.spill import Folder
from audit.tally import NONE


def datasets_of(stream):
    """(names, each dataset's document numbers): the stream's labels in order of first appearance."""
    labels = np.asarray(["all"] * stream.n if stream.labels is None else stream.labels, dtype=object).astype(str)
    names, first, inv = np.unique(labels, return_index=True, return_inverse=True)
    order = np.argsort(first)
    return [str(names[k]) for k in order], [np.flatnonzero(inv.reshape(-1) == k) for k in order]


def layout(stream, members, E):
    """The stream Megatron reads: the pass, then epoch e >= 1 of each dataset with more than e epochs (its
    documents in corpus order). Returns each place's document and epoch."""
    docs, ep = [np.arange(stream.n)], [np.zeros(stream.n, np.int64)]
    for e in range(1, max(E, default=1)):
        more = np.sort(np.concatenate([m for m, k in zip(members, E) if k > e]))
        docs.append(more)
        ep.append(np.full(len(more), e, np.int64))
    return np.concatenate(docs), np.concatenate(ep)


def shifts(stream, members, E, doc, ep):
    """Per dataset, (E_j, n_j): where document d's epoch k starts in the laid-out stream, less where its first
    epoch starts (the ids the dataset's .bin holds)."""
    L = np.asarray(stream.lengths, np.int64)[doc]
    start = np.cumsum(L) - L
    at = np.zeros((max(E, default=1), stream.n), np.int64)
    at[ep, doc] = start
    return [at[:k, m] - at[0, m] for m, k in zip(members, E)]


def blend_audit(stream, name, rows, R, B, work, csv=False, progress=None, fates=True, run=None):
    """megatron_blend's audit: the blend built by Megatron's builder, then one trace of the stream as it reads it."""
    try:
        plan = prepare(stream, rows, R, Path(work) / f".{name}-work")
    except Exception as e:  # a library refusing this stream is a finding about it, as for a traced packer
        return {"packer": name, "refused": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    doc, ep = plan["doc"], plan["epoch"]
    index = None if stream.index is None else stream.index.subset(doc)
    laid = dataclasses.replace(stream, name=f"{stream.name} as megatron_blend reads it", lengths=stream.lengths[doc],
                               refills=np.append(np.arange(0, len(doc), 128), len(doc)), passes=1, index=index,
                               labels=None if stream.labels is None else np.asarray(stream.labels, object)[doc])
    inner = Spec(name, lambda R_, B_, w: packer(plan, len(doc)), "megatron-core", lambda r: r - 1, SETTINGS, WHY_NOT)
    s = run(laid, name, rows, R, B, work, csv, inner, progress, fates)
    if "refused" in s:
        return s
    s["passes_started"] = int(max(plan["E"]))
    if s.get("fates_file"):
        s["documents"] = fold_fates(Path(work) / s["fates_file"], stream, doc, ep, s["row_capacity"])
    s["loader"] = {**plan["facts"], "datasets": dataset_table(plan, rows, Path(work) / s.get("fates_file", ""),
                                                             stream)}
    return s


def prepare(stream, rows, R, work):
    """Each dataset's .bin (its documents' first-arrival tracer ids), the blend as Megatron builds it, the layout."""
    names, members = datasets_of(stream)
    if len(names) < 2:
        raise ValueError("the stream has one dataset; a blend needs two or more (one per label: several --corpus "
                         "inputs, or a label column); audit one with megatron_gpt")
    weights = value(stream.loader_args, "weights")
    split = value(stream.loader_args, "split")
    for name, m in zip(names, members) if weights else ():  # weights: every split asked for samples, 0 included
        check_splits(len(m), split, (True, True, True), name)
    L = np.asarray(stream.lengths, np.int64)
    start = FIRST_ID + np.cumsum(L) - L
    prefixes = [write_dataset(work / f"d{j}_text_document", [np.arange(start[d], start[d] + L[d]) for d in m.tolist()])
                for j, m in enumerate(members)]
    try:
        blend = build(config(prefixes, weights, R - 1, stream.loader_args, value(stream.loader_args, "surplus")), rows)
    except AssertionError:  # megatron-core asserts without a message; say which of its asserts a small corpus meets
        raise ValueError(f"megatron-core refused the blend: a dataset's validation or test share at split {split} "
                         "holds no sample, and a blend weight must be positive (blended_dataset.py:52); a larger "
                         "corpus, or --loader-arg split=100,0,0, trains every document") from None
    E = [epochs(ds) for ds in blend.datasets]
    doc, ep = layout(stream, members, E)
    return {"names": names, "members": members, "blend": blend, "E": E, "doc": doc, "epoch": ep, "weights": weights,
            "shift": shifts(stream, members, E, doc, ep),
            "facts": {"library": "megatron-core", "seq_length": R - 1, "seed": value(stream.loader_args, "seed"),
                      "split": split, "blend_samples": int(len(blend)),
                      "surplus": value(stream.loader_args, "surplus") if weights else None,
                      "passes_limit_ignored": stream.passes is not None}}


def packer(plan, n):
    """The rows: the blend's samples in its order, each dataset's inputs as tracer ids of their epoch."""
    blend = plan["blend"]

    def run(docs):
        it = iter(docs)
        for _ in range(n):  # every epoch of every dataset is in the index before the first sample
            next(it)
        ids = [SampleIds(ds, sh) for ds, sh in zip(blend.datasets, plan["shift"])]
        for k in range(len(blend)):
            sample = blend[k]
            yield ids[int(sample["dataset_id"])](int(blend.dataset_sample_index[k]), sample)
    return run


def fold_fates(path, stream, doc, ep, R):
    """The laid-out stream's fate table (one row per document epoch) folded into one row per document: epoch k of
    document d is its arrival k * n + d, as for a stream read k + 1 times."""
    t = pq.read_table(path).to_pydict()
    fate = np.asarray(t["fate"], dtype=object)
    n = stream.n

    def col(k, none):
        return np.asarray([none if v is None else v for v in t[k]], np.int64)

    table = FateTable(Folder(path.parent, "blend-fold"), n)
    table.add({"id": doc + n * ep, "own": col("emitted", 0), "disc": col("discarded", 0), "len": col("length", 0),
               "nev": np.isin(fate, ("whole", "partial")).astype(np.int64), "t0": col("first_target", NONE),
               "pmin": col("first_position", NONE), "pmax": col("last_position", -1)})
    try:
        return table.write(path, stream.index, R)
    finally:
        table.spill.folder.close()


def dataset_table(plan, rows, fates_path, stream):
    """Per dataset: weight, samples built / drawn / surplus, epochs, documents started and never drawn, and its
    share of the emitted tokens against its weight."""
    blend, names, weights = plan["blend"], plan["names"], plan["weights"]
    m = megatron()
    drawn_all = np.bincount(np.asarray(blend.dataset_index, np.int64), minlength=len(names))
    drawn = np.bincount(np.asarray(blend.dataset_index[:rows], np.int64), minlength=len(names))
    w = np.asarray(blend.weights, np.float64)
    w = w / w.sum()
    sizes = m.blended_megatron_dataset_builder._get_size_per_split_per_dataset  # the builder's own arithmetic
    target = [int(x[0]) for x in sizes(w.tolist(), [rows, 0, 0])] if weights else [None] * len(names)
    per = per_dataset_fates(fates_path, plan["members"], stream)
    total = sum(p["emitted"] for p in per) or 1
    out = []
    for j, (ds, name) in enumerate(zip(blend.datasets, names)):
        out.append({"dataset": name, "weight": float(w[j]), "documents": int(len(plan["members"][j])),
                    "samples_target": target[j], "samples_built": int(len(ds)),
                    "samples_drawn_by_budget": int(drawn[j]), "samples_drawn": int(drawn_all[j]),
                    "samples_never_drawn": int(len(ds) - drawn_all[j]), "epochs": int(plan["E"][j]),
                    "epochs_without_surplus": None if target[j] is None else epochs_for(ds, target[j]),
                    **per[j], "emitted_share": per[j]["emitted"] / total})
    return out


def epochs_for(ds, samples):
    """The epochs Megatron's rule gives a dataset asked for `samples` (gpt_dataset.py:617-638), on the built one."""
    k = 1
    while samples_in(ds, k) < samples:
        k += 1
    return k


def per_dataset_fates(path, members, stream):
    """Per dataset: documents by fate at the horizon and the tokens they emitted, from the folded fate table."""
    if not Path(path).is_file():
        return [{"started": None, "never_drawn": None, "emitted": 0} for _ in members]
    t = pq.read_table(path, columns=["doc", "fate", "emitted"]).to_pydict()
    doc, fate = np.asarray(t["doc"], np.int64), np.asarray(t["fate"], dtype=object)
    emitted = np.asarray(t["emitted"], np.int64)
    at = np.empty(stream.n, np.int64)
    at[doc] = np.arange(len(doc))
    out = []
    for m in members:
        f = fate[at[m]]
        out.append({"started": int(np.isin(f, ("whole", "partial")).sum()),
                    "never_drawn": int((f == "dropped").sum()), "emitted": int(emitted[at[m]].sum())})
    return out


SETTINGS = {"blend": "one dataset per label, in order of first appearance", "row": "a sample's seq_length inputs",
            "rows": "the blend's samples in its order; after them nothing (a dataset's surplus samples are never "
                    "drawn)",
            "at the horizon": "the budget is the blend's first samples, each a random window of its dataset's shuffled "
                              "index; a document read in two epochs arrives twice; windows no blend sample draws, and "
                              "tokens in no window, are discarded"}
WHY_NOT = ("no buffered selection: windows of seq_length + 1 tokens over shuffled documents, never cropped; "
           "a blend of datasets each with its own epochs")
