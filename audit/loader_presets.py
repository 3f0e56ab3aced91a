"""--pipeline NAME: the loaders people run, each as a packer, a split and who owns a buffer.

A preset only fills in --packers, --split-by and --refill-docs where the command line leaves
them out, and says what a rank and a DataLoader worker each own: a buffer of their own (the
pipeline audit of audit/topology.py, one packer per worker stream) or a share of one packer's
rows (the one-stream audit is the run's answer). The facts each follows are named in `follows`,
read in that loader's code; TRL's pack_dataset is not here (a note in `LEFT_OUT` says why).
"""
from dataclasses import dataclass

from audit.libraries.args import HOST_BINS, HOST_DEVICES
from errors import DataError


@dataclass(frozen=True)
class Pipeline:
    packer: str
    split_by: str
    refill_docs: int
    owner: str  # who runs a packer of their own: "stream" (one for the run), "rank", or "worker" (each of each rank)
    follows: str
    ranks_arg: str = ""  # a --loader-arg the preset sets to --ranks where one packing is dealt to the ranks
    no_ranks: str = ""  # where the packing runs with no ranks at all: why (--ranks above 1 is refused with it)
    # what the loader calls the N and the M of --ranks and --loader-workers (MaxText's Grain: hosts and their
    # worker processes, not ranks and DataLoader workers)
    rank_word: str = "rank"
    worker_word: str = "DataLoader worker"
    order: str = ""  # where the loader shuffles what the audit reads in order (a sentence of the report)
    bos: str = ""  # the --bos it fills in where that is left out: what the loader's own tokenizing adds


def rows_shuffled(who):
    """The order sentence of a loader that trains its packed rows shuffled: the audit reads them as they are made."""
    return (f"{who}, and the audit reads them in the order they are made: at a budget of whole epochs the fates are "
            "the run's, within an epoch the audit leaves the last ones untrained where the run leaves a random set")


PIPELINES = {
    "project": Pipeline(
        "original", "document", 128, "stream",
        "this repository's loader (loaders/batches.py): one packer over the whole stream, its microbatch m trained by "
        "rank m mod N; ranks and workers add no buffer"),
    "nanochat": Pipeline(
        "original", "file-group:1024", 128, "rank",
        "nanochat's bos_bestfit loader: rank r reads row groups r, r+N, ... of each parquet file, starting again at "
        "row group r in every file (dataloader.py:62-68; its repackaged data has 1,024 documents per row group: "
        "file-group:1024), tokenizes 128 documents per refill into its own 1,000-document best-fit buffer; it has no "
        "DataLoader workers"),
    "torchtitan": Pipeline(
        "titan_concat", "hf-iterable", 128, "worker",
        "torchtitan's HuggingFaceTextDataset, a streaming HF IterableDataset under split_dataset_by_node and a "
        "DataLoader of M workers (--split-by hf-iterable, datasets 4.7.0 iterable_dataset.py): when the file count "
        "is a multiple of N, rank r keeps files r, r+N, ... (:2510-2517) and its worker k the rank's files k, k+M, "
        "... (:2440-2450), file f to worker stream f mod N*M; otherwise worker k reads files k, k+M, ... and rank r "
        "keeps documents r, r+N, ... of that worker's stream (StepExamplesIterable, :2528, :647-652). A worker with "
        "no file is stopped by HF, which the audit refuses; a token buffer per worker. The first pass only: for the "
        "next, torchtitan 0.3.0 calls set_epoch (hf_datasets/text_datasets.py:168-171, :183-184) and HF shuffles the "
        "files by the epoch before dealing them (iterable_dataset.py:2503-2505), the M workers of a rank sharing one "
        "epoch counter that each worker's re-loop advances; the audit's stream wraps in the first pass's order, and "
        "the report names any worker stream that read past its first pass at an epoch whose shuffle moves the "
        "files"),
    "torchtune": Pipeline(
        "torchtune_text", "document", 128, "stream",
        "torchtune's pretraining path, text_completion_dataset(packed=True) (torchtune 0.6.1): the tokenizer cuts each "
        "document to max_seq_len - 1 (datasets/_text_completion.py:71-72), and PackedDataset, split_across_pack=True "
        "by default (:86), packs the whole dataset when it is built, the same on every rank; a "
        "DistributedSampler deals its packs to ranks and DataLoader workers only read packs: one packing",
        order=rows_shuffled("Its recipes' DistributedSampler shuffles the packs when the config's shuffle is on (its "
                            "shipped configs set it)")),
    "megatron": Pipeline(
        "megatron_gpt", "document", 128, "stream",
        "Megatron-Core's GPTDataset (megatron-core 0.16.1; Megatron-LM, NeMo 2; not nanotron's Nanoset): one "
        "global sample index built the same on every rank (BlendedMegatronDatasetBuilder, is_built_on_rank), each "
        "global batch cut into the ranks' micro-batches by the sampler; DataLoader workers only read samples: one "
        "packing. It trains on the documents as the .bin holds them (tools/preprocess_data.py wrote its tokenizer's "
        "ids, and with --append-eod an EOD after each): no BOS is counted per document unless --bos is given (text "
        "you tokenize here: --bos add where Megatron's tokenizer adds one, as Llama's do)",
        bos="none"),
    "grain": Pipeline(
        "grain_first_fit", "document", 128, "worker",
        "MaxText's Grain pipeline: each host reads every H-th record (dataset[host::hosts], "
        "grain_data_processing.py get_datasets) and packs with its own num_packing_bins (the per-host batch: "
        f"default {HOST_BINS}, per_device_batch_size 12 x {HOST_DEVICES} devices a host; --loader-arg bins=N sets it, "
        "--buffer does not); "
        "grain's mp_prefetch gives each worker process every W-th record of its host and its own packer "
        "(--ranks: the hosts, --loader-workers: each host's worker processes)",
        rank_word="host", worker_word="Grain worker process"),
    "foundry": Pipeline(
        "foundry_concat", "file", 128, "worker",
        "llm-foundry's ConcatTokensDataset (llm-foundry 0.22.0) packs only in its offline MDS conversion, "
        "command_utils/data_prep/convert_dataset_hf.py: a streaming HF dataset (:191-196) wrapped in "
        "ConcatTokensDataset (:218) and read by a DataLoader with num_workers = cpu_count() by default "
        "(:248-251); the training run reads the converted, already packed, MDS shards. The conversion has no "
        "ranks (--ranks above 1 is refused); --loader-workers is its workers, each with its own buffer, and a "
        "streaming dataset hands worker k of M the files k, k+M, ... (datasets 4.7.0 "
        "iterable_dataset.py:2429-2450): file f to worker f mod M (--split-by file; a worker with no file idles, "
        "which the audit refuses)",
        no_ranks="the conversion that packs (convert_dataset_hf.py) has no ranks: training reads its packed MDS "
                 "shards",
        order="The conversion writes every worker's files once, whatever the budget (its DataLoader takes batches "
              "from the workers in turn until each is exhausted), and training reads the written samples through a "
              "StreamingDataset that shuffles them when the config's shuffle is on (its shipped configs set it). The "
              "audit instead gives each worker stream an equal share of the budget's rows, in the order they are "
              "made: a worker with fewer files wraps into a second pass while the others stop short, so read its "
              "per-worker fates as a budget's share, not as the MDS's contents. Your own JSON files go through "
              "convert_dataset_json.py (convert_dataset_hf.py reads only the datasets it names): one "
              "ConcatTokensDataset over the files in order, no workers, --loader-workers 1 here"),
    "llamafactory": Pipeline(
        "llamafactory_pt", "document", 128, "stream",
        "LLaMA-Factory packs the dataset with datasets.map before training, the same on every rank; the Trainer's "
        "sampler deals the blocks to ranks and DataLoader workers only read them: one packing. It tokenizes with "
        "add_special_tokens=False (data/processor/pretrain.py, just before it concatenates at :40-41): no BOS is "
        "counted per document unless --bos is given (a tokenizer with add_bos_token: --loader-arg add_bos_token=on)",
        bos="none",
        order=rows_shuffled("The Trainer shuffles the blocks (transformers' RandomSampler; a SequentialSampler only "
                            "with LLaMA-Factory's disable_shuffling)")),
    "axolotl": Pipeline(
        "axolotl_completion", "document", 128, "stream",
        "axolotl's completion type (raw text, as a pretraining run gives it) cuts each document into sequence_len "
        "pieces after truncating it at 64 x sequence_len (prompt_strategies/completion.py:57-58, 86); its "
        "MultipackBatchSampler packs the whole epoch once, the same on every rank, and accelerate deals "
        "its bins to the ranks in turn, dropping the last round that cannot fill every rank (world_size is set "
        "to --ranks)", ranks_arg="world_size",
        order="Its sampler shuffles the documents each epoch before it packs them (a RandomSampler; "
              "curriculum_sampling keeps their order), and the audit packs them in the stream's order: its bins, and "
              "which documents fall in a dropped last round or past the budget, are those of that one order"),
}

# why TRL's pack_dataset(num_proc=k) has no preset (a decision, kept with the presets)
LEFT_OUT = {"trl": "pack_dataset already packs each map() batch of 1,000 documents on its own (audit's trl_bfd), so "
                   "num_proc only moves batch edges; and its rows come out shard after shard, which an equal share "
                   "of rows per worker stream does not describe"}


OWNS = {"stream": "one packer for the run", "rank": "a packer per rank", "worker": "a packer per worker of each rank"}


def help_lines() -> str:
    """Each preset in a few words for --help (the facts each follows, with their file:line, are the report's pipeline
    line and summary.json's; the whole text here made --help's entry 100 lines long)."""
    return "; ".join(f"{n}: {p.packer}, {OWNS[p.owner]}" + (f", split by {p.split_by}" if p.owner != "stream" else "")
                     for n, p in PIPELINES.items())


def preset_help(name=None) -> str:
    """`--pipeline [NAME] --help`: one preset in full (what it fills in, who owns a buffer, the facts it follows, what
    the audit reads in another order, its BOS policy), or every preset's name and few words."""
    if name not in PIPELINES:
        unknown = f"--pipeline {name}: unknown. " if name else ""
        return f"{unknown}--pipeline NAME, a named loader (--pipeline NAME --help: that one in full): {help_lines()}."
    p = PIPELINES[name]
    lines = [f"--pipeline {name}: --packers {p.packer}, --split-by {p.split_by}, --refill-docs {p.refill_docs} where you "
             f"leave them out; {OWNS[p.owner]}.", "", f"It follows {p.follows}."]
    if p.order:
        lines.append(f"{p.order}.")
    if p.bos:
        lines.append(f"Its BOS policy where --bos is left out: {p.bos}.")
    if p.no_ranks:
        lines.append(f"--ranks above 1 is refused: {p.no_ranks}.")
    return "\n".join(lines)


@dataclass(frozen=True)
class LoaderChoice:
    """A --pipeline preset (or none) applied to the command line: the packers, the split and the refill it fills
    in where they were left out, and who runs a packer of their own."""
    preset: Pipeline | None
    packers: str
    split_by: str
    refill_docs: int
    owner: str  # "stream", "rank" or "worker", as Pipeline.owner; "worker" without a preset

    def streams(self, ranks, loader_workers) -> tuple:
        """(ranks, workers per rank) that each run a packer of their own: 1 x 1 where one packer serves the run."""
        return 1 if self.owner == "stream" else ranks, loader_workers if self.owner == "worker" else 1


def apply_pipeline(name, packers, split_by, refill_docs, loader_workers, ranks=1) -> LoaderChoice:
    """The preset's --packers, --split-by, --refill-docs where they were left out (None), else the defaults."""
    p = PIPELINES.get(name) if name else None
    if name and p is None:
        raise DataError(f"--pipeline {name!r}: unknown (choose from {', '.join(PIPELINES)})")
    if p and p.owner == "rank" and loader_workers > 1:
        raise DataError(f"--pipeline {name}: the loader has no DataLoader workers; leave out --loader-workers")
    if p and p.no_ranks and ranks > 1:
        raise DataError(f"--pipeline {name}: {p.no_ranks}; leave out --ranks")
    return LoaderChoice(p, packers or (p.packer if p else "all"), split_by or (p.split_by if p else "document"),
                        refill_docs if refill_docs is not None else (p.refill_docs if p else 128),
                        p.owner if p else "worker")


def describe(plan) -> dict:
    """summary.json's 'pipeline': the preset of an AuditPlan (audit/plan.py), what it follows and the worker
    streams it makes of the ranks."""
    p, topo = plan.pipeline, plan.topology
    return {"name": plan.pipeline_name, "follows": p.follows, "owner": p.owner, "ranks": topo.ranks,
            "loader_args": dict(plan.loader_args), "loader_workers": topo.loader_workers,
            "worker_streams": topo.worker_streams, "packers": plan.packers_arg, "split_by": topo.split_by,
            "refill_docs": topo.refill_docs, "rank_word": p.rank_word, "worker_word": p.worker_word,
            **({"order": p.order} if p.order else {})}  # only where the loader shuffles what the audit reads in order
