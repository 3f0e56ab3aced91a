"""The 64M proxy fits its machine (issue 17): shards stream from their token files, so a
shard far larger than its rows' int64 size costs no more memory than a small one; the
peak host memory and disk of a preset are counted term by term."""
import numpy as np

from shardqueue.study.footprint import GIB, PER_DOC, PER_POOL_DOC, RUNTIME_BYTES, footprint_terms, host_footprint


def test_footprint_terms_add_up_by_hand():
    t = footprint_terms(documents=1000, pool_documents=100, shard_documents=10, parameters=1000, update_rows=2,
                        context=4, sample_tokens=50, reference_shards=3, overlap_chunk_tokens=10, val_text_bytes=20)
    assert sum(PER_DOC.values()) == 92 and sum(PER_POOL_DOC.values()) == 220
    # 92 x 1,000 + 220 x 100 + 2 x 16 x 1,000 (state) + the runtime, plus the largest transient:
    # opening the stream, 3 x 36 x 1,000 = 108,000 (rows 256, shard list 520, inspection 4,800)
    assert sum(t.values()) == 92_000 + 22_000 + 32_000 + RUNTIME_BYTES + 108_000
    assert t["largest transient: opening the training stream (three Python int lists)"] == 108_000


def test_the_proxy_fits_one_node():
    fp = host_footprint("proxy64m")
    assert fp["fits"] and fp["peak_host_bytes"] < 128 * GIB and fp["disk_bytes"] < fp["node"]["disk_bytes"]
    # the corpus's token files alone: 2 bytes a token, 1.25 x the data the plan needs
    assert fp["disk"]["token files (uint16) of the corpus"] == int(2 * fp["assumptions"]["corpus_tokens"])


def test_a_large_shard_trains_in_bounded_memory(calibrated, tmp_path):
    import tracemalloc

    from shardqueue import api as rq
    from shardqueue.engine.training import one_thread
    from shardqueue.engine.runner import Runner

    cfg, world, pool, calib = rq.open_calibration(calibrated["dir"])
    cfg = type(cfg)(**{**cfg.to_dict(), "micro_rows": 128})  # few, wide updates: the test is about data, not steps
    r = Runner(cfg, world, pool, calib, tmp_path, log=lambda s: None)
    # about 100,000 tokens: cached rows would take 1.6 MB (a traced peak of 2.4-3.2 MB with the tokens they are cut
    # from), a streamed update's rows (128 x 32 tokens) ~66 KB, and the peak streamed was ~230 KB (2026-12-07), under
    # the bound below; 200,000 tokens took twice the training for it
    n = int(np.searchsorted(np.cumsum(world.stream.lengths), 100_000)) + 1
    tokens = int(world.stream.lengths[:n].sum())
    r.shards["big"] = {"id": "big", "docs": [[0, n]], "tokens": tokens}
    int64_rows = 16 * tokens  # x and y as int64, what caching a shard's rows costs
    assert int64_rows > 1_500_000
    tracemalloc.start()
    try:
        with one_thread():
            info = r.train_shard("big")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info["targets"] == tokens
    # numpy buffers are traced: a streamed shard holds one update's rows (128 x 32 tokens) at a time,
    # where cached rows would hold the whole shard (and its concatenated tokens) at once
    assert peak < int64_rows / 4, (peak, int64_rows)


def _stream(n_docs=60, seed=0, alphabet=6):
    from loaders.stream import DocumentStream

    rng = np.random.default_rng(seed)
    return DocumentStream.from_token_lists([[1] + rng.integers(2, alphabet, rng.integers(0, 40)).tolist()
                                            for _ in range(n_docs)])


def test_streamed_rows_equal_the_cached_rows():
    from shardqueue.engine.packing import StreamedShard, shard_rows, shard_tokens, update_batches

    s = _stream()
    for ctx in (1, 5, 16):
        for docs in ([0], [7, 2, 30], list(range(60))):
            x, y = shard_rows(shard_tokens(s, docs), ctx, 1)
            lx, ly = StreamedShard(s, docs, ctx, 1).rows()
            assert lx.shape == x.shape and len(ly) == len(y)
            n = len(x)
            for a, b in ((0, n), (0, 1), (n - 1, n), (1, n + 3), (n // 3, 2 * n // 3 + 1), (n, n)):
                assert np.array_equal(np.asarray(lx[a:b]), x[a:b]) and np.array_equal(np.asarray(ly[a:b]), y[a:b])
            assert np.array_equal(lx[-1], x[-1]) and np.array_equal(np.asarray(lx[:4][1:]), x[1:4])
            for got, want in zip(update_batches(lx, ly, 2, 3), update_batches(x, y, 2, 3)):
                assert all(np.array_equal(gx, wx) and np.array_equal(gy, wy) for (gx, gy), (wx, wy) in zip(got, want))
            assert len(update_batches(lx, ly, 2, 3)) == len(update_batches(x, y, 2, 3)) == -(-len(x) // 6)


def test_the_chunked_overlap_pass_equals_hashing_everything_at_once():
    from shardqueue.world.domains import ngram_hashes, overlap_rate, sampled_overlap

    s = _stream(200, seed=1, alphabet=5)
    # windows from documents 95..104: half inside the first list, all inside the union
    y = np.full((10, 30), -1)
    for r, i in enumerate(range(95, 105)):
        t = s.doc_tokens(i)[1:31]
        y[r, :len(t)] = t
    sets = {"control": {"a": {"y": y}}}
    lists = [list(range(0, 100)), list(range(20, 60))]
    whole = overlap_rate(sets, np.unique(np.concatenate(
        [ngram_hashes(np.concatenate([s.doc_tokens(i) for i in docs])) for docs in lists])))
    for chunk in (7, 50, 1 << 20):  # chunks end at document ends, so no window's 13-gram is cut
        got, read, total = sampled_overlap(sets, s, lists, chunk_tokens=chunk)
        assert got == whole and read == total == int(s.lengths[:100].sum() + s.lengths[20:60].sum())
    assert 0 < whole["a"] < 1
    _, read, total = sampled_overlap(sets, s, lists, max_tokens=300)
    assert read <= 2 * (300 + int(s.lengths.max())) and read < total  # a capped sample per list
