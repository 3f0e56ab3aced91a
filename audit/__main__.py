"""Exact CPU audit: who is emitted, discarded, buffered or never started, for any packer.

  python -m audit --source stdlib                    # offline corpus, scaled budget
  python -m audit --source climbmix                  # the paper's 499,646,464 targets
  python -m audit --synthetic                        # paper-shaped synthetic census
  python -m audit --corpus data/*.parquet --tokenizer tok.json   # your own corpus where it lives
  python -m audit --lengths MY_LENGTHS.txt           # your own corpus: lengths in arrival order, one pass
  python -m audit --lengths F --packers original,lossless,concat_chunk,trl_bfd,olmo_truncate
  python -m audit --lengths F --trace mypackers:pack [--trace-arg k=v ...]   # your own packer
  python -m audit --lengths F --ranks 2 --loader-workers 4 [--split-by group:G|file-group:G|file]  # a packer per worker stream
  python -m audit --lengths F --pipeline nanochat --ranks 8                       # a named loader's topology
  python -m audit --lengths F --ranks 8 --loader-workers 4 --engine ray [--ray-address HOST:PORT]  # streams on Ray

The paper's four packers (original, lossless, segment_first, random_span) are replayed on
lengths by the selection core that trains. Every other packer is traced: run on tracer
documents whose token ids say where each token came from, its rows decoded back into the
same events (concat_chunk; trl_bfd, trl_bfd_split, trl_wrapped; olmo_truncate,
olmo_fragment; torchtune_text, torchtune_chat; titan_concat, titan_first_fit: the real
libraries, from the 'audit-libs' extra; and the loaders of --loader-arg below: megatron_gpt,
megatron_blend, grain_first_fit, grain_best_fit, grain_concat_split, foundry_concat,
foundry_no_wrap, foundry_binpack, llamafactory_pt, axolotl_completion,
axolotl_chat_template). 'all' is the four; 'every' adds every installed one.

Writes to --out: fates_<packer>.parquet (one row per document: its file, row, label, length and
what the packer did with it), events_<packer>.parquet (CSV too with --csv), stream_lengths.txt (one
refill per line, for checkers/packing_checker.py and --lengths), summary.json,
comparison.json, regime.json, report.md and the figures. The output is written into a
temporary sibling folder and swapped in at the end, under a lock: a failed or concurrent
audit never leaves a mix of old and new files.
"""
import argparse
import sys

from audit.libraries.about import help_line as loaders_help
from audit.libraries.args import help_line as keys_help
from audit.loader_presets import help_lines, preset_help
from console.shutdown import skip_final_collections
from console.usage import prog_name
from errors import DataError, check_out_folder, os_error_line
from fanout import add_engine_args

PREPARED_SOURCES = ("stdlib", "climbmix", "parquet")
MAX_LENGTH = 2 ** 31  # --max-length's default: far above any real document, far below a misread file


def add_corpus_args(ap):
    """How --corpus is read (and --lengths's parquet columns)."""
    ap.add_argument("--format", default=None, metavar="NAME",
                    help="--corpus: the format of a file whose name and first bytes do not say it, or say it wrongly "
                         "(datasets, parquet, arrow, jsonl, megatron, tokens); in a folder, only that format's files "
                         "are read. A Megatron prefix takes only megatron, a datasets folder only datasets or arrow "
                         "(each shard a file of its own): another format there is refused. A folder's files whose "
                         "name and first bytes say no format (a README) are never read, nor its *.json files "
                         "(metadata: dataset_info.json, tokenizer.json) unless the format is jsonl")
    ap.add_argument("--column", default=None, help="the length column of a --lengths .parquet file; with --corpus, "
                    "the text or token column (default: text, or input_ids / token_ids / tokens)")
    ap.add_argument("--label-column", default=None, help="the label column of a --lengths .parquet file (default: a "
                    "column named label or source); with --corpus, the label column or JSON field (a dotted path: a JSON field, or a struct column's), "
                    "default source or label, else each file's name")
    ap.add_argument("--tokenizer", default=None, metavar="T",
                    help="--corpus with text: a tokenizers JSON file, a tiktoken encoding (NAME, or NAME:RANKFILE), or "
                         "this project's tokenizer folder")
    ap.add_argument("--bos", choices=("auto", "add", "none"), default=None,
                    help="--corpus: count a BOS per document? auto (default): yes for text, and for token data only "
                         "where the first token is not --bos-id; add: always; none: never (the default under "
                         "--pipeline llamafactory, whose tokenizing adds none, and --pipeline megatron, which trains "
                         "on the .bin as it is). The report states it")
    ap.add_argument("--bos-id", type=int, default=None, help="--corpus: the BOS token id (default: the tokenizer's own)")
    ap.add_argument("--separator", type=int, default=None,
                    help="--corpus with flat token files: the id that ends each document (an EOS)")
    ap.add_argument("--token-dtype", choices=("uint16", "uint32"), default=None,
                    help="--corpus with flat .bin token files: their type (a .npy says its own)")
    ap.add_argument("--cache-dir", default=None,
                    help="--corpus: where the lengths are cached (default: OUT.lengths beside --out)")


# --split-by's values, each the deal of a loader this audit models (audit/topology.py)
SPLIT_HELP = ("how documents are shared among the worker streams: 'document' (default: document i goes "
              "to worker stream i mod N*M, rank w mod N, worker w // N), 'group:G' (consecutive groups "
              "of G documents dealt round-robin across the whole stream), 'file-group:G' (the same, "
              "starting again at stream 0 in every file: group k of a file to stream k mod N*M, as "
              "row groups strided by rank in each parquet file), 'file' (whole files: file f to stream "
              "f mod N*M; every stream needs a file) or 'hf-iterable' (HF datasets' streaming deal under "
              "split_dataset_by_node: 'file' when the files divide by N, else worker k reads files k, k+M, "
              "... and rank r keeps every N-th of its documents). A length file is one file")


def pipeline_help(argv):
    """`--pipeline [NAME] --help`: the preset in full, or the list (argparse would take --help for a missing NAME)."""
    if not {"-h", "--help"} & set(argv):
        return
    for i, a in enumerate(argv):
        if a == "--pipeline" or a.startswith("--pipeline="):
            name = a.partition("=")[2] or (argv[i + 1] if i + 1 < len(argv) else None)
            print(preset_help(None if name in (None, "-h", "--help") else name))
            raise SystemExit(0)


def parse_args(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    pipeline_help(argv)
    ap = argparse.ArgumentParser(prog=prog_name("python -m audit"), description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--source", choices=PREPARED_SOURCES, default="stdlib",
                     help="prepared corpus (default stdlib; parquet: your own, prepare.py --source parquet)")
    src.add_argument("--synthetic", action="store_true", help="audit the paper-shaped synthetic census stream instead")
    src.add_argument("--lengths", metavar="FILE", help="audit your own corpus: document lengths in arrival order "
                     "(one integer per line, a refill per line, .npy, or .parquet with --column)")
    src.add_argument("--corpus", nargs="+", metavar="PATH",
                     help="audit your own corpus where it lives: files, folders or globs, in the order given (sorted "
                          "within a glob). Read: a datasets folder (save_to_disk), parquet or arrow files (a token-list "
                          "column gives lengths without decoding a token; a text column is tokenized), jsonl, "
                          ".jsonl.gz, .jsonl.zst with a text field, Megatron-Core PREFIX.bin/.idx (lengths from the "
                          "index alone), flat token files (.bin/.npy, uint16/uint32) cut at --separator. Lengths are "
                          "cached (--cache-dir) with the inputs' SHA256s: a rerun on unchanged inputs reads nothing again")
    add_corpus_args(ap)
    ap.add_argument("--refill-docs", type=int, default=None,
                    help="documents per buffer refill for --lengths, and for each worker stream's share under --ranks / "
                         "--loader-workers (default 128, the pinned baseline's slice)")
    ap.add_argument("--data-dir", default=None, help="data root (default: $PACKAUDIT_DATA or ~/.cache/packing-audit)")
    ap.add_argument("--split", choices=["train", "val"], default="train",
                    help="train: the eligible training corpus (default); val: the official development stream, "
                         "whose default budget is the official 20,971,520 targets (climbmix)")
    ap.add_argument("--packers", default=None, help="comma list (see above), 'all' (the paper's four; the default) or 'every'")
    ap.add_argument("--trace", metavar="MODULE:CALLABLE", help="also trace your own packer: CALLABLE(docs, **args) "
                    "takes an iterator of token-id arrays and yields rows")
    ap.add_argument("--trace-arg", action="append", default=[], metavar="K=V",
                    help="a keyword argument for --trace: True, False and None as Python's, an integer or a number as "
                         "one, anything else as text")
    add_loader_args(ap)
    b = ap.add_mutually_exclusive_group()
    b.add_argument("--updates", type=int, help="budget in optimizer updates of 524,288 targets")
    b.add_argument("--targets", type=int, help="budget in targets (a multiple of R-1); default: the paper's "
                   "499,646,464 for climbmix/synthetic, the paper's share of its corpus (79%%) otherwise: one pass or less")
    ap.add_argument("--row-capacity", type=int, default=2049, help="R = context + 1 (default 2049)")
    ap.add_argument("--buffer", type=int, default=1000, help="minimum buffered spans B (default 1000)")
    ap.add_argument("--ranks", type=int, default=1, help="N data-parallel ranks (default 1: one stream, as before)")
    ap.add_argument("--loader-workers", type=int, default=1,
                    help="M DataLoader workers per rank (default 1). With N*M > 1 each of the N*M worker streams runs "
                         "its own packer and buffer over its own share, refilled --refill-docs documents at a time, for "
                         "an equal share of the budget's rows (the first rows mod N*M streams get one row more); the "
                         "report gives the merged answer beside the one-stream answer for the same budget")
    ap.add_argument("--split-by", default=None, help=SPLIT_HELP)
    ap.add_argument("--pipeline", metavar="NAME", help="a named loader: fills in --packers, --split-by and "
                    "--refill-docs where you leave them out, and says what owns a buffer (" + help_lines() + "); what "
                    "each follows in its loader's code, file by file, heads the report (and summary.json's pipeline); "
                    "--pipeline NAME --help prints it")
    add_engine_args(ap, "permutations (--permutations above 0, with the original packer) and worker streams' "
                        "audits (--ranks / --loader-workers above 1)")
    ap.add_argument("--workers", type=int, default=None,
                    help="with --engine local: processes side by side for --corpus's length pass (default: the cores) "
                         "and for the permutations or worker streams (default 1: one after another in this process; "
                         "with --trace, everything runs here: your packer is called, not pickled)")
    # None where left out: a frontier (--sweep) refuses the ones it would ignore, and knows them by it
    ap.add_argument("--permutations", type=int, default=None,
                    help="seeded arrival-order permutations for the startup delay (default 20: plan.PERMUTATIONS)")
    ap.add_argument("--thresholds", default=None,
                    help="length thresholds of the repeated-corpus table (default 16384,32768,65536,131072: "
                         "plan.THRESHOLDS; the longest source is always added)")
    ap.add_argument("--passes", type=int, default=None,
                    help="read the stream this many times and stop (default: it wraps, as a training loader that "
                         "cycles over epochs). With --passes 1 a budget past the corpus is not reached: each packer "
                         "stops where its input ends, and the report says how many rows it made")
    ap.add_argument("--max-length", type=int, default=MAX_LENGTH,
                    help="refuse a document longer than this many tokens (default 2^31): a misread file, caught "
                         "before a huge audit starts")
    add_output_args(ap)
    return ap.parse_args(argv)


def add_output_args(ap):
    """What the audit writes, and where: its folder, fate tables, figures, CSV events; or a frontier (--sweep)."""
    ap.add_argument("--no-fates", action="store_true",
                    help="skip fates_<packer>.parquet, the one row per input document of what became of it "
                         "(written by default: a pass over the documents on disk after each packer)")
    ap.add_argument("--out", default="runs/audit", help="output folder (default runs/audit), replaced whole at the "
                    "end: new, empty, or an earlier audit's output (with --sweep: an earlier frontier's; a folder of other "
                    "files, or of the other's output, is refused)")
    ap.add_argument("--no-figures", action="store_true", help="tables only (report.md without figures; with --sweep, "
                    "frontier.md and .json without frontier.png): faster")
    ap.add_argument("--csv", action="store_true", help="also write the events as CSV (the standard-library checker's input)")
    ap.add_argument("--no-csv", action="store_true", help=argparse.SUPPRESS)  # the default now; kept for old callers
    ap.add_argument("--sweep", action="append", default=[], metavar="KEY=V1,V2,...",
                    help="the frontier (audit/sweep.py): replay every combination of the listed buffer, packer, "
                         "row_capacity and ranks values and write frontier.md, .json and .png to --out (in this "
                         "process: not with --csv, --no-fates, --trace, --passes, --permutations, "
                         "--thresholds or --engine ray)")


def add_loader_args(ap):
    ap.add_argument("--loader-arg", action="append", default=[], metavar="K=V",
                    help="a setting of a library loader: " + loaders_help() + ". Keys: " + keys_help())


def main(argv=None, left_out=None):
    """The command line; left_out ({packer: why}) names packers a caller chose not to run, for the comparison."""
    skip_final_collections()  # the interpreter's last scans of every object skipped at exit
    args = parse_args(argv)
    try:
        # the plan's checks, the mechanism and the writers import numpy, pyarrow, matplotlib: after parsing, so --help
        # is fast; inside the try, so that Ctrl-C while they import is the one line below, not a traceback
        from audit.plan import plan_of
        from audit.run import run_audit

        check_out_folder(args.out)  # before the stream is read: where the audit goes must be a folder it can make
        plan = plan_of(args, left_out)  # every other bad value, one line, before anything is read or written
        if plan.sweep is not None:
            # late, as run_audit above: --help stays fast
            from audit.sweep import run_sweep

            return run_sweep(plan)
        return run_audit(plan)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a full disk or a lost folder while writing: the previous output is untouched
        print(f"error: {os_error_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted: nothing written; {args.out} is as it was", file=sys.stderr)
        return 130
    except MemoryError:  # numpy's, for one: the buffer's bookkeeping is allocated for B documents up front
        print(f"error: out of memory (--buffer {args.buffer:,}: the packer's buffer and its bookkeeping grow with B; "
              f"a smaller --buffer, or fewer --workers); nothing written, {args.out} is as it was", file=sys.stderr)
        return 2


# left out of the main job's comparison (still audited with --packers NAME): too slow on the offline corpus
MAIN_JOB_SKIPS = {"titan_first_fit": "its scan-and-pick pass runs over a buffer where samples longer than R pile up "
                                     "(they are dropped only once every buffered sample is over-length): minutes here"}


def audit_offline(data_dir=None, out="runs/main/audit_packers", extra_args=()) -> int:
    """The main job's cross-packer comparison on the offline corpus: the paper's four, concatenate-and-chunk and
    every installed library packer (but MAIN_JOB_SKIPS), at the scaled budget. Returns the exit status; the
    findings page reads its comparison.json (records/audit_comparison.py) for SUMMARY.md."""
    # late, as in main(): --help stays fast
    from audit.adapters import SPECS, installed
    from loaders.core import PACKERS

    names = list(PACKERS) + [n for n, s in SPECS.items() if installed(s) and n not in MAIN_JOB_SKIPS]
    left = {n: why for n, why in MAIN_JOB_SKIPS.items() if n in SPECS and installed(SPECS[n])}
    for n, why in left.items():
        print(f"left out here: {n} ({why}); audit it alone with --packers {n}")
    # Megatron's own default split (969,30,1) holds out 3.1% of the documents, and on this corpus leaves the blend's
    # smaller dataset no test sample (megatron-core then refuses it): every document in the training split here
    argv = ["--source", "stdlib", "--packers", ",".join(names), "--permutations", "0", "--out", str(out),
            "--loader-arg", "split=100,0,0"]
    return main(argv + (["--data-dir", str(data_dir)] if data_dir else []) + list(extra_args), left_out=left)


if __name__ == "__main__":
    sys.exit(main())
