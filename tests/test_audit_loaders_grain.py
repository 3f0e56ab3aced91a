"""MaxText's Grain packing, grain's own code (audit/libraries/grain.py): on a seeded stream of documents with long
ones, every partition count, the never-started set and every document's fate against a reference written below
from grain's documented rules and MaxText's tokenizer step, with truncation on (MaxText's default) and off."""
import json
import re

import numpy as np
import pytest

from audit.__main__ import main as audit_main
from loader_fates import account, audit_run, compare, cut

R = 65
SEQ = R - 1
BINS = 6


@pytest.fixture(scope="module")
def stream(tmp_path_factory):
    """2,000 documents: lognormal around 30 tokens, one in ten between 80 and 400 (past a row)."""
    rng = np.random.default_rng(7)
    L = np.maximum(1, rng.lognormal(3.1, 0.8, 2000).astype(np.int64))
    L[::10] = rng.integers(80, 400, len(L[::10]))
    f = tmp_path_factory.mktemp("grain") / "L.txt"
    f.write_text("\n".join(map(str, L)) + "\n")
    return L, f


def elements(L, truncation):
    """MaxText's tokenizer step: each document with an EOS after it, trimmed to SEQ tokens (TokenizeAndTrim) or
    cut into pieces of SEQ (TokenizeAndChunk). Each element: (its document, its pieces, its size)."""
    out = []
    for d, n in enumerate(L.tolist()):
        if truncation:
            k = min(n + 1, SEQ)
            out.append((d, [(d, 0, min(n, k))] + ([None] if n < k else []), k))
        else:
            for a in range(0, n + 1, SEQ):
                b = min(a + SEQ, n + 1)
                out.append((d, [(d, a, min(b, n))] + ([None] if b == n + 1 else []), b - a))
    return out


def ref_fit(L, truncation, best):
    """grain's FirstFit/BestFitPackedBatch and PackingDatasetIterator: BINS open rows; an element goes to the first
    row with room (best fit: the fullest row with room, the first on a tie); when it fits none, the non-empty rows
    are emitted in the order np.random.default_rng(rows emitted so far).permuted(range(rows)) and a fresh set
    starts with it; the last set is emitted when the documents end. The rows of a set come out once the element
    that did not fit has been pulled."""
    rows, pulled = [], []
    fill, content = [0] * BINS, [[] for _ in range(BINS)]

    def flush(now):
        used = sum(1 for x in fill if x)
        for j in np.random.default_rng(len(rows)).permuted(range(used)):
            rows.append([p for p in content[j] if p is not None])
            pulled.append(now)

    for d, pieces, size in elements(L, truncation):
        fits = [b for b in range(BINS) if fill[b] + size <= SEQ]
        if not fits:
            flush(d + 1)
            fill, content = [0] * BINS, [[] for _ in range(BINS)]
            fits = [0]
        b = max(fits, key=lambda b: (fill[b], -b)) if best else fits[0]
        fill[b] += size
        content[b] += pieces
    flush(len(L))
    return rows, pulled


def ref_concat_split(L, truncation):
    """ConcatThenSplitIterDataset: the elements concatenated and cut into rows of SEQ, the last shorter row kept.
    A row comes out once the element holding its last token has been pulled, and the next one too when that
    element ends exactly at the row's end (the buffer full, grain still asks for one more)."""
    els = elements(L, truncation)
    full, (last, _) = cut([p for _d, ps, _s in els for p in ps], SEQ)
    ends = np.cumsum([s for _d, _p, s in els])
    rows, pulled = full + ([last] if last else []), []
    for k in range(len(full)):
        e = int(np.searchsorted(ends, (k + 1) * SEQ))  # the element holding the row's last token
        if ends[e] == (k + 1) * SEQ:
            e += 1
        pulled.append(len(L) if e >= len(els) else els[e][0] + 1)
    if last:
        pulled.append(len(L))
    return rows, pulled


@pytest.mark.parametrize("truncation", [True, False])
@pytest.mark.parametrize("packer", ["grain_first_fit", "grain_best_fit", "grain_concat_split"])
def test_grain_packs_as_its_rules_say(stream, tmp_path, packer, truncation):
    L, f = stream
    kind = packer.removeprefix("grain_")
    rows, pulled = (ref_concat_split(L, truncation) if kind == "concat_split" else
                    ref_fit(L, truncation, kind == "best_fit"))
    horizon = len(rows) * 3 // 4
    s, fates = audit_run(audit_main, f, tmp_path / packer, packer, R, horizon * SEQ, "--loader-arg", f"bins={BINS}",
                         "--loader-arg", f"truncation={'on' if truncation else 'off'}")
    assert s["rows"] == horizon and s["loader"]["use_truncation"] is truncation and s["how"] == "traced"
    assert s["library"] == {"name": "grain", "version": "0.2.18"}
    fate, counts = account(L, rows, horizon, pulled[horizon - 1])
    compare(s, fates, fate, counts)
    if truncation:  # each long document's tail is thrown away by the trim
        assert not (np.asarray(fates["fate"], object)[L > SEQ] == "whole").any()


def test_the_report_names_the_packers_own_row_capacity_where_it_counts_against_it(stream, tmp_path):
    """grain's rows hold R - 1 tokens: its sources "longer than R" are those longer than its own row, and the
    topology sentence and the verdict say that length, not the audit's R (a new user's probe found R + 1 there)."""
    L, f = stream
    out = tmp_path / "o"
    assert audit_main(["--lengths", str(f), "--row-capacity", str(R), "--pipeline", "grain", "--ranks", "2",
                       "--permutations", "0", "--no-figures", "--no-fates", "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    own = s["packers"]["grain_first_fit"]["row_capacity"]
    assert own == SEQ != s["row_capacity"]
    report = (out / "report.md").read_text()
    said = re.findall(r"arrived sources longer than R = ([0-9,]+)", report)
    assert len(said) >= 2 and set(said) == {f"{own:,}"}, said  # the topology sentence and the verdict at least
    assert "arrived documents longer than R = " not in report  # arrivals are sources, not documents
    # MaxText's Grain has hosts and worker processes, not ranks and DataLoader workers (a new user's probe)
    assert "Pipeline **grain** at 2 hosts x 1 Grain worker process: 2 worker streams" in report
    assert "With 2 hosts x 1 Grain worker process (2 worker streams, split by document), grain_first_fit" in report
    assert "| stream (host, Grain worker process) |" in report and " rank" not in report.replace("ranks x", "")


def test_the_default_bins_are_maxtexts_per_host_batch_not_the_buffer(tmp_path):
    """Hand-worked: 100 documents of 63 tokens, each 64 with MaxText's EOS, fill a bin alone. At the default 96 bins
    (per_device_batch_size 12 x 8 devices of one host) documents 0-95 fill them and document 96 fits none, so 97 have
    arrived when the 96 rows come out; the budget's 8 rows train 8 whole, the 88 other rows' documents and document
    96 wait, 3 never arrive. --buffer 8 is the audit's B, not MaxText's bins (it gave 9 arrived, 1 waiting)."""
    f = tmp_path / "L.txt"
    f.write_text("63\n" * 100)
    s, _ = audit_run(audit_main, f, tmp_path / "o", "grain_first_fit", R, 8 * SEQ)  # --buffer 8
    assert s["loader"]["num_packing_bins"] == 96 and s["sources_arrived"] == 97
    assert s["documents"]["by_fate"] == {"dropped": 0, "not_arrived": 3, "partial": 0, "waiting": 89, "whole": 8}
    assert "per_device_batch_size 12" in s["loader"]["num_packing_bins_from"]
    given, _ = audit_run(audit_main, f, tmp_path / "g", "grain_first_fit", R, 8 * SEQ, "--loader-arg", "bins=8")
    assert given["sources_arrived"] == 9 and given["loader"]["num_packing_bins_from"] == "--loader-arg"


def test_the_help_says_the_default_bins_and_that_buffer_does_not_set_them(capsys):
    with pytest.raises(SystemExit):
        audit_main(["--help"])
    said = next(k for k in " ".join(capsys.readouterr().out.split()).split("; ") if k.startswith("bins (grain)"))
    assert "default 96: per_device_batch_size 12 x 8 devices of one host, not --buffer" in said
