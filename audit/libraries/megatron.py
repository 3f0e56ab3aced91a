"""Megatron-Core's GPTDataset (megatron-core 0.16.1, what Megatron-LM and NeMo 2 train with; not nanotron, whose
Nanoset slices windows per file with no document shuffle and no 80% rule, and repeats one permutation every epoch),
run over an indexed dataset (.bin/.idx) of tracer documents: its own builder, indices and samples.

What its code does with the documents (megatron/core/datasets/, megatron-core 0.16.1):
- the train split is the first share of the documents by the split string
  (blended_megatron_dataset_builder.py:469-472); the rest is never trained;
- num_epochs: the fewest epochs whose tokens cover num_samples * seq_length + 1 (gpt_dataset.py:617-638);
- the document index: every epoch's document ids shuffled together by RandomState(seed)
  (gpt_dataset.py:496-502, 640-671), except that a last epoch supplying under 80% of an epoch's samples is
  shuffled on its own (gpt_dataset.py:457-482): only a random subset of its documents is ever trained;
- samples: windows of seq_length + 1 tokens over the documents concatenated in that order, each starting at
  the last token of the one before (helpers.cpp:145-230): a document is never cropped, it carries into the
  next sample; the last partial sample is dropped (helpers.cpp:173-174);
- the samples are shuffled (gpt_dataset.py:536-543, 674-703) and the run trains the first num_samples.

A row here is a sample's seq_length inputs (`tokens`, gpt_dataset.py:242): consecutive samples' inputs are
disjoint, the label-only last token is the next sample's first input. The loader's rows are its whole index
(len(dataset)): a window after the budget's num_samples is "buffered" (built, not yet trained); a token in no
window (the dropped partial sample, the held-out split) is discarded. Epoch k of document d is its arrival k:
the k-th place the document takes in the document index.
"""
import importlib
import importlib.machinery
import importlib.util
import logging
import os
import sys
import types
from pathlib import Path

import numpy as np

from audit.libraries.args import value
from audit.libraries.common import EOS, PAD, take

SEPARATE_FINAL_EPOCH = 0.80  # gpt_dataset.py:477, quoted in the report's facts


def installed_root(locations):
    """The installed megatron package's folder among the namespace package's portions: a folder named megatron in
    the working folder (where the README puts a Megatron corpus) is a portion too, and comes first on the path."""
    root = next((p for p in locations if os.path.isdir(os.path.join(p, "core", "datasets"))), None)
    if root is None:
        raise ImportError("megatron-core's megatron/core/datasets is on no path", name="megatron.core")
    return root


def megatron():
    """megatron-core's dataset modules. megatron/core/__init__.py imports the model-parallel code (about 10 s,
    none of it used here), so when the package is not imported yet its two package modules are stand-ins that
    only give the path, and the dataset modules load alone; they stay (GPTDataset imports helpers late)."""
    if "megatron.core" not in sys.modules:
        root = installed_root(importlib.util.find_spec("megatron").submodule_search_locations)
        for name, path in (("megatron", root), ("megatron.core", os.path.join(root, "core"))):
            stub = types.ModuleType(name)
            stub.__path__ = [path]
            stub.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)  # find_spec() reads it
            stub.__spec__.submodule_search_locations = [path]
            sys.modules[name] = stub
        importlib.import_module("megatron.core.parallel_state")  # first: its circle with core.utils then closes
    logging.getLogger("megatron.core").setLevel(logging.ERROR)  # its INFO lines narrate every index it builds
    mods = ("gpt_dataset", "blended_megatron_dataset_builder", "blended_megatron_dataset_config", "indexed_dataset",
            "helpers", "blended_dataset")
    return types.SimpleNamespace(**{m: importlib.import_module(f"megatron.core.datasets.{m}") for m in mods})


class TracerTokenizer:
    """What a GPTDatasetConfig asks of a tokenizer: EOD and padding ids, a vocab size (None: any dtype), and
    identifiers for the index cache's hash."""
    vocab_size = None
    eod = eos = EOS
    pad = PAD
    unique_identifiers = {"class": "packing-audit tracer"}


def write_dataset(prefix, docs):
    """docs (token arrays) as a Megatron indexed dataset PREFIX.bin/.idx, one sequence per document, written by
    megatron-core's own IndexedDatasetBuilder."""
    m = megatron()
    top = max((int(d.max()) for d in docs if len(d)), default=0)
    dtype = np.int32 if top < np.iinfo(np.int32).max else np.int64
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    b = m.indexed_dataset.IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    for d in docs:
        b.add_document(d, [len(d)])
    b.finalize(f"{prefix}.idx")
    return str(prefix)


def config(prefixes, weights, seq, args, surplus=None):
    """The GPTDatasetConfig of a run over `prefixes`. No path_to_cache: each GPTDataset keeps its indices beside
    its prefix (gpt_dataset.py:401-404), and a BlendedDataset builds its own without asking torch.distributed
    for a rank, which it does when a cache folder is given (blended_dataset.py:148)."""
    m = megatron()
    kw = {} if surplus is None else {"mid_level_dataset_surplus": surplus}
    return m.gpt_dataset.GPTDatasetConfig(
        random_seed=value(args, "seed"), sequence_length=seq, blend=(list(prefixes), weights),
        split=value(args, "split"), tokenizer=TracerTokenizer(), reset_position_ids=False, reset_attention_mask=False,
        eod_mask_loss=False, create_attention_mask=False, **kw)


SPLITS = ("train", "validation", "test")


def check_splits(n, split, sized, dataset=None):
    """Refuses (ValueError) a split megatron-core would build with no document while asked for samples (`sized`:
    which of train, validation, test get a sample count): its epoch loop (gpt_dataset.py:634-636) adds epochs of
    no token until they cover the samples asked for (one token even for none), so the build never ends. The split's
    documents are counted as its builder counts them (blended_megatron_dataset_builder.py:469-472)."""
    c = megatron().blended_megatron_dataset_config
    matrix = c.convert_split_vector_to_split_matrix(c.parse_and_normalize_split(split))
    for name, span, asked in zip(SPLITS, matrix, sized):
        if asked and span is not None and int(round(span[1] * n)) == int(round(span[0] * n)):
            of = f"dataset {dataset!r}" if dataset is not None else "the stream"
            raise ValueError(f"{of} has {n} documents, so its {name} share at split {split} holds none, and "
                             f"megatron-core would never finish building it (its epoch loop, gpt_dataset.py:634-636, "
                             f"waits for tokens an empty split never gives); a larger corpus or another "
                             f"--loader-arg split (e.g. 100,0,0) avoids it")


def build(cfg, samples):
    """The train split as megatron-core's BlendedMegatronDatasetBuilder builds it for `samples` samples. The
    validation and test splits are built too, for no samples where weights need a size for every split
    (blended_megatron_dataset_builder.py:72-75), else as one epoch."""
    m = megatron()
    rest = 0 if cfg.blend[1] is not None else None
    train, _valid, _test = m.blended_megatron_dataset_builder.BlendedMegatronDatasetBuilder(
        m.gpt_dataset.GPTDataset, [samples, rest, rest], lambda: True, cfg).build()
    return train


def epochs(ds):
    """The epochs a GPTDataset built (its own rule, gpt_dataset.py:617-638)."""
    return ds._get_num_epochs(ds._get_num_tokens_per_epoch())


def samples_in(ds, passes):
    """The most samples `passes` epochs of a GPTDataset's train documents give (helpers.cpp:174)."""
    return max(0, (passes * ds._get_num_tokens_per_epoch() - ds.config.add_extra_token_to_sequence)
               // ds.config.sequence_length)


def occurrences(document_index):
    """The epoch of each place of the document index: the k-th place a document takes is its epoch k."""
    d = np.asarray(document_index, np.int64)
    order = np.argsort(d, kind="stable")
    s = d[order]
    first = np.r_[0, np.flatnonzero(np.diff(s)) + 1] if len(s) else np.zeros(0, np.int64)
    group = np.repeat(first, np.diff(np.r_[first, len(s)]))
    occ = np.empty(len(d), np.int64)
    occ[order] = np.arange(len(d)) - group
    return occ


class SampleIds:
    """A GPTDataset's samples as tracer ids. Its .bin holds each document's first arrival; `shift[k, d]` is how
    far arrival k of document d lies from it in the tracer stream, so every place of the document index gets
    the shift of its epoch."""

    def __init__(self, ds, shift):
        self.ds, self.seq = ds, ds.config.sequence_length
        doc = np.asarray(ds.document_index, np.int64)
        self.place_shift = np.asarray(shift, np.int64)[occurrences(doc), doc] if len(doc) else doc
        self.sizes = np.asarray(ds.dataset.sequence_lengths, np.int64)[doc]
        self.plain = not self.place_shift.any()

    def __call__(self, i, sample=None):
        """The inputs of sample i (in the shuffled order the run reads) as tracer ids; sample: what the dataset
        gave for it, where a BlendedDataset read it."""
        tokens = (self.ds[i] if sample is None else sample)["tokens"].numpy()
        if self.plain:
            return tokens
        s = int(self.ds.shuffle_index[i])
        (p0, o0), (p1, _) = self.ds.sample_index[s], self.ds.sample_index[s + 1]
        parts = self.sizes[p0:p1 + 1].copy()
        parts[0] -= o0
        return tokens + np.repeat(self.place_shift[p0:p1 + 1], parts)[:self.seq]


def gpt_facts(ds, plan, passes_cap):
    """What the report says of the index built: epochs, samples, the 80% rule, the split."""
    E, seq = epochs(ds), ds.config.sequence_length
    per_epoch = samples_in(ds, 1)
    from_final = ds.num_samples - samples_in(ds, E - 1) if E > 1 else None
    return {"library": "megatron-core", "seq_length": seq, "seed": ds.config.random_seed, "split": ds.config.split,
            "train_documents": int(len(ds.indices)), "held_out_documents": int(plan.n - len(ds.indices)),
            "num_samples": int(ds.num_samples), "samples_built": int(len(ds)), "epochs": int(E),
            "samples_per_epoch": int(per_epoch), "samples_from_final_epoch": from_final,
            "final_epoch_shuffled_alone": bool(E > 1 and from_final < int(SEPARATE_FINAL_EPOCH * per_epoch)),
            "capped_by_passes": passes_cap}


def gpt(R, workdir, plan):
    """megatron_gpt: GPTDataset(num_samples = the budget's rows, seq_length = R - 1) over the stream's documents."""
    seq = R - 1

    def run(docs):
        it = iter(docs)
        check_splits(plan.n, value(plan.args, "split"), (True, False, False))  # validation, test: built unsized
        prefix = write_dataset(Path(workdir) / "tracer_text_document", take(it, plan.n))
        cfg = config([prefix], None, seq, plan.args)
        ds, cap = build(cfg, plan.rows), None
        if plan.passes is not None and epochs(ds) > plan.passes:  # --passes: the epochs the stream gives
            cap = plan.passes
            ds = build(cfg, min(plan.rows, samples_in(ds, cap)))
        E = epochs(ds)
        plan.facts.update(gpt_facts(ds, plan, cap))
        for _ in range(E - 1):  # the later epochs arrive as the stream's later passes
            take(it, plan.n)
        ids = SampleIds(ds, np.arange(E, dtype=np.int64)[:, None] * plan.tokens + np.zeros((1, plan.n), np.int64))
        for i in range(len(ds)):
            yield ids(i)
    return run
