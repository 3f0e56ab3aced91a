"""A record in a JSON file, read back: its schema (name/version, the first thing checked), its keys exactly those
its dataclass declares (from_mapping) or at least those (picked: a table that holds more than its readers read),
and a one-line refusal naming the file otherwise. StageFile: a record kept as one JSON file in a stage's folder."""
import dataclasses
import json
import types
from pathlib import Path

from corpus.atomic import atomic_write_json
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


def check_schema(d, where, schema):
    """d is an object whose "schema" is `schema`; else one line naming the file."""
    if not isinstance(d, dict):
        raise DataError(f"{where}: expected a JSON object, found {type(d).__name__}")
    if d.get("schema") != schema:
        raise DataError(f"{where}: schema {d.get('schema')!r}, expected {schema!r} (written by another version: "
                        "run its stage again)")


def from_mapping(cls, d, where, schema=None):
    """cls(**d) when d is an object holding exactly cls's fields (and, given a schema, d["schema"] == schema)."""
    if not isinstance(d, dict):
        raise DataError(f"{where}: expected a JSON object, found {type(d).__name__}")
    if schema is not None:
        check_schema(d, where, schema)
    names = {f.name for f in dataclasses.fields(cls)}
    missing, extra = sorted(names - set(d)), sorted(set(d) - names)
    if missing or extra:
        raise DataError(f"{where}: " + "; ".join(x for x in (f"missing {', '.join(missing)}" if missing else "",
                                                            f"unknown {', '.join(extra)}" if extra else "") if x))
    for f in dataclasses.fields(cls):
        check_type(d[f.name], f, where)
    return cls(**d)


def picked(cls, d, where):
    """cls from those keys of object d that are its fields: a file's table that holds more than its readers read
    (the rest stays in the file). A field without a default that d lacks is one line naming the file and the key."""
    if not isinstance(d, dict):
        raise DataError(f"{where}: expected a JSON object, found {type(d).__name__}")
    kw = {}
    for f in dataclasses.fields(cls):
        if f.name in d:
            kw[f.name] = check_type(d[f.name], f, where)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise DataError(f"{where}: missing {f.name}")
    return cls(**kw)


def _fits(value, tp) -> bool:
    """value is of the annotation tp as JSON holds it: an int is no bool, a float may be written as an int, X | None
    takes null; a record type (a nested record, read by its own picked) and `object` take anything here."""
    if isinstance(tp, types.UnionType):
        return any(_fits(value, t) for t in tp.__args__)
    if tp is type(None):
        return value is None
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp in (bool, str, dict, list):
        return isinstance(value, tp)
    return True


def check_type(value, field, where):
    """value, when it fits its field's declared type; else one line naming the file and the key."""
    if not _fits(value, field.type):
        shown = "null" if value is None else type(value).__name__
        raise DataError(f"{where}: {field.name} is {shown}, expected {getattr(field.type, '__name__', field.type)}")
    return value


class StageFile:
    """of, load and write for a record kept whole as one JSON file in a stage's folder. A subclass (a frozen
    dataclass whose first field is `values`, the file's JSON) sets FILE, SCHEMA, WHAT (its name in a refusal of
    a record made in memory) and from_json(d, where)."""
    FILE = SCHEMA = WHAT = None

    @classmethod
    def of(cls, values):
        """The record of values a stage made, its schema added."""
        return cls.from_json({**values, "schema": cls.SCHEMA}, cls.WHAT)

    @classmethod
    def load(cls, folder):
        """The record in a stage's folder; None when there is none (the stage did not run)."""
        path = Path(folder) / cls.FILE
        d = read_json(path)
        return None if d is None else cls.from_json(d, str(path))

    def write(self, folder):
        atomic_write_json(Path(folder) / self.FILE, self.values)
