"""RECORD rows (PEP 376 / the wheel spec): parse, render, hash, the pyc a source compiles to;
what is installed in this image's Python: the distribution, its RECORD, the package's manifest."""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from . import ImageError

# forkbuild.wheel.manifest.PACKAGE_FILE / DIST_INFO_FILE, copied: forkbuild is not installed in
# images (a unit test keeps them equal).
MANIFEST = "_forkbuild_manifest.json"
DIST_INFO_MANIFEST = "forkbuild_manifest.json"


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


@dataclass(frozen=True)
class Installed:
    name: str
    version: str
    site: Path
    dist_info: str
    rows: tuple[Row, ...]
    direct_url: dict | None


def installed(name: str = "sglang") -> Installed:
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        raise ImageError(f"{name} is not installed for {sys.executable}") from None
    text = dist.read_text("RECORD")
    if text is None:
        raise ImageError(f"{name} {dist.version} has no RECORD: not installed by a wheel installer")
    rows = tuple(parse(text, source=f"the installed RECORD of {name} {dist.version}"))
    dist_infos = {row.path.split("/", 1)[0] for row in rows if row.path.split("/", 1)[0].endswith(".dist-info")}
    if len(dist_infos) != 1:
        raise ImageError(f"{name}'s RECORD names {len(dist_infos)} .dist-info directories: {sorted(dist_infos)}")
    url = dist.read_text("direct_url.json")
    return Installed(name=name, version=dist.version, site=Path(str(dist.locate_file(""))).resolve(),
                     dist_info=dist_infos.pop(), rows=rows,
                     direct_url=_json(url, f"{name}'s direct_url.json") if url else None)


def package_dir(name: str = "sglang") -> Path:
    """Where `import name` loads from, without running the package's __init__."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ImageError(f"`import {name}` finds no package for {sys.executable}")
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def read_manifest(package: Path) -> dict:
    path = package / MANIFEST
    if not path.is_file():
        raise ImageError(f"{path} is missing: this sglang is not a forkbuild build")
    return _json(path.read_text(), str(path))


def _json(text: str, source: str):
    try:
        return json.loads(text)
    except ValueError as error:
        raise ImageError(f"{source}: not JSON: {error}") from None


def verify_record(dist: Installed) -> tuple[int, list[str]]:
    """(files checked, problems): every RECORD row with a hash has that hash and size."""
    problems, checked = [], 0
    for row in (row for row in dist.rows if row.hash):
        try:
            data = (dist.site / row.path).read_bytes()
        except OSError as error:
            problems.append(f"{row.path}: listed in RECORD but unreadable ({error.strerror})")
            continue
        checked += 1
        if hash_of(data) != row.hash or (row.size and int(row.size) != len(data)):
            problems.append(f"{row.path}: content does not match its RECORD hash")
    return checked, problems
