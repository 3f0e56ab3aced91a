"""The audit's records (records/audit_summary.py, audit_comparison.py, frontier.py): what an audit writes reads
back through each loader with the file's numbers; a file of another version, or one that lacks a key its
readers need, is one line naming the file; and the findings page reports such a folder as not run."""
import json

import numpy as np
import pytest

from audit.__main__ import main as audit_main
from errors import DataError
from findings.summary import build
from records.audit_comparison import Comparison
from records.audit_summary import AuditSummary
from records.frontier import Frontier

R, B = 33, 4


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    """An audit at 2 ranks (a topology) and a frontier, of one small length file."""
    d = tmp_path_factory.mktemp("records")
    rng = np.random.default_rng(5)
    L = rng.integers(1, 24, size=900)
    L[::13] = rng.integers(R + 1, 5 * R, size=len(L[::13]))
    (d / "L.txt").write_text("\n".join(map(str, L)) + "\n")
    base = ["--lengths", str(d / "L.txt"), "--row-capacity", str(R), "--buffer", str(B), "--targets",
            str(200 * (R - 1)), "--permutations", "2", "--no-figures"]
    assert audit_main(base + ["--packers", "original,segment_first,concat_chunk", "--ranks", "2",
                              "--out", str(d / "audit")]) == 0
    sweep = base[:-3] + ["--no-figures"]  # the frontier runs no permutations; its records are the json
    assert audit_main(sweep + ["--sweep", "buffer=2,4", "--out", str(d / "frontier")]) == 0
    return d


def test_each_record_reads_back_what_the_audit_wrote(audited):
    raw = json.loads((audited / "audit" / "summary.json").read_text())
    s = AuditSummary.load(audited / "audit")
    assert s.values == raw and raw["schema"] == "audit-summary/1"
    for name, p in s.packers.items():
        f = raw["packers"][name]
        assert (p.emitted, p.discarded, p.buffered, p.partition_holds) == \
            (f["emitted"], f["discarded"], f["buffered"], f["partition_holds"])
        assert p.protected.size == f["protected"]["size"] and p.protected.applies == f["protected"]["applies"]
    assert s.permutations.count == 2 and [b.length_at_least for b in s.pass_bounds] == \
        [b["length_at_least"] for b in raw["pass_bounds"]]
    assert set(s.regime) == set(raw["regime"]["columns"])
    t, ft = s.topology, raw["topology"]
    assert (t.ranks, t.worker_streams, t.split_by) == (2, 2, "document")
    m = ft["packers"]["original"]["merged"]
    assert t.packers["original"].merged.long_never_started == \
        m["sources_longer_than_R_arrived"] - m["sources_longer_than_R_started"]
    assert [w.sources_arrived for w in t.packers["original"].workers] == \
        [w["sources_arrived"] for w in ft["packers"]["original"]["workers"]]
    c = Comparison.load(audited / "audit")
    rawc = json.loads((audited / "audit" / "comparison.json").read_text())
    assert c.values == rawc and rawc["schema"] == "audit-comparison/1"
    assert {n: r.long_never_started for n, r in c.packers.items()} == \
        {n: r["long_never_started"] for n, r in rawc["packers"].items()}
    f = Frontier.load(audited / "frontier")
    rawf = json.loads((audited / "frontier" / "frontier.json").read_text())
    assert f.values == rawf and [p.crop_waste for p in f.points] == [p["crop_waste"] for p in rawf["points"]]
    assert f.pareto == rawf["pareto"] and sum(p.current for p in f.points) == 1


@pytest.mark.parametrize("load,folder,file", [
    (AuditSummary.load, "audit", "summary.json"), (Comparison.load, "audit", "comparison.json"),
    (Frontier.load, "frontier", "frontier.json")])
def test_another_version_or_a_missing_key_is_one_line_naming_the_file(audited, tmp_path, load, folder, file):
    raw = json.loads((audited / folder / file).read_text())
    (tmp_path / file).write_text(json.dumps({**raw, "schema": raw["schema"][:-1] + "0"}))
    with pytest.raises(DataError, match=f"{tmp_path / file}: schema .*expected '{raw['schema']}'"):
        load(tmp_path)
    (tmp_path / file).write_text(json.dumps({k: v for k, v in raw.items() if k != "targets"}))
    with pytest.raises(DataError, match=f"^{tmp_path / file}: missing targets$"):
        load(tmp_path)
    assert load(tmp_path / "none") is None  # a stage that did not run


def test_a_packers_record_names_the_key_it_lacks(audited, tmp_path):
    raw = json.loads((audited / "audit" / "summary.json").read_text())
    del raw["packers"]["segment_first"]["protected"]["tokens"]
    (tmp_path / "summary.json").write_text(json.dumps(raw))
    with pytest.raises(DataError, match="packers.segment_first: protected: missing tokens$"):
        AuditSummary.load(tmp_path)


def test_the_findings_page_names_a_folder_of_an_older_audit_and_why_it_was_not_read(audited, tmp_path):
    run = tmp_path / "run"
    (run / "audit").mkdir(parents=True)
    raw = json.loads((audited / "audit" / "summary.json").read_text())
    del raw["schema"]  # as the audit wrote it before its records were versioned
    (run / "audit" / "summary.json").write_text(json.dumps(raw))
    secs = {s.key: s for s in build(run)}
    why = f"Not read: {run / 'audit' / 'summary.json'}: schema None, expected 'audit-summary/1'"
    assert secs["s3"].headline.startswith(why) and secs["s5_1"].headline.startswith(why)
    assert secs["regime"].text == ["No regime indicators were written (the audit's summary.json has none, or was not "
                                   "read)."]


def _set(path, value):
    """A change of one key of a JSON object, at a path of keys."""
    def change(raw):
        d = raw
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value
    return change


@pytest.mark.parametrize("record, folder, change, line", [
    (AuditSummary, "audit", _set(["targets"], "abc"), "summary.json: targets is str, expected int"),
    (AuditSummary, "audit", _set(["targets"], True), "summary.json: targets is bool, expected int"),
    (AuditSummary, "audit", _set(["packers", "original", "protected", "size"], "7"),
     "packers.original: protected: size is str, expected int"),
    (AuditSummary, "audit", _set(["packers"], []), "summary.json: packers is list, expected dict"),
    (AuditSummary, "audit", _set(["regime"], {"rows": []}), "summary.json: regime has no columns object"),
    (AuditSummary, "audit", _set(["topology", "packers"], ["original"]), "topology: packers is list, expected dict"),
    (Comparison, "audit", _set(["refused"], []), "comparison.json: refused is list, expected dict"),
    (Frontier, "frontier", _set(["pareto"], "0,1"), "frontier.json: pareto is str, expected list"),
], ids=["string targets", "bool targets", "string protected size", "packers a list", "regime without columns",
        "topology packers a list", "refused a list", "pareto a string"])
def test_a_value_of_the_wrong_type_is_one_line_naming_the_file_and_the_key(audited, tmp_path, record, folder, change,
                                                                          line):
    raw = json.loads((audited / folder / record.FILE).read_text())
    change(raw)
    (tmp_path / record.FILE).write_text(json.dumps(raw))
    with pytest.raises(DataError) as e:
        record.load(tmp_path)
    assert line in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_null_where_a_record_allows_it_and_ints_for_floats_read_back(audited, tmp_path):
    raw = json.loads((audited / "audit" / "summary.json").read_text())
    raw["permutations"].update({"min": None, "max": None})  # no permutation emitted a long source in the budget
    first = next(iter(raw["packers"].values()))
    first["share_emitted_from_long_sources"] = 0  # a float field written as an int
    (tmp_path / "summary.json").write_text(json.dumps(raw))
    s = AuditSummary.load(tmp_path)
    assert (s.permutations.min, s.permutations.max) == (None, None)


def test_an_audit_without_a_crop_reads_back_and_renders(tmp_path):
    # three documents of 11 fill each row of 33 exactly: no crop event, so no median crop emission (null)
    (tmp_path / "L.txt").write_text("\n".join(["11"] * 300) + "\n")
    assert audit_main(["--lengths", str(tmp_path / "L.txt"), "--row-capacity", str(R), "--buffer", str(B), "--targets",
                       str(20 * (R - 1)), "--packers", "original", "--permutations", "0", "--no-figures", "--no-fates",
                       "--out", str(tmp_path / "run" / "audit")]) == 0
    s = AuditSummary.load(tmp_path / "run" / "audit")
    assert s.packers["original"].crop_events == 0 and s.packers["original"].crop_median_emitted is None
    secs = {x.key: x for x in build(tmp_path / "run")}
    assert ("crop events, median retained prefix, BOS-only crops", "0, n/a, 0") in [r[:2] for r in secs["s5_1"].rows]
