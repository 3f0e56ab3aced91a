"""Where prepared data lives: DATA_DIR/SOURCE/{raw,tokenizer,tokens,census}/ + prepared.json."""
import json
import os
import shlex
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
        self.data_dir = Path(data_dir)
        self.root = self.data_dir / source
        self.source = source
        self.raw = self.root / "raw"
        self.tokenizer = self.root / "tokenizer"
        self.tokens = self.root / "tokens"
        self.census = self.root / "census"
        self.record = self.root / "prepared.json"

    def prepared(self) -> dict:
        if not self.record.exists():
            raise DataError(f"{self.record}: corpus not prepared (run `{self.prepare_command()}`)")
        return prepared_record(self.root)

    def prepare_command(self) -> str:
        """The prepare.py command that writes this corpus: it names the data root unless it is the default one,
        where prepare.py would write anyway (a command without it would prepare a corpus the caller never reads)."""
        cmd = ["python", "prepare.py", "--source", self.source]
        if self.source == "parquet":  # prepare.py refuses parquet without its input files
            cmd += ["--input", "FILE.parquet"]
        if os.path.abspath(self.data_dir) != os.path.abspath(default_data_dir()):
            cmd += ["--data-dir", str(self.data_dir)]
        return shlex.join(cmd)

    def shard_names(self, split: str):
        rec = self.prepared()
        names = rec["train_shards"] if split == "train" else [rec["val_shard"]]
        return [Path(n).stem for n in names]
