"""forkbuild's JSON state files, one format: a frozen dataclass (or NamedTuple) written by its
fields and read back by their types, so a damaged or foreign file is one ValueError naming the
key, never a KeyError deep inside. An unknown schema is `UnknownSchema` ("made by another
forkbuild", not "damaged"). A key that is missing or null reads as its field's default."""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Collection, Mapping
from enum import Enum
from pathlib import Path
from types import UnionType
from typing import Any, TypeVar

T = TypeVar("T")
SCALARS: dict[Any, tuple[Any, str]] = {int: (int, "an integer"), float: ((int, float), "a number"),
                                       bool: (bool, "true or false")}  # else a string (str, Path, an enum)


class UnknownSchema(ValueError):
    def __init__(self, schema: object, known: Collection[int | None]) -> None:
        readable = ", ".join("none" if number is None else str(number) for number in known)
        super().__init__(f"schema {schema!r}, this forkbuild reads {readable}")
        self.schema = schema


def encode(value: Any) -> Any:
    """`value` as JSON data; a None whose field defaults to None is left out (an older
    forkbuild reads a missing key as "not recorded")."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: encode(getattr(value, field.name)) for field in dataclasses.fields(value)
                if getattr(value, field.name) is not None or field.default is not None}
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return encode(value._asdict())
    if isinstance(value, Mapping):
        return {key: encode(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [encode(item) for item in value]
    return str(value) if isinstance(value, Path) else value  # an enum is a str


def decode(kind: Any, value: Any, where: str = "") -> Any:
    """JSON `value` as `kind` (its fields' types, recursively); ValueError naming the key."""
    optional = typing.get_origin(kind) in (typing.Union, UnionType)
    if optional:
        if value is None:
            return None
        kind = next(arg for arg in typing.get_args(kind) if arg is not type(None))
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    record = dataclasses.is_dataclass(kind) or hasattr(kind, "_fields")
    expected: Any
    expected, what = (list, "a list") if origin in (tuple, list) else \
        (dict, "an object") if record or origin in (dict, Mapping) else SCALARS.get(kind, (str, "a string"))
    if not isinstance(value, expected) or (isinstance(value, bool) and kind is not bool):
        raise ValueError(f"{where or 'the file'}: {what}{' or null' if optional else ''} expected, "
                         f"found {json.dumps(value)[:60]}")
    if origin in (tuple, list):
        return tuple(decode(args[0], item, f"{where}[{index}]") for index, item in enumerate(value))
    if origin in (dict, Mapping):
        return {key: decode(args[1], item, f"{where}[{key!r}]") for key, item in value.items()}
    if record:
        return _record(kind, value, where)
    if isinstance(kind, type) and issubclass(kind, Enum):
        try:
            return kind(value)
        except ValueError:
            raise ValueError(f"{where}: unknown {kind.__name__.lower()} {value!r}") from None
    return Path(value) if kind is Path else value


def _record(kind: Any, value: dict, where: str) -> Any:
    hints = typing.get_type_hints(kind)
    if hasattr(kind, "_fields"):
        names, defaults = kind._fields, set(kind._field_defaults)
    else:
        fields = dataclasses.fields(kind)
        names = [field.name for field in fields]
        defaults = {field.name for field in fields
                    if field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING}
    values = {}
    for name in names:
        key = f"{where}.{name}" if where else name
        if value.get(name) is None and name in defaults:
            continue
        if name not in value:
            raise ValueError(f"{key}: missing")
        values[name] = decode(hints[name], value[name], key)
    return kind(**values)


def read(kind: type[T], data: object, known: Collection[int | None]) -> T:
    """A state of `kind` from JSON data of a schema in `known` (None: from before schemas)."""
    schema = data.get("schema") if isinstance(data, dict) else None
    if isinstance(data, dict) and (schema not in known or isinstance(schema, bool)):
        raise UnknownSchema(schema, known)
    return decode(kind, data)


def load(path: Path, kind: type[T], known: Collection[int | None]) -> T:
    """The state in `path` (OSError; ValueError when it is not JSON or not a state)."""
    return read(kind, json.loads(path.read_text()), known)


def dump(value: Any, *, schema: int | None = None) -> str:
    """A state file's text (sorted keys: the same state, the same bytes)."""
    data = encode(value)
    return json.dumps(data if schema is None else {**data, "schema": schema}, indent=2, sort_keys=True) + "\n"
