"""Freeze the comparison protocol before any confirmation pass.

  python -m comparison.freeze --preset tiny [--data-dir DIR] --out runs/main/protocol.json [--overwrite]

Writes canonical JSON with the six run configs, every evaluation parameter (populations,
seeds, sampling, contrasts, bootstrap, confirmation size and the fingerprint of the
confirmation stream's rows, the stream checks made before scoring, and the section 5.6 ranked set: the seed-43 runs with baseline_s43 as the
reference, unless --rank names another set), the corpus and
tokenizer SHA256s, the SHA256 of every code file and of the rest of the fixed judge (checkers,
the paper's values, the queue's and study's rules) and the UTC time, plus a
`protocol.json.sha256` sidecar; prints the protocol's SHA256.
"""
import argparse
import sys
import time
from pathlib import Path

from console.shutdown import skip_final_collections
from console.usage import prog_name
from corpus.layout import Layout, default_data_dir
from errors import DataError, check_out_file
from presets.six import configs

# Late imports: the training config, the streams, the evaluation plan and the protocol load torch, pyarrow or
# numpy; main() imports them after parsing, so `--help` answers without them


def main(argv=None):
    skip_final_collections()  # the interpreter's last scans of every object skipped at exit
    ap = argparse.ArgumentParser(prog=prog_name("python -m comparison.freeze"), description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="tiny", choices=["tiny", "paper"],
                    help="which six configs (presets/six.py; default tiny)")
    ap.add_argument("--data-dir", default=None, help="data root (default: $PACKAUDIT_DATA or ~/.cache/packing-audit)")
    ap.add_argument("--name", default=None, help="protocol name (default: <preset>-six)")
    ap.add_argument("--out", required=True, help="protocol file to write (a <file>.sha256 sidecar goes beside it)")
    ap.add_argument("--replicates", type=int, default=10000, help="bootstrap replicates (default 10000)")
    ap.add_argument("--per-stratum", type=int, default=None,
                    help="window sources per stratum (default 256 for climbmix, 64 for the offline corpus)")
    ap.add_argument("--rank", default=None,
                    help="comma list of run names for the section 5.6 ranking, the first is the reference "
                         "(default: the seed-43 runs, baseline_s43 first)")
    ap.add_argument("--overwrite", action="store_true",
                    help="replace a protocol already at --out (refused without it: a pass may have been confirmed under it)")
    a = ap.parse_args(argv)
    for name, v in (("--replicates", a.replicates), ("--per-stratum", a.per_stratum)):
        if v is not None and v < 1:
            print(f"error: {name} must be >= 1, got {v}", file=sys.stderr)
            return 2
    try:
        check_out_file(a.out)  # before the corpus is hashed (seconds): where the protocol goes must be writable
    except DataError as e:  # a folder among them: a protocol is a file
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not a.overwrite and Path(a.out).exists():  # a confirmation pass may cite it by its SHA256
        what = ("a protocol is already frozen there" if Path(f"{a.out}.sha256").exists() else
                "another file is there (no .sha256 beside it: not a frozen protocol)")
        print(f"error: {a.out}: {what}; pass --overwrite to replace it, or choose another --out", file=sys.stderr)
        return 2
    from corpus.verify import verify_prepared
    from eval.confirmation import confirmation_fingerprint
    from eval.plan import evaluation_plan
    from loaders.stream import open_split
    from protocols.protocol import judge_sha256, write_protocol
    from training.checkpoint import code_sha256
    from training.config import resolve_config

    try:
        dd = a.data_dir or str(default_data_dir())
        runs = {}
        for c in configs(a.preset):
            ov = [f"{k}={v}" for k, v in c.items()] + ([f"data_dir={a.data_dir}"] if a.data_dir else [])
            runs[c["name"]] = resolve_config(None, ov).to_dict()
        first = next(iter(runs.values()))
        lay = Layout(dd, first["source"])
        rec = lay.prepared()
        verify_prepared(lay.root, full=True)  # the frozen hashes must describe files that verify now
        n_val = open_split(dd, first["source"], "val").n
        plan = evaluation_plan(first["source"], n_val, first["context"], first["eval_rows"], first["eval_batches"],
                               a.per_stratum, a.replicates, run_names=list(runs), buffer=first.get("eval_buffer", 1000))
        plan["confirmation_fingerprint"] = confirmation_fingerprint(dd, first["source"], plan, first["eval_rows"])
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    proto = {
        "name": a.name or f"{a.preset}-six",
        "frozen_at_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "runs": runs,
        "evaluation": plan,
        "corpus": {"source": first["source"], "shards_sha256": rec["shards_sha256"],
                   "tokenizer_sha256": rec["tokenizer_sha256"], "files": rec["files"], "build_id": rec["build_id"]},
        "code_sha256": code_sha256(),
        "judge_sha256": judge_sha256(),
    }
    if a.rank:
        names = [n.strip() for n in a.rank.split(",") if n.strip()]
        unknown = [n for n in names if n not in runs]
        if len(names) < 2 or unknown:
            print(f"error: --rank needs two or more of the protocol's runs ({', '.join(runs)})"
                  + (f"; unknown: {', '.join(unknown)}" if unknown else ""), file=sys.stderr)
            return 2
        proto["evaluation"]["ranking"].update({"population": sorted(names), "reference": names[0], "seed": None})
    digest = write_protocol(a.out, proto)
    print(f"froze protocol {proto['name']} at {proto['frozen_at_utc']}: {a.out}\nSHA256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
