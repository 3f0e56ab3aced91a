"""The audit of a corpus where it lives (python -m audit --corpus): the README's command for each format, run
on a fixture that format's own library writes (datasets, pyarrow, zstandard and gzip, megatron-core, numpy), gives
the audit of a --lengths file of the lengths and labels counted here independently (the tokenizer's own
encode_batch, len() of each token list), every count alike."""
import gzip
import json
import re
import shlex
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import zstandard
from conftest import ROOT
from test_corpus_readers import make_texts, megatron_builder, token_lists
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from audit.__main__ import main as audit_main

BOS = 0
SEPARATOR = 2
# what differs between an audit of a corpus and of its lengths file, by design: the stream's name and kind, the
# corpus's provenance, wall times and file sizes; events, fates and figures are compared through their counts
DIFFERS = {"stream", "source", "corpus", "seconds", "packer_seconds", "folder_bytes", "budget_reason", "figures"}
# fast: the README's commands as written, without the figures (matplotlib: seconds per audit) or permutations
FAST = ["--no-figures", "--permutations", "0"]


def readme_commands():
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- corpus-commands.*?```bash\n(.*?)```", text, re.S).group(1)
    return [shlex.split(line.split("  #")[0])[3:] for line in block.strip().splitlines()]  # after `python -m audit`


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory, hf_datasets):
    """Every file the README's commands name, each written by its format's own library, and for each command the
    lengths and labels counted independently (a BOS counted as the command's --bos says)."""
    d = tmp_path_factory.mktemp("corpus")
    texts = [t for t in make_texts(300, seed=7) if t]  # --bos auto counts a BOS for text: no empty document left
    labels = [("web", "books", "code")[i % 3] for i in range(len(texts))]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, special_tokens=["<bos>"], show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(d / "tokenizer.json"))
    text_lengths = [len(e.ids) + 1 for e in tok.encode_batch(texts, add_special_tokens=False)]
    hf_datasets.Dataset.from_dict({"text": texts, "source": labels}).save_to_disk(str(d / "my_dataset"))
    (d / "data").mkdir()
    lists = [x for x in token_lists(400, seed=8) if x]
    auto = [len(x) + (x[0] != BOS) for x in lists]
    for i, part in enumerate((lists[:250], lists[250:])):
        pq.write_table(pa.table({"input_ids": part}), d / "data" / f"part-{i}.parquet")
    (d / "dolma").mkdir()
    with open(d / "dolma" / "a.jsonl.zst", "wb") as raw, zstandard.ZstdCompressor().stream_writer(raw) as f:
        f.write("".join(json.dumps({"text": t, "source": s}) + "\n" for t, s in zip(texts[:150], labels)).encode())
    with gzip.open(d / "dolma" / "b.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps({"text": t, "source": s}) + "\n" for t, s in zip(texts[150:], labels[150:])))
    (d / "megatron").mkdir()
    b = megatron_builder().IndexedDatasetBuilder(str(d / "megatron" / "corpus_text_document.bin"), dtype=np.uint16)
    for ids in lists:
        b.add_item(torch.tensor(ids))
        b.end_document()
    b.finalize(str(d / "megatron" / "corpus_text_document.idx"))
    (d / "tokens").mkdir()
    flat = [[y for y in x if y != SEPARATOR] + [SEPARATOR] for x in lists]  # a document ends with its separator
    np.array([t for x in flat for t in x], np.uint16).tofile(d / "tokens" / "train.bin")
    want = [(text_lengths, labels), (auto, ["part-0.parquet"] * 250 + ["part-1.parquet"] * (len(lists) - 250)),
            (text_lengths, labels), (auto, ["corpus_text_document"] * len(lists)),
            ([len(x) + 1 for x in flat], ["train.bin"] * len(lists))]  # --bos add
    return d, want


@pytest.mark.parametrize("k", range(5), ids=["datasets", "parquet-tokens", "jsonl", "megatron", "flat-tokens"])
def test_the_readmes_corpus_command_equals_the_audit_of_its_lengths_file(fixtures, monkeypatch, capsys, k):
    folder, want_lengths = fixtures
    args = readme_commands()[k]
    monkeypatch.chdir(folder)
    assert audit_main(args + FAST) == 0, capsys.readouterr().err
    out = Path(args[args.index("--out") + 1])
    got = json.loads((out / "summary.json").read_text())
    assert got["source"] == "corpus" and got["corpus"]["documents"] == got["packers"]["original"]["documents"]["documents"]
    lengths, labels = want_lengths[k]
    t = pq.read_table(out / "fates_original.parquet")
    assert t["length"].to_pylist() == lengths and t["label"].to_pylist() == labels
    pq.write_table(pa.table({"length": lengths, "label": labels}), out.parent / f"{out.name}.parquet")
    assert audit_main(["--lengths", str(out.parent / f"{out.name}.parquet"), "--out", str(out) + "-lengths"] + FAST) == 0
    want = json.loads((Path(str(out) + "-lengths") / "summary.json").read_text())
    for s in (got, want):
        for key in DIFFERS:
            s.pop(key, None)
        for p in s["packers"].values():
            p.pop("seconds", None)
    assert got == want
    assert "Corpus: " in (out / "report.md").read_text()


# a Megatron prefix names no file, so --format has nothing to override there: another format is refused, not ignored
PREFIX_REFUSED = ("error: megatron/corpus_text_document: format {} given, but this is a Megatron .bin/.idx prefix "
                  "(corpus_text_document.bin and .idx); name the format megatron, or leave it out")

DATASETS_REFUSED = ("error: my_dataset: a Hugging Face datasets folder (save_to_disk: its rows in .arrow files), which "
                    "format {} cannot read; name the format datasets, or leave it out")



@pytest.mark.parametrize("args, line", [
    (["--corpus", "megatron/corpus_text_document", "--format", "jsonl", "--bos-id", "0"],
     PREFIX_REFUSED.format("jsonl")),
    (["--corpus", "megatron/corpus_text_document", "--format", "parquet", "--bos-id", "0"],
     PREFIX_REFUSED.format("parquet")),
    (["--corpus", "my_dataset", "--format", "megatron", "--bos-id", "0"], DATASETS_REFUSED.format("megatron")),
    # its state.json and dataset_info.json open with "{": read as the corpus before
    (["--corpus", "my_dataset", "--format", "jsonl", "--tokenizer", "tokenizer.json"],
     DATASETS_REFUSED.format("jsonl")),
    (["--corpus", "megatron", "--format", "jsonl", "--tokenizer", "tokenizer.json"],
     "error: megatron: no jsonl file in this folder, which holds megatron data; name the format megatron, or leave "
     "it out"),
    (["--corpus", "my_dataset", "--format", "bogus"],
     "error: --format bogus: expected one of datasets, parquet, arrow, jsonl, megatron, tokens"),
], ids=["megatron-as-jsonl", "megatron-as-parquet", "datasets-as-megatron", "datasets-as-jsonl", "folder-as-jsonl",
        "unknown"])
def test_a_format_the_corpus_path_contradicts_is_one_line_and_nothing_written(fixtures, monkeypatch, capsys, args,
                                                                               line):
    folder, _ = fixtures
    monkeypatch.chdir(folder)
    before = sorted(folder.rglob("*"))
    assert audit_main(args + ["--out", "runs/contradicted"] + FAST) == 2
    assert capsys.readouterr().err == line + "\n"
    assert sorted(folder.rglob("*")) == before  # no output, no lengths cache
