"""The loaders of this package as Specs: how each is built, its row capacity, settings and what the report says."""
from audit.libraries import axolotl, foundry, grain, llamafactory, megatron
from audit.libraries.args import HOST_BINS, HOST_DEVICES
from audit.libraries.common import Spec
from audit.libraries.megatron_blend import WHY_NOT as BLEND_WHY_NOT, blend_audit

# the distribution -> the module installed() looks for
LIBRARY_MODULES = {"megatron-core": "megatron", "grain": "grain"}


# what the budget's last row means for each loader, for the report's settings line
HORIZON = {
    "megatron": "the budget is the first num_samples of the shuffled sample index, a random subset of windows; a "
                "document spans several windows, so one is whole only when all its windows fall inside, partial "
                "otherwise (its first and last exposed positions say which part); a window past the budget is built "
                "but not reached (buffered), a token in no window (the dropped last sample, the held-out split) is "
                "discarded",
    "windows": "consecutive windows of the concatenated documents: the horizon can end inside a document, which is "
               "then partial (its first and last exposed positions say how far it got), its rest buffered",
    "bins": "rows come out a whole set of bins at a time, shuffled: at the horizon the set being filled is buffered, "
            "and a document is whole or not started, never cut (a trimmed tail is discarded at once)",
    "binpack": "rows come out a collate call at a time; the bins carried to the next call are buffered",
    "map batch": "a map batch's remainder is discarded when the batch is packed; its blocks past the budget are "
                 "buffered",
    "epoch": "the epoch is packed at once: its bins past the budget are buffered; the bins short of the ranks are "
             "dropped",
}


def seq(R):
    return R - 1


def _window(name, order="in arrival order"):
    return f"no buffered selection: {name}, {order}, so nothing waits by length"


def _megatron_specs():
    mset = {"seq_length": "R - 1 (each sample reads R tokens, the last one the next sample's first input)",
            "rows": "the samples in the order of its shuffle index, the budget's num_samples first, then the rest "
                    "of the index", "documents": "one sequence each, in one indexed dataset (int32 or int64 ids)",
            "at the horizon": HORIZON["megatron"]}
    return [
        Spec("megatron_gpt", lambda R, B, w, plan: megatron.gpt(R, w, plan), "megatron-core", seq, mset,
             _window("windows of seq_length + 1 tokens over shuffled documents, never cropped",
                     "in its index's shuffled order"), planned=True,
             indexed=True),
        Spec("megatron_blend", None, "megatron-core", seq, mset, BLEND_WHY_NOT, audit=blend_audit),
    ]


def _grain_specs():
    gset = {"max_target_length": "R - 1",
            "num_packing_bins": f"--loader-arg bins (default {HOST_BINS}: MaxText's per-host batch, "
                                f"per_device_batch_size 12 x {HOST_DEVICES} devices of one host; not --buffer)",
            "use_truncation": "--loader-arg truncation (default on, MaxText's default)", "add_eos": "true (MaxText)"}
    horizon = {"first_fit": HORIZON["bins"], "best_fit": HORIZON["bins"], "concat_split": HORIZON["windows"]}
    why = {"first_fit": "first fit into a fixed set of bins, all emitted when an element fits none; long documents "
                        "trimmed (or chunked) to the row first",
           "best_fit": "best fit into a fixed set of bins, all emitted when an element fits none; long documents "
                       "trimmed (or chunked) to the row first",
           "concat_split": _window("concatenated and split after MaxText's trim")}
    return [Spec(f"grain_{k}", (lambda k: lambda R, B, w, plan: grain.grain(k, R, B, plan))(k), "grain", seq,
                 {**gset, "at the horizon": horizon[k]}, why[k], planned=True) for k in grain.KINDS]


def _rule_specs():
    cset = {"max_length": "R - 1", "bos_text": "'' (the document's own first token)", "eos_text": "one EOS token",
            "at the horizon": HORIZON["windows"]}
    return [
        Spec("foundry_concat", lambda R, B, w: foundry.concat(R, False), capacity=seq, settings=cset,
             why_not=_window("concatenated and cut into max_length samples"), how=foundry.HOW["concat"]),
        Spec("foundry_no_wrap", lambda R, B, w: foundry.concat(R, True), capacity=seq,
             settings={**cset, "no_wrap": "true: the rest of the buffer is thrown away at each cut"},
             why_not=_window("concatenated and cut, each cut dropping the rest of the buffer"),
             how=foundry.HOW["concat"]),
        Spec("foundry_binpack", lambda R, B, w, plan: foundry.binpack(R, plan), capacity=seq,
             settings={"max_seq_len": "R - 1", "device_batch_size": "--loader-arg device_batch_size (default 8)",
                       "packing_ratio": "--loader-arg packing_ratio (default 2.0, the audit's own: llm-foundry has "
                                        "none and does not pack without it, nor at 1.0)",
                       "eos": "appended to each example by the collator, then cut to max_seq_len",
                       "max_leftover_bins_to_keep": "--loader-arg leftover (default None)",
                       "at the horizon": HORIZON["binpack"]},
             why_not="first-fit decreasing per collate call after truncation to the row, leftover bins carried",
             how=foundry.HOW["binpack"], planned=True),
        Spec("llamafactory_pt", lambda R, B, w, plan: llamafactory.pretrain(R, plan), capacity=seq,
             settings={"cutoff_len": "R - 1", "preprocessing_batch_size": "--loader-arg map_batch (default 1000)",
                       "eos": "appended to every document", "at the horizon": HORIZON["map batch"]},
             why_not=_window("each map batch concatenated and cut, its remainder dropped"), how=llamafactory.HOW,
             planned=True),
        *_axolotl_specs(),
    ]


def _axolotl_specs():
    aset = {"sequence_len": "R - 1", "world_size": "--loader-arg world_size (--pipeline axolotl: --ranks)",
            "sampler": "arrival order (its default RandomSampler shuffles)", "at the horizon": HORIZON["epoch"]}
    bins = "first fit over open bins per group of 100,000; the epoch's last bins short of the ranks dropped"
    return [
        Spec("axolotl_completion", lambda R, B, w, plan: axolotl.multipack("completion", R, plan), capacity=seq,
             settings={**aset, "type": "completion (raw text): truncated at 64 x sequence_len, EOS appended, cut "
                                       "into pieces of sequence_len"},
             why_not=f"documents longer than the row are cut into row-sized pieces first (pre-segmentation), then "
                     f"{bins}", how=axolotl.HOW["completion"], planned=True, indexed=True),
        Spec("axolotl_chat_template", lambda R, B, w, plan: axolotl.multipack("chat_template", R, plan),
             capacity=seq, settings={**aset, "type": "chat_template or pre-tokenized: excess_length_strategy drop"},
             why_not=f"documents longer than the row are dropped (excess_length_strategy drop), then {bins}",
             how=axolotl.HOW["chat_template"], planned=True, indexed=True),
    ]


def loader_specs() -> dict:
    return {s.name: s for s in _megatron_specs() + _grain_specs() + _rule_specs()}
