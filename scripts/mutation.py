#!/usr/bin/env python3
"""Mutation testing (mutmut) of one module at a time, in a scratch copy of the working tree.

  python scripts/mutation.py eval/scoring.py [--tests tests/test_x.py ...] [--only FUNC ...] [--work DIR]
                                            [--reuse-fixtures]

Copies the tracked and the untracked-but-not-ignored files into DIR (default
/tmp/packaudit-mutation/<module>), points pyproject's [tool.mutmut] there at MODULE and
its tests (table below, or --tests), and runs `nice -n 19 mutmut run --max-children 1`
with one torch thread: the machine is shared, and a forked worker must not inherit a
torch thread pool (hence also the fork server). Prints the count per status and every
surviving mutant; `mutmut show NAME` in DIR shows a mutant's diff. Not part of the test
suite: minutes per module. The scores and the survivors' reasons are in docs/testing.md.
"""
import argparse
import fnmatch
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the tests that check each module's numbers (mutmut runs, per mutant, those of them that reach it)
TESTS = {
    "eval/scoring.py": ["tests/test_reference_values.py"],
    "eval/official.py": ["tests/test_reference_values.py"],
    "eval/compare.py": ["tests/test_reference_values.py"],
    "audit/metrics.py": ["tests/test_audit_strata.py", "tests/test_audit.py::test_summary_matches_independent_replay",
                         "tests/test_audit.py::test_the_audits_own_pass_table_rounds_the_earliest_pass_up"],
    "shardqueue/policy/rule.py": ["tests/test_queue_rule.py"],
    "loaders/core.py": ["tests/test_loader_core.py", "tests/test_loaders.py", "tests/test_audit_strata.py"],
    "eval/rankings.py": ["tests/test_rankings.py", "tests/test_eval.py::test_rankings_find_a_constructed_reversal"],
    "shardqueue/engine/state.py": ["tests/test_queue_state.py"],
    "shardqueue/study/efficiency.py": ["tests/test_queue_study.py"],
    "shardqueue/study/adoption.py": ["tests/test_queue_study.py"],
    "shardqueue/study/curve_fit.py": ["tests/test_queue_study.py"],
    "shardqueue/study/random_rejection.py": ["tests/test_queue_study.py"],
    "shardqueue/study/intervals.py": ["tests/test_queue_study.py"],
    "shardqueue/study/power.py": ["tests/test_queue_study.py"],
    "training/optim.py": ["tests/test_optim.py"],
    "eval/confirmation.py": ["tests/test_eval.py::test_duplicates_match_brute_force",
                             "tests/test_eval.py::test_duplicates_of_validation_rows_before_the_range_are_excluded"],
    # with --only: the parts of a large module that issue 31's tests pin
    "training/checkpoint.py": ["tests/test_protocol.py::test_the_hashed_code_is_all_the_code_that_trains_and_scores"],
    "shardqueue/study/arms.py": ["tests/test_queue_study.py"],
    "shardqueue/engine/runner.py": ["tests/test_queue_branch.py"],
    "shardqueue/engine/branch_check.py": ["tests/test_queue_branch.py"],
    "shardqueue/policy/measured.py": ["tests/test_queue_branch.py", "tests/test_queue_study.py"],
    # the traced libraries' topology test is left out: it imports TRL and OLMo-core (seconds) for every mutant, and
    # checks their adapters, not the split or the merge, which the other tests there check by hand
    "audit/topology.py": [
        "tests/test_audit_topology.py", "--deselect",
        "tests/test_audit_topology.py::test_traced_packers_under_the_topology_equal_traces_of_the_shares"],
    "audit/loader_presets.py": ["tests/test_audit_loader_presets.py"],
    # the scratch copy is not a git checkout, so the provenance test (it reads the commit) cannot pass there
    **{f"findings/{m}.py": ["tests/test_findings_summary.py", "tests/test_summary_scorecard.py",
                            "--deselect", "tests/test_summary_scorecard.py::test_provenance_fields"]
       for m in ("summary", "audit_sections", "training_section", "evaluation_sections", "queue_sections")},
}
PACKAGES = ["audit", "checkers", "comparison", "console", "corpus", "errors", "eval", "fanout", "findings", "gpu_check", "loaders",
            "manifests", "presets", "protocols", "queue", "records", "shardqueue",
            "training", "tests", "main.py", "prepare.py", "train.py"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("module", help="a file to mutate, relative to the repository root")
    ap.add_argument("--tests", nargs="+", default=None, help="pytest selection (default: the table in this script)")
    ap.add_argument("--only", nargs="+", default=None, metavar="FUNC",
                    help="mutate only these functions or methods (Class.method); a large module's decisions "
                         "without its plumbing")
    ap.add_argument("--reuse-fixtures", action="store_true",
                    help="build the tests' prepared corpus and stage-A calibration once (tests/conftest.py, "
                         "PACKAUDIT_FIXTURE_CACHE) instead of once per mutant; sound only when no mutated function "
                         "runs in prepare or stage A (the runner's branch_check and recovery_step do not)")
    ap.add_argument("--work", default=None, help="scratch folder (default /tmp/packaudit-mutation/<module>)")
    a = ap.parse_args(argv)
    tests = a.tests or TESTS.get(a.module)
    if not (ROOT / a.module).is_file() or not tests:
        print(f"error: {a.module}: not a file of this repository with known tests (give --tests)", file=sys.stderr)
        return 2
    if shutil.which("mutmut") is None and not (Path(sys.executable).parent / "mutmut").exists():
        print("error: mutmut is not installed (pip install -r requirements-dev.txt)", file=sys.stderr)
        return 2
    work = Path(a.work or f"/tmp/packaudit-mutation/{a.module.replace('/', '_')}")
    shutil.rmtree(work, ignore_errors=True)
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for f in filter(None, files):
        if (ROOT / f).is_file():
            (work / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, work / f)
    py = (work / "pyproject.toml").read_text()
    section = ("[tool.mutmut]\n"
               f"source_paths = [{a.module!r}]\n"
               f"also_copy = {PACKAGES!r}\n"
               f"pytest_add_cli_args_test_selection = {tests!r}\n"
               'process_isolation = "forkserver"\n').replace("'", '"')
    py = re.sub(r"\[tool\.mutmut\]\n(?:(?!\n\[).)*", section, py, flags=re.S) if "[tool.mutmut]" in py else py + "\n" + section
    (work / "pyproject.toml").write_text(py)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if a.reuse_fixtures:
        env["PACKAUDIT_FIXTURE_CACHE"] = str(work / ".fixture-cache")
    mutmut = shutil.which("mutmut") or str(Path(sys.executable).parent / "mutmut")
    # mutmut names a mutant module.x_func__mutmut_N (a method: module.xǁClassǁmethod__mutmut_N)
    mod = a.module.removesuffix(".py").replace("/", ".")
    names = [f"{mod}.x{'ǁ'.join([''] + f.split('.')) if '.' in f else '_' + f}__mutmut_*" for f in a.only or []]
    subprocess.run(["nice", "-n", "19", mutmut, "run", "--max-children", "1", *names], cwd=work, env=env)
    res = subprocess.run([mutmut, "results", "--all", "true"], cwd=work, env=env, capture_output=True, text=True).stdout
    status = dict(line.strip().rsplit(": ", 1) for line in res.splitlines() if ": " in line)
    if a.only:
        status = {k: v for k, v in status.items() if any(fnmatch.fnmatchcase(k, n) for n in names)}
    counts = Counter(status.values())
    killed, survived = counts.get("killed", 0) + counts.get("timeout", 0), counts.get("survived", 0)
    print(f"\n{a.module}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if killed + survived:
        print(f"score (killed incl. timeouts / tested): {killed}/{killed + survived} = {killed / (killed + survived):.1%}")
    for name, s in sorted(status.items()):
        if s == "survived":
            print(f"  survived: {name}")
    print(f"(in {work}: `mutmut show NAME`)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
