"""Megatron-Core's GPTDataset and BlendedDataset, megatron-core's own code (audit/libraries/megatron.py,
megatron_blend.py): on a seeded stream with long documents, every partition count, the never-started set and every
document's fate against a reference written below from Megatron's documented rule (the split, the epochs, the
document shuffle and its 80% rule, windows of seq_length + 1, the dropped last sample, the sample shuffle, the
blend's weights and 0.5% surplus); a real GPTDataset built here over a tracer indexed dataset gives its first 64
samples, each checked against the (document, offset) the audit assigns their tokens; and bad input is one line."""
import importlib.util
import json
import math
import signal
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from audit.__main__ import main as audit_main
from audit.events import read_events
from audit.libraries.megatron import installed_root, megatron
from audit.topology import SUMMED
from conftest import one_line_error
from loader_fates import account, audit_run, compare

R = 65
SEQ = R - 1
SEED = 1234


def _lengths(n, seed):
    rng = np.random.default_rng(seed)
    L = np.maximum(1, rng.lognormal(3.2, 0.9, n).astype(np.int64))
    L[::11] = rng.integers(100, 500, len(L[::11]))
    return L


@pytest.fixture(scope="module")
def stream(tmp_path_factory):
    """2,000 documents, one in eleven of 100-500 tokens; and the same in two labelled datasets (a: every third)."""
    L = _lengths(2000, 3)
    d = tmp_path_factory.mktemp("megatron")
    (d / "L.txt").write_text("\n".join(map(str, L)) + "\n")
    labels = np.where(np.arange(len(L)) % 3 == 0, "a", "b")
    pq.write_table(pa.table({"length": L, "label": labels}), d / "L.parquet")
    return L, labels, d


def ref_gpt(L, samples, split=(969, 30, 1)):
    """A GPTDataset's rows by its documented rule: (rows as span lists over sources epoch * n + document, epochs)."""
    n = len(L)
    train = np.arange(int(round(split[0] / sum(split) * n)), dtype=np.int32)
    T = int(L[train].sum())
    E = 1
    while E * T < samples * SEQ + 1:  # the fewest epochs covering num_samples * seq_length + 1 tokens
        E += 1
    total = (E * T - 1) // SEQ  # the last partial sample dropped
    sans = ((E - 1) * T - 1) // SEQ
    separate = E > 1 and samples - sans < int(0.80 * ((T - 1) // SEQ))
    rs = np.random.RandomState(SEED)

    def shuffled(a):
        rs.shuffle(a)
        return a

    docs = (np.concatenate([shuffled(np.tile(train, E - 1)), shuffled(train.copy())]) if separate
            else shuffled(np.tile(train, E)))
    if separate:
        order = np.concatenate([shuffled(np.arange(sans, dtype=np.uint32)),
                                shuffled(np.arange(sans, total, dtype=np.uint32))])
    else:
        order = shuffled(np.arange(total, dtype=np.uint32))
    epoch = np.zeros(len(docs), np.int64)  # a document's k-th place in the index is its epoch k
    seen = np.zeros(n, np.int64)
    for p, d in enumerate(docs.tolist()):
        epoch[p], seen[d] = seen[d], seen[d] + 1
    src, start = epoch * n + docs, np.cumsum(L[docs]) - L[docs]
    rows = []
    for i in order.tolist():  # sample i's inputs: tokens [i * SEQ, (i + 1) * SEQ) of the documents in index order
        a, b = i * SEQ, (i + 1) * SEQ
        p0, p1 = np.searchsorted(start, a, "right") - 1, np.searchsorted(start, b - 1, "right") - 1
        at = [(int(src[p]), int(start[p]), int(start[p] + L[docs[p]])) for p in range(p0, p1 + 1)]
        rows.append([(s, max(a, s0) - s0, min(b, s1) - s0) for s, s0, s1 in at])
    return rows, E, separate, len(train)


@pytest.mark.parametrize("share, separate", [(1.25, True), (1.9, False)])
def test_megatron_gpt_trains_the_windows_its_rule_gives(stream, tmp_path, share, separate):
    L, _labels, d = stream
    one = (int(L[:int(round(0.969 * len(L)))].sum()) - 1) // SEQ  # samples in one epoch of the train split
    horizon = int(one * share)  # into a second epoch: under 80% of it shuffled alone, or not
    rows, E, sep, train = ref_gpt(L, horizon)
    assert (E, sep) == (2, separate)
    s, fates = audit_run(audit_main, d / "L.txt", tmp_path / "gpt", "megatron_gpt", R, horizon * SEQ)
    facts = s["loader"]
    assert (facts["epochs"], facts["final_epoch_shuffled_alone"], facts["train_documents"]) == (E, sep, train)
    assert s["passes_started"] == 2 and s["library"] == {"name": "megatron-core", "version": "0.16.1"}
    fate, counts = account(L, rows, horizon, 2 * len(L), passes=2)
    compare(s, fates, fate, counts)
    assert (np.asarray(fates["fate"], object)[train:] == "dropped").all()  # the held-out split is never trained
    # the report, not only summary.json, says what Megatron built and that the held-out documents are those dropped
    md = (tmp_path / "gpt" / "report.md").read_text()
    assert (f"**megatron_gpt**: as the library itself ran: seq length: {SEQ}; seed: {SEED}; split: 969,30,1; "
            f"train documents: {train:,}; held out documents: {len(L) - train:,};") in md
    assert f"epochs: {E}; " in md and f"final epoch shuffled alone: {'yes' if sep else 'no'}" in md
    assert f"Its {len(L) - train:,} held-out documents (the split's validation and test shares) are never trained" in md


def ref_blend(L, labels, rows, weights, surplus=0.005):
    """The blend by its documented rule: per dataset a GPTDataset of ceil(ceil(rows * w) * (1 + surplus)) samples;
    sum(ceil(rows * w)) blend samples, each from the dataset whose drawn count lags w * max(k, 1) most (the first
    on a tie), its next sample. Sources: the corpus's pass, then each dataset's later epochs."""
    w = np.asarray(weights, float) / sum(weights)
    names = list(dict.fromkeys(labels.tolist()))
    members = [np.flatnonzero(labels == x) for x in names]
    per = [ref_gpt(L[m], math.ceil(math.ceil(rows * x) * (1 + surplus))) for m, x in zip(members, w)]
    n, E = len(L), [p[1] for p in per]
    size = sum(math.ceil(rows * x) for x in w)
    drawn, out, pick = np.zeros(len(w), np.int64), [], []
    for k in range(size):
        j = int(np.argmax(w * max(k, 1) - drawn))
        out.append([(int(e_n // len(members[j])) * n + int(members[j][e_n % len(members[j])]), a, b)
                    for e_n, a, b in per[j][0][drawn[j]]])
        pick.append(j)
        drawn[j] += 1
    sources = np.concatenate([np.arange(n)] + [e * n + np.sort(np.concatenate([m for m, k in zip(members, E) if k > e]))
                                               for e in range(1, max(E))])
    return out, sources, E, np.asarray(pick), [len(p[0]) for p in per]


def test_megatron_blend_draws_by_weight_with_each_datasets_own_epochs(stream, tmp_path):
    L, labels, d = stream
    horizon = 1500
    rows, sources, E, pick, built = ref_blend(L, labels, horizon, [0.7, 0.3])
    assert E == [2, 1]  # 'a' (a third of the documents, 70% of the samples) is read twice, 'b' once
    s, fates = audit_run(audit_main, d / "L.parquet", tmp_path / "blend", "megatron_blend", R, horizon * SEQ,
                         "--column", "length", "--loader-arg", "weights=0.7,0.3")
    fate, counts = account(L, rows, horizon, None, passes=max(E), sources=sources)
    compare(s, fates, fate, counts)
    table = {t["dataset"]: t for t in s["loader"]["datasets"]}
    for j, name in enumerate(("a", "b")):
        t = table[name]
        assert (t["epochs"], t["samples_built"], t["samples_drawn"], t["samples_drawn_by_budget"]) == \
            (E[j], built[j], int((pick == j).sum()), int((pick[:horizon] == j).sum()))
        assert t["samples_target"] == math.ceil(horizon * [0.7, 0.3][j]) < t["samples_built"]
        assert abs(t["emitted_share"] - [0.7, 0.3][j]) < 0.01 and t["started"] == int(
            np.isin(np.asarray(fates["fate"], object)[labels == name], ("whole", "partial")).sum())


def test_a_real_gptdatasets_first_64_samples_are_where_the_audit_puts_them(stream, tmp_path):
    L, _labels, d = stream
    first = 16 + np.cumsum(L) - L  # the tracer ids of the stream's first pass
    m = megatron()
    b = m.indexed_dataset.IndexedDatasetBuilder(str(tmp_path / "t.bin"), dtype=np.int32)
    for a, n in zip(first.tolist(), L.tolist()):
        b.add_document(np.arange(a, a + n), [n])
    b.finalize(str(tmp_path / "t.idx"))

    class Tok:
        vocab_size, eod, eos, pad, unique_identifiers = None, 2, 2, 0, {"class": "test"}

    one = (int(L[:int(round(0.969 * len(L)))].sum()) - 1) // SEQ
    horizon = int(one * 1.9)  # two epochs shuffled together: the first samples read both
    cfg = m.gpt_dataset.GPTDatasetConfig(random_seed=SEED, sequence_length=SEQ, blend=([str(tmp_path / "t")], None),
                                         split="969,30,1", tokenizer=Tok(), reset_position_ids=False,
                                         reset_attention_mask=False, eod_mask_loss=False, create_attention_mask=False)
    ds = m.blended_megatron_dataset_builder.BlendedMegatronDatasetBuilder(
        m.gpt_dataset.GPTDataset, [horizon, None, None], lambda: True, cfg).build()[0]
    out = tmp_path / "audit"
    audit_run(audit_main, d / "L.txt", out, "megatron_gpt", R, horizon * SEQ)
    ev = read_events(out / "events_megatron_gpt.parquet")
    n, epochs_seen = len(L), set()
    for i in range(64):
        tokens = ds[i]["tokens"].numpy()  # the sample's inputs, as a trainer reads them
        doc = np.searchsorted(first, tokens, "right") - 1
        want = np.stack([doc, tokens - first[doc]])
        mine = ev[ev["row"] == i]
        spans = np.sort(mine, order="row_offset")  # each event: the document's tokens from span_start on
        got = np.concatenate([np.stack([np.full(e["emitted"], e["source_id"] % n),
                                        e["span_start"] + np.arange(e["emitted"])]) for e in spans], axis=1)
        assert np.array_equal(got, want), i
        epochs_seen |= set((mine["source_id"] // n).tolist())
    assert epochs_seen == {0, 1}


def test_the_megatron_preset_is_one_global_index_for_every_rank(stream, tmp_path):
    # --pipeline megatron at 2 ranks x 2 workers: one packing for the run, the one-stream audit
    d = stream[2]
    s, fates = audit_run(audit_main, d / "L.txt", tmp_path / "preset", "megatron_gpt", R, 500 * SEQ, "--pipeline",
                         "megatron", "--ranks", "2", "--loader-workers", "2")
    one, one_fates = audit_run(audit_main, d / "L.txt", tmp_path / "one", "megatron_gpt", R, 500 * SEQ)
    summary = json.loads((tmp_path / "preset" / "summary.json").read_text())
    assert "topology" not in summary and summary["pipeline"]["owner"] == "stream"
    assert {k: s[k] for k in SUMMED} == {k: one[k] for k in SUMMED} and fates == one_fates


@pytest.mark.parametrize("extra, msg", [
    (["--packers", "megatron_blend", "--loader-arg", "weights=0.5,-0.5"], "-0.5 is negative"),
    (["--packers", "megatron_blend", "--loader-arg", "weights=0,0"], "they sum to 0"),
    (["--packers", "megatron_blend", "--loader-arg", "weights=0.2,0.3,0.5"], "3 weights for 2 datasets"),
    (["--packers", "megatron_gpt", "--row-capacity", "2"], "seq_length = R - 1 = 1 tokens a row; it must be at "
                                                           "least 2"),
    (["--packers", "megatron_gpt", "--loader-arg", "bins=4"], "--loader-arg bins: none of the audited packers "
                                                              "reads it"),
    # a typo reached Megatron's normalisation as NaN, a zero train share built no train dataset: both were filed as
    # findings about Megatron
    (["--packers", "megatron_gpt", "--loader-arg", "split=abc"], "--loader-arg split=abc: expected up to three"),
    (["--packers", "megatron_gpt", "--loader-arg", "split=0,100,0"], "with a positive train share"),
    (["--packers", "megatron_gpt", "--loader-arg", "split=1e3,1"], "non-negative train,valid,test shares"),
])
def test_bad_loader_input_is_one_line_and_nothing_written(stream, tmp_path, capsys, extra, msg):
    out = tmp_path / "o"
    rc = audit_main(["--lengths", str(stream[2] / "L.parquet"), "--column", "length", "--out", str(out), *extra])
    one_line_error(capsys, rc, msg)
    assert not out.exists() and not list(tmp_path.glob(".o*"))


def test_a_blend_of_one_dataset_is_refused_alone(stream, tmp_path):
    # an unlabelled stream: megatron_blend has nothing to blend, the other packers are audited
    out = tmp_path / "o"
    assert audit_main(["--lengths", str(stream[2] / "L.txt"), "--row-capacity", str(R), "--targets", str(50 * SEQ),
                       "--packers", "megatron_blend,foundry_concat", "--permutations", "0", "--no-figures",
                       "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())["packers"]
    assert "the stream has one dataset; a blend needs two or more" in s["megatron_blend"]["refused"]
    assert s["foundry_concat"]["rows"] == 50


def test_megatron_capped_at_the_passes_given_is_short_because_its_input_ended_in_every_line(stream, tmp_path):
    """--passes 1 under a budget of two epochs: Megatron builds its index for one epoch and stops there, its
    iterator never read to the end. The comparison said it "stopped yielding rows, its input not ended" where the
    packer's own line said its input ended first."""
    L, _labels, d = stream
    one = (int(L[:int(round(0.969 * len(L)))].sum()) - 1) // SEQ
    s, _ = audit_run(audit_main, d / "L.txt", tmp_path / "gpt", "megatron_gpt", R, 2 * one * SEQ, "--passes", "1")
    assert s["rows"] == one and s["loader"]["capped_by_passes"] == 1 and not s["trace"]["input_ended"]
    comparison = json.loads((tmp_path / "gpt" / "comparison.json").read_text())
    row = comparison["packers"]["megatron_gpt"]
    md = (tmp_path / "gpt" / "report.md").read_text()
    assert row["input_ended"] and "its input ended first" in md and "stopped yielding rows" not in md


@pytest.mark.parametrize("packer, weights, split, where", [
    ("megatron_blend", ["--loader-arg", "weights=1,1"], "969,30,1", "dataset 'a' has 5 documents, so its validation share"),
    ("megatron_gpt", [], "1,1000", "the stream has 12 documents, so its train share"),
])
def test_a_split_megatron_would_build_empty_is_refused_not_built_for_ever(tmp_path, packer, weights, split, where):
    """megatron-core's epoch loop never ends for an empty split asked for samples (a blend with weights asks every
    split for some; the train split always): the audit says so instead of running that loop. An alarm turns a
    regression into a failure, not a suite that never ends."""
    n = 10 if packer == "megatron_blend" else 12  # two datasets of 5, or one of 12
    pq.write_table(pa.table({"length": np.full(n, 40), "label": ["a"] * 5 + ["b"] * (n - 5)}), tmp_path / "L.parquet")
    before = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(TimeoutError("the audit ran Megatron's "
                                                                                           "loop")))
    signal.alarm(20)
    try:
        rc = audit_main(["--lengths", str(tmp_path / "L.parquet"), "--column", "length", "--label-column", "label",
                         "--row-capacity", str(R), "--targets", str(4 * SEQ), "--packers", packer, *weights,
                         "--loader-arg", f"split={split}", "--permutations", "0", "--no-figures",
                         "--out", str(tmp_path / "o")])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)
    refused = json.loads((tmp_path / "o" / "summary.json").read_text())["packers"][packer]["refused"]
    assert rc != 0 or refused
    assert where in refused and "gpt_dataset.py:634-636" in refused, refused


def test_a_megatron_prefix_without_its_bin_is_one_line_and_nothing_written(stream, tmp_path, capsys):
    m = megatron()
    b = m.indexed_dataset.IndexedDatasetBuilder(str(tmp_path / "c_text_document.bin"), dtype=np.int32)
    b.add_document(np.arange(5), [5])
    b.finalize(str(tmp_path / "c_text_document.idx"))
    (tmp_path / "c_text_document.bin").unlink()
    out = tmp_path / "o"
    rc = audit_main(["--corpus", str(tmp_path / "c_text_document"), "--bos", "none", "--packers", "megatron_gpt",
                     "--out", str(out)])
    one_line_error(capsys, rc, "c_text_document.bin: missing")
    assert not out.exists() and not (tmp_path / "o.lengths").exists()


def test_a_corpus_folder_named_megatron_in_the_working_folder_is_not_taken_for_the_library(tmp_path, monkeypatch):
    """`python -m audit` puts the working folder first on the path, and megatron is a namespace package: the
    README's `--corpus megatron/...` folder there is a portion of it, listed first. The installed portion (the one
    with core/datasets) is the one loaded; with none, an ImportError naming megatron.core (refused in one line)."""
    (tmp_path / "megatron").mkdir()
    (tmp_path / "megatron" / "corpus_text_document.bin").write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "megatron", raising=False)  # found afresh, as in a new process
    found = list(importlib.util.find_spec("megatron").submodule_search_locations)
    assert found[0] == str(tmp_path / "megatron") and len(found) > 1  # the user's folder first
    assert installed_root(found) == found[1] and (Path(found[1]) / "core" / "datasets").is_dir()
    with pytest.raises(ImportError, match="megatron/core/datasets"):
        installed_root(found[:1])


def test_the_megatron_preset_counts_a_bin_s_documents_as_stored(tmp_path, capsys):
    """GPTDataset trains on the documents as the .bin holds them: under --pipeline megatron a .bin/.idx whose documents
    start with no BOS is audited at its stored lengths (it was refused, asking for a BOS id, unless --bos was given);
    --bos auto with an id still counts one where a document does not start with it."""
    m = megatron()
    rng = np.random.default_rng(4)
    lengths = rng.integers(5, 300, 400)
    b = m.indexed_dataset.IndexedDatasetBuilder(str(tmp_path / "c_text_document.bin"), dtype=np.uint16)
    for n in lengths:
        b.add_document(rng.integers(10, 900, n).astype(np.uint16), [int(n)])
    b.finalize(str(tmp_path / "c_text_document.idx"))
    common = ["--corpus", str(tmp_path / "c_text_document"), "--pipeline", "megatron", "--passes", "1",
              "--permutations", "0", "--no-figures", "--no-fates"]
    assert audit_main(common + ["--out", str(tmp_path / "as_stored")]) == 0
    s = json.loads((tmp_path / "as_stored" / "summary.json").read_text())
    assert s["corpus"]["bos"]["policy"] == "none" and s["corpus"]["tokens"] == int(lengths.sum())
    assert audit_main(common + ["--bos", "auto", "--bos-id", "1", "--out", str(tmp_path / "auto")]) == 0
    s = json.loads((tmp_path / "auto" / "summary.json").read_text())
    assert s["corpus"]["tokens"] == int(lengths.sum()) + len(lengths)  # no document starts with id 1
