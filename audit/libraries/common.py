"""What every packer adapter shares: the Spec the audit runs, the tracer's marker ids, the Plan a loader
that needs the budget is given, and require() for a library that may be missing.

Token ids: tracer documents start at FIRST_ID; 0 is padding, 1 BOS, 2 EOS (what an adapter gives a
library as its special tokens, and what a rule inserts where its library inserts one).
"""
import importlib
from dataclasses import dataclass, field

import numpy as np

from errors import DataError

PAD, BOS, EOS = 0, 1, 2
FIRST_ID = 16
EXTRA = "audit-libs"  # pip install -e '.[audit-libs]' (run.sh installs requirements-audit.lock)


@dataclass
class Spec:
    """A packer the audit can run: how to build it, its row capacity, and what the report says of it."""
    name: str
    build: object  # (R, B, workdir) -> packer(docs) -> rows; with planned, (R, B, workdir, plan)
    library: str = ""  # the distribution it needs ("" for ours and for a rule written here)
    capacity: object = None  # R -> the row capacity it packs to (default R)
    settings: dict = field(default_factory=dict)
    why_not: str = ""  # why the paper's Proposition does not apply ("" for the paper's family)
    how: str = ""  # the report's "how" where it is not "traced": a rule written from a library's code
    planned: bool = False  # build gets a Plan: the budget, the stream's shape, the --loader-arg values
    indexed: bool = False  # builds an index of its epochs first: pulls the passes it builds (--passes bounds them)
    audit: object = None  # replaces the one-stream trace (megatron_blend: the datasets' epochs differ)

    def row_capacity(self, R):
        return self.capacity(R) if self.capacity else R


@dataclass
class Plan:
    """What an index-building loader knows before it packs: the budget's rows, one pass of the stream, the
    passes the audit allows (None: as many as it builds) and the --loader-arg values. `facts` is filled by
    the loader with what it decided (epochs, samples built, ...) and lands in the summary as 'loader'."""
    rows: int
    lengths: np.ndarray  # one pass, in arrival order
    labels: object = None  # one label per document of the pass, or None
    passes: int = None
    args: dict = field(default_factory=dict)
    facts: dict = field(default_factory=dict)

    @property
    def n(self):
        return len(self.lengths)

    @property
    def tokens(self):
        return int(self.lengths.sum())


def require(module, spec_name):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise DataError(f"packer {spec_name}: {module} is not installed ({e.name}); install the '{EXTRA}' extra "
                        f"(pip install -r requirements-audit.lock, or pip install -e '.[{EXTRA}]')") from None


def take(it, k):
    """The next k documents of an iterator, as a list (fewer where it ends)."""
    out = []
    for _ in range(k):
        try:
            out.append(next(it))
        except StopIteration:
            break
    return out
