"""--pipeline NAME (audit/loader_presets.py): what each named loader makes of its ranks and workers.

The shares are worked by hand from each loader's rule; the audits are compared with the plain
topology flags the preset stands for, and bad input is one line with nothing written."""
import json

import numpy as np
import pytest

from audit.__main__ import main as audit_main, parse_args
from audit.fate_table import DocumentIndex
from audit.pipeline import StreamInput
from audit.plan import plan_of
from audit.topology import shares

R, B = 65, 16


@pytest.fixture(scope="module")
def lengths_file(tmp_path_factory):
    # 5,000 documents: four row groups of 1,024 and one of 904, a long tail past R
    rng = np.random.default_rng(11)
    f = tmp_path_factory.mktemp("presets") / "L.txt"
    f.write_text("\n".join(map(str, np.maximum(1, rng.lognormal(3.0, 1.2, 5000).astype(np.int64)))) + "\n")
    return f


def _audit(f, out, *extra):
    argv = ["--lengths", str(f), "--row-capacity", str(R), "--buffer", str(B), "--targets", str(600 * (R - 1)),
            "--permutations", "0", "--no-figures", "--out", str(out), *extra]
    assert audit_main(argv) == 0
    return json.loads((out / "summary.json").read_text()), (out / "report.md").read_text()


def test_nanochat_strides_row_groups_of_1024_by_rank(lengths_file, tmp_path):
    s, md = _audit(lengths_file, tmp_path / "nano", "--pipeline", "nanochat", "--ranks", "2")
    topo = s["topology"]
    # one length file: rank 0 reads its row groups 0, 2, 4 (1,024 + 1,024 + 904 documents); rank 1 groups 1, 3
    assert topo["split_by"] == "file-group:1024" and topo["documents_per_stream"] == [2952, 2048]
    assert list(topo["packers"]) == ["original"] and topo["rows_per_stream"] == [300, 300]
    assert s["pipeline"]["worker_streams"] == 2 and s["pipeline"]["owner"] == "rank"
    assert "Pipeline **nanochat** at 2 ranks x 1 DataLoader worker: 2 worker streams" in md
    # the preset is the flags it fills in: the same counts from those flags by hand (one file: as group:1024)
    plain, _ = _audit(lengths_file, tmp_path / "plain", "--packers", "original", "--ranks", "2",
                      "--split-by", "group:1024", "--refill-docs", "128")
    assert plain["topology"]["packers"] == topo["packers"]


@pytest.mark.parametrize("preset, packer", [("project", "original"), ("torchtune", "torchtune_text")])
def test_one_packing_for_the_run_whatever_the_ranks(lengths_file, tmp_path, preset, packer):
    # this repository's loader and torchtune's PackedDataset pack once; ranks only take turns at the rows
    s, md = _audit(lengths_file, tmp_path / preset, "--pipeline", preset, "--ranks", "8", "--loader-workers", "2")
    assert "topology" not in s and s["pipeline"]["worker_streams"] == 1
    assert list(s["packers"]) == [packer]
    one, _ = _audit(lengths_file, tmp_path / "one", "--packers", packer)
    assert "refused" not in one["packers"][packer]  # the README's test command installs the 'audit-libs' extra
    assert s["packers"][packer]["sources_never_started"] == one["packers"][packer]["sources_never_started"]
    assert "one packer serves the whole run, so the one-stream audit below is the run's answer" in md
    # torchtune's recipes train the packs shuffled, which the audit does not model: the report says so; ours does not
    said = "the audit reads them in the order they are made: at a budget of whole epochs the fates are the run's"
    assert (said in md) == (preset == "torchtune") and ("order" in s["pipeline"]) == (preset == "torchtune")


def test_a_flag_given_overrides_the_preset(lengths_file, tmp_path):
    s, _ = _audit(lengths_file, tmp_path / "o", "--pipeline", "torchtitan", "--packers", "original", "--ranks", "2",
                  "--loader-workers", "2", "--split-by", "group:100")
    topo = s["topology"]
    # every worker of every rank its own buffer: 4 streams; 50 groups of 100 dealt round-robin
    assert topo["worker_streams"] == 4 and topo["split_by"] == "group:100"
    assert topo["documents_per_stream"] == [1300, 1300, 1200, 1200] and list(topo["packers"]) == ["original"]


@pytest.mark.parametrize("extra, msg", [
    (["--pipeline", "fairseq"], "--pipeline 'fairseq': unknown (choose from project, nanochat, torchtitan"),
    (["--pipeline", "nanochat", "--loader-workers", "2"], "the loader has no DataLoader workers"),
    # llm-foundry packs in its MDS conversion, which has no ranks
    (["--pipeline", "foundry", "--ranks", "2"], "--pipeline foundry: the conversion that packs (convert_dataset_hf.py) "
     "has no ranks: training reads its packed MDS shards; leave out --ranks"),
    (["--pipeline", "nanochat", "--ranks", "6"],
     # the preset's split, which the user never typed, is said to be the preset's
     "--split-by file-group:1024 (--pipeline nanochat's deal): 6 worker streams but 5 groups of 1024 documents (counted "
     "in each file) reach only 5 of them: every worker stream needs a share; that is the loader's own deal: give "
     "fewer worker streams"),
    # given by the user, the same split is theirs
    (["--pipeline", "nanochat", "--ranks", "6", "--split-by", "file-group:2000"],
     "error: --split-by file-group:2000: 6 worker streams but 3 groups of 2000"),
])
def test_bad_pipeline_is_one_line_and_nothing_written(lengths_file, tmp_path, capsys, extra, msg):
    out = tmp_path / "o"
    assert audit_main(["--lengths", str(lengths_file), "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: ") and msg in err, err
    assert not out.exists()


@pytest.mark.parametrize("argv, want", [
    # no preset: the flags' own defaults, and every worker of every rank its own stream (2 x 3)
    (["--ranks", "2", "--loader-workers", "3"], ("all", "document", 128, 2, 3)),
    # a preset fills in what is left out and keeps what is given (--refill-docs here)
    (["--pipeline", "nanochat", "--ranks", "2", "--refill-docs", "7"], ("original", "file-group:1024", 7, 2, 1)),
    (["--pipeline", "torchtitan", "--ranks", "2", "--loader-workers", "3"], ("titan_concat", "hf-iterable", 128, 2, 3)),
    (["--pipeline", "torchtune", "--ranks", "8", "--loader-workers", "2"], ("torchtune_text", "document", 128, 1, 1)),
    (["--pipeline", "foundry", "--loader-workers", "3"], ("foundry_concat", "file", 128, 1, 3)),
], ids=["no preset", "nanochat, refill given", "torchtitan", "torchtune", "foundry"])
def test_what_a_preset_fills_in_and_the_worker_streams_it_makes(lengths_file, argv, want):
    plan = plan_of(parse_args(["--lengths", str(lengths_file), *argv]))
    t = plan.topology
    assert (plan.packers_arg, t.split_by, t.refill_docs, t.streams_ranks, t.streams_workers) == want


def test_the_summary_records_the_preset_and_the_loader_args_it_set(lengths_file, tmp_path):
    # axolotl deals its bins to the ranks: the preset sets world_size to --ranks, and summary.json says so
    s, _ = _audit(lengths_file, tmp_path / "ax", "--pipeline", "axolotl", "--ranks", "3")
    p = s["pipeline"]
    assert (p["name"], p["owner"], p["ranks"], p["loader_workers"], p["worker_streams"]) == \
        ("axolotl", "stream", 3, 1, 1)
    assert (p["packers"], p["split_by"], p["refill_docs"]) == ("axolotl_completion", "document", 128)
    assert p["loader_args"] == {"world_size": 3} and s["packers"]["axolotl_completion"]["loader"]["world_size"] == 3
    assert p["order"].startswith("Its sampler shuffles the documents each epoch before it packs them")


def test_foundry_deals_whole_files_to_the_conversion_workers(lengths_file):
    # llm-foundry's MDS conversion, 2 DataLoader workers over a streaming dataset of two files (documents 0-2, then
    # 3-6): worker 0 reads file 0 whole, worker 1 file 1 whole, each into its own ConcatTokensDataset buffer (not
    # documents 0 2 4 6 | 1 3 5, every other document)
    plan = plan_of(parse_args(["--lengths", str(lengths_file), "--pipeline", "foundry", "--loader-workers", "2"]))
    t = plan.topology
    assert (plan.packers_arg, t.split_by, t.streams_ranks, t.streams_workers) == ("foundry_concat", "file", 1, 2)
    sizes = [3, 4]
    file_of = np.repeat(np.arange(2, dtype=np.int32), sizes)
    L = np.arange(1, 8)
    index = DocumentIndex(["f0.parquet", "f1.parquet"], file_of, np.concatenate([np.arange(k) for k in sizes]), L)
    stream = StreamInput("files", "lengths", L, np.array([0, 7]), index=index)
    got = [s.index.doc.tolist() for s in shares(stream, t.worker_streams, t.split)]
    assert got == [[0, 1, 2], [3, 4, 5, 6]]


def test_the_pipeline_help_names_each_preset_and_who_owns_a_buffer_in_a_few_lines(capsys):
    """A new user's probe: --pipeline's --help entry was about 100 lines (every preset's facts); those head each
    report now, and the entry names each preset's packer and who owns a buffer."""
    from audit.loader_presets import PIPELINES

    with pytest.raises(SystemExit):
        audit_main(["--help"])
    text = capsys.readouterr().out
    entry = text[text.index("\n  --pipeline NAME"):].split("\n  --", 2)[1]
    assert len(entry.splitlines()) <= 16, entry
    flat = " ".join(entry.split())
    for name, p in PIPELINES.items():
        assert f"{name}: {p.packer}, " in flat, name
    assert "nanochat: original, a packer per rank, split by file-group:1024;" in flat


@pytest.mark.parametrize("argv, bos", [
    (["--pipeline", "llamafactory"], "none"),  # its tokenizing adds no BOS (add_special_tokens=False)
    (["--pipeline", "llamafactory", "--bos", "add"], "add"),  # what the command line gives stands
    (["--pipeline", "megatron"], "none"),  # GPTDataset trains on the .bin's documents as they are
    (["--pipeline", "megatron", "--bos", "auto"], "auto"),
    ([], "auto"),
])
def test_a_presets_bos_policy_is_used_where_bos_is_left_out(tmp_path, argv, bos):
    (tmp_path / "c.jsonl").write_text('{"text": "a b"}\n')
    plan = plan_of(parse_args(["--corpus", str(tmp_path / "c.jsonl"), "--tokenizer", "gpt2", *argv]))
    assert plan.stream.corpus.bos == bos


def test_pipeline_name_help_prints_that_preset_in_full_and_pipeline_help_the_list(capsys):
    """`--pipeline --help` was argparse's "expected one argument"; there was no help per preset."""
    from audit.loader_presets import PIPELINES

    with pytest.raises(SystemExit) as e:
        audit_main(["--lengths", "L.txt", "--pipeline", "megatron", "--help"])
    text = capsys.readouterr().out
    assert e.value.code == 0 and text.startswith("--pipeline megatron: --packers megatron_gpt, --split-by document")
    assert f"It follows {PIPELINES['megatron'].follows}." in text
    with pytest.raises(SystemExit) as e:
        audit_main(["--pipeline=grain", "-h"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("--pipeline grain: --packers grain_first_fit")
    with pytest.raises(SystemExit) as e:
        audit_main(["--pipeline", "--help"])
    text = capsys.readouterr().out
    assert e.value.code == 0 and all(f"{n}: {p.packer}" in text for n, p in PIPELINES.items())
    with pytest.raises(SystemExit):
        audit_main(["--pipeline", "fairseq", "--help"])
    assert capsys.readouterr().out.startswith("--pipeline fairseq: unknown. --pipeline NAME, a named loader")
