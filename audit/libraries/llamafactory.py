"""LLaMA-Factory's pretraining packing, as a rule written from its code (llamafactory 0.9.5; the package's pins
do not install beside this project's: it asks for torch 2.14.1). Not its code: the rule is tested against a
reference written from the same lines in tests/test_audit_loaders_rules.py, and against LLaMA-Factory's own
PretrainDatasetProcessor, installed apart, in tests/test_audit_loaders_real.py.

PretrainDatasetProcessor.preprocess_dataset (llamafactory/data/processor/pretrain.py:27-53), run by
datasets.map(batched=True, batch_size=preprocessing_batch_size) (data/loader.py:255-261; the batch size
defaults to 1000, hparams/data_args.py:80-83; packing is on for stage pt, hparams/parser.py:520): each
document's text gets the tokenizer's EOS appended (:29-30), the map batch's token lists are concatenated
(:40-41), cut to (total // cutoff_len) * cutoff_len (:42-44) and split into blocks of cutoff_len (:45-48), so
every map batch throws away its remainder: the tail of its last document, or whole short documents. With a
tokenizer whose add_bos_token is set (Llama's), each block's first token is replaced by BOS (:49-51).
The dataset is mapped once, so every epoch trains the same blocks: the audit packs each pass of the stream alike,
its map batches starting again with the pass (a batch never spans two passes). Blocks are yielded in the order the
map makes them; the Trainer's sampler shuffles them (transformers' RandomSampler; a SequentialSampler only with
LLaMA-Factory's disable_shuffling, its trainers' _get_train_sampler), so past the budget the audit leaves the last
blocks made untrained where a run leaves a random set of them.
"""
import numpy as np

from audit.libraries.args import value
from audit.libraries.common import BOS, EOS, take

HOW = "rule from llamafactory 0.9.5 data/processor/pretrain.py:27-53, not its code"


def pretrain(R, plan):
    """llamafactory_pt: blocks of cutoff_len = R - 1 per map batch of --loader-arg map_batch documents."""
    block, per_batch, bos = R - 1, value(plan.args, "map_batch"), value(plan.args, "add_bos_token")
    plan.facts.update({"cutoff_len": block, "preprocessing_batch_size": per_batch, "add_bos_token": bos})

    def run(docs):
        it = iter(docs)
        while True:
            for b0 in range(0, plan.n, per_batch):  # a pass: the dataset's map batches, the last one short
                batch = take(it, min(per_batch, plan.n - b0))
                if not batch:
                    return
                yield from blocks(batch, block, bos)
    return run


def blocks(batch, block, bos):
    """One map batch: its documents, each with EOS, concatenated and cut into whole blocks; the rest dropped."""
    flat = np.concatenate([np.append(d, EOS) for d in batch])
    for a in range(0, len(flat) // block * block, block):
        out = flat[a:a + block].copy()
        if bos:
            out[0] = BOS
        yield out
