"""llm-foundry's two packers, as rules written from its code (llm-foundry 0.22.0; the package's pins do not install
beside this project's: it asks for torch 2.7.0 and numpy 2.1.3). Not its code: each rule is tested against a
reference written from the same lines in tests/test_audit_loaders_rules.py, and against llm-foundry's own
ConcatTokensDataset and BinPackCollator, installed apart, in tests/test_audit_loaders_real.py.

ConcatTokensDataset (llmfoundry/data/data.py:160-177), the concatenating writer of its MDS pretraining data:
each document's tokens, bos_tokens before and eos_tokens after, are appended to one buffer; while the buffer
holds max_length tokens, its first max_length are a sample and the rest is kept (wrap) or, with no_wrap, thrown
away: the current document's tail is lost. A last buffer shorter than max_length is never written. Here
bos_text is empty (the document's own first token is its BOS) and eos_text one EOS token, the usual
--eos_text '<|endoftext|>' (convert_dataset_hf.py:206-217 refuses a run with neither).

BinPackCollator (llmfoundry/data/packing.py:87-279; finetuning/dataloader.py:668-714), its on-the-fly packing:
each collate call gets int(device_batch_size * packing_ratio) examples; the base collator appends the tokenizer's
EOS to each example whose last target lacks one (finetuning/collator.py:152-154, called at :335; a tracer document
never ends in EOS, so every example gains one, a marker the packer added) and then cuts it to max_seq_len
(collator.py:349-352: a document of max_seq_len or more loses its EOS with its tail). It packs them first-fit
decreasing into the bins left over from the call before plus new ones; it returns the device_batch_size fullest
bins, each padded to max_seq_len (repad, packing.py; on the right, the usual tokenizer's padding_side), and keeps
the rest sorted by size, at most max_leftover_bins_to_keep of them (None: all); the bins still left when the data
ends are never trained. The DataLoader's last, smaller batch is collated too (drop_last False, dataloader.py:61).
llm-foundry has no default packing_ratio: without one it does not pack at all (dataloader.py:669-679), and 'auto'
profiles the data first. The audit's default of 2.0 is its own choice, said so in the report's settings. At 1.0
llm-foundry builds no BinPackCollator either (dataloader.py:693-694): each example is its own row, padded, in the
order it came, none kept for later.
"""
import numpy as np

from audit.libraries.args import value
from audit.libraries.common import EOS, PAD, take

HOW = {"concat": "rule from llm-foundry 0.22.0 data.py:160-177, not its code",
       "binpack": "rule from llm-foundry 0.22.0 packing.py:87-279, not its code"}
RATIO_DEFAULT = "the audit's default, not llm-foundry's (it has none: without packing_ratio it does not pack)"


def concat(R, no_wrap):
    """foundry_concat / foundry_no_wrap: ConcatTokensDataset at max_length = R - 1."""
    max_length = R - 1

    def run(docs):
        buffer = np.zeros(0, np.int64)
        for d in docs:
            buffer = np.concatenate([buffer, d, [EOS]])
            while len(buffer) >= max_length:
                yield buffer[:max_length]
                buffer = np.zeros(0, np.int64) if no_wrap else buffer[max_length:]
    return run


def first_fit_decreasing(examples, bins, num_bins, max_bin_size):
    """One collate call's packing (packing.py:173-279): (the num_bins fullest bins, the rest). A bin is
    [size, [examples]]; examples are token arrays."""
    start = len(bins)
    order = sorted(examples, key=len, reverse=True)  # a stable sort, as Python's sorted() in the library
    if len(order) < max(0, num_bins - start):
        bins = bins + [[len(e), [e]] for e in order]
    else:
        for i, e in enumerate(order):
            if len(order) - i == max(0, num_bins - len(bins)):
                bins.append([len(e), [e]])  # too few examples left to fill the bins otherwise: one each
                continue
            for b in range(len(bins)):
                if bins[b][0] + len(e) <= max_bin_size:
                    size, parts = bins.pop(b)
                    bins.append([size + len(e), parts + [e]])
                    break
            else:
                bins.append([len(e), [e]])
    ranked = sorted(bins, key=lambda b: b[0], reverse=True)
    return ranked[:num_bins], ranked[num_bins:]


def binpack(R, plan):
    """foundry_binpack: BinPackCollator at max_seq_len = R - 1 over the stream's documents in order."""
    max_seq_len = R - 1
    batch, ratio = value(plan.args, "device_batch_size"), value(plan.args, "packing_ratio")
    keep = value(plan.args, "leftover")
    per_call = int(batch * ratio)
    plan.facts.update({"max_seq_len": max_seq_len, "device_batch_size": batch, "packing_ratio": ratio,
                       "packing_ratio_from": "--loader-arg" if "packing_ratio" in (plan.args or {}) else RATIO_DEFAULT,
                       "examples_per_call": per_call, "max_leftover_bins_to_keep": keep, "eos": "appended"})

    def run(docs):
        it, left = iter(docs), []
        while True:
            # the collator's EOS after the last target, then its cut to max_seq_len (collator.py:152-154, 349-352)
            examples = [np.append(d, EOS)[:max_seq_len] for d in take(it, per_call)]
            if not examples:
                return
            if ratio == 1.0:  # the plain collator (dataloader.py:693-694): no bins sorted by size, none left over
                out = [[len(e), [e]] for e in examples]
            else:
                out, left = first_fit_decreasing(examples, left, batch, max_seq_len)
                left = left if keep is None else left[:keep]
            for size, parts in out:  # re-padded to max_seq_len (packing.py repad), on the right: a batch is one shape
                yield np.concatenate(parts + [np.full(max_seq_len - size, PAD, np.int64)])
    return run
