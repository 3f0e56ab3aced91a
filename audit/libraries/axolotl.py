"""axolotl's multipack sampler, as a rule written from its code (axolotl 0.19.0; the package's pins do not install
beside this project's: it asks for numpy 2.3.5 and its own transformers, datasets and torchao). Not its code:
the rule is tested against a reference written from the same lines in tests/test_audit_loaders_rules.py, and
against axolotl's own completion strategy, length filter and MultipackBatchSampler, installed apart, in
tests/test_audit_loaders_real.py.

What becomes a sample depends on the dataset type (KINDS):
- completion (raw text, a pretraining run; axolotl_completion): the text is tokenized with truncation at
  max_length = 64 x sequence_len (prompt_strategies/completion.py:86; prompt_tokenizers.py:81-87), an EOS is
  appended when the tokens end shorter than that (prompt_tokenizers.py:92-98), and the tokens are cut into
  pieces of sequence_len (completion.py:57-58): a long document is split, its tail past 64 x sequence_len lost;
- chat_template (and other already tokenized samples; axolotl_chat_template): the sample is whole, one token past
  sequence_len at most (chat_template.py:1404-1405), and excess_length_strategy defaults to drop.
Either way the prepared samples pass handle_long_seq_in_dataset (utils/data/sft.py:346-350; utils/data/utils.py:
314-350), which keeps a sample only if 2 <= length <= sequence_len (utils/trainer.py:200-230, min_sequence_len 2):
a completion piece is never too long, so only a lone last token is dropped; a long chat sample is dropped whole.
The document's own first token stands for the tokenizer's BOS; the rule inserts EOS as the tracer's EOS id.

- MultipackBatchSampler (utils/samplers/multipack.py:244-398; built in core/trainers/base.py:142-181 with
  batch_size 1, batch_max_len = micro batch x sequence_len, drop_last=True): the epoch's samples are cut into
  groups of sample_packing_group_size (100,000) and each group is packed first fit in the sampler's order into
  as many bins as it needs, at most sample_packing_bin_size (200) samples a bin (pack_group, multipack.py:60-112;
  pack_parallel, :125-190; the "decreasing" of its name is only in ffd_check, never called here);
- the bins are dealt to the ranks in turn by accelerate's BatchSamplerShard, which with drop_last stops at the
  first round that cannot give every rank a bin (accelerate 1.15.0 data_loader.py:213-232): the epoch's last
  len(bins) mod world_size bins are dropped.
A row is one bin (micro batch 1: sequence_len = R - 1 tokens). The documents come in the stream's order (axolotl's
default RandomSampler shuffles them each epoch; curriculum_sampling keeps this order); each epoch is one pass,
packed again, and the loader stops at the end of the epoch that reaches the budget.
"""
import numpy as np

from audit.libraries.args import value
from audit.libraries.common import EOS, take

HOW = {"completion": "rule from axolotl 0.19.0 prompt_strategies/completion.py:42-86, prompt_tokenizers.py:73-98, "
                     "utils/samplers/multipack.py:60-190, 362-377, not its code",
       "chat_template": "rule from axolotl 0.19.0 utils/data/utils.py:314-350, utils/trainer.py:200-230, "
                        "utils/samplers/multipack.py:60-190, 362-377, not its code"}
MAX_LENGTH_TIMES = 64  # completion.py:86: the tokenizer truncates raw text at 64 x sequence_len
MIN_LEN = 2  # filter_sequences_by_length's min_sequence_len when min_sample_len is unset (trainer.py:205-206)


def completion_samples(doc, seq):
    """type: completion: truncated at 64 x seq, EOS appended if that left it shorter, cut into pieces of seq."""
    most = MAX_LENGTH_TIMES * seq
    tokens = doc[:most] if len(doc) >= most else np.append(doc, EOS)
    return [p for p in (tokens[i:i + seq] for i in range(0, len(tokens), seq)) if len(p) >= MIN_LEN]


def chat_template_samples(doc, seq):
    """A tokenized sample kept whole or dropped (excess_length_strategy drop, the default)."""
    return [doc] if MIN_LEN <= len(doc) <= seq else []


KINDS = {"completion": completion_samples, "chat_template": chat_template_samples}


class OpenBins:
    """First fit over bins that never close: the leftmost bin with room for `size` and fewer than `cap` documents,
    found in a tree of the bins' largest room (O(log bins) where the library scans every bin)."""

    def __init__(self, most, capacity, cap):
        self.size = 1
        while self.size < max(1, most):
            self.size *= 2
        self.room = [-1] * (2 * self.size)  # a bin not opened yet, or full of documents, has no room
        self.capacity, self.cap, self.bins, self.free = capacity, cap, [], []

    def _set(self, b, room):
        i = b + self.size
        self.room[i] = room
        i //= 2
        while i:
            self.room[i] = max(self.room[2 * i], self.room[2 * i + 1])
            i //= 2

    def add(self, doc, size):
        if self.room[1] >= size:
            i = 1
            while i < self.size:
                i = 2 * i if self.room[2 * i] >= size else 2 * i + 1
            b = i - self.size
            self.bins[b].append(doc)
            self.free[b] -= size
        else:
            b = len(self.bins)
            self.bins.append([doc])
            self.free.append(self.capacity - size)
        self._set(b, self.free[b] if len(self.bins[b]) < self.cap else -1)


def pack_epoch(lengths, capacity, group, cap):
    """One epoch's bins (lists of indices into `lengths`), group after group (pack_parallel's order)."""
    out = []
    for g in range(0, len(lengths), group):
        part = lengths[g:g + group]
        bins = OpenBins(len(part), capacity, cap)
        for i, n in enumerate(part.tolist()):
            bins.add(g + i, n)
        out += bins.bins
    return out


def multipack(kind, R, plan):
    """axolotl_<kind>: sequence_len = R - 1; world_size, group_size and bin_size from --loader-arg."""
    prepare = KINDS[kind]
    seq, world = R - 1, value(plan.args, "world_size")
    group, cap = value(plan.args, "group_size"), value(plan.args, "bin_size")
    plan.facts.update({"sequence_len": seq, "world_size": world, "sample_packing_group_size": group,
                       "sample_packing_bin_size": cap, "epochs": 0, "bins_dropped": 0})

    def run(docs):
        it, made = iter(docs), 0
        while plan.passes is None or plan.facts["epochs"] < plan.passes:
            epoch = take(it, plan.n)
            kept = [p for d in epoch for p in prepare(d, seq)]
            bins = pack_epoch(np.fromiter((len(d) for d in kept), np.int64, len(kept)), seq, group, cap)
            usable = len(bins) // world * world
            plan.facts["epochs"] += 1
            plan.facts["bins_dropped"] += len(bins) - usable
            for b in bins[:usable]:
                yield np.concatenate([kept[i] for i in b])
            made += usable
            if made >= plan.rows or usable == 0:
                return
        plan.facts["capped_by_passes"] = plan.passes  # the passes given ran out before the budget: its input ended
    return run
