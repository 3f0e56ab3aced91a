"""MaxText's Grain pretraining pipeline: grain 0.2.18's own packing datasets (FirstFitPackIterDataset,
BestFitPackIterDataset, ConcatThenSplitIterDataset) over the tracer documents, after MaxText's tokenizer step.

What MaxText does before packing (AI-Hypercomputer/maxtext at e591f30, src/maxtext/):
- the tokenizer adds an EOS to every document (configs/base.yml:723 add_eos: true; its BOS is the document's
  own first token here, as the audit counts lengths);
- use_truncation: true by default (configs/base.yml:728): TokenizeAndTrim keeps each document's first
  max_target_length tokens and throws the tail away (input_pipeline/grain_tokenizer.py:78); with it off,
  TokenizeAndChunk splits a document into pieces of max_target_length (grain_tokenizer.py:99-114)
  (input_pipeline/grain_data_processing.py:293-296). This step is MaxText's rule, written here, not its code;
- packing (input_pipeline/data_processing_utils.py:94-114): grain_packing_type first_fit (the default,
  configs/base.yml:803) with num_packing_bins = the per-host batch and max_sequences_per_bin None
  (max_segments_per_seq -1), best_fit with the same bins, or concat_then_split with BOS handling
  REPLACE_FIRST_TOKEN_WITH_BOS and no bos_features, so grain leaves every token as it is
  (grain packing_concat_then_split.py:303-304).

Grain's first fit and best fit keep num_packing_bins rows open; when an element fits none of them, all of them
are emitted (shuffled: shuffle_bins defaults to True, seed 0) and a fresh set starts with that element
(grain packing.py:180-262, 280). A row is
max_target_length = R - 1 tokens of inputs; MaxText shifts the targets left and pads the last one
(input_pipeline_utils.py:997-1011, ShiftData), so a row trains max_target_length - 1 = R - 2 targets: its first
token is never a target, as the audit counts every row (rows x (row capacity - 1)). Documents arrive in the stream's
order (MaxText shuffles the source first by default, enable_data_shuffling: true, data_shuffle_seed 0: audit a
shuffled stream for that).
"""
import logging

import numpy as np

from audit.libraries.args import HOST_BINS, HOST_DEVICES, value
from audit.libraries.common import BOS, EOS, require

KINDS = ("first_fit", "best_fit", "concat_split")
BINS_DEFAULT = (f"MaxText's per-host batch on the audit's stated host: per_device_batch_size 12 (base.yml:731) x "
                f"{HOST_DEVICES} devices = {HOST_BINS}")


def _no_jax_profiler_note(record):
    """grain logs once, on import, that jax's profiler is missing; the audit never profiles, so that line is
    dropped (every other record passes)."""
    return "Failed to load jax profiler" not in record.getMessage()


def maxtext_elements(docs, seq, truncation):
    """MaxText's tokenizer step on tracer documents: an EOS added, then trimmed to seq (or chunked into seq)."""
    for d in docs:
        d = np.append(d, EOS)
        if truncation:
            yield {"inputs": d[:seq]}
        else:
            for a in range(0, len(d), seq):
                yield {"inputs": d[a:a + seq]}


def source(elements, dataset):
    """A grain IterDataset over a Python iterator of elements, pulled one at a time as the packer asks."""
    class Source(dataset.IterDataset):
        def __iter__(self):
            return Pull(elements)

    class Pull(dataset.DatasetIterator):
        def __init__(self, it):
            super().__init__()
            self.it, self.n = iter(it), 0

        def __next__(self):
            el = next(self.it)
            self.n += 1
            return el

        def get_state(self):  # the packers record it per element; the audit never restores one
            return {"pulled": self.n}

        def set_state(self, state):
            raise NotImplementedError("the audit's tracer source is read once")

    return Source()


def grain(kind, R, B, plan):
    """grain_<kind>: MaxText's pipeline at max_target_length = R - 1, num_packing_bins from --loader-arg bins
    (default the per-host batch of the stated host, args.HOST_BINS; B, the audit's --buffer, is not MaxText's),
    truncation from --loader-arg truncation (default on)."""
    logging.getLogger("absl").addFilter(_no_jax_profiler_note)  # adding the same filter twice keeps one
    exp = require("grain.experimental", f"grain_{kind}")
    dataset = require("grain._src.python.dataset.dataset", f"grain_{kind}")
    seq, bins, trunc = R - 1, value(plan.args, "bins"), value(plan.args, "truncation")
    given = "bins" in (plan.args or {})
    plan.facts.update({"library": "grain", "max_target_length": seq, "use_truncation": trunc,
                       "num_packing_bins": bins if kind != "concat_split" else None})
    if kind != "concat_split":
        plan.facts["num_packing_bins_from"] = "--loader-arg" if given else BINS_DEFAULT

    def run(docs):
        src = source(maxtext_elements(docs, seq, trunc), dataset)
        shape = {"inputs": seq}
        if kind == "first_fit":
            ds = exp.FirstFitPackIterDataset(src, length_struct=shape, num_packing_bins=bins,
                                             max_sequences_per_bin=None)
        elif kind == "best_fit":
            ds = exp.BestFitPackIterDataset(src, length_struct=shape, num_packing_bins=bins)
        else:
            ds = exp.ConcatThenSplitIterDataset(src, length_struct=shape,
                                                bos_handling=exp.BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS,
                                                bos_token_id=BOS)
        for row in ds:
            yield row["inputs"]
    return run
