#!/usr/bin/env python3
"""The main job on the built-in offline corpus, every stage in order.

  ./run.sh main [--data-dir DIR] [--out runs/main] [--stages prepare,audit,train,eval]

prepare  offline corpus (this Python's standard library) -> tokenizer (vocab 8192)
         -> pre-tokenized shards -> length census
audit    the four packers replayed on lengths at a budget scaled to the corpus
train    the six tiny configs (baseline / random_crop / segmented x seeds 43, 44) on CPU,
         each ending with its official score, and the section 5.3-style table
freeze   the comparison protocol (configs, populations, seeds, bootstrap, corpus and code
         SHA256s) and a SHA256 manifest of the checkpoints, before any confirmation pass
eval     under that protocol: source windows, position bins and paired bootstraps on two populations, the
         confirmation score and prefix rankings of the six checkpoints, then the
         numpy checkers recompute every number from the evidence files
Each stage prints where it reads and writes; results land under --out.
"""
import argparse
import sys
import time
from pathlib import Path

STAGES = ("prepare", "audit", "train", "freeze", "eval")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=None, help="data root (default: $PACKAUDIT_DATA or ~/.cache/packing-audit)")
    ap.add_argument("--out", default="runs/main", help="results folder (default runs/main)")
    ap.add_argument("--stages", default=",".join(STAGES), help=f"comma list of {', '.join(STAGES)}")
    args = ap.parse_args(argv)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    bad = [s for s in stages if s not in STAGES]
    if bad:
        print(f"error: unknown stage(s) {', '.join(bad)}; choose from {', '.join(STAGES)}", file=sys.stderr)
        return 2
    out = Path(args.out)
    t0 = time.time()
    dd = ["--data-dir", args.data_dir] if args.data_dir else []
    if "prepare" in stages:
        print("== stage: prepare (offline corpus)", flush=True)
        import prepare

        rc = prepare.main(["--source", "stdlib", *dd])
        if rc:
            return rc
    if "audit" in stages:
        print("\n== stage: audit (four packers, scaled budget)", flush=True)
        from audit.__main__ import main as audit_main

        rc = audit_main(["--source", "stdlib", *dd, "--out", str(out / "audit")])
        if rc:
            return rc
    if "train" in stages:
        print("\n== stage: train (six tiny configs on CPU)", flush=True)
        from protocols.run_six import main as run_six

        rc = run_six(["--preset", "tiny", *dd, "--out", str(out / "train")])
        if rc:
            return rc
    if "freeze" in stages:
        print("\n== stage: freeze (protocol and checkpoint manifest)", flush=True)
        from manifests.__main__ import main as manifest_main
        from protocols.freeze import main as freeze_main

        rc = freeze_main(["--preset", "tiny", *dd, "--out", str(out / "protocol.json")]) or manifest_main(
            ["write", str(out / "train"), "--glob", "ckpt_*.pt", "--out", str(out / "checkpoints.sha256")])
        if rc:
            return rc
    if "eval" in stages:
        print("\n== stage: eval (windows, bins, bootstrap, confirmation, rankings)", flush=True)
        from eval.__main__ import main as eval_main

        from manifests.__main__ import verify_manifest

        if (out / "checkpoints.sha256").exists() and not verify_manifest(out / "checkpoints.sha256"):
            return 1
        proto = ["--protocol", str(out / "protocol.json")] if (out / "protocol.json").exists() else []
        rc = eval_main(["--runs", str(out / "train"), *dd, "--out", str(out / "eval"), *proto])
        if rc:
            return rc
        import subprocess

        for chk in ("verify_window_evidence.py", "verify_evaluation_summary.py"):
            rc = subprocess.call([sys.executable, str(Path(__file__).parent / "checkers" / chk), str(out / "eval")])
            if rc:
                return rc
    print(f"\nmain job done in {time.time() - t0:.0f}s; results under {out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
