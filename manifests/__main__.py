"""Write or verify SHA256 manifests (the `sha256sum` format: "<hex>  <path>" per line).

  python -m manifests write --code [--out manifests/code.sha256]        # every tracked .py file
  python -m manifests write FILE_OR_DIR... --out runs/main/checkpoints.sha256 [--glob 'ckpt_*.pt']
  python -m manifests verify runs/main/checkpoints.sha256 [--allow-extra]

Paths are stored relative to the manifest's folder, so a manifest travels with its files;
a relative entry may not climb out of that folder (verify fails such a line, e.g.
`../../etc/hostname`; a file outside the folder is written as an absolute path, explicit
about where it lies), and only regular files are hashed: a FIFO, a directory or a device
named by a line is a failure of that line, never read. `sha256sum -c` checks the same file
(it skips the '#' lines). A manifest written from a folder records it as
"# covers: <folder> glob <pattern>" (recursive): verify then fails on a file there that the
manifest does not list, unless --allow-extra. Verify exits 1 on a
missing or changed file, an unlisted covered file, an unparsable line (the first five named
by line number, the rest counted; a file with no entry line at all gets one line saying it is
not a manifest) or an empty manifest; 2 when the manifest itself is not found.
"""
import argparse
import re
import subprocess
import sys
from pathlib import Path

from console.shutdown import skip_final_collections
from console.usage import prog_name
from corpus.atomic import atomic_write_text, sha256_file
from errors import DataError, check_out_file, os_error_line

ROOT = Path(__file__).resolve().parents[1]


def code_files():
    out = subprocess.run(["git", "ls-files", "*.py", "*.sh", "*.toml", ".ci/run"], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.split()
    return [ROOT / p for p in out]


COVERS = "# covers: "
SHOWN_BAD_LINES = 5  # unparsable lines named one by one, the rest counted; a file with no entry line is one line
LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")  # sha256sum's text and binary forms


def _rel(p: Path, base: Path) -> str:
    p = p.resolve()
    return (p.relative_to(base) if p.is_relative_to(base) else p).as_posix()


def inside(p: Path, base: Path) -> bool:
    return p.resolve().is_relative_to(base.resolve())


def write_manifest(files, out: Path, covers=()):
    """covers: (folder, glob) pairs whose every matching file (recursively) the manifest claims to list."""
    out = out.resolve()
    lines = [f"{COVERS}{_rel(Path(folder), out.parent)} glob {pattern}\n" for folder, pattern in covers]
    n = 0
    for f in sorted({Path(p).resolve() for p in files}):
        lines.append(f"{sha256_file(f)}  {_rel(f, out.parent)}\n")
        n += 1
    atomic_write_text(out, "".join(lines))
    return n


def covered_files(folder: Path, pattern: str, manifest: Path):
    return {f.resolve() for f in folder.rglob(pattern)
            if f.is_file() and not f.name.endswith(".sha256") and f.resolve() != manifest.resolve()}


def verify_manifest(path: Path, log=print, allow_extra=False):
    """True when every listed file matches, the manifest lists at least one file, every line parses,
    and no file in a covered folder/glob is missing from the list (unless allow_extra)."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        log(f"{path}: unreadable manifest ({type(e).__name__})")
        return False
    bad_lines, bad_files, n, listed, covers = [], 0, 0, set(), []
    bad_line = bad_lines.append  # logged after the entries: all of them counted, a few named
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            if line.startswith(COVERS):
                folder, sep, pattern = line[len(COVERS):].rpartition(" glob ")
                if not sep or not folder or not pattern:
                    bad_line(f"{path}:{i}: not a '{COVERS}<folder> glob <pattern>' line")
                elif not Path(folder).is_absolute() and not inside(path.parent / folder, path.parent):
                    bad_line(f"{path}:{i}: covered folder {folder} lies outside the manifest's folder")
                else:
                    covers.append((folder, pattern))
            continue
        m = LINE.match(line)
        if not m:
            bad_line(f"{path}:{i}: not a '<sha256>  <path>' line")
            continue
        digest, name = m.group(1).lower(), m.group(2)
        f = Path(name) if Path(name).is_absolute() else path.parent / name
        n += 1
        if not Path(name).is_absolute() and not inside(f, path.parent):
            log(f"OUTSIDE   {name} (a relative entry that leaves the manifest's folder)")
            bad_files += 1
            continue
        listed.add(f.resolve())
        if not f.exists():
            log(f"MISSING   {name}")
            bad_files += 1
        elif not f.is_file():  # a FIFO would block the read, a directory raise: neither is hashed
            log(f"NOTFILE   {name} (not a regular file)")
            bad_files += 1
        elif sha256_file(f) != digest:
            log(f"MISMATCH  {name}")
            bad_files += 1
    if n == 0 and bad_lines:  # README.md given by mistake: one line, not one per line of it
        log(f"{path}: not a manifest: none of its lines is a '<sha256>  <path>' line ({len(bad_lines)} unparsable)")
        return False
    for message in bad_lines[:SHOWN_BAD_LINES]:
        log(message)
    if len(bad_lines) > SHOWN_BAD_LINES:
        log(f"{path}: {len(bad_lines) - SHOWN_BAD_LINES} more unparsable line(s) not shown")
    if n == 0:
        log(f"{path}: empty manifest (no '<sha256>  <path>' lines): nothing to verify")
        return False
    extra = 0
    for folder, pattern in covers:
        root = Path(folder) if Path(folder).is_absolute() else path.parent / folder
        for f in sorted(covered_files(root, pattern, path) - listed):
            extra += 1
            log(f"EXTRA     {_rel(f, path.parent.resolve())} (matches {pattern} in {folder} but is not listed)")
    log(f"{n - bad_files} of {n} listed files verified against {path}"
        + (f"; {len(bad_lines)} unparsable line(s)" if bad_lines else "")
        + (f"; {extra} unlisted file(s) in covered folders{' (allowed)' if allow_extra else ''}" if extra else ""))
    return not bad_lines and bad_files == 0 and (allow_extra or extra == 0)


def main(argv=None):
    skip_final_collections()  # the interpreter's last scans of every object skipped at exit
    ap = argparse.ArgumentParser(prog=prog_name("python -m manifests"), description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="write a manifest")
    w.add_argument("paths", nargs="*", help="files or folders")
    w.add_argument("--code", action="store_true", help="the repository's tracked code files")
    w.add_argument("--glob", default="*", help="pattern for files inside folders, searched recursively; the folder "
                   "and pattern are recorded so verify also catches unlisted files (default: all)")
    w.add_argument("--out", required=False, default=None,
                   help="manifest file (default: manifests/code.sha256 with --code, else manifest.sha256)")
    v = sub.add_parser("verify", help="verify a manifest")
    v.add_argument("manifest", help="a manifest written by 'write' (or by sha256sum)")
    v.add_argument("--allow-extra", action="store_true",
                   help="files in a covered folder that the manifest does not list are reported, not a failure")
    a = ap.parse_args(argv)
    if a.cmd == "verify":
        if not Path(a.manifest).exists():
            print(f"error: {a.manifest}: manifest not found", file=sys.stderr)
            return 2
        return 0 if verify_manifest(Path(a.manifest), allow_extra=a.allow_extra) else 1
    files = code_files() if a.code else []
    out = Path(a.out or (ROOT / "manifests" / "code.sha256" if a.code else "manifest.sha256"))
    try:  # before any file is hashed: a folder there failed the write only after, naming a temporary file
        check_out_file(out)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    covers = []
    for p in map(Path, a.paths):
        if p.is_dir():
            covers.append((p, a.glob))
            files += sorted(covered_files(p, a.glob, out))
        elif p.is_file():
            files.append(p)
        else:
            print(f"error: {p}: not found", file=sys.stderr)
            return 2
    if not files:
        print("error: no files to list (an empty manifest verifies nothing)", file=sys.stderr)
        return 2
    try:
        n = write_manifest(files, out, covers)
    except OSError as e:
        print(f"error: {os_error_line(e, out)}", file=sys.stderr)
        return 2
    print(f"wrote {out}: {n} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
