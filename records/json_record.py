"""A record in a JSON file, read back whole: its schema (name/version, the first thing checked), its keys
exactly those its dataclass declares, and a one-line refusal naming the file otherwise."""
import dataclasses
import json
from pathlib import Path

from errors import DataError


def read_json(path):
    """The JSON value in path, or None when there is no such file (a stage that did not run)."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        raise DataError(f"{path}: not readable as JSON") from None


def from_mapping(cls, d, where, schema=None):
    """cls(**d) when d is an object holding exactly cls's fields (and, given a schema, d["schema"] == schema)."""
    if not isinstance(d, dict):
        raise DataError(f"{where}: expected a JSON object, found {type(d).__name__}")
    if schema is not None and d.get("schema") != schema:
        raise DataError(f"{where}: schema {d.get('schema')!r}, expected {schema!r} (written by another version: "
                        "run its stage again)")
    names = {f.name for f in dataclasses.fields(cls)}
    missing, extra = sorted(names - set(d)), sorted(set(d) - names)
    if missing or extra:
        raise DataError(f"{where}: " + "; ".join(x for x in (f"missing {', '.join(missing)}" if missing else "",
                                                            f"unknown {', '.join(extra)}" if extra else "") if x))
    return cls(**d)
