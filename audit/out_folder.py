"""What --out may be, and what an audit that ended early left beside it. The audit writes into a fresh sibling folder
and swaps it in for --out at the end, so --out is replaced whole: it must be new, empty or an earlier audit's
output, never a folder of other files, the working folder or one holding an input. A --sweep's frontier
(frontier.md, .json, .png) is written and checked the same way, in a folder of its own: an audit's --out holding a
frontier is refused (replacing the folder would delete the frontier unsaid), and a frontier's --out holding an
audit's output too (a later audit there would then delete the frontier); an earlier frontier's folder takes a new
frontier."""
import glob
import json
import os
import shutil
import tempfile
from pathlib import Path

from errors import DataError

FRONTIER_FILES = ("frontier.md", "frontier.json", "frontier.png")  # what a --sweep writes (audit/sweep.py)


def inputs_of(choice):
    """The files and folders the stream is read from (a --corpus glob by the folder it names)."""
    given = [choice.lengths] if choice.lengths else []
    if choice.corpus is not None:
        given += [str(p).split("*")[0] or "." for p in choice.corpus.paths]
        given += [choice.corpus.tokenizer] if choice.corpus.tokenizer and os.path.exists(choice.corpus.tokenizer) else []
    return [Path(p) for p in given]


def earlier_audit(folder):
    """True when folder holds an audit's output: its summary.json, of the audit summary's schema, or of an audit
    from before the schema was written (its packers, R and B)."""
    try:
        d = json.loads((folder / "summary.json").read_text())
        return str(d.get("schema", "")).startswith("audit-summary/") or (
            "schema" not in d and {"packers", "row_capacity", "buffer"} <= d.keys())
    except (OSError, ValueError, AttributeError):
        return False


def earlier_frontier(folder):
    """True when folder holds a --sweep's frontier: its frontier.json, of the frontier's schema."""
    try:
        d = json.loads((folder / "frontier.json").read_text())
        return str(d.get("schema", "")).startswith("audit-frontier/")
    except (OSError, ValueError, AttributeError):
        return False


def nested_outputs(folder):
    """The subfolders of folder, at any depth, that hold an audit's or a frontier's output (relative paths)."""
    found = {p.parent for name in ("summary.json", "frontier.json") for p in folder.rglob(name) if p.parent != folder}
    return sorted(str(d.relative_to(folder)) for d in found if earlier_audit(d) or earlier_frontier(d))


def _names(folder, only=None):
    names = sorted(p.name for p in folder.iterdir() if only is None or p.name in only)
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def check_out(out, choice, frontier=False):
    """--out as the audit can replace it whole (a new folder swapped in for it at the end): a new folder, an empty
    one or an earlier audit's output; never the working folder or one above it, one holding an input, or a folder
    of other files (they would be deleted with it). frontier: --out of a --sweep, whose own output is an earlier
    frontier's; each refuses a folder holding the other's output, so neither ever deletes the other's unsaid."""
    _check_place(out, choice)
    if not (out.is_dir() and any(out.iterdir())):
        return
    if frontier:
        if earlier_audit(out):
            raise DataError(f"--out {out}: holds an audit's output ({_names(out)}); the frontier goes to a folder of "
                            "its own (an audit run there again replaces the folder whole); give another folder")
        if not earlier_frontier(out):
            raise DataError(f"--out {out}: holds files that are not an earlier frontier's output ({_names(out)}), and "
                            "the frontier replaces its --out folder whole; give a new or empty folder, or move them")
    else:
        if any((out / name).exists() for name in FRONTIER_FILES):
            raise DataError(f"--out {out}: holds a --sweep's frontier ({_names(out, FRONTIER_FILES)}), which the audit "
                            "would delete with the folder it replaces whole; give another folder, or move them")
        if not earlier_audit(out):
            raise DataError(f"--out {out}: holds files that are not an earlier audit's output ({_names(out)}), and the "
                            "audit replaces its --out folder whole; give a new or empty folder, or move them")
    if inner := nested_outputs(out):  # an earlier output's folder, searched only once it is one
        raise DataError(f"--out {out}: holds another run's output in {inner[0]}/ (an audit's or a frontier's), which "
                        "replacing the folder whole would delete; give another folder, or move it")


def _check_place(out, choice):
    """--out is a folder (or none yet), not the working folder or one above it, and holds no input."""
    if out.exists() and not out.is_dir():
        raise DataError(f"--out {out}: is a file, not a folder")
    where, here = out.resolve(), Path.cwd().resolve()
    if where == here or where in here.parents:
        raise DataError(f"--out {out}: is the working folder or holds it; the audit replaces its --out folder whole, "
                        f"so give a folder of its own (e.g. {out / 'audit'})")
    for p in inputs_of(choice):
        if where == p.resolve() or where in p.resolve().parents:
            raise DataError(f"--out {out}: holds the input {p}, and the audit replaces its --out folder whole; give "
                            "another folder")
    cache = Path(choice.corpus.cache_dir).resolve() if choice.corpus is not None else None
    for p in folders_read_whole(choice):  # the next run would read this audit's files as corpus
        if p.resolve() in where.parents:
            raise DataError(f"--out {out}: is inside the input folder {p}, every file of which is read as the corpus "
                            "(a rerun would read this audit's output); give a folder outside it")
        if cache is not None and (cache == p.resolve() or p.resolve() in cache.parents):  # the same, for the cache
            raise DataError(f"--cache-dir {choice.corpus.cache_dir}: is inside the input folder {p}, every file of "
                            "which is read as the corpus (a rerun would read the cached lengths as documents); give "
                            "a folder outside it")


def folders_read_whole(choice):
    """The --corpus folders every file under which is read: a folder named, or the root of a recursive glob (**); a
    glob of one folder's files (DIR/*.parquet) reads none of its subfolders."""
    out = []
    for p in map(str, choice.corpus.paths if choice.corpus is not None else ()):
        if "**" in p:
            out.append(Path(p.split("**")[0] or "."))
        elif not glob.has_magic(p) and Path(p).is_dir():
            out.append(Path(p))
    return out


def new_folder(out):
    """A fresh folder beside out to write into (swapped in by replace_whole); absolute, so that a Ray node's task
    that is handed it writes there."""
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=os.path.abspath(out.parent)))
    work.chmod(0o755)  # mkdtemp makes 0700; the output folder gets the usual permissions
    return work


def replace_whole(out, work):
    """work, complete, swapped in for out: a failure before this leaves the previous output untouched, never a mix
    of old and new files."""
    old = out.parent / f".{out.name}.old"
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        os.replace(out, old)
    os.replace(work, out)
    shutil.rmtree(old, ignore_errors=True)


def clear_unfinished(out):
    """An earlier audit's partial output beside OUT (its .OUT.new-* folders), removed, under the lock the caller holds,
    and said: the audit that left it ended without a line of its own (killed, or ended by Ray when its node went)."""
    stale = sorted(out.parent.glob(f".{out.name}.new-*"))
    for folder in stale:
        shutil.rmtree(folder, ignore_errors=True)
    if stale:
        print(f"note: removed {', '.join(p.name for p in stale)} beside {out}: the unfinished output of an earlier "
              "audit that ended before finishing")
