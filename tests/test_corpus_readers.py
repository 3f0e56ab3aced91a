"""The corpus readers (corpus/readers, fanout/corpus_data.py): each format on a fixture its own library writes
(datasets' save_to_disk and to_parquet, pyarrow, gzip and zstandard, megatron-core's IndexedDatasetBuilder, numpy's
tofile and save), its lengths and labels against an independent count (the tokenizer's own encode_batch; len() of
each token list); the same lengths in the same order from one worker, two and Ray Data (that test is in
tests/test_fanout.py, on its cluster); the cache reused and resumed; each bad input one line naming the file."""
import gzip
import importlib.util
import json
import os
import random
import shutil
import sys
import types
from dataclasses import replace
from pathlib import Path
from unittest import mock

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import rustbpe
import tiktoken
import tiktoken.load
import tiktoken_ext.openai_public as openai_public
import torch
import zstandard
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from corpus.readers import cache as cache_module
from corpus.readers import corpus_lengths, jsonl, parallel
from corpus.readers.encoders import tokenizer_spec
from corpus.tokenizer import bos_id, save_encoding, train_encoding
from errors import DataError

BOS = 0  # the trained BPE's first special token
WORDS = ("the", "packer", "buffer", "row", "longest", "document", "crop", "café", "naïve", "東京", "données",
         "🙂", "x", "1999", "—", "def", "return", "\n", "  ")


def make_texts(n, seed):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        k = 0 if i % 37 == 5 else int(rng.lognormvariate(2.5, 1.0))  # some empty documents, some long ones
        out.append(" ".join(rng.choice(WORDS) for _ in range(k)))
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Texts, their labels and a byte-level BPE trained here (no unknown token: every text encodes)."""
    d = tmp_path_factory.mktemp("corpus")
    texts = make_texts(400, seed=1)
    labels = [("web", "books", "code")[i % 3] for i in range(len(texts))]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, special_tokens=["<bos>"], show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    assert tok.token_to_id("<bos>") == BOS
    tok.save(str(d / "bpe.json"))
    want = [len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)]  # the independent count
    return types.SimpleNamespace(dir=d, texts=texts, labels=labels, tok=str(d / "bpe.json"), counts=want)


def run(paths, tok=None, **kw):
    kw.setdefault("workers", 1)
    kw.setdefault("progress", False)
    kw.setdefault("text_batch", 64)  # many batches per unit: their seams are tested
    return corpus_lengths(paths, tok, **kw)


def one_line(excinfo, *words):
    text = str(excinfo.value)
    assert "\n" not in text and all(w in text for w in words), text
    return text


def token_lists(n, seed, vocab=500):
    """Token lists, about half starting with BOS, a few empty."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        k = 0 if i % 29 == 3 else int(rng.integers(1, 60))
        ids = rng.integers(1, vocab, k).tolist()
        if ids and i % 2:
            ids[0] = BOS
        out.append(ids)
    return out


def bos_auto(lists):
    return [len(x) + (0 if x and x[0] == BOS else 1) for x in lists]


# ---- each format, against an independent count


def test_a_datasets_folder_of_text_counts_as_encode_batch_with_a_bos_and_labels_its_source(corpus, tmp_path,
                                                                                           hf_datasets):
    ds = hf_datasets.Dataset.from_dict({"text": corpus.texts, "source": corpus.labels})
    ds.save_to_disk(str(tmp_path / "ds"), num_shards=3)
    r = run([tmp_path / "ds"], corpus.tok)
    assert r.lengths.tolist() == [c + 1 for c in corpus.counts]  # BOS auto: one per text document
    assert r.labels.tolist() == corpus.labels
    assert r.files == [str(tmp_path / "ds")] and set(r.doc_file.tolist()) == {0}
    assert r.doc_row.tolist() == list(range(len(corpus.texts)))  # numbered across the three shards
    assert r.provenance["bos"] == {"policy": "auto", "id": None} and r.provenance["columns"][0]["column"] == "text"
    none = run([tmp_path / "ds"], corpus.tok, bos="none")
    assert none.lengths.tolist() == corpus.counts
    # a nested label, as a JSON file's is named (meta.lang): a struct column's field, in a datasets folder and in
    # parquet (a new user's probe: "no label column 'meta.lang'", where the same flag worked on jsonl)
    meta = [{"lang": f"l{i % 3}", "q": i} for i in range(len(corpus.texts))]
    hf_datasets.Dataset.from_dict({"text": corpus.texts, "meta": meta}).save_to_disk(str(tmp_path / "nested"),
                                                                                      num_shards=2)
    pq.write_table(pa.table({"text": corpus.texts, "meta": meta}), tmp_path / "nested.parquet", row_group_size=50)
    for where in (tmp_path / "nested", tmp_path / "nested.parquet"):
        assert run([where], corpus.tok, label="meta.lang").labels.tolist() == [m["lang"] for m in meta], where
    for bad in ("meta.nope", "meta.lang.x", "nope.lang"):
        with pytest.raises(DataError) as e:
            run([tmp_path / "nested.parquet"], corpus.tok, label=bad)
        one_line(e, f"no label column {bad!r}", "a dotted name is a struct column's field")
    # a later shard whose label is elsewhere (a literal 'meta.lang' column, a struct without the field): one line
    # naming it, where reading it raised Arrow's KeyError (review)
    n = len(corpus.texts)
    for name, other in (("literal", {"text": corpus.texts, "meta.lang": [m["lang"] for m in meta]}),
                        ("nofield", {"text": corpus.texts, "meta": [{"q": i} for i in range(n)]})):
        hf_datasets.Dataset.from_dict(other).save_to_disk(str(tmp_path / name), num_shards=2)
        mixed = tmp_path / f"mixed-{name}"
        shutil.copytree(tmp_path / "nested", mixed)
        shutil.copy(tmp_path / name / "data-00001-of-00002.arrow", mixed / "data-00001-of-00002.arrow")
        with pytest.raises(DataError) as e:
            run([mixed], corpus.tok, label="meta.lang")
        one_line(e, "data-00001-of-00002.arrow: lacks column 'meta.lang'")


def test_a_token_column_gives_the_list_lengths_and_auto_adds_a_bos_only_where_none_starts(tmp_path, hf_datasets):
    lists = token_lists(300, seed=2)
    ds = hf_datasets.Dataset.from_dict({"input_ids": lists, "source": ["a"] * 150 + ["b"] * 150})
    ds.save_to_disk(str(tmp_path / "ds"), num_shards=2)
    ds.to_parquet(str(tmp_path / "t.parquet"), batch_size=64)  # several row groups
    for p in (tmp_path / "ds", tmp_path / "t.parquet"):
        assert run([p], bos_id=BOS).lengths.tolist() == bos_auto(lists)
        assert run([p], bos="add").lengths.tolist() == [len(x) + 1 for x in lists]
        assert run([p], bos="none").lengths.tolist() == [len(x) for x in lists]
        assert run([p], bos="none").labels.tolist() == ["a"] * 150 + ["b"] * 150


def test_a_tokenizer_that_counts_no_text_and_gives_no_needed_bos_id_is_not_named_as_used(corpus, tmp_path):
    """Token data with --tokenizer: the report's Corpus line named the tokenizer though it counted nothing. It is
    used for text, or for its own BOS id under BOS auto; else left out of the provenance, and a note says so."""
    pq.write_table(pa.table({"input_ids": token_lists(40, seed=4)}), tmp_path / "t.parquet")
    for kw in ({"bos_id": BOS}, {"bos": "add"}, {"bos": "none"}):
        r = run([tmp_path / "t.parquet"], corpus.tok, **kw)
        assert r.provenance["tokenizer"] is None, kw
        assert r.message.endswith(f"note: the tokenizer {corpus.tok} is not used: the inputs are token data, and the "
                                  f"BOS policy needs no id of its"), r.message
    own_bos = replace(tokenizer_spec(corpus.tok), bos_id=BOS)  # a tokenizer with a BOS of its own, under BOS auto
    r = run([tmp_path / "t.parquet"], own_bos)
    assert r.provenance["tokenizer"]["ref"] == corpus.tok and "not used" not in r.message
    assert r.lengths.tolist() == bos_auto(token_lists(40, seed=4))
    pq.write_table(pa.table({"text": corpus.texts[:20]}), tmp_path / "x.parquet")  # text: the tokenizer counts it
    r = run([tmp_path / "x.parquet"], corpus.tok, bos_id=BOS)
    assert r.provenance["tokenizer"]["ref"] == corpus.tok and "not used" not in r.message


def test_parquet_and_arrow_files_in_the_order_given_labelled_by_their_names(corpus, tmp_path, hf_datasets):
    half = len(corpus.texts) // 2
    hf_datasets.Dataset.from_dict({"text": corpus.texts[:half]}).to_parquet(str(tmp_path / "b.parquet"), batch_size=50)
    lists = token_lists(120, seed=3)
    table = pa.table({"ids": pa.array(lists, pa.large_list(pa.int64()))})
    with pa.OSFile(str(tmp_path / "a.arrow"), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table, max_chunksize=50)
    with pytest.raises(DataError) as e:  # the arrow file's only column is no known name: refused, never guessed
        run([tmp_path / "b.parquet", tmp_path / "a.arrow"], corpus.tok)
    one_line(e, "a.arrow", "name the column")
    pq.write_table(table.rename_columns(["input_ids"]), tmp_path / "a.parquet")
    r = run([tmp_path / "b.parquet", tmp_path / "a.parquet"], corpus.tok, bos="none")
    assert r.lengths.tolist() == corpus.counts[:half] + [len(x) for x in lists]
    assert r.labels.tolist() == ["b.parquet"] * half + ["a.parquet"] * len(lists)
    assert r.doc_file.tolist() == [0] * half + [1] * len(lists)
    assert r.doc_row.tolist() == list(range(half)) + list(range(len(lists)))
    arrow = run([tmp_path / "a.arrow"], column="ids", bos="none")
    assert arrow.lengths.tolist() == [len(x) for x in lists] and arrow.labels.tolist() == ["a.arrow"] * len(lists)
    shutil.copy(tmp_path / "a.parquet", tmp_path / "noname")  # no suffix: the format from its first bytes
    assert run([tmp_path / "noname"], bos="none").lengths.tolist() == [len(x) for x in lists]
    (tmp_path / "docs.txt").write_text("".join(json.dumps({"text": t}) + "\n" for t in corpus.texts[:9]))
    sniffed = run([tmp_path / "docs.txt"], corpus.tok)  # its first byte opens a JSON object
    assert sniffed.lengths.tolist() == [c + 1 for c in corpus.counts[:9]]
    (tmp_path / "docs.txt").write_text("\n" + (tmp_path / "docs.txt").read_text())  # a blank first line
    with pytest.raises(DataError) as e:
        run([tmp_path / "docs.txt"], corpus.tok)
    one_line(e, "docs.txt", "unknown format")
    named = run([tmp_path / "docs.txt"], corpus.tok, format="jsonl", bos="add")  # the format named
    assert named.lengths.tolist() == [c + 1 for c in corpus.counts[:9]] and named.provenance["format"] == "jsonl"
    # a UTF-8 byte order mark before the first line (Windows tools write one), and before a line inside (cat of two
    # such files): read, by name and by first bytes (it was "line 1: not JSON (Unexpected UTF-8 BOM ...)")
    lines = [json.dumps({"text": t}) + "\n" for t in corpus.texts[:9]]
    (tmp_path / "bom.jsonl").write_text("\ufeff" + "".join(lines[:4]) + "\ufeff" + "".join(lines[4:]), encoding="utf-8")
    shutil.copy(tmp_path / "bom.jsonl", tmp_path / "bom")
    for name in ("bom.jsonl", "bom"):
        assert run([tmp_path / name], corpus.tok).lengths.tolist() == [c + 1 for c in corpus.counts[:9]], name


def test_a_format_named_for_a_folder_leaves_out_a_datasets_folder_inside_it(corpus, tmp_path, hf_datasets):
    write_dolma(tmp_path / "a.jsonl", corpus.texts[:5], corpus.labels[:5], lambda p: open(p, "w", encoding="utf-8"))
    hf_datasets.Dataset.from_dict({"text": corpus.texts[5:9]}).save_to_disk(str(tmp_path / "ds"))
    assert run([tmp_path], corpus.tok).files == [str(tmp_path / "a.jsonl"), str(tmp_path / "ds")]
    named = run([tmp_path], corpus.tok, format="jsonl")  # the datasets folder is of another format: not read
    assert named.files == [str(tmp_path / "a.jsonl")] and named.lengths.tolist() == [c + 1 for c in corpus.counts[:5]]
    shards = run([tmp_path / "ds"], corpus.tok, format="arrow")  # the one other reading of a datasets folder
    assert shards.files == [str(tmp_path / "ds" / "data-00000-of-00001.arrow")]
    assert shards.lengths.tolist() == [c + 1 for c in corpus.counts[5:9]]


def test_a_folder_reads_only_its_corpus_files_not_its_card_or_metadata_json(corpus, tmp_path):
    """A Hugging Face Hub snapshot: parquet shards beside a README.md, a dataset_info.json (pretty-printed) and a
    tokenizer.json. The .json files start as JSON lines do, and were read as such ("line 1: not JSON"); with
    --format parquet the README was read as parquet. Now only the parquet files are read, named or not; *.json
    files of JSON lines are read when jsonl is named."""
    for i in range(2):
        pq.write_table(pa.table({"text": corpus.texts[i * 5:(i + 1) * 5]}), tmp_path / f"train-{i}.parquet")
    (tmp_path / "README.md").write_text("---\nlicense: mit\n---\n# my corpus\n")
    (tmp_path / "dataset_info.json").write_text(json.dumps({"features": {"text": "string"}}, indent=2))
    shutil.copy(corpus.tok, tmp_path / "tokenizer.json")
    want = [c + 1 for c in corpus.counts[:10]]
    for fmt in (None, "parquet"):
        r = run([tmp_path], corpus.tok, format=fmt)
        assert r.files == [str(tmp_path / f"train-{i}.parquet") for i in range(2)] and r.lengths.tolist() == want
    lines = tmp_path / "lines"
    lines.mkdir()
    write_dolma(lines / "part.json", corpus.texts[:4], corpus.labels[:4], lambda p: open(p, "w", encoding="utf-8"))
    with pytest.raises(DataError) as e:
        run([lines], corpus.tok)
    one_line(e, str(lines), "no corpus file", "*.json files are read as JSON lines only with --format jsonl")
    assert run([lines], corpus.tok, format="jsonl").lengths.tolist() == [c + 1 for c in corpus.counts[:4]]


def write_dolma(path, texts, labels, opener):
    with opener(path) as f:
        for i, (t, s) in enumerate(zip(texts, labels)):
            f.write(json.dumps({"id": str(i), "text": t, "source": s, "metadata": {"lang": f"l{i % 2}"}}) + "\n")


def test_jsonl_plain_gzip_and_zstd_with_dolma_sources_as_labels(corpus, tmp_path):
    n = len(corpus.texts) // 3
    parts = [(corpus.texts[i * n:(i + 1) * n], corpus.labels[i * n:(i + 1) * n]) for i in range(3)]
    write_dolma(tmp_path / "a.jsonl", *parts[0], lambda p: open(p, "w", encoding="utf-8"))
    write_dolma(tmp_path / "b.json.gz", *parts[1], lambda p: gzip.open(p, "wt", encoding="utf-8"))
    write_dolma(tmp_path / "c.jsonl.zst", *parts[2],
                lambda p: zstandard.open(p, "wt", encoding="utf-8", cctx=zstandard.ZstdCompressor(level=3)))
    r = run([tmp_path / "*.js*"], corpus.tok)  # a glob: its files sorted
    assert r.lengths.tolist() == [c + 1 for c in corpus.counts[:3 * n]]
    empty = sum(t == "" for t in corpus.texts[:3 * n])  # an empty text is a lone BOS, and said to be
    assert empty > 0 and r.provenance["empty_documents"] == empty and f"({empty:,} of them a lone BOS" in r.message
    assert r.labels.tolist() == corpus.labels[:3 * n]
    assert r.doc_row.tolist() == list(range(n)) * 3 and r.doc_file.tolist() == [0] * n + [1] * n + [2] * n
    lang = run([tmp_path], corpus.tok, label="metadata.lang")  # a folder: its files sorted; a nested label field
    assert lang.labels.tolist() == [f"l{i % 2}" for i in range(n)] * 3
    with open(tmp_path / "d.jsonl", "w", encoding="utf-8") as f:  # a key with a dot in it is a field of its own
        f.write("".join(json.dumps({"text": t, "meta.lang": f"k{i}"}) + "\n" for i, t in enumerate(corpus.texts[:3])))
    assert run([tmp_path / "d.jsonl"], corpus.tok, label="meta.lang").labels.tolist() == ["k0", "k1", "k2"]
    os.mkfifo(tmp_path / "pipe")  # a named pipe: refused by name, passed over in a folder (both waited for ever)
    with pytest.raises(DataError) as e:
        run([tmp_path / "pipe"], corpus.tok)
    one_line(e, "pipe: not a regular file")
    assert len(run([tmp_path], corpus.tok)) == 3 * n + 3


def test_a_plain_jsonl_split_in_byte_ranges_counts_every_line_once(corpus, tmp_path, monkeypatch):
    write_dolma(tmp_path / "a.jsonl", corpus.texts, corpus.labels, lambda p: open(p, "w", encoding="utf-8"))
    line_start = len(b"".join((tmp_path / "a.jsonl").read_bytes().splitlines(keepends=True)[:7]))
    # cuts on a line's first byte, on the newline before it, on its second byte, and anywhere
    for part in (line_start, line_start - 1, line_start + 1, 1000):
        monkeypatch.setattr(jsonl, "PART_BYTES", part)
        r = run([tmp_path / "a.jsonl"], corpus.tok)
        assert len(r.provenance["units"]) > 5
        assert r.lengths.tolist() == [c + 1 for c in corpus.counts] and r.labels.tolist() == corpus.labels
        assert r.doc_row.tolist() == list(range(len(corpus.texts)))


def megatron_builder():
    """megatron-core's indexed_dataset module (IndexedDatasetBuilder), imported without running
    megatron/core/__init__.py, which imports the model-parallel code (14 s against 1 s here); the stand-in
    packages are removed after."""
    spec = importlib.util.find_spec("megatron")
    root = spec.submodule_search_locations[0]
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if k == "megatron" or k.startswith("megatron.")}
    for name, path in (("megatron", root), ("megatron.core", os.path.join(root, "core"))):
        stub = types.ModuleType(name)
        stub.__path__ = [path]
        sys.modules[name] = stub
    try:
        importlib.import_module("megatron.core.parallel_state")  # first: its circle with core.utils then closes
        return importlib.import_module("megatron.core.datasets.indexed_dataset")
    finally:
        for k in [k for k in sys.modules if k == "megatron" or k.startswith("megatron.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def test_a_megatron_dataset_gives_its_documents_lengths_from_the_index(tmp_path):
    idx = megatron_builder()
    lists = [x for x in token_lists(200, seed=4) if x]  # Megatron's preprocessing writes no empty document
    b = idx.IndexedDatasetBuilder(str(tmp_path / "m_text_document.bin"), dtype=np.uint16)
    for i, ids in enumerate(lists):
        if i % 10 == 7 and len(ids) > 2:  # a document of two sequences (sentence-split preprocessing)
            b.add_document(torch.tensor(ids), lengths=[1, len(ids) - 1])
        else:
            b.add_item(torch.tensor(ids))
            b.end_document()
    b.finalize(str(tmp_path / "m_text_document.idx"))
    for given in ("m_text_document", "m_text_document.idx", "m_text_document.bin"):
        r = run([tmp_path / given], bos_id=BOS)
        assert r.lengths.tolist() == bos_auto(lists)
        assert r.provenance["bos_first"] == sum(x[0] == BOS for x in lists) > 0 and "note:" not in r.message
        assert r.files == [str(tmp_path / "m_text_document")] and r.labels.tolist() == ["m_text_document"] * len(lists)
    # a BOS id no document starts with (a tokenizer's id given for data made with another): counted, and said
    other = run([tmp_path / "m_text_document"], bos_id=60000)
    assert other.lengths.tolist() == [len(x) + 1 for x in lists] and other.provenance["bos_first"] == 0
    assert "no document of the token data starts with the BOS id 60000, so one was counted for each" in other.message
    none = run([tmp_path], bos="none")  # a folder: the .bin/.idx pair is one source
    assert none.lengths.tolist() == [len(x) for x in lists]
    # and named by its two files, or by a glob that matches both (refused as "named twice" before)
    for given in ([tmp_path / "m_text_document.bin", tmp_path / "m_text_document.idx"], [tmp_path / "m_text_*"]):
        pair = run(given, bos="none")
        assert pair.files == [str(tmp_path / "m_text_document")] and pair.lengths.tolist() == [len(x) for x in lists]
    for twice in ([tmp_path / "m_text_document.bin"] * 2, [tmp_path, tmp_path / "m_text_document.idx"]):
        with pytest.raises(DataError) as e:
            run(twice, bos="none")
        one_line(e, "m_text_document: named twice in the corpus")
    assert none.provenance["inputs"][0]["files"][1]["sha256"] is None  # the .bin, not read without BOS auto
    data = (tmp_path / "m_text_document.bin").read_bytes()
    (tmp_path / "m_text_document.bin").write_bytes(data[:-2])  # one token short
    with pytest.raises(DataError) as e:
        run([tmp_path / "m_text_document"], bos="none")
    one_line(e, "m_text_document.bin", "truncated")
    (tmp_path / "m_text_document.bin").write_bytes(data)
    index = (tmp_path / "m_text_document.idx").read_bytes()
    (tmp_path / "m_text_document.idx").write_bytes(index[:-8])
    with pytest.raises(DataError) as e:
        run([tmp_path / "m_text_document"], bos="none")
    one_line(e, "m_text_document.idx", "truncated or corrupt")


def test_flat_token_files_cut_after_each_separator_with_a_trailing_piece_kept(tmp_path):
    sep = 50256
    lists = [[t for t in x if t != sep] for x in token_lists(150, seed=5, vocab=60000)]
    flat = np.array([t for x in lists for t in x + [sep]], np.uint16)
    flat.tofile(tmp_path / "train.bin")  # nanoGPT: raw uint16, the EOT after every document
    r = run([tmp_path / "train.bin"], separator=sep, token_dtype="uint16", bos="none")
    assert r.lengths.tolist() == [len(x) + 1 for x in lists] and r.provenance["trailing_pieces"] == 0
    np.save(tmp_path / "part.npy", np.concatenate([flat, [7, 8, 9]]).astype(np.uint32))  # numpy .npy, uint32
    r = run([tmp_path / "part.npy"], separator=sep, bos_id=BOS)
    assert r.lengths.tolist() == bos_auto([x + [sep] for x in lists] + [[7, 8, 9]])
    assert r.provenance["trailing_pieces"] == 1
    with pytest.raises(DataError) as e:
        run([tmp_path / "train.bin"], separator=sep, bos="none")
    one_line(e, "train.bin", "dtype")


def test_tiktoken_from_a_rank_file_and_the_projects_own_tokenizer(corpus, tmp_path, hf_datasets):
    bpe = rustbpe.Tokenizer()
    bpe.train_from_iterator(corpus.texts, 400, pattern=openai_public.r50k_pat_str)
    ranks = {bytes(k): v for k, v in bpe.get_mergeable_ranks()}
    tiktoken.load.dump_tiktoken_bpe(ranks, str(tmp_path / "mine.tiktoken"))
    with mock.patch.object(openai_public, "load_tiktoken_bpe", return_value=ranks):
        enc = tiktoken.Encoding(**openai_public.cl100k_base())  # cl100k_base's pattern and specials, these ranks
    hf_datasets.Dataset.from_dict({"text": corpus.texts}).to_parquet(str(tmp_path / "t.parquet"))
    r = run([tmp_path / "t.parquet"], f"cl100k_base:{tmp_path / 'mine.tiktoken'}", bos="none")
    assert r.lengths.tolist() == [len(x) for x in enc.encode_ordinary_batch(corpus.texts)]
    assert r.provenance["tokenizer"]["kind"] == "tiktoken"
    own = train_encoding(iter(corpus.texts * 3), vocab_size=300)
    with pytest.raises(DataError, match=r"too small for a vocabulary of 8192; prepare it with --vocab-size \d+ or l"):
        train_encoding(iter(["a few words", "of text"]), vocab_size=8192)  # the size to give, not only "too small"
    save_encoding(own, tmp_path / "tokenizer")
    r = run([tmp_path / "t.parquet"], tmp_path / "tokenizer")
    assert r.lengths.tolist() == [len(x) + 1 for x in own.encode_ordinary_batch(corpus.texts)]
    assert r.provenance["bos"]["id"] == bos_id(own)  # the project's BOS, unless one is given


# ---- parallel: the same lengths in the same order


@pytest.fixture(scope="module")
def shards(corpus, tmp_path_factory):
    d = tmp_path_factory.mktemp("shards")
    k = len(corpus.texts) // 4
    for i in range(4):
        pq.write_table(pa.table({"text": corpus.texts[i * k:(i + 1) * k]}), d / f"s{i}.parquet", row_group_size=25)
    return d


# test_two_workers_and_ray_data_give_one_workers_lengths_in_its_order (one worker, two and Ray Data, on the fixtures
# above) is in tests/test_fanout.py: its Ray Data runs on that file's two-node cluster, not on a local Ray started
# and stopped here for it alone (~6 s of the suite's wall time)


# ---- the cache


def test_a_rerun_reads_the_cache_and_an_interrupted_pass_resumes_by_unit(corpus, shards, tmp_path, monkeypatch):
    shards = Path(shutil.copytree(shards, tmp_path / "shards"))  # one of them is changed below
    cache = tmp_path / "cache"
    counted, hashed = [], []
    real, real_hash = parallel.count_unit, cache_module.sha256_file

    def counting(unit, settings):
        counted.append(unit.source)
        return real(unit, settings)
    monkeypatch.setattr(parallel, "count_unit", counting)
    monkeypatch.setattr(cache_module, "sha256_file", lambda p: hashed.append(Path(p).name) or real_hash(p))
    whole = run([shards], corpus.tok)
    counted.clear()
    hashed.clear()

    def interrupted(units, settings, todo):
        for i in todo[:2]:
            yield i, counting(units[i], settings)
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        run([shards], corpus.tok, cache_dir=cache, runner=interrupted)
    assert counted == [0, 1]
    counted.clear()
    again = run([shards], corpus.tok, cache_dir=cache)
    assert counted == [2, 3] and again.resumed == 2 and "2 of 4 parts resumed" in again.message
    assert again.lengths.tolist() == whole.lengths.tolist() and not again.cached
    assert sorted(hashed) == [f"s{i}.parquet" for i in range(4)]  # once, at the first pass: remembered since
    counted.clear()
    third = run([shards], corpus.tok, cache_dir=cache, progress=True)
    assert counted == [] and len(hashed) == 4  # no unit counted, no file hashed
    assert third.cached and "nothing recomputed" in third.message
    for f in ("lengths", "labels", "doc_file", "doc_row"):
        assert getattr(third, f).tolist() == getattr(whole, f).tolist()
    assert third.provenance == again.provenance
    none = run([shards], corpus.tok, cache_dir=cache, bos="none")  # another BOS policy: another key, counted
    assert not none.cached and counted == [0, 1, 2, 3]
    counted.clear()
    pq.write_table(pa.table({"text": ["changed"] * 3}), shards / "s3.parquet")
    changed = run([shards], corpus.tok, cache_dir=cache)
    assert not changed.cached and counted == [0, 1, 2, 3] and len(changed) == len(whole) - 100 + 3
    assert hashed[-1] == "s3.parquet" and len(hashed) == 5  # the changed file alone hashed again


# ---- bad input: one line naming the file


def test_each_bad_input_is_one_line_naming_the_file(corpus, tmp_path, hf_datasets):
    def refused(paths, *words, tok=None, **kw):
        with pytest.raises(DataError) as e:
            run(paths, tok, **kw)
        return one_line(e, *words)

    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    refused([tmp_path / "bad.parquet"], "bad.parquet", "not a readable parquet", tok=corpus.tok)
    (tmp_path / "bad.arrow").write_bytes(b"ARROW1\x00\x00 not really")
    refused([tmp_path / "bad.arrow"], "bad.arrow", "not a readable arrow", tok=corpus.tok)
    (tmp_path / "bad.npy").write_bytes(b"\x93NUMPY not really")
    refused([tmp_path / "bad.npy"], "bad.npy", "not a readable .npy", separator=0)
    (tmp_path / "x.weird").write_bytes(b"\x00\x01\x02")
    refused([tmp_path / "x.weird"], "x.weird", "unknown format")
    pq.write_table(pa.table({"body": ["a", "b"]}), tmp_path / "body.parquet")
    refused([tmp_path / "body.parquet"], "body.parquet", "no column 'text'", tok=corpus.tok, column="text")
    pq.write_table(pa.table({"n": [3, 4]}), tmp_path / "ints.parquet")  # its only integer column: never taken
    refused([tmp_path / "ints.parquet"], "ints.parquet", "no text column", tok=corpus.tok)
    refused([tmp_path / "body.parquet"], "body.parquet", "no label column 'lang'", tok=corpus.tok, column="body",
            label="lang")
    (tmp_path / "p.idx").write_bytes(b"MMIDIDX\x00\x00")
    refused([tmp_path / "p.idx"], "p.bin", "missing")
    (tmp_path / "q.idx").write_bytes(b"MMIDIDX\x00\x00")
    (tmp_path / "q.bin").mkdir()
    refused([tmp_path / "q"], "q.bin", "is a folder")
    (tmp_path / "tokdir").mkdir()
    with pytest.raises(DataError) as e:
        run([tmp_path / "body.parquet"], tmp_path / "tokdir")
    one_line(e, "tokdir", "is a folder")
    (tmp_path / "latin.jsonl").write_bytes(json.dumps({"text": "ok"}).encode() + b'\n{"text": "caf\xe9"}\n')
    refused([tmp_path / "latin.jsonl"], "latin.jsonl", "line 2", "not UTF-8", tok=corpus.tok)
    # labels from a later line on, where the first had none (a new user's probe: dropped without a word); the
    # reverse, a labelled file's line without one, is refused as it was
    (tmp_path / "late.jsonl").write_text('{"text": "a"}\n{"text": "b"}\n{"text": "c", "label": "web"}\n')
    refused([tmp_path / "late.jsonl"], "late.jsonl", "line 3: a label field 'label', which the file's first record "
            "has not", "--label-column label", tok=corpus.tok)
    (tmp_path / "early.jsonl").write_text('{"text": "a", "source": "web"}\n{"text": "b"}\n')
    refused([tmp_path / "early.jsonl"], "early.jsonl", "line 2: no label field 'source'", tok=corpus.tok)
    (tmp_path / "half.jsonl").write_text('{"text": "ok"}\n{"text": "a\\ud800b"}\n')
    refused([tmp_path / "half.jsonl"], "half.jsonl", "line 2", "not valid Unicode", tok=corpus.tok)
    np.arange(10, dtype=np.uint16).tofile(tmp_path / "flat.bin")
    refused([tmp_path / "flat.bin"], "flat.bin", "out of range", separator=70000, token_dtype="uint16")
    refused([tmp_path / "flat.bin"], "flat.bin", "never occurs", separator=11, token_dtype="uint16", bos="none")
    (tmp_path / "empty.jsonl").write_text("")
    refused([tmp_path / "empty.jsonl"], "empty.jsonl", "no documents", tok=corpus.tok)
    refused([tmp_path / "latin.jsonl"], "latin.jsonl", "tokenizer")  # text and no tokenizer
    good = tmp_path / "g.jsonl"
    good.write_text('{"text": "a"}\n')
    zst = tmp_path / "cut.jsonl.zst"
    zst.write_bytes(zstandard.ZstdCompressor().compress(b'{"text": "abc"}\n' * 500)[:-9])
    refused([zst], "cut.jsonl.zst", "cannot be read", tok=corpus.tok)
    gz = tmp_path / "cut.jsonl.gz"
    gz.write_bytes(gzip.compress(b'{"text": "abc"}\n' * 500)[:-9])
    refused([gz], "cut.jsonl.gz", "cannot be read", tok=corpus.tok)
    refused([tmp_path / "nothing.parquet"], "nothing.parquet", "no such file")
    refused([tmp_path / "nothing*.parquet"], "nothing*.parquet", "no file matches")
    refused([good, good], "g.jsonl", "named twice", tok=corpus.tok)
    one_split = hf_datasets.DatasetDict({"train": hf_datasets.Dataset.from_dict({"text": ["a"]})})
    one_split.save_to_disk(str(tmp_path / "dd"))
    refused([tmp_path / "dd"], "dd", "DatasetDict", "train")
    lists = pa.table({"input_ids": pa.array([[1, 2]], pa.list_(pa.int32()))})
    pq.write_table(lists, tmp_path / "ids.parquet")
    refused([tmp_path / "ids.parquet"], "ids.parquet", "BOS id")  # BOS auto on tokens: which id?
    # a null inside a token list, counted as a token before: the row (or line) and its index named. Parquet's
    # second row group, and a table sliced into batches, so that the row is counted across both
    nulls = pa.table({"input_ids": pa.array([[1, 2], [3], [4, 5, 6], [7, None, 9]], pa.list_(pa.int32()))})
    pq.write_table(nulls, tmp_path / "nulls.parquet", row_group_size=2)
    refused([tmp_path / "nulls.parquet"], "nulls.parquet", "row 3: 'input_ids' holds a null at index 1, not a token",
            bos="none")
    (tmp_path / "nulls.jsonl").write_text('{"input_ids": [1, 2]}\n{"input_ids": [3, 4, null]}\n')
    refused([tmp_path / "nulls.jsonl"], "nulls.jsonl", "line 2: field 'input_ids' holds a null at index 2, not a token",
            bos="none")
    # in the first record, which decides the field: it was no token field at all; after blank lines, its own line
    (tmp_path / "null0.jsonl").write_text('\n{"input_ids": [null, 1]}\n{"input_ids": [2, 3]}\n')
    refused([tmp_path / "null0.jsonl"], "null0.jsonl", "line 2: field 'input_ids' holds a null at index 0, not a token",
            bos="none")
    (tmp_path / "nofield.jsonl").write_text('\n\n{"ids": [1, 2]}\n')
    refused([tmp_path / "nofield.jsonl"], "nofield.jsonl", "line 3: no text field", tok=corpus.tok)
    refused([good], "cache", "is a file", tok=corpus.tok, cache_dir=good)
