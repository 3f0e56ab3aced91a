"""One section of the findings page, computed (Section: headline, text, table, notes, links, its scorecard
row), and the small formats every section module shares. summary.py renders the sections."""
from pathlib import Path

from errors import DataError

NOT_COMPARABLE = "not comparable at this scale"


def pct(x, nd=2):
    return "n/a" if x is None else f"{100 * x:.{nd}f}%"


def n(x):
    return "n/a" if x is None else f"{x:,}"


def f(x, nd=4, sign=False):
    return "n/a" if x is None else (f"{x:+.{nd}f}" if sign else f"{x:.{nd}f}")


def link(base, target, label=None):
    return f"[{label or target}]({target})" if (base / target).exists() else None


def rel(path, out):
    path = Path(path)
    return str(path.relative_to(out)) if path.is_relative_to(out) else str(path)


class Unreadable:
    """What loaded() gives for a file that is there but refused (another version's, malformed): as falsy as a
    missing one, with the refusal's line, which the page prints instead of "not run"."""

    def __init__(self, why):
        self.why = why

    def __bool__(self):
        return False


def loaded(load, *args):
    """A record's load(*args); None when its file is missing (the stage did not run), an Unreadable when it is
    there but refused."""
    try:
        return load(*args)
    except DataError as e:
        return Unreadable(str(e))


class Section:
    """One section of the page, computed: its headline, text, table (by default: quantity, ours, the
    reference's), notes, links and scorecard row. section_md renders it; findings.json holds to_json()."""

    def __init__(self, key, title, ref="paper", columns=None, prose=False):
        self.key, self.title, self.ref = key, title, ref
        self.columns = tuple(columns or ("quantity", "ours", ref))
        self.prose = prose  # cells of sentences, left-aligned; otherwise the value columns align right
        self.headline, self.text, self.rows, self.links, self.notes = None, [], [], [], []
        self.score = None  # the scorecard row: (what was measured, ours, the paper's, agreement)

    def row(self, *cells):
        if len(cells) != len(self.columns):
            raise ValueError(f"{self.key}: a row of {len(cells)} cells under {len(self.columns)} columns")
        self.rows.append(cells)

    def to_json(self):
        return {"key": self.key, "title": self.title, "headline": self.headline, "text": self.text,
                "columns": list(self.columns), "rows": [list(r) for r in self.rows], "notes": self.notes,
                "score": dict(zip(("measured", "ours", "paper", "agreement"), self.score)) if self.score else None}


def signs_agree(ours, paper):
    """'direction agrees in k of n' over paired signed values (ours, paper's)."""
    k = sum((a > 0) == (b > 0) for a, b in zip(ours, paper))
    return f"direction agrees in {k} of {len(ours)}" if ours else "n/a"


def missing(key, title, d, got=None):
    """The section of a stage that did not run, or (got: loaded()'s Unreadable) whose file was refused."""
    sec = Section(key, title)
    sec.headline = f"Not read: {got.why}" if isinstance(got, Unreadable) else f"Not run: no results under {d}."
    return sec
