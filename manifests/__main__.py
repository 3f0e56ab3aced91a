"""Write or verify SHA256 manifests (the `sha256sum` format: "<hex>  <path>" per line).

  python -m manifests write --code [--out manifests/code.sha256]        # every tracked .py file
  python -m manifests write FILE_OR_DIR... --out runs/main/checkpoints.sha256 [--glob 'ckpt_*.pt']
  python -m manifests verify runs/main/checkpoints.sha256               # exit 1 on any mismatch

Paths are stored relative to the manifest's folder, so a manifest travels with its files;
`sha256sum -c` checks the same file.
"""
import argparse
import subprocess
import sys
from pathlib import Path

from corpus.atomic import atomic_write_text, sha256_file

ROOT = Path(__file__).resolve().parents[1]


def code_files():
    out = subprocess.run(["git", "ls-files", "*.py", "*.sh", "*.toml", ".ci/run"], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.split()
    return [ROOT / p for p in out]


def write_manifest(files, out: Path):
    out = out.resolve()
    lines = []
    for f in sorted(Path(p).resolve() for p in files):
        rel = f.relative_to(out.parent) if f.is_relative_to(out.parent) else f
        lines.append(f"{sha256_file(f)}  {rel.as_posix()}\n")
    atomic_write_text(out, "".join(lines))
    return len(lines)


def verify_manifest(path: Path, log=print):
    path = Path(path)
    bad = 0
    n = 0
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            digest, name = line.split("  ", 1)
        except ValueError:
            log(f"{path}:{i}: not a '<sha256>  <path>' line")
            bad += 1
            continue
        f = Path(name) if Path(name).is_absolute() else path.parent / name
        n += 1
        if not f.exists():
            log(f"MISSING   {name}")
            bad += 1
        elif sha256_file(f) != digest:
            log(f"MISMATCH  {name}")
            bad += 1
    log(f"{n - bad} of {n} files verified against {path}")
    return bad == 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m manifests", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="write a manifest")
    w.add_argument("paths", nargs="*", help="files or folders")
    w.add_argument("--code", action="store_true", help="the repository's tracked code files")
    w.add_argument("--glob", default="*", help="pattern for files inside folders (default: all)")
    w.add_argument("--out", required=False, default=None)
    v = sub.add_parser("verify", help="verify a manifest")
    v.add_argument("manifest")
    a = ap.parse_args(argv)
    if a.cmd == "verify":
        if not Path(a.manifest).exists():
            print(f"error: {a.manifest}: manifest not found", file=sys.stderr)
            return 2
        return 0 if verify_manifest(Path(a.manifest)) else 1
    files = code_files() if a.code else []
    for p in map(Path, a.paths):
        if p.is_dir():
            files += [f for f in p.rglob(a.glob) if f.is_file() and not f.name.endswith(".sha256")]
        elif p.is_file():
            files.append(p)
        else:
            print(f"error: {p}: not found", file=sys.stderr)
            return 2
    out = Path(a.out or (ROOT / "manifests" / "code.sha256" if a.code else "manifest.sha256"))
    n = write_manifest(files, out)
    print(f"wrote {out}: {n} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
