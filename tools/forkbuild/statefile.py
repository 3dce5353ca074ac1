"""Reading forkbuild's JSON state files: every key through `Fields`, which checks its type and
names the key, so a damaged or foreign file is one clear error, never a KeyError deep inside.
An unknown schema is `UnknownSchema` ("made by another forkbuild", not "damaged")."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

_REQUIRED: Any = object()


class UnknownSchema(ValueError):
    """A state file of a schema this forkbuild does not read."""

    def __init__(self, schema: object, known: Collection[int | None]) -> None:
        readable = ", ".join("none" if number is None else str(number) for number in known)
        super().__init__(f"schema {schema!r}, this forkbuild reads {readable}")
        self.schema = schema


class Fields:
    """A JSON object's keys, type-checked; `where` names the object in errors ("patches[2]")."""

    def __init__(self, data: object, where: str = "") -> None:
        if not isinstance(data, dict):
            raise ValueError(f"{where or 'the file'}: not a JSON object")
        self.data: dict[str, Any] = data
        self.where = where

    def _name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def _value(self, key: str, kind: type | tuple[type, ...], default: Any, what: str) -> Any:
        if key not in self.data:
            if default is _REQUIRED:
                raise ValueError(f"{self._name(key)}: missing")
            return default
        value = self.data[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, float, (int, float))):
            raise ValueError(f"{self._name(key)}: {what} expected, found {json.dumps(value)[:60]}")
        return value

    def schema(self, known: Collection[int | None]) -> int | None:
        """The file's schema number (None: from before schemas); UnknownSchema if not in `known`."""
        schema = self.data.get("schema")
        if schema not in known or isinstance(schema, bool):
            raise UnknownSchema(schema, known)
        return schema

    def text(self, key: str, default: str = _REQUIRED) -> str:
        return self._value(key, str, default, "a string")

    def text_or_empty(self, key: str) -> str:
        """A string that older files write as null or leave out: "" then."""
        return self._value(key, (str, type(None)), None, "a string or null") or ""

    def flag(self, key: str, default: bool = _REQUIRED) -> bool:
        return self._value(key, bool, default, "true or false")

    def integer(self, key: str, default: int = _REQUIRED) -> int:
        return self._value(key, int, default, "an integer")

    def texts(self, key: str, default: tuple[str, ...] = _REQUIRED) -> tuple[str, ...]:
        items = self._value(key, list, default, "a list")
        if any(not isinstance(item, str) for item in items):
            raise ValueError(f"{self._name(key)}: a list of strings expected")
        return tuple(items)

    def text_map(self, key: str, default: Mapping[str, str] = _REQUIRED) -> dict[str, str]:
        items = self._value(key, dict, default, "an object")
        if any(not isinstance(value, str) for value in items.values()):
            raise ValueError(f"{self._name(key)}: an object of strings expected")
        return dict(items)

    def number_map(self, key: str, default: Mapping[str, float] = _REQUIRED) -> dict[str, float]:
        items = self._value(key, dict, default, "an object")
        if any(isinstance(value, bool) or not isinstance(value, int | float) for value in items.values()):
            raise ValueError(f"{self._name(key)}: an object of numbers expected")
        return dict(items)

    def object(self, key: str) -> Fields:
        return Fields(self._value(key, dict, _REQUIRED, "an object"), self._name(key))

    def optional_object(self, key: str) -> Fields | None:
        value = self._value(key, (dict, type(None)), None, "an object or null")
        return None if value is None else Fields(value, self._name(key))

    def objects(self, key: str, default: tuple[Fields, ...] = _REQUIRED) -> tuple[Fields, ...]:
        items = self._value(key, list, default, "a list")
        return tuple(Fields(item, f"{self._name(key)}[{index}]") for index, item in enumerate(items))

    def object_map(self, key: str) -> dict[str, Fields]:
        items = self._value(key, dict, _REQUIRED, "an object")
        return {name: Fields(value, f"{self._name(key)}[{name!r}]") for name, value in items.items()}


def load(path: Path) -> Fields:
    """The file's JSON object (OSError, or ValueError when it is not JSON or not an object)."""
    return Fields(json.loads(path.read_text()))


def dump(data: Mapping[str, Any]) -> str:
    """A state file's text (sorted keys: the same state, the same bytes)."""
    return json.dumps(data, indent=2, sort_keys=True) + "\n"
