"""ClimbMix download: streamed to a temp file, verified, renamed into place.

A file is accepted only when (1) the byte count equals Content-Length, (2) it opens as
parquet with a `text` column and (3) its SHA256 equals the expected one where known.
The SHA256 of every accepted file is recorded in sha256.json and verified whenever the
file is reused, so a damaged file on disk is fetched again instead of trusted.
"""
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import requests

from console.progress import bar as tqdm
from corpus.atomic import atomic_write_json, sha256_file
from corpus.shards import open_shard
from errors import DataError

BASE_URL = "https://huggingface.co/datasets/karpathy/climbmix-400b-shuffle/resolve/main"
VAL_SHARD = "shard_06542.parquet"
OFFLINE_HINT = "no network: use `python prepare.py --source stdlib` for the built-in offline corpus"


def climbmix_files(n_train: int):
    return [f"shard_{i:05d}.parquet" for i in range(n_train)] + [VAL_SHARD]


class _Retry(Exception):
    pass


def _fetch_once(url, dest: Path, timeout, expected_sha, bar):
    tmp = dest.with_name(f".{dest.name}.part")
    try:
        with requests.get(url, stream=True, timeout=timeout) as r:
            if r.status_code >= 500 or r.status_code == 429:
                raise _Retry(f"HTTP {r.status_code}")
            if r.status_code != 200:
                raise DataError(f"{dest.name}: HTTP {r.status_code} from {url}")
            expected_len = r.headers.get("Content-Length")
            got = 0
            with open(tmp, "wb") as f:
                for chunk in r.iter_content(1 << 20):
                    f.write(chunk)
                    got += len(chunk)
                    bar.update(len(chunk))
                f.flush()
                os.fsync(f.fileno())
        if expected_len is not None and got != int(expected_len):
            raise _Retry(f"truncated transfer ({got} of {expected_len} bytes)")
        try:
            open_shard(tmp)
        except DataError as e:
            raise _Retry(f"downloaded file is not a valid shard: {str(e).split(': ', 1)[-1]}")
        sha = sha256_file(tmp)
        if expected_sha and sha != expected_sha:
            raise _Retry(f"SHA256 {sha[:12]}… does not match the expected {expected_sha[:12]}…")
        os.replace(tmp, dest)
        return sha
    except requests.exceptions.ConnectionError as e:
        raise ConnectionError(str(e)) from None
    except (requests.exceptions.ChunkedEncodingError, requests.exceptions.Timeout) as e:
        raise _Retry(type(e).__name__) from None
    finally:
        if tmp.exists():
            tmp.unlink()


def download_file(url, dest, expected_sha=None, retries=4, backoff=1.0, timeout=60, bar=None):
    """Download one file with retries; returns its SHA256. Never leaves a partial file."""
    dest = Path(dest)
    bar = bar or tqdm(disable=True)
    last = None
    for attempt in range(retries + 1):
        try:
            return _fetch_once(url, dest, timeout, expected_sha, bar)
        except ConnectionError:
            if attempt == 0:
                raise DataError(f"{dest.name}: cannot connect to {url.split('/')[2]} ({OFFLINE_HINT})") from None
            last = "connection lost"
        except _Retry as e:
            last = str(e)
        if attempt < retries:
            time.sleep(backoff * 2 ** attempt)
    raise DataError(f"{dest.name}: failed after {retries + 1} attempts: {last}")


def download_all(files, raw_dir, base_url=BASE_URL, workers=4, expected=None, retries=4, backoff=1.0, log=print):
    """Fetch every file not already present and verified; returns {name: sha256}."""
    raw_dir = Path(raw_dir)
    raw_dir.mkdir(parents=True, exist_ok=True)
    record_path = raw_dir / "sha256.json"
    record = json.loads(record_path.read_text()) if record_path.exists() else {}
    expected = expected or {}
    todo = []
    for name in files:
        path = raw_dir / name
        if path.exists() and name in record and sha256_file(path) == record[name] and expected.get(name, record[name]) == record[name]:
            continue
        if path.exists():
            log(f"{name}: present but does not match its recorded SHA256; fetching again")
            path.unlink()
        todo.append(name)
    if not todo:
        log(f"all {len(files)} files present and verified in {raw_dir}")
        return {n: record[n] for n in files}
    with tqdm(total=0, unit="B", unit_scale=True, desc="download") as bar:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            futs = {
                pool.submit(download_file, f"{base_url}/{n}", raw_dir / n, expected.get(n), retries, backoff, 60, bar): n
                for n in todo
            }
            for fut in as_completed(futs):
                record[futs[fut]] = fut.result()
                atomic_write_json(record_path, record)
    return {n: record[n] for n in files}
