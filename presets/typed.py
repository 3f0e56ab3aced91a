"""Typed settings: a dataclass built from a mapping of key: value, every bad key or value named in one line.

What TrainConfig, the queue's settings and the study's presets share: an unknown key is refused (a typo
never adds a setting silently), a value is converted to the field's type or refused ("0.02" from a command
line is a float; `true` is not a number), and the message names the key and what it belongs to.
"""
import dataclasses
import difflib
import types
import typing

from errors import DataError

TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def coerce(name, value, typ, what="config"):
    """value as typ (int, float, str, bool, or one of them | None), or a DataError naming the key."""
    args = typing.get_args(typ)
    if typing.get_origin(typ) in (typing.Union, types.UnionType) and type(None) in args:
        if value is None:
            return None
        typ = next(a for a in args if a is not type(None))
    if typ is bool:
        if isinstance(value, str) and value.lower() in TRUE + FALSE:
            return value.lower() in TRUE
        if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
            return bool(value)
        raise DataError(f"{what} key {name!r}: {value!r} is not true or false")
    if typ not in (int, float, str):
        return value  # a nested setting or a tuple: checked by the dataclass itself
    if isinstance(value, str) and typ is not str:
        try:
            return typ(value)
        except ValueError:
            raise DataError(f"{what} key {name!r}: {value!r} is not a valid {typ.__name__}") from None
    if isinstance(value, bool):
        # bool is an int subclass in Python: "muon_lr": true must not become 1.0
        raise DataError(f"{what} key {name!r}: {value!r} is a boolean, not a {typ.__name__}")
    if typ is float and isinstance(value, int):
        return float(value)
    if not isinstance(value, typ):
        raise DataError(f"{what} key {name!r}: {value!r} is not a valid {typ.__name__}")
    return value


def field_types(cls) -> dict:
    return typing.get_type_hints(cls)


def closest_keys(key, known, n=3) -> list:
    """The known keys a mistyped one most likely meant: those holding it as a word ('lr' -> muon_lr), then
    difflib's nearest spellings ('depht' -> depth)."""
    words = [k for k in known if key in k.split("_")]
    near = difflib.get_close_matches(key, list(known), n=n, cutoff=0.4)
    return list(dict.fromkeys(words + near))[:n]


def check_keys(cls, values, what="config"):
    known = [f.name for f in dataclasses.fields(cls)]
    for k in values:
        if k not in known:
            close = closest_keys(k, known)
            hint = f"did you mean {', '.join(close)}?" if close else f"known keys: {', '.join(sorted(known))}"
            raise DataError(f"unknown {what} key {k!r} ({hint})")


def build(cls, values, what="config"):
    """cls(**values) with every key known and every value of its field's type."""
    check_keys(cls, values, what)
    hints = field_types(cls)
    return cls(**{k: coerce(k, v, hints[k], what) for k, v in values.items()})


def at_least(obj, minima: dict, what="config"):
    """Each named field of obj is at least its minimum; the first that is not is named."""
    for k, least in minima.items():
        v = getattr(obj, k)
        if v < least:
            raise DataError(f"{what} key {k!r}: {v} must be at least {least}")


class ConfigKeys:
    """A setting that is also read as the TrainConfig keys it sets, so that presets compose
    (`{**PRESETS["tiny"], "seed": 44}`). Subclasses define config_keys()."""

    def config_keys(self) -> dict:
        raise NotImplementedError

    def keys(self):
        return self.config_keys().keys()

    def __getitem__(self, key):
        return self.config_keys()[key]
