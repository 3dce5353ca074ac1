"""RECORD rows (PEP 376 / the wheel spec): parse, render, hash, and the pyc a source compiles to."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
from dataclasses import dataclass

from . import ImageError


@dataclass(frozen=True)
class Row:
    path: str
    hash: str = ""
    size: str = ""


def parse(text: str, *, source: str) -> list[Row]:
    """The rows of a RECORD; ImageError naming `source` (the file) for a malformed one."""
    rows = []
    reader = csv.reader(io.StringIO(text))
    try:
        for fields in reader:
            if not fields:
                continue
            if len(fields) != 3:
                raise ImageError(f"{source}: line {reader.line_num}: RECORD row {fields!r} does not have 3 fields")
            if fields[2] and not fields[2].isdigit():
                raise ImageError(f"{source}: line {reader.line_num}: size {fields[2]!r} of {fields[0]} is not a number")
            rows.append(Row(*fields))
    except csv.Error as error:
        raise ImageError(f"{source}: line {reader.line_num}: not a RECORD (CSV): {error}") from None
    return rows


def render(rows: list[Row]) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows((row.path, row.hash, row.size) for row in rows)
    return buffer.getvalue().encode("utf-8")


def hash_of(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode("ascii").rstrip("=")


def row_for(path: str, data: bytes) -> Row:
    return Row(path, hash_of(data), str(len(data)))


def pyc_for(source: str, cache_tag: str) -> str:
    """`a/b.py` -> `a/__pycache__/b.<cache_tag>.pyc` (what pip and compileall write)."""
    directory, _, name = source.rpartition("/")
    prefix = f"{directory}/" if directory else ""
    return f"{prefix}__pycache__/{name[:-3]}.{cache_tag}.pyc"


def pyc_source(path: str) -> str | None:
    """The source a `__pycache__/*.pyc` row belongs to; None for other rows."""
    directory, _, name = path.rpartition("/")
    if not name.endswith(".pyc") or not (directory == "__pycache__" or directory.endswith("/__pycache__")):
        return None
    return f"{directory[: -len('__pycache__')]}{name.split('.', 1)[0]}.py"
