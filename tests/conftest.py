import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory):
    """A small offline corpus prepared once: 3 shards (2 train + val), vocab 400."""
    import prepare

    d = tmp_path_factory.mktemp("data")
    rc = prepare.main(["--data-dir", str(d), "--max-files", "120", "--shards", "3",
                       "--row-group-size", "150", "--vocab-size", "400"])
    assert rc == 0
    return d


@pytest.fixture
def python_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    return env
