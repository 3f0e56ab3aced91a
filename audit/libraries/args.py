"""--loader-arg KEY=VALUE: the settings a loader leaves to its caller (a seed, a split, blend weights, bins),
parsed and checked before anything is read or written, each bad value one line.

Every key belongs to some loaders; a key none of the audited loaders reads is refused (a typo would
otherwise audit the defaults and say nothing). Defaults are the library's own where it has one; the
report's `settings` states each value used.
"""
import re
from dataclasses import dataclass

from errors import DataError


def _on_off(v):
    if v.lower() in ("on", "true", "yes", "1"):
        return True
    if v.lower() in ("off", "false", "no", "0"):
        return False
    raise ValueError("expected on or off")


def _floats(v):
    return [float(x) for x in v.split(",") if x.strip()]


def _positive(cast):
    def parse(v):
        x = cast(v)
        if x <= 0:
            raise ValueError("must be positive")
        return x
    return parse


def _at_least_one(v):
    x = float(v)
    if x < 1:
        raise ValueError("must be at least 1 (llm-foundry refuses less, finetuning/dataloader.py:695-696)")
    return x


def _split(v):
    """Megatron-LM's --split: up to three train, valid, test shares, normalised by its parser (blended_megatron_dataset_
    config.py:155-172, which reads every run of digits and dots), here each share a plain number between commas,
    slashes or spaces ("969,30,1", "98/2/0", "99 1 0"). A typo would otherwise reach that normalisation as NaN, and a
    zero train share builds no train dataset."""
    parts = [x for x in re.split(r"[,/\s]+", v.strip()) if x]
    plain = all(re.fullmatch(r"\d+(\.\d*)?|\.\d+", x) for x in parts)  # what its parser's regex reads as one number
    if not parts or not plain or len(parts) > 3 or float(parts[0]) <= 0:
        raise ValueError("expected up to three non-negative train,valid,test shares with a positive train share "
                         "(Megatron-LM's --split, e.g. 969,30,1 or 100,0,0)")
    return ",".join(parts)


def _leftover(v):
    return None if v.lower() == "none" else _nonnegative_int(v)


def _nonnegative_int(v):
    x = int(v)
    if x < 0:
        raise ValueError("must be 0 or more")
    return x


@dataclass(frozen=True)
class Key:
    parse: object
    default: object
    loaders: tuple  # packer-name prefixes that read it
    help: str


MEGATRON = ("megatron_gpt", "megatron_blend")
# MaxText packs into num_packing_bins = the per-host batch, global_batch_size_to_load // process_count
# (data_processing_utils.py:72, 100): per_device_batch_size 12.0 (configs/base.yml:731) times the host's devices.
# MaxText cannot know the host, so the audit states one: 8 accelerators (a GPU host, a TPU v5e host).
HOST_DEVICES = 8
HOST_BINS = 12 * HOST_DEVICES
AXOLOTL = ("axolotl_completion", "axolotl_chat_template")
KEYS = {
    "seed": Key(int, 1234, MEGATRON, "random_seed (Megatron-LM's --seed default 1234)"),
    "split": Key(_split, "969,30,1", MEGATRON, "the train/valid/test split string (Megatron-LM's legacy default "
                 "'969, 30, 1'); documents outside the train share are never trained"),
    "weights": Key(_floats, None, ("megatron_blend",), "blend weights, one per dataset (label) in order of first "
                   "appearance (default: none, Megatron blends by dataset size, one epoch each)"),
    "surplus": Key(float, 0.005, ("megatron_blend",), "mid_level_dataset_surplus (default 0.005: 0.5%% more "
                   "samples built per dataset than the blend draws)"),
    "truncation": Key(_on_off, True, ("grain_",), "MaxText's use_truncation (on, its default: TokenizeAndTrim cuts "
                      "each document to max_target_length; off: TokenizeAndChunk splits it)"),
    "bins": Key(_positive(int), HOST_BINS, ("grain_",), "num_packing_bins, MaxText's per-host batch (default "
                f"{HOST_BINS}: per_device_batch_size 12 x {HOST_DEVICES} devices of one host, not --buffer)"),
    "device_batch_size": Key(_positive(int), 8, ("foundry_binpack",),
                             "BinPackCollator's target_batch_size (default 8)"),
    "packing_ratio": Key(_at_least_one, 2.0, ("foundry_binpack",),
                         "raw examples per bin of a collate call (default 2.0, the audit's own: llm-foundry has "
                         "none and does not pack without it, nor at 1.0)"),
    "leftover": Key(_leftover, None, ("foundry_binpack",), "max_leftover_bins_to_keep (default None: keep all)"),
    "map_batch": Key(_positive(int), 1000, ("llamafactory_pt",), "preprocessing_batch_size (default 1000)"),
    "add_bos_token": Key(_on_off, False, ("llamafactory_pt",), "the tokenizer's add_bos_token: each block's "
                         "first token replaced by BOS"),
    "world_size": Key(_positive(int), 1, AXOLOTL, "ranks the packed bins are dealt to; the last "
                      "round that cannot fill every rank is dropped (--pipeline axolotl sets it to --ranks)"),
    "group_size": Key(_positive(int), 100_000, AXOLOTL, "sample_packing_group_size"),
    "bin_size": Key(_positive(int), 200, AXOLOTL, "sample_packing_bin_size (documents per bin)"),
}


def help_line() -> str:
    return "; ".join(f"{k} ({', '.join(x.rstrip('_') for x in v.loaders)}): {v.help}" for k, v in KEYS.items())


def parse_loader_args(pairs) -> dict:
    """--loader-arg values as a dict of parsed values (one line for a bad one)."""
    out = {}
    for kv in pairs or ():
        k, sep, v = kv.partition("=")
        if not sep or not k:
            raise DataError(f"--loader-arg {kv!r}: expected KEY=VALUE")
        if k not in KEYS:
            raise DataError(f"--loader-arg {k}: unknown (known: {', '.join(KEYS)})")
        try:
            out[k] = KEYS[k].parse(v)
        except ValueError as e:
            raise DataError(f"--loader-arg {kv}: {e}") from None
    return out


def reads(key, packer) -> bool:
    return any(packer.startswith(p) for p in KEYS[key].loaders)


def value(args, key):
    """A key's value: the one given, else the default."""
    return (args or {}).get(key, KEYS[key].default)


LOADERS = ("megatron_", "grain_", "foundry_", "llamafactory_", "axolotl_")  # this package's packers


def loader_settings(pairs, packers, row_capacity, preset=None, ranks=1) -> dict:
    """--loader-arg pairs parsed and checked against the packers audited; a --pipeline preset's ranks filled in
    (axolotl deals its bins to the ranks). Every loader here needs seq_length = R - 1 of at least 2
    (helpers.cpp:166)."""
    out = parse_loader_args(pairs)
    if getattr(preset, "ranks_arg", "") and any(reads(preset.ranks_arg, p) for p in packers):
        out.setdefault(preset.ranks_arg, ranks)
    for k in out:
        if not any(reads(k, p) for p in packers):
            raise DataError(f"--loader-arg {k}: none of the audited packers reads it (it is for "
                            f"{', '.join(x.rstrip('_') for x in KEYS[k].loaders)})")
    ours = [p for p in packers if p.startswith(LOADERS)]
    if ours and row_capacity - 1 < 2:
        raise DataError(f"--row-capacity {row_capacity}: {ours[0]} packs seq_length = R - 1 = "
                        f"{row_capacity - 1} tokens a row; it must be at least 2 (Megatron's build_sample_idx "
                        "asserts seq_length > 1)")
    if "weights" in out:
        check_weights(out["weights"], None)
    return out


def check_datasets(stream, packers):
    """Blend weights, where given, one per dataset (the stream's labels). A stream of one dataset is refused by
    megatron_blend alone (a row of the comparison), so that --packers every still audits the others."""
    w = (stream.loader_args or {}).get("weights")
    if "megatron_blend" in packers and w is not None:
        labels = ["all"] if stream.labels is None else list(dict.fromkeys(str(x) for x in stream.labels))
        check_weights(w, labels)


def check_weights(w, datasets):
    if not w:
        raise DataError("--loader-arg weights: no weight given")
    neg = [x for x in w if x < 0]
    if neg:
        raise DataError(f"--loader-arg weights: {neg[0]:g} is negative; a blend weight is a share of the samples")
    if sum(w) == 0:
        raise DataError("--loader-arg weights: they sum to 0, so no dataset is ever drawn")
    if min(w) == 0:
        raise DataError("--loader-arg weights: a weight of 0 (Megatron's BlendedDataset asserts every weight is "
                        "positive, blended_dataset.py:52); leave that dataset out of the corpus instead")
    if datasets is not None and len(w) != len(datasets):
        raise DataError(f"--loader-arg weights: {len(w)} weights for {len(datasets)} datasets "
                        f"({', '.join(map(str, datasets[:5]))}{' ...' if len(datasets) > 5 else ''})")
