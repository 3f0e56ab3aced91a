"""What --out may be, and what an audit that ended early left beside it. The audit writes into a fresh sibling folder
and swaps it in for --out at the end, so --out is replaced whole: it must be new, empty or an earlier audit's
output, never a folder of other files, the working folder or one holding an input."""
import json
import os
import shutil
from pathlib import Path

from errors import DataError


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


def check_out(out, choice):
    """--out as the audit can replace it whole (a new folder swapped in for it at the end): a new folder, an empty
    one or an earlier audit's output; never the working folder or one above it, one holding an input, or a folder
    of other files (they would be deleted with it)."""
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
    if out.is_dir() and any(out.iterdir()) and not earlier_audit(out):
        names = sorted(p.name for p in out.iterdir())
        raise DataError(f"--out {out}: holds files that are not an earlier audit's output ({', '.join(names[:3])}"
                        f"{', ...' if len(names) > 3 else ''}), and the audit replaces its --out folder whole; give a "
                        "new or empty folder, or move them")


def clear_unfinished(out):
    """An earlier audit's partial output beside OUT (its .OUT.new-* folders), removed, under the lock the caller holds,
    and said: the audit that left it ended without a line of its own (killed, or ended by Ray when its node went)."""
    stale = sorted(out.parent.glob(f".{out.name}.new-*"))
    for folder in stale:
        shutil.rmtree(folder, ignore_errors=True)
    if stale:
        print(f"note: removed {', '.join(p.name for p in stale)} beside {out}: the unfinished output of an earlier "
              "audit that ended before finishing")
