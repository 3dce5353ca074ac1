"""RECORD files: read with installer's parser, written as PEP 376 rows.

Rows of members whose content is copied keep the hash and size the upstream
RECORD gives them (the upstream wheel is sha256-pinned, and the finished wheel
is validated in full afterwards); new content is hashed here.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
from collections.abc import Iterable, Mapping

from installer.records import InvalidRecordEntry, RecordEntry, parse_record_file

from forkbuild.errors import BuildError


def parse_record(text: str, *, source: str) -> dict[str, RecordEntry]:
    """RECORD rows by path; `source` names the wheel in errors."""
    try:
        return {row[0]: RecordEntry.from_elements(*row) for row in parse_record_file(text.splitlines())}
    except InvalidRecordEntry as error:
        raise BuildError(f"{source}: invalid RECORD: {'; '.join(error.issues)}") from error


def entry_for(path: str, content: bytes) -> RecordEntry:
    digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).decode("ascii").rstrip("=")
    return RecordEntry.from_elements(path, f"sha256={digest}", str(len(content)))


def record_line(entry: RecordEntry) -> str:
    """One RECORD row as render_record writes it (csv, "\\n" line ends)."""
    buffer = io.StringIO()
    csv.writer(buffer, delimiter=",", quotechar='"', lineterminator="\n").writerow(entry.to_row())
    return buffer.getvalue()


def record_lines(entries: Mapping[str, RecordEntry]) -> dict[str, str]:
    """record_line of every entry, by path: the rows of members copied unchanged, rendered
    once per upstream wheel instead of once per wheel built from it."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter=",", quotechar='"', lineterminator="\n")
    lines = {}
    for path, entry in entries.items():
        writer.writerow(entry.to_row())
        lines[path] = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    return lines


def render_record(lines: Iterable[str], *, record_path: str) -> bytes:
    """The RECORD file: the rows given (record_line's) in order, then RECORD's own row."""
    return ("".join(lines) + record_line(RecordEntry(path=record_path, hash_=None, size=None))).encode("utf-8")


def renamed(entries: Mapping[str, RecordEntry], *, old: str, new: str) -> RecordEntry:
    """The upstream row of `old`, under the member's new path."""
    entry = entries.get(old)
    if entry is None:
        raise BuildError(f"the upstream RECORD has no row for {old}")
    return RecordEntry(path=new, hash_=entry.hash_, size=entry.size)
