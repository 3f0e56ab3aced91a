"""The ClimbMix downloader against a local HTTP server that fails on purpose."""
import http.server
import io
import threading
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import corpus.download
from corpus.download import download_all, download_file
from errors import DataError


def _parquet_bytes(texts):
    buf = io.BytesIO()
    pq.write_table(pa.table({"text": texts}), buf)
    return buf.getvalue()


class FaultyServer:
    """Serves files; per path a list of faults consumed one per request: 500, cut, wrong."""

    def __init__(self, files, faults):
        self.files, self.faults, self.requests = files, {k: list(v) for k, v in faults.items()}, []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                name = self.path.rsplit("/", 1)[-1]
                outer.requests.append(name)
                fault = outer.faults.get(name, []).pop(0) if outer.faults.get(name) else None
                body = outer.files.get(name)
                if body is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                if fault == "500":
                    self.send_response(500)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if fault == "wrong":
                    body = b"<html>not the shard you asked for</html>" * 10
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if fault == "cut":
                    self.wfile.write(body[: len(body) // 3])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # shutdown() waits for serve_forever's next poll: 0.5 s by default, ~0.5 s of every test here
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def files():
    return {f"shard_{i:05d}.parquet": _parquet_bytes([f"document {i}-{j}" for j in range(50)]) for i in range(3)}


def _no_partials(d: Path):
    return not [p for p in d.iterdir() if p.name.endswith(".part") or p.name.endswith(".tmp")]


def test_retries_500_truncation_and_wrong_file(tmp_path, files):
    srv = FaultyServer(files, {"shard_00000.parquet": ["500"], "shard_00001.parquet": ["cut"],
                               "shard_00002.parquet": ["wrong"]})
    try:
        shas = download_all(list(files), tmp_path, base_url=srv.url, workers=2, backoff=0.01, log=lambda m: None)
    finally:
        srv.close()
    for name, body in files.items():
        assert (tmp_path / name).read_bytes() == body
    assert len(shas) == 3 and _no_partials(tmp_path)
    assert srv.requests.count("shard_00001.parquet") == 2


def test_reuse_verifies_recorded_sha_and_refetches_damaged_file(tmp_path, files):
    srv = FaultyServer(files, {})
    try:
        download_all(list(files), tmp_path, base_url=srv.url, backoff=0.01, log=lambda m: None)
        n = len(srv.requests)
        download_all(list(files), tmp_path, base_url=srv.url, backoff=0.01, log=lambda m: None)
        assert len(srv.requests) == n  # complete files are skipped
        (tmp_path / "shard_00001.parquet").write_bytes(b"damaged")
        msgs = []
        download_all(list(files), tmp_path, base_url=srv.url, backoff=0.01, log=msgs.append)
        assert srv.requests[n:] == ["shard_00001.parquet"]
        assert any("shard_00001.parquet" in m for m in msgs)
        assert (tmp_path / "shard_00001.parquet").read_bytes() == files["shard_00001.parquet"]
    finally:
        srv.close()


def test_persistently_bad_file_is_reported_by_name(tmp_path, files):
    srv = FaultyServer(files, {"shard_00002.parquet": ["wrong"] * 10})
    try:
        with pytest.raises(DataError) as e:
            download_file(f"{srv.url}/shard_00002.parquet", tmp_path / "shard_00002.parquet", retries=2, backoff=0.01)
    finally:
        srv.close()
    assert "shard_00002.parquet" in str(e.value) and "not a valid shard" in str(e.value)
    assert not (tmp_path / "shard_00002.parquet").exists() and _no_partials(tmp_path)


def test_expected_sha_mismatch_is_rejected(tmp_path, files):
    srv = FaultyServer(files, {})
    try:
        with pytest.raises(DataError) as e:
            download_file(f"{srv.url}/shard_00000.parquet", tmp_path / "shard_00000.parquet",
                          expected_sha="0" * 64, retries=1, backoff=0.01)
    finally:
        srv.close()
    assert "SHA256" in str(e.value) and not (tmp_path / "shard_00000.parquet").exists()


def test_no_network_fails_at_once_naming_the_offline_corpus(tmp_path):
    with pytest.raises(DataError) as e:
        download_file("http://127.0.0.1:9/shard_00000.parquet", tmp_path / "shard_00000.parquet", backoff=5)
    assert "--source stdlib" in str(e.value)


def test_prepare_climbmix_end_to_end_from_a_local_server(tmp_path, monkeypatch):
    """prepare.py --source climbmix against 127.0.0.1: download (with faults), tokenizer, tokens, census."""
    import random

    import prepare

    waits = []  # the retries' backoff, recorded instead of slept
    monkeypatch.setattr(corpus.download, "time", SimpleNamespace(sleep=waits.append))

    rng = random.Random(0)
    words = ["alpha", "beta", "gamma", "delta", "packing", "buffer", "source", "token", "row", "crop", "über", "naïve"]

    def doc():
        return " ".join(rng.choice(words) + str(rng.randint(0, 99)) for _ in range(rng.randint(5, 200)))

    files = {n: _parquet_bytes([doc() for _ in range(300)]) for n in ("shard_00000.parquet", "shard_00001.parquet",
                                                                      "shard_06542.parquet")}
    srv = FaultyServer(files, {"shard_00001.parquet": ["cut"], "shard_06542.parquet": ["500"]})
    try:
        args = ["--source", "climbmix", "-n", "2", "--data-dir", str(tmp_path), "--base-url", srv.url,
                "--vocab-size", "300"]
        assert prepare.main(args) == 0
        assert prepare.main(args) == 0  # second run: nothing to do, no new requests
    finally:
        srv.close()
    assert len(srv.requests) == 5 and waits == [1.0, 1.0]  # each faulty file retried once, after the first backoff
    from corpus.layout import Layout

    rec = Layout(tmp_path, "climbmix").prepared()
    assert rec["train_shards"] == ["shard_00000.parquet", "shard_00001.parquet"] and rec["val_shard"] == "shard_06542.parquet"
    hist = (tmp_path / "climbmix" / "census" / "train_length_histogram.csv").read_text().splitlines()
    assert hist[0] == "length,count" and sum(int(x.split(",")[1]) for x in hist[1:]) == 600
