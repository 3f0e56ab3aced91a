"""An audit's files, byte for byte, against references committed before issue 54 gave the audit a plan built
once from the command line and typed records for its results: neither may change a number or a byte of what
an audit writes (summary.json, comparison.json, regime.json, report.md; a frontier's frontier.json and
frontier.md).

The audits cover what the plan and the records touch: the paper's four packers beside a traced library packer
and a packer of the researcher's own (labels, permutations, CSV events), a topology of ranks x workers split by
groups, two --pipeline presets (one packer per rank, one packer for the run), a stream read once that ends
before the budget, and a frontier. Wall times are the one thing not the audit's own: the clock (time.time) is
fixed while the audits run, as for the queue's reference, so that summary.json's length, and with it the folder's
size, is the same in every session; and every value under a key named `seconds` or `packer_seconds`, and the
frontier table's seconds column (perf_counter's), are replaced by a name before the comparison. The folder's size (summary.json's `folder_bytes`, the report's MB) counts the events and fates
files, whose bytes follow pyarrow's writer: the comparison runs where the reference was made (machine.json)
and is skipped elsewhere.

To write the reference again (only with an intended change of behaviour, said in its commit and in tests/reference/README.md):
    PACKAUDIT_WRITE_REFERENCE=1 .venv/bin/python -m pytest tests/test_audit_reference.py
"""
import json
import os
import platform
import re
import shutil
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ROOT

from audit.__main__ import main as audit_main

REFERENCE = ROOT / "tests" / "reference" / "audit"
WRITE = os.environ.get("PACKAUDIT_WRITE_REFERENCE") == "1"
FILES = ("summary.json", "comparison.json", "regime.json", "report.md", "frontier.json", "frontier.md")
TIMES = ("seconds", "packer_seconds")
SECONDS = "<seconds>"
R, B = 33, 6
FIXED_TIME = 1_800_000_000.0


def _labelled(folder):
    """1,200 documents, short with a long one (> R) every 17th, labelled by three sources."""
    rng = np.random.default_rng(54)
    L = rng.integers(1, 24, size=1200)
    L[::17] = rng.integers(R + 1, 6 * R, size=len(L[::17]))
    labels = np.array(["code", "docs", "web"])[rng.integers(0, 3, size=len(L))]
    f = folder / "labelled.parquet"
    pq.write_table(pa.table({"length": L, "label": labels}), f)
    return f


def _plain(folder):
    """2,500 documents (two row groups of 1,024 and the rest), a long tail past R = 65."""
    rng = np.random.default_rng(540)
    f = folder / "plain.txt"
    f.write_text("\n".join(map(str, np.maximum(1, rng.lognormal(3.0, 1.2, 2500).astype(np.int64)))) + "\n")
    return f


def _audits(folder):
    """{name: argv} of the audits (their --out added by the caller)."""
    own, plain = _labelled(folder), _plain(folder)
    (folder / "refpackers.py").write_text("def pack(docs, keep=8):\n    for d in docs:\n        yield d[:keep]\n")
    base = ["--lengths", str(own), "--column", "length", "--label-column", "label", "--row-capacity", str(R),
            "--buffer", str(B), "--targets", str(300 * (R - 1)), "--no-figures"]
    small = ["--lengths", str(plain), "--row-capacity", "65", "--buffer", "16", "--targets", str(600 * 64),
             "--permutations", "0", "--no-figures"]
    return {
        "packers": base + ["--packers", "original,lossless,segment_first,random_span,concat_chunk",
                           "--trace", "refpackers:pack", "--trace-arg", "keep=8", "--permutations", "3",
                           "--refill-docs", "16", "--csv"],
        "topology": base + ["--packers", "original,concat_chunk", "--ranks", "2", "--loader-workers", "2",
                            "--split-by", "group:3", "--refill-docs", "5", "--permutations", "0"],
        "nanochat": small + ["--pipeline", "nanochat", "--ranks", "2"],
        "project": small + ["--pipeline", "project", "--ranks", "4", "--loader-workers", "2"],
        "read_once": base + ["--packers", "original,lossless,concat_chunk", "--passes", "1", "--targets",
                             str(3000 * (R - 1)), "--permutations", "0", "--no-fates"],
        # the frontier with its figure, as the main job draws it; its json and md are compared
        "frontier": [a for a in base if a != "--no-figures"] + ["--sweep", "buffer=1,6,24", "--sweep", "ranks=1,2",
                                                                "--permutations", "0"],
    }


def untimed(text, name):
    """A file's text with its wall times replaced by a name."""
    if name.endswith(".json"):
        return json.dumps(_untimed(json.loads(text)), indent=2, sort_keys=True) + "\n"
    if name == "frontier.md":  # the table's last column
        return re.sub(r"\| [0-9]+\.[0-9]{2} \|$", f"| {SECONDS} |", text, flags=re.M)
    return text


def _untimed(v):
    if isinstance(v, dict):
        return {k: (_times(x) if k in TIMES else _untimed(x)) for k, x in v.items()}
    if isinstance(v, list):
        return [_untimed(x) for x in v]
    return v


def _times(v):
    return {k: SECONDS for k in v} if isinstance(v, dict) else SECONDS


def written(out, tmp):
    """{file: text} of an audit folder's compared files, as the reference keeps them."""
    got = {}
    for name in FILES:
        if (out / name).exists():
            text = (out / name).read_text()
            assert str(tmp) not in text, f"{name} names the session's folder"
            got[name] = untimed(text, name)
    return got


def here():
    return {"python": platform.python_version(), "numpy": np.__version__, "pyarrow": pa.__version__}


@pytest.fixture(scope="module")
def audited(tmp_path_factory, monkeypatch_module):
    """{audit/file: text} of every audit, run in this process."""
    tmp = tmp_path_factory.mktemp("aref")
    monkeypatch_module.syspath_prepend(str(tmp))
    got = {}
    for name, argv in _audits(tmp).items():
        out = tmp / name
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(time, "time", lambda: FIXED_TIME)
            assert audit_main(argv + ["--out", str(out)]) == 0, name
        got.update({f"{name}/{f}": text for f, text in written(out, tmp).items()})
    return got


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_an_audit_writes_the_reference_files_byte_for_byte(audited):
    by_audit = {}
    for name, text in audited.items():
        a, _, f = name.partition("/")
        by_audit.setdefault(a, {})[f] = text
    if WRITE:
        shutil.rmtree(REFERENCE, ignore_errors=True)
        for a, files in by_audit.items():
            for f, text in files.items():
                (REFERENCE / a / f).parent.mkdir(parents=True, exist_ok=True)
                (REFERENCE / a / f).write_text(text)
        (REFERENCE / "machine.json").write_text(json.dumps(here(), indent=1, sort_keys=True) + "\n")
    made_on = json.loads((REFERENCE / "machine.json").read_text())
    if made_on != here():
        pytest.skip(f"the reference was made with {made_on}; the folder sizes agree only there (this is {here()})")
    want = {str(p.relative_to(REFERENCE)): p.read_text() for p in sorted(REFERENCE.rglob("*"))
            if p.is_file() and p.name != "machine.json"}
    assert sorted(audited) == sorted(want)
    for a, files in by_audit.items():
        for f, text in files.items():
            assert text == want[f"{a}/{f}"], f"{a}/{f} differs from the reference"


def test_the_references_cover_what_the_plan_and_the_records_touch():
    """Each audit shows the path it is there for (a reference that lost one would prove nothing of it)."""
    s = {a: json.loads((REFERENCE / a / "summary.json").read_text()) for a in
         ("packers", "topology", "nanochat", "project", "read_once")}
    assert {"original", "lossless", "segment_first", "random_span", "concat_chunk", "pack"} == set(s["packers"]["packers"])
    assert s["packers"]["permutations"]["count"] == 3 and s["packers"]["labelled"]
    assert s["topology"]["topology"]["worker_streams"] == 4 and s["topology"]["topology"]["split_by"] == "group:3"
    assert s["nanochat"]["pipeline"]["owner"] == "rank" and s["nanochat"]["topology"]["worker_streams"] == 2
    assert s["project"]["pipeline"]["worker_streams"] == 1 and "topology" not in s["project"]
    assert not s["read_once"]["packers"]["original"]["budget_reached"]
    f = json.loads((REFERENCE / "frontier" / "frontier.json").read_text())
    assert len(f["points"]) >= 6 and SECONDS in (REFERENCE / "frontier" / "frontier.md").read_text()
