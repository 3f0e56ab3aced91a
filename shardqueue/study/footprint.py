"""Peak host memory and disk of a queue study, counted term by term from its plan.

The queue holds no shard in memory: shards stream from their uint16 token files an
update at a time (packing.StreamedShard), the pool sample is read row by row, the 13-gram
overlap and the inspection read a capped sample per shard. What remains grows with the
number of documents (index arrays, labels, text-hash keys, the pool manifest) or is fixed
(the model and optimizer state, the runtime). Memory-mapped token files sit in the page
cache, which the kernel reclaims under pressure, so they are not counted as peak memory.

host_footprint(preset) -> {"memory": {term: bytes} of one process, "processes", "peak_host_bytes",
"disk": {term: bytes}, "disk_bytes", "node", "fits", "assumptions"}; format_footprint() renders
it for --dry-run. Runs that the plan puts side by side (one per GPU: plan()["node"]
["runs_in_parallel"]) are separate processes, each with its own index of the corpus, so the
peak is that many times one process's memory.
Every per-document figure below is counted from the data structures in world/corpus_view.py, world/pool.py,
rotation.py and loaders/stream.py; the two figures not measured here are marked assumed.
"""
import math

from shardqueue.study.presets import PRESETS, plan
from shardqueue.world.inspection import SAMPLE_TOKENS

GIB = 2 ** 30
# the stated node: one 8-GPU node with 128 GiB of host memory and 2 TiB of local disk for the data and runs
NODE = {"name": "one 8-GPU node", "host_memory_bytes": 128 * GIB, "disk_bytes": 2048 * GIB}
# measured: the ten-file ClimbMix corpus holds 631,241,817 tokens in 846,848 documents (REPRODUCE.md); the offline
# corpus of Python 3.11's standard library 7,112,489 training tokens in 14,525 documents (prepare.py's census, vocab 8192)
MEAN_DOC_TOKENS = {"climbmix": 631_241_817 / 846_848, "stdlib": 7_112_489 / 14_525}
RAW_BYTES_PER_TOKEN = 2.0  # assumed: compressed parquet text per token (not measured in this repository)
STATE_BYTES_PER_PARAM = 16  # fp32 weights + two AdamW moments + one Muon momentum, all fp32 (an upper bound)
RUNTIME_BYTES = 3 * GIB  # assumed allowance per process: Python, torch, the CUDA context's host side, libraries
CORPUS_FACTOR = 1.25  # build_pool draws 1.25 x the tokens its shards need, so the corpus holds at least that

# bytes per document of each structure (CPython 3.11/3.12 on 64 bits)
PER_DOC = {
    "stream index (lengths, array, start, shard row: 4 x int64)": 32,
    "text-hash keys (uint64)": 8,
    "source labels (one pointer each, strings shared)": 8,
    "build_pool: seeded orders as numpy and as a Python list": 8 + 36,
}
PER_POOL_DOC = {
    "pool manifest: one [start, end) range per scattered document": 120,
    "pool.json as canonical JSON text and bytes": 40,
    "documents taken (Python set)": 60,
}


def footprint_terms(documents, pool_documents, shard_documents, parameters, update_rows, context,
                    sample_tokens, reference_shards, overlap_chunk_tokens, val_text_bytes):
    """{term: bytes} of peak host memory: persistent terms plus the largest transient one."""
    persistent = {k: v * documents for k, v in PER_DOC.items()}
    persistent.update({k: v * pool_documents for k, v in PER_POOL_DOC.items()})
    persistent["model and optimizer state: trainer on the device, checkpoint copy and a loaded state on the host"] = \
        2 * STATE_BYTES_PER_PARAM * parameters
    persistent["runtime allowance (assumed)"] = RUNTIME_BYTES
    transient = {
        # x and y as int64 plus their torch copies, one update at a time
        "one update's rows": 4 * 8 * update_rows * context,
        # shard_docs() as a Python list, and the StreamedShard's two int64 arrays
        "one shard's document list": (36 + 16) * shard_documents,
        # tokens, hashes, a sorted copy and isin's work array of one chunk
        "13-gram overlap: one chunk": 32 * overlap_chunk_tokens,
        # bigrams and 13-gram hashes of the sampled shards (grams, unique copies, concatenation)
        "inspection: sampled pool statistics": 3 * 8 * sample_tokens * (reference_shards + 1),
        # the validation texts, read whole once to build the control and selection sets
        "validation texts": 2 * val_text_bytes,
        # loaders.stream.DocumentStream.from_shards gathers lengths, array and row as Python lists first
        "opening the training stream (three Python int lists)": 3 * 36 * documents,
    }
    big = max(transient, key=transient.get)
    return {**persistent, f"largest transient: {big}": transient[big]}


def host_footprint(preset, node=NODE):
    p, pl = PRESETS[preset], plan(preset)
    mdt = MEAN_DOC_TOKENS[p.source]
    data_tokens = pl["data_tokens_needed"]
    corpus_tokens = CORPUS_FACTOR * data_tokens
    documents = math.ceil(corpus_tokens / mdt)
    pool_documents = math.ceil(data_tokens / mdt)
    shard_documents = math.ceil(pl["shard_targets"] / mdt)
    m = p.model()
    val_tokens = corpus_tokens / max(1, pl["climbmix_files_estimate"] or 1)  # one file's worth of validation text
    memory = footprint_terms(documents, pool_documents, shard_documents, pl["parameters"],
                             m["micro_rows"] * m["accum"], m["context"], SAMPLE_TOKENS, pl["pool_shards"],
                             1 << 20, int(4 * val_tokens))
    processes = (pl.get("node") or {}).get("runs_in_parallel", 1)
    runs = 1 + len(p.seeds) * 3  # stage A and three arms per seed
    n_branches = len(pl.get("reference_fractions") or [])
    ckpt = STATE_BYTES_PER_PARAM * pl["parameters"]
    disk = {
        "token files (uint16) of the corpus": int(2 * corpus_tokens),
        "document offsets (int64)": 8 * documents,
        "raw parquet text (assumed 2 bytes per token)": int(RAW_BYTES_PER_TOKEN * corpus_tokens),
        # each run keeps 3 checkpoints, its final state and a start state; the study adds decay branches
        "checkpoints": ckpt * (5 * runs + n_branches * len(p.seeds)),
        "manifests and logs (pool.json and rotation copies per run)": 40 * pool_documents * (1 + runs),
    }
    peak, need = processes * sum(memory.values()), sum(disk.values())
    return {"preset": preset, "memory": memory, "processes": processes, "peak_host_bytes": peak, "disk": disk,
            "disk_bytes": need,
            "node": node, "fits": peak <= node["host_memory_bytes"] and need <= node["disk_bytes"],
            "assumptions": {"mean_document_tokens": mdt, "corpus_documents": documents, "pool_documents": pool_documents,
                            "corpus_tokens": int(corpus_tokens)}}


def format_footprint(fp):
    g = lambda b: f"{b / GIB:.1f} GiB"  # noqa: E731
    n = fp["node"]
    lines = [f"host memory, peak {g(fp['peak_host_bytes'])} of {n['name']}'s {g(n['host_memory_bytes'])}: "
             f"{fp['processes']} process(es) side by side, each {g(fp['peak_host_bytes'] / fp['processes'])} "
             f"({fp['assumptions']['corpus_documents']:,} corpus documents of {fp['assumptions']['mean_document_tokens']:.0f} "
             f"tokens on average; token files are memory-mapped and not counted):"]
    lines += [f"  {v / GIB:8.2f} GiB  {k}" for k, v in fp["memory"].items()]
    lines.append(f"disk, {g(fp['disk_bytes'])} of the node's stated {g(n['disk_bytes'])}:")
    lines += [f"  {v / GIB:8.2f} GiB  {k}" for k, v in fp["disk"].items()]
    lines.append("fits the node" if fp["fits"] else "DOES NOT FIT the node")
    return "\n".join(lines)
