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


def render_record(entries: Iterable[RecordEntry], *, record_path: str) -> bytes:
    """The RECORD file: one row per entry in the order given, then RECORD's own row."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter=",", quotechar='"', lineterminator="\n")
    for entry in entries:
        writer.writerow(entry.to_row())
    writer.writerow((record_path, "", ""))
    return buffer.getvalue().encode("utf-8")


def renamed(entries: Mapping[str, RecordEntry], *, old: str, new: str) -> RecordEntry:
    """The upstream row of `old`, under the member's new path."""
    entry = entries.get(old)
    if entry is None:
        raise BuildError(f"the upstream RECORD has no row for {old}")
    return RecordEntry(path=new, hash_=entry.hash_, size=entry.size)
