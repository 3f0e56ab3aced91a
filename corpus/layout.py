"""Where prepared data lives: DATA_DIR/SOURCE/{raw,tokenizer,tokens,census}/ + prepared.json."""
import json
import os
from pathlib import Path

from errors import DataError

ENV_VAR = "PACKAUDIT_DATA"


def default_data_dir() -> Path:
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "packing-audit"


def prepared_record(root) -> dict:
    """prepared.json of a source folder, or DataError."""
    path = Path(root) / "prepared.json"
    if not path.exists():
        raise DataError(f"{path}: corpus not prepared (run prepare.py)")
    try:
        rec = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise DataError(f"{path}: not valid JSON (rerun prepare.py)") from None
    if not isinstance(rec, dict) or "files" not in rec:
        raise DataError(f"{path}: no file hashes (prepared by an older version: rerun prepare.py)")
    return rec


class Layout:
    def __init__(self, data_dir, source):
        self.root = Path(data_dir) / source
        self.source = source
        self.raw = self.root / "raw"
        self.tokenizer = self.root / "tokenizer"
        self.tokens = self.root / "tokens"
        self.census = self.root / "census"
        self.record = self.root / "prepared.json"

    def prepared(self) -> dict:
        if not self.record.exists():
            raise DataError(f"{self.record}: corpus not prepared (run `python prepare.py --source {self.source}`)")
        return prepared_record(self.root)

    def shard_names(self, split: str):
        rec = self.prepared()
        names = rec["train_shards"] if split == "train" else [rec["val_shard"]]
        return [Path(n).stem for n in names]
