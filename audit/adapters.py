"""Packers to trace: ours, the textbook concatenate-and-chunk, and the libraries researchers use.

Each adapter is a thin function `packer(docs) -> rows` (audit/trace.py) that calls the real
code: our compiled selection core (loaders/core.py) fed one refill at a time, or the library's own
packing function, with the library's defaults wherever it leaves a setting to its caller
(printed in the report as `settings`). A library that is not installed is a one-line error
naming the extra that installs it. Write your own the same way and pass it with
`python -m audit --lengths F --trace MODULE:CALLABLE`.

Token ids: tracer documents start at FIRST_ID; 0 is padding, 1 BOS, 2 EOS (what an adapter
gives a library as its special tokens).
"""
import contextlib
import gzip
import importlib
import importlib.util
import logging
import os
from importlib.metadata import PackageNotFoundError, version
from itertools import islice
from pathlib import Path

import numpy as np

from audit.feed import StreamEnded
from audit.libraries.common import BOS, EOS, EXTRA, FIRST_ID, PAD, Spec, require  # noqa: F401 - re-exported
from audit.libraries.registry import LIBRARY_MODULES as LOADER_MODULES, loader_specs
from errors import DataError
from loaders.core import PACKERS, PackerCore


# ---- ours ----------------------------------------------------------------------------
def ours(packer, R, B, refill_docs=128):
    """The paper's packer `packer` (the code that trains), fed refills of refill_docs as it asks.

    When the documents run out it keeps selecting from what is buffered (B = 1) until the
    buffer is empty: only the fate of tokens after the horizon depends on that. BOS markers
    that segment-first adds are written as minus the id they precede; random spans move the
    source's own first token in front of the span (the paper: the same BOS is retained).
    """
    def run(docs):
        # the tracer's documents come a refill at a time, as the stream is cut; any other iterable in slices
        batches = docs.refill_batches() if hasattr(docs, "refill_batches") else _slices(iter(docs), refill_docs)
        store = {}

        def refills():  # a window of one refill each: the core pulls the next when it needs it
            for batch in batches:
                base = core.next_source
                for j, d in enumerate(batch):
                    store[base + j] = d
                yield np.fromiter((len(d) for d in batch), np.int64, len(batch)), np.array([0, len(batch)]), None

        core = PackerCore.pulling(refills(), packer, R, B)
        while True:
            last = False
            try:
                raw = core.pack_rows(1)
            except StreamEnded as e:
                raw, last = e.events, core.count == 0
                core.B = 1  # drain what is buffered
            if len(raw):
                yield _materialize(raw, store, R, packer)
            if last:
                return
            if len(store) > 4 * (B + refill_docs) + 1024:
                live = set(core.buffered_sources().tolist())
                for s in [s for s in store if s not in live]:
                    del store[s]
    return run


def _slices(it, k):
    while True:
        batch = list(islice(it, k))
        if not batch:
            return
        yield batch


def _materialize(raw, store, R, packer):
    out = np.full(R, PAD, dtype=np.int64)
    p = 0
    for src, start, em, _d, _k, lead in raw.tolist():
        d = store[src]
        if lead:
            out[p] = d[0] if packer == "random_span" else -d[start]
            out[p + 1:p + em] = d[start:start + em - 1]
        else:
            out[p:p + em] = d[start:start + em]
        p += em
    return out


def concat_chunk(R):
    """Concatenate the documents and cut rows of R tokens (Megatron, LitData, OLMo's FSL dataset)."""
    def run(docs):
        rest = np.zeros(0, np.int64)
        for d in docs:
            rest = np.concatenate([rest, d])
            while len(rest) >= R:
                yield rest[:R]
                rest = rest[R:]
        if len(rest):
            yield rest
    return run




# ---- Hugging Face TRL -----------------------------------------------------------------
TRL_MAP_BATCH = 1000  # datasets' map() default batch size, which pack_dataset leaves to its caller


def trl(strategy, R):
    """TRL's pack_dataset(dataset, seq_length=R, strategy) on a lazily read IterableDataset: the
    packing runs per map() batch of TRL_MAP_BATCH documents (the default), as in training."""
    data_utils = require("trl.data_utils", f"trl_{strategy}")
    datasets = require("datasets", f"trl_{strategy}")

    def run(docs):
        feats = datasets.Features({"input_ids": datasets.Sequence(datasets.Value("int64"))})
        ds = datasets.IterableDataset.from_generator(lambda: ({"input_ids": d.tolist()} for d in docs), features=feats)
        # rows as numpy arrays (a trainer would ask for torch tensors): no per-token Python objects
        for ex in data_utils.pack_dataset(ds, seq_length=R, strategy=strategy).with_format("numpy"):
            yield ex["input_ids"]
    return run


# ---- OLMo-core ------------------------------------------------------------------------
def olmo_capacity(R):
    """OLMo's packed dataset needs a power-of-two sequence length: the largest one <= R."""
    return 1 << (int(R).bit_length() - 1)


def olmo(strategy, R, workdir):
    """OLMo-core's NumpyPackedFSLDataset (optimized best-fit decreasing per source file) over the
    documents written as one token file, with their boundaries in its metadata file (so no EOS is
    needed in the tracer's tokens); instances read in index order, padding as it pads."""
    nd = require("olmo_core.data.numpy_dataset", f"olmo_{strategy}")
    types = require("olmo_core.data.types", f"olmo_{strategy}")

    def run(docs):
        d = Path(workdir)
        d.mkdir(parents=True, exist_ok=True)
        path = d / "tracer_00000.npy"
        start = 0
        with open(path, "wb") as f, gzip.open(d / "tracer_00000.csv.gz", "wt") as meta:
            for doc in docs:
                doc.astype(np.uint64).tofile(f)
                meta.write(f"{start},{start + len(doc)},{start}\n")
                start += len(doc)
        ds = nd.NumpyPackedFSLDataset(str(path.resolve()), sequence_length=olmo_capacity(R), pad_token_id=PAD,
                                      eos_token_id=EOS, vocab_size=2**62, dtype=np.uint64,
                                      long_doc_strategy=types.LongDocStrategy(strategy), use_array_if_local=False)
        ds.work_dir = d / "work"
        with one_prep_worker():
            ds.prepare()
        for i in range(len(ds)):
            yield ds[i]["input_ids"]
    return run


@contextlib.contextmanager
def one_prep_worker():
    """OLMO_DATA_PREP_WORKERS=1 for the block, unless the user set it: OLMo-core packs each source file in a process
    pool of one worker per core by default (numpy_dataset.py, _get_data_prep_max_workers), and the tracer writes one
    file, so every other worker was a fork of this process that never ran a task (two here, 64 on a 64-core node)."""
    key = "OLMO_DATA_PREP_WORKERS"
    ours = key not in os.environ
    if ours:
        os.environ[key] = "1"
    try:
        yield
    finally:
        if ours:
            os.environ.pop(key, None)


# ---- torchtune ------------------------------------------------------------------------
def _skips_cpp_extensions(record):
    """The locked torchao (torchtune imports it) logs once that it skips its C++ extensions under this torch;
    the packers never use them (requirements-audit.lock says why this pair), so that one line is dropped."""
    return not record.getMessage().startswith("Skipping import of cpp extensions")


def _quiet_packing_bar(packed_module):
    """torchtune's PackedDataset draws its own "Packing dataset" bar on rank 0 (tqdm imported by name into
    its module); the audit draws its own progress, so the library's is built disabled."""
    bar = packed_module.tqdm
    if not getattr(bar, "packaudit_quiet", False):
        def quiet(*args, **kwargs):
            return bar(*args, **{**kwargs, "disable": True})
        quiet.packaudit_quiet = True
        packed_module.tqdm = quiet


def _text_completion_sample(doc, R):
    """TextCompletionDataset: encode with add_eos (True by default), then cut to max_seq_len - 1 with no EOS put
    back (torchtune 0.6.1 datasets/_text_completion.py:46, 68, 71-72); the tail is never seen by the packer."""
    return (doc.tolist() + [EOS])[:R - 1]


def _chat_sample(doc, R):
    """The chat path: the end tokens appended, then cut to max_seq_len with the last token made EOS
    (models/llama3/_tokenizer.py:320-328; data/_utils.py:41-43). The template's header tokens are left out."""
    tokens = (doc.tolist() + [EOS])[:R]
    tokens[-1] = EOS
    return tokens


# path -> (how its tokenizer cuts a sample, the split_across_pack PackedDataset gets on that path)
TORCHTUNE_PATHS = {"text": (_text_completion_sample, True),  # text_completion_dataset default (:86, :166)
                   "chat": (_chat_sample, False)}  # chat_dataset passes none: PackedDataset's default (_packed.py:90)


def torchtune(path, R):
    """torchtune's packed dataset with the tokenizer's max_seq_len = R, which packed=True requires
    (_text_completion.py:160-165, _chat.py:181-186): every sample is cut by the tokenizer first (so PackedDataset's
    refusal of a sample longer than R, _packed.py:130-133, is never reached), then the real
    PackedDataset(max_seq_len=R, padding_idx=0) packs them greedily in order at construction."""
    logging.getLogger("torchao").addFilter(_skips_cpp_extensions)  # adding the same filter twice keeps one
    packed = require("torchtune.datasets", f"torchtune_{path}")
    _quiet_packing_bar(importlib.import_module("torchtune.datasets._packed"))
    cut, split = TORCHTUNE_PATHS[path]

    def run(docs):
        samples = [{"tokens": tokens, "labels": tokens} for tokens in (cut(d, R) for d in docs)]
        for pack in packed.PackedDataset(samples, max_seq_len=R, padding_idx=PAD, split_across_pack=split):
            yield pack["tokens"]
    return run


# ---- torchtitan -----------------------------------------------------------------------
def _tracer_ran_out(record):
    """torchtitan warns on the root logger when a dataset ends; the tracer stream ending is the audit's
    plan, not news, so that one line is dropped (every other record passes)."""
    return "packing_audit_tracer has run out of data" not in record.getMessage()


def titan_concat(R):
    """torchtitan's HuggingFaceTextDataset (concatenate, then split into seq_len = R - 1 inputs; each
    document's tokens shifted within it, an EOS appended), over the tracer documents as a registered
    dataset and a tokenizer that returns them."""
    text = require("torchtitan.hf_datasets.text_datasets", "titan_concat")
    hf = require("torchtitan.hf_datasets", "titan_concat")
    tok = require("torchtitan.components.tokenizer", "titan_concat")
    datasets = require("datasets", "titan_concat")
    logging.getLogger().addFilter(_tracer_ran_out)  # torchtitan's logger is the root logger; one filter kept

    class Passthrough(tok.BaseTokenizer):
        def __init__(self):
            super().__init__()
            self.eos_id = EOS

        def encode(self, ids, add_bos=True, add_eos=True):
            return list(ids) + ([EOS] if add_eos else [])

        def decode(self, ids):
            return " ".join(map(str, ids))

        def get_vocab_size(self):
            return 2**62

    def run(docs):
        feats = datasets.Features({"text": datasets.Sequence(datasets.Value("int64"))})
        ds = datasets.IterableDataset.from_generator(lambda: ({"text": d.tolist()} for d in docs), features=feats)
        text.DATASETS["packing_audit_tracer"] = hf.DatasetConfig(path="tracer", loader=lambda _p: ds,
                                                                  sample_processor=lambda s: s["text"])
        for inputs, _labels in text.HuggingFaceTextDataset("packing_audit_tracer", None, Passthrough(), seq_len=R - 1):
            yield inputs["input"]
    return run


TITAN_BUFFER, TITAN_BATCH = 100, 8  # MMSamplePacker's defaults


def titan_first_fit(R):
    """torchtitan's sample packer (MMSamplePacker: first fit over a buffer of 100 samples, batches of 8,
    max_seq_length = R; a buffer whose samples all exceed R is dropped), flushed at the end."""
    packing = require("torchtitan.hf_datasets.multimodal.utils.packing", "titan_first_fit")
    # late: only this packer hands torch tensors to its library; the audit itself runs without torch
    import torch

    def run(docs):
        p = packing.MMSamplePacker(max_seq_length=R, buffer_size=TITAN_BUFFER, batch_size=TITAN_BATCH)
        for d in docs:
            t = torch.from_numpy(d)
            p.add_sample({"input_ids": t, "labels": t, "positions": torch.arange(len(d))})
            while p.has_batch_ready():
                for s in p.get_next_batch():
                    yield s["input_ids"]
        p.flush()
        while p.packed_samples:
            yield p.packed_samples.popleft()["input_ids"]
    return run


# ---- the registry ---------------------------------------------------------------------
def _specs():
    trl_set = {"map batch_size": f"{TRL_MAP_BATCH} (the datasets default)", "dataset": "IterableDataset, read lazily",
               "row order": "as packed (a trainer's sampler may shuffle)"}
    olmo_set = {"sequence_length": "largest power of two <= R", "source_group_size": "1 (the default)",
                "source files": "one file holding the stream", "boundaries": "the metadata file (use_array_if_local=False)",
                "instance order": "index order (OLMo's data loader shuffles instances per epoch)"}
    tune_set = {"padding_idx": PAD, "max_packs": "None (the default)", "row order": "as packed"}
    no_sel = "no buffered selection (documents are cut in arrival order), so nothing waits by length"
    return {s.name: s for s in (
        Spec("concat_chunk", lambda R, B, w: concat_chunk(R), why_not=no_sel),
        Spec("trl_bfd", lambda R, B, w: trl("bfd", R), "trl", settings=trl_set,
             why_not="best-fit decreasing within each map batch (no minimum buffer), after truncating long "
                     "sequences to R (pre-truncation)"),
        Spec("trl_bfd_split", lambda R, B, w: trl("bfd_split", R), "trl", settings=trl_set,
             why_not="long sequences are split into R-token pieces before packing (pre-segmentation)"),
        Spec("trl_wrapped", lambda R, B, w: trl("wrapped", R), "trl", settings=trl_set, why_not=no_sel),
        Spec("olmo_truncate", lambda R, B, w: olmo("truncate", R, w), "ai2-olmo-core", olmo_capacity, olmo_set,
             why_not="best-fit decreasing over the whole source file after truncating long documents (pre-truncation)"),
        Spec("olmo_fragment", lambda R, B, w: olmo("fragment", R, w), "ai2-olmo-core", olmo_capacity, olmo_set,
             why_not="long documents are fragmented to the sequence length first (pre-segmentation)"),
        Spec("torchtune_text", lambda R, B, w: torchtune("text", R), "torchtune",
             settings={**tune_set, "dataset": "text_completion_dataset(packed=True), tokenizer max_seq_len = R",
                       "sample": "document + EOS, cut to R - 1 tokens (the tail discarded)",
                       "split_across_pack": "True (the default)"},
             why_not="long documents truncated to R - 1 by the tokenizer (pre-truncation), then concatenated in "
                     "arrival order and split across packs, so nothing waits by length"),
        Spec("torchtune_chat", lambda R, B, w: torchtune("chat", R), "torchtune",
             settings={**tune_set, "dataset": "chat_dataset(packed=True), tokenizer max_seq_len = R",
                       "sample": "document + EOS, cut to R tokens, the last made EOS (no template headers)",
                       "split_across_pack": "False (the default)"},
             why_not="long documents truncated to R by the tokenizer (pre-truncation), then packed whole, greedy in "
                     "arrival order"),
        Spec("titan_concat", lambda R, B, w: titan_concat(R), "torchtitan", lambda R: R - 1,
             {"seq_len": "R - 1 inputs (each document shifted within itself, EOS appended)"}, why_not=no_sel),
        Spec("titan_first_fit", lambda R, B, w: titan_first_fit(R), "torchtitan",
             settings={"buffer_size": f"{TITAN_BUFFER} (the default)", "batch_size": f"{TITAN_BATCH} (the default)"},
             why_not="first fit over a small buffer with no shortest-span fallback; a buffer holding only "
                     "over-length samples is dropped"),
    )} | loader_specs()  # Megatron-Core, Grain, llm-foundry, LLaMA-Factory, axolotl (audit/libraries/)


SPECS = _specs()
LIBRARY_MODULES = {"trl": "trl", "ai2-olmo-core": "olmo_core", "torchtune": "torchtune", "torchtitan": "torchtitan",
                   **LOADER_MODULES}


def check_own_name(name, where=""):
    """A packer of the researcher's own under a name the audit has for one of its own (the paper's four, a library's)
    would be replaced by that one, silently: refused."""
    if name in PACKERS or name in SPECS:
        whose = "the paper's" if name in PACKERS else "a library's"
        raise DataError(f"{where}{name!r} is the name of a packer the audit has ({whose}): rename your packer, whose "
                        "name names its rows in the report and files")


def installed(spec) -> bool:
    """Whether the library a spec drives imports here (cheap: the module is found, not imported)."""
    return not spec.library or importlib.util.find_spec(LIBRARY_MODULES[spec.library]) is not None


def library_version(spec):
    if not spec.library:
        return None

    try:
        return version(spec.library)
    except PackageNotFoundError:
        return None


def user_spec(target, args):
    """--trace MODULE:CALLABLE: the researcher's own packer, called as CALLABLE(docs, **args)."""
    mod, _, fn = target.partition(":")
    if not mod or not fn:
        raise DataError(f"--trace {target!r}: expected MODULE:CALLABLE (e.g. mypackers:pack)")
    try:
        f = getattr(importlib.import_module(mod), fn)
    except Exception as e:  # no such module or name, or the module's own error (a SyntaxError, a raise at import)
        raise DataError(f"--trace {target!r}: cannot load it ({type(e).__name__}: {e})") from None
    if not callable(f):  # refused here, not found while the stream is traced
        raise DataError(f"--trace {target!r}: {mod}.{fn} is a {type(f).__name__}, not a callable packer(docs, **args)")
    check_own_name(fn, f"--trace {target!r}: ")
    return Spec(fn, lambda R, B, w: (lambda docs: f(docs, **args)), settings={k: repr(v) for k, v in args.items()},
                why_not="its rule is unknown to the audit: the Proposition is not checked")
