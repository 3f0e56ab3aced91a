"""The rules for llm-foundry 0.22.0, LLaMA-Factory 0.9.5 and axolotl 0.19.0 (audit/libraries/foundry.py,
llamafactory.py, axolotl.py) against those libraries' own code, loaded from their wheels by tests/real_libs.py (run.sh
installs requirements-real-libs.lock with --no-deps). Each test gives one stream of tracer documents, every token id
unique (FIRST_ID upwards), to the library's function and to the rule, and compares the rows element for element:
which documents' tokens land in which row, in what order, which are cut or never packed, and every EOS, BOS and
padding token either adds. The libraries that tokenize text get each document as words a word-level tokenizer
(tokenizers' WordLevel, "t16" is id 16) turns back into exactly its ids, the tracer's EOS, BOS and padding its special
tokens.

Stand-ins (tests/real_libs.py), each for an import the functions run here never call:
- composer.utils (llmfoundry/data/packing.py:10): its `dist` is used only by auto_packing_ratio (:438-443) and
  profile_packing (:501-513), packing_ratio='auto'; BinPackCollator never calls them. composer (mosaicml<0.33)
  pins torch 2.7.
- axolotl.prompters (axolotl/prompt_tokenizers.py:9): its Prompter only annotates the prompter argument (:52); the
  completion strategy's prompter is completion.py's own CompletionPrompter. The real prompters.py imports colorama,
  not installed, to colour its printed prompts (:6, :12).
- axolotl.utils.dict (axolotl/utils/trainer.py:20): DictDefault is only checked against a deepspeed config (:552,
  :680), never by filter_sequences_by_length (:200-241). The real dict.py subclasses addict's Dict, not installed.
"""
import functools
import re
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from audit.libraries import axolotl, foundry, llamafactory
from audit.libraries.about import RULES
from audit.libraries.common import BOS, EOS, FIRST_ID, PAD, Plan
from conftest import ROOT, freeze_survivors
from real_libs import REAL_LIBS, load

VOCAB = 1 << 13
WORDS = {"<pad>": PAD, "<bos>": BOS, "<eos>": EOS, **{f"t{i}": i for i in range(FIRST_ID, VOCAB)}}

@functools.cache
def real():
    """The three libraries' files, the tokenizers and the classes the tests drive: loaded at the first test that needs
    them, not when the file is collected (both test processes collect every file, and only one runs this one: at
    collection, transformers, datasets and accelerate cost each process ~3 s). Then frozen out of the collector's reach
    with the rest: axolotl's sampler runs gc.collect() at every packing (multipack.py:385), which would otherwise scan
    their heaps."""
    # late: see the docstring
    import datasets
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import SequentialSampler

    libs = SimpleNamespace(
        datasets=datasets, BatchSamplerShard=BatchSamplerShard, SequentialSampler=SequentialSampler,
        tok=tokenizer(), tok_bos=tokenizer(add_bos_token=True),
        foundry=load(["llmfoundry/utils/consts.py", "llmfoundry/data/finetuning/collator.py",
                      "llmfoundry/data/packing.py", "llmfoundry/data/data.py"], {"composer.utils": {"dist": None}}),
        llamafactory=load(["llamafactory/data/processor/processor_utils.py", "llamafactory/data/processor/pretrain.py"]),
        axolotl=load(["axolotl/utils/distributed.py", "axolotl/utils/logging.py", "axolotl/prompt_tokenizers.py",
                      "axolotl/prompt_strategies/completion.py", "axolotl/utils/samplers/multipack.py",
                      "axolotl/utils/samplers/utils.py", "axolotl/utils/samplers/__init__.py",
                      "axolotl/utils/environment.py", "axolotl/utils/trainer.py"],
                     {"axolotl.prompters": {"Prompter": object},
                      "axolotl.utils.dict": {"DictDefault": type("DictDefault", (dict,), {})}}))
    freeze_survivors()
    return libs


def test_the_code_run_is_the_version_each_rule_names():
    """The lock pins, and the folder holds, the release each rule was written from (what --help names)."""
    lock = (ROOT / "requirements-real-libs.lock").read_text()
    for lib, v in RULES.items():
        assert re.search(rf"^{lib}=={re.escape(v)} --hash=sha256:[0-9a-f]{{64}}$", lock, re.M), lib
        assert (REAL_LIBS / f"{lib.replace('-', '_')}-{v}.dist-info").is_dir(), lib


def tokenizer(**kw):
    """A fast tokenizer whose words are the tracer's ids, its pad, BOS and EOS the tracer's. It adds no special token
    around a text, except a BOS with add_bos_token=True (the attribute LLaMA-Factory reads) where the caller asks for
    special tokens, which LLaMA-Factory's packing does not (pretrain.py:40)."""
    # late: real() calls it; tokenizers and transformers load with the libraries, not at collection
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    model = Tokenizer(models.WordLevel(WORDS, unk_token="<pad>"))
    model.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=model, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
                                   **kw)



def stream(lengths):
    """Documents of these lengths, their ids running on from FIRST_ID."""
    ends = np.cumsum([0, *lengths]) + FIRST_ID
    assert ends[-1] <= VOCAB
    return [np.arange(a, b, dtype=np.int64) for a, b in zip(ends[:-1], ends[1:])]


def text(doc):
    return " ".join(f"t{i}" for i in doc.tolist())


def rows(arrays):
    return [np.asarray(a).tolist() for a in arrays]


# short documents (several to a row) and long ones (past any row here), or all of one length
LENGTHS = st.one_of(st.lists(st.one_of(st.integers(1, 4), st.integers(1, 40)), min_size=1, max_size=30),
                    st.builds(lambda n, k: [n] * k, st.integers(1, 14), st.integers(1, 12)))


# --- llm-foundry ---------------------------------------------------------------------------------------------------

@settings(max_examples=20, deadline=None)
@given(lengths=LENGTHS, R=st.integers(3, 12), no_wrap=st.booleans())
@example(lengths=[4, 4, 4], R=6, no_wrap=False)  # document + EOS exactly max_length: a sample each, nothing carried
@example(lengths=[3, 9, 1, 2], R=6, no_wrap=True)  # a tail thrown away, and a last buffer short of max_length
def test_foundry_concat_writes_what_concat_tokens_dataset_writes(lengths, R, no_wrap):
    docs = stream(lengths)
    ds = real().foundry["llmfoundry.data.data"].ConcatTokensDataset(
        hf_dataset=[{"text": text(d)} for d in docs], tokenizer=real().tok, max_length=R - 1, bos_text="", eos_text="<eos>",
        no_wrap=no_wrap)  # convert_dataset_hf.py's --concat_tokens R-1 --eos_text (--no_wrap), no --bos_text
    assert rows(foundry.concat(R, no_wrap)(iter(docs))) == rows(s["tokens"] for s in ds)


def binpack_library(docs, R, batch, ratio, keep):
    """build_collate_fn (finetuning/dataloader.py:658-714) with decoder_only_format and its default target settings,
    then the DataLoader's batches of n_examples_to_pack examples, the last one shorter (drop_last False); each
    document one example, its tokens the target of one turn. The rows: each batch's input_ids."""
    seq = R - 1
    collate = real().foundry["llmfoundry.data.finetuning.collator"].Seq2SeqFinetuningCollator(
        tokenizer=real().tok, max_seq_len=seq, decoder_only_format=True)
    per = batch
    if ratio != 1.0:  # :693-694: a ratio of 1.0 keeps the plain collator
        collate = real().foundry["llmfoundry.data.packing"].BinPackCollator(
            collator=collate, target_batch_size=batch, max_seq_len=seq, pad_token_id=real().tok.pad_token_id,
            padding_side=real().tok.padding_side, max_leftover_bins_to_keep=keep)
        per = int(batch * ratio)
    examples = [{"turns": [{"input_ids": [], "labels": d.tolist()}]} for d in docs]
    return [r for c in range(0, len(examples), per) for r in rows(collate(examples[c:c + per])["input_ids"])]


@pytest.mark.filterwarnings("ignore:Truncating sequence:UserWarning")  # collator.py:368, for every long document
@settings(max_examples=25, deadline=None)
@given(lengths=LENGTHS, R=st.integers(3, 12), batch=st.integers(1, 4),
       ratio=st.sampled_from([1.0, 1.5, 2.0, 2.5, 4.0]), keep=st.sampled_from([None, 0, 1, 3]))
@example(lengths=[4, 3, 4, 3], R=9, batch=1, ratio=2.0, keep=None)  # test_binpack_appends_the_collators_eos_...
@example(lengths=[7, 8, 9, 2, 1, 6], R=9, batch=2, ratio=2.0, keep=1)  # max_seq_len - 1, max_seq_len, past it
@example(lengths=[1] * 6, R=9, batch=2, ratio=1.5, keep=None)  # the third fits the first bin, yet opens the second
@example(lengths=[4, 4, 1, 1], R=10, batch=1, ratio=4.0, keep=None)  # a bin that takes one moves behind the others
@example(lengths=[7, 7, 7, 7, 1, 1, 1], R=9, batch=4, ratio=1.5, keep=None)  # last call: too few to pack, own bins
@example(lengths=[1, 2], R=4, batch=2, ratio=1.0, keep=None)  # no packing: rows in arrival order, not by size
def test_foundry_binpack_gives_the_batches_bin_pack_collator_gives(lengths, R, batch, ratio, keep):
    docs = stream(lengths)
    plan = Plan(1, np.array(lengths), args={"device_batch_size": batch, "packing_ratio": ratio, "leftover": keep})
    assert rows(foundry.binpack(R, plan)(iter(docs))) == binpack_library(docs, R, batch, ratio, keep)


# --- LLaMA-Factory -------------------------------------------------------------------------------------------------

def llamafactory_library(docs, R, map_batch, bos):
    """get_dataset's map (data/loader.py:255-261) of PretrainDatasetProcessor.preprocess_dataset over the documents'
    text; of DataArguments, the three fields it reads: packing (on for stage pt), cutoff_len, and a template other
    than llama3, whose EOS text is the tokenizer's (pretrain.py:29)."""
    processor = real().llamafactory["llamafactory.data.processor.pretrain"].PretrainDatasetProcessor(
        template=None, tokenizer=real().tok_bos if bos else real().tok, processor=None,
        data_args=SimpleNamespace(template="default", packing=True, cutoff_len=R - 1))
    ds = real().datasets.Dataset.from_dict({"_prompt": [[{"role": "user", "content": text(d)}] for d in docs]})
    out = ds.map(processor.preprocess_dataset, batched=True, batch_size=map_batch, remove_columns=["_prompt"])
    return rows(out["input_ids"]) if out.num_rows else []  # no block at all: no column either


@settings(max_examples=10, deadline=None)  # datasets' map: ~25 ms a call
@given(lengths=LENGTHS, R=st.integers(3, 12), map_batch=st.integers(1, 7), bos=st.booleans(), passes=st.integers(1, 2))
@example(lengths=[3, 3, 3, 3], R=5, map_batch=2, bos=False, passes=1)  # each map batch two blocks: nothing dropped
@example(lengths=[30, 1, 1], R=9, map_batch=1, bos=True, passes=1)  # one long document a batch; short ones: no block
@example(lengths=[2, 2, 2], R=4, map_batch=2, bos=False, passes=2)  # a map batch never runs across the epochs
def test_llamafactory_cuts_the_blocks_its_preprocessing_cuts(lengths, R, map_batch, bos, passes):
    """The dataset is mapped once and every epoch trains its blocks again: the second pass's documents (the same
    lengths, their ids running on) cut as the first pass's are."""
    docs = stream(lengths * passes)
    plan = Plan(1, np.array(lengths), args={"map_batch": map_batch, "add_bos_token": bos})
    n = len(lengths)
    want = [r for p in range(passes) for r in llamafactory_library(docs[p * n:(p + 1) * n], R, map_batch, bos)]
    assert rows(llamafactory.pretrain(R, plan)(iter(docs))) == want


# --- axolotl -------------------------------------------------------------------------------------------------------

def axolotl_samples(kind, docs, seq):
    """The prepared samples' input_ids: type completion tokenizes each text (completion.py:80-91, batched) and cuts
    it into pieces; a tokenized sample (chat_template) is the document itself. Then the length filter
    handle_long_seq_in_dataset applies with the default drop strategy (utils/data/utils.py:290-297: batched,
    min_sample_len unset)."""
    if kind == "completion":
        strategy = real().axolotl["axolotl.prompt_strategies.completion"].load(
            real().tok, SimpleNamespace(train_on_inputs=False, sequence_len=seq))
        samples = strategy.tokenize_prompt({"text": [text(d) for d in docs]})["input_ids"]
    else:
        samples = rows(docs)
    keep = real().axolotl["axolotl.utils.trainer"].filter_sequences_by_length(
        {"input_ids": samples}, sequence_len=seq, min_sequence_len=None)
    return [s for s, k in zip(samples, keep) if k]


def axolotl_library(kind, docs, seq, world, group, cap):
    """_create_multipack_sampler (core/trainers/base.py:166-180; curriculum_sampling's SequentialSampler, :203-204;
    micro batch 1; dataset_num_proc 1: packed in this process, where a pool's executor.map returns the groups in the
    same order, multipack.py:176-188), its batches dealt by accelerate's BatchSamplerShard to `world` ranks, read back
    round by round: rank 0's bin, rank 1's, ... Returns (the rows, the number of bins the sampler made)."""
    samples = axolotl_samples(kind, docs, seq)
    lengths = real().axolotl["axolotl.utils.samplers.utils"].get_dataset_lengths(
        real().datasets.Dataset.from_dict({"input_ids": samples}))
    sampler = real().axolotl["axolotl.utils.samplers.multipack"].MultipackBatchSampler(
        real().SequentialSampler(samples), batch_size=1, batch_max_len=seq, lengths=lengths, group_size=group,
        bin_size=cap, drop_last=True, num_processes=1)
    made = len(sampler)
    ranks = [list(real().BatchSamplerShard(sampler, num_processes=world, process_index=r)) for r in range(world)]
    assert len({len(r) for r in ranks}) == 1  # even: every rank gets a bin each round
    return [sum((samples[i] for i in batch[0]), []) for rnd in zip(*ranks) for batch in rnd], made


def axolotl_rule(kind, docs, R, world, group, cap):
    plan = Plan(1, np.array([len(d) for d in docs]), passes=1,
                args={"world_size": world, "group_size": group, "bin_size": cap})
    return rows(axolotl.multipack(kind, R, plan)(iter(docs))), plan.facts["bins_dropped"]


@st.composite
def completion_streams(draw):
    """sequence_len 2 to 6 and documents around its 64x truncation, with short ones between."""
    seq = draw(st.integers(2, 6))
    most = 64 * seq
    one = st.one_of(st.integers(1, 3 * seq), st.integers(most - 2, most + 2))
    return draw(st.lists(one, min_size=1, max_size=12).filter(lambda L: sum(L) < 4000)), seq


@settings(max_examples=15, deadline=None)
@given(stream_seq=completion_streams(), world=st.integers(1, 3), group=st.sampled_from([2, 5, 100_000]),
       cap=st.sampled_from([1, 2, 200]))
@example(stream_seq=([6, 3, 258, 4, 1], 4), world=1, group=100_000, cap=200)  # the hand-worked case of the rules' test
@example(stream_seq=([255, 256, 257, 1], 4), world=2, group=100_000, cap=200)  # truncated at 256 with, without EOS
def test_axolotl_completion_packs_the_bins_its_sampler_packs(stream_seq, world, group, cap):
    lengths, seq = stream_seq
    docs = stream(lengths)
    got, dropped = axolotl_rule("completion", docs, seq + 1, world, group, cap)
    want, made = axolotl_library("completion", docs, seq, world, group, cap)
    assert got == want and dropped == made - len(want)


@settings(max_examples=15, deadline=None)
@given(lengths=LENGTHS, R=st.integers(3, 12), world=st.integers(1, 3), group=st.sampled_from([2, 5, 100_000]),
       cap=st.sampled_from([1, 2, 200]))
@example(lengths=[1, 5, 6, 7, 2], R=7, world=2, group=100_000, cap=200)  # 1 and 7 dropped; 5 + 2 share a bin
def test_axolotl_chat_template_packs_the_bins_its_sampler_packs(lengths, R, world, group, cap):
    docs = stream(lengths)
    got, dropped = axolotl_rule("chat_template", docs, R, world, group, cap)
    want, made = axolotl_library("chat_template", docs, R - 1, world, group, cap)
    assert got == want and dropped == made - len(want)
