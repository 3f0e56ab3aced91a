#!/usr/bin/env python3
"""Write the paper's six training configs (or CPU-sized versions of the same six).

  python protocols/generate_configs.py [--preset paper|tiny] [--out protocols/configs/paper]

Conditions: baseline (original packer), random_crop (random spans), segmented
(segment-first), each at model seeds 43 and 44. The paper preset is 953 updates of
64 rows x 2048 targets x 4 accumulation steps; the tiny preset changes only sizes
(model, context, rows, updates, evaluation length) and scales the buffer, nothing about
the packing rules or the seeds. The presets, and why the tiny one has the sizes and the
demo-only source-length filter it has, are in presets/six.py.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run as a file: the repository root

from console.shutdown import skip_final_collections  # noqa: E402
from corpus.atomic import atomic_write_json  # noqa: E402
from errors import DataError, check_out_folder, os_error_line  # noqa: E402
from presets.six import PRESETS, configs  # noqa: E402


def main(argv=None):
    skip_final_collections()  # the interpreter's last scans of every object skipped at exit
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="paper")
    ap.add_argument("--out", default=None, help="folder (default protocols/configs/<preset>)")
    a = ap.parse_args(argv)
    out = a.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", a.preset)
    try:
        check_out_folder(out)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for c in configs(a.preset):
        try:
            atomic_write_json(os.path.join(out, f"{c['name']}.json"), c)
        except OSError as e:  # a full disk, a read-only folder
            print(f"error: {os_error_line(e, out)}", file=sys.stderr)
            return 2
        print(os.path.join(out, f"{c['name']}.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
