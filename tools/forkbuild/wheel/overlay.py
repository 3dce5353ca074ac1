"""The overlay build: the release wheel plus the files the series changes, nothing else
recompressed. Members: upstream's in order (changed ones in place, deleted ones left out),
then added files, then the renamed .dist-info with RECORD last."""

from __future__ import annotations

import base64
import csv
import functools
import hashlib
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

from installer.records import InvalidRecordEntry, RecordEntry, parse_record_file

from forkbuild.errors import BuildError
from forkbuild.wheel import naming
from forkbuild.wheel.manifest import DIST_INFO_FILE, PACKAGE_FILE
from forkbuild.wheel.zipraw import FILE_MODE, Member, ZipSource, ZipWriter

EXECUTABLE_MODE = 0o100755 << 16


@dataclass(frozen=True, kw_only=True)
class Overlay:
    """What to write over an upstream wheel: `changes` maps members to new content (None
    deletes); `executable` lists added members that get mode 0755."""

    name: str
    package: str
    version: str
    manifest: bytes
    changes: Mapping[str, bytes | None] = field(default_factory=dict)
    executable: frozenset[str] = frozenset()

    @property
    def manifest_member(self) -> str:
        return f"{self.package}/{PACKAGE_FILE}"

    @property
    def version_member(self) -> str:
        return f"{self.package}/_version.py"


def _row(path: str, hash_: str = "", size: str = "") -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow((path, hash_, size))
    return buffer.getvalue()


@functools.lru_cache(maxsize=4)
def _upstream_rows(source: ZipSource, record_path: str) -> dict[str, tuple[str, str, str]]:
    """The upstream RECORD by path: hash, size and the row as this module writes it."""
    try:
        entries = [RecordEntry.from_elements(*row)
                   for row in parse_record_file(source.read(record_path).decode("utf-8").splitlines())]
    except InvalidRecordEntry as error:
        raise BuildError(f"{source.path.name}: invalid RECORD: {'; '.join(error.issues)}") from error
    rows = {}
    for entry in entries:
        hash_, size = str(entry.hash_ or ""), "" if entry.size is None else str(entry.size)
        rows[entry.path] = (hash_, size, _row(entry.path, hash_, size))
    return rows


class _Record:
    """RECORD's text in pieces (ZipWriter.add_pieces): each run of copied members' rows is one
    piece, deflated once per process; rows written one by one gather in the next."""

    def __init__(self, upstream: Mapping[str, tuple[str, str, str]]) -> None:
        self.upstream = upstream
        self.pieces: list[str] = []
        self.rows: list[str] = []

    def _upstream(self, name: str) -> tuple[str, str, str]:
        if name not in self.upstream:
            raise BuildError(f"the upstream RECORD has no row for {name}")
        return self.upstream[name]

    def add(self, name: str, content: bytes) -> None:
        digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).decode("ascii").rstrip("=")
        self.rows.append(_row(name, f"sha256={digest}", str(len(content))))

    def renamed(self, old: str, new: str) -> None:
        hash_, size, _ = self._upstream(old)
        self.rows.append(_row(new, hash_, size))

    def copied(self, members: Sequence[Member]) -> None:
        if members:
            self._end_piece()
            self.pieces.append("".join(self._upstream(member.name)[2] for member in members if not member.is_dir))

    def _end_piece(self) -> None:
        if self.rows:
            self.pieces.append("".join(self.rows))
            self.rows = []

    def pieces_with(self, record_path: str) -> list[bytes]:
        """Every row so far, then RECORD's own."""
        self._end_piece()
        pieces = self.pieces or [""]
        return [piece.encode("utf-8") for piece in [*pieces[:-1], pieces[-1] + _row(record_path)]]


def write_overlay(source: ZipSource, overlay: Overlay, stream: BinaryIO) -> None:
    """Write the patched wheel for `overlay` to `stream`."""
    found = sorted({member.name.split("/", 1)[0] for member in source.members
                    if member.name.split("/", 1)[0].endswith(".dist-info")})
    if len(found) != 1:
        raise BuildError(f"{source.path}: expected one .dist-info directory, found {found or 'none'}")
    old_dist_info = found[0]
    problems = []
    for name, content in sorted(overlay.changes.items()):
        top = name.split("/", 1)[0]
        if top == old_dist_info or top.endswith(".data") or name.endswith("/"):
            problems.append(f"{name}: not a package file (the overlay writes .dist-info and .data itself)")
        elif name == overlay.manifest_member:
            problems.append(f"{name}: reserved for forkbuild's manifest")
        elif content is None and name not in source.by_name:
            problems.append(f"{name}: deleted by the series but not in the upstream wheel")
    if problems:
        raise BuildError(f"{source.path.name}: the overlay cannot apply:\n" + "\n".join(f"  - {p}" for p in problems))
    new_dist_info = naming.dist_info_dir(overlay.name, overlay.version)
    record_path, metadata_path = f"{old_dist_info}/RECORD", f"{old_dist_info}/METADATA"
    record = _Record(_upstream_rows(source, record_path))
    writer = ZipWriter(stream)
    # New members carry the upstream METADATA's timestamp: never the clock, TZ or SOURCE_DATE_EPOCH.
    stamp = source.by_name[metadata_path].info.date_time
    changes = dict(overlay.changes)  # plus the version module carrying the new version
    current = changes[overlay.version_member] if overlay.version_member in changes else \
        source.read(overlay.version_member) if overlay.version_member in source.by_name else None
    if current is not None:
        changes[overlay.version_member] = naming.set_version_module(current, overlay.version,
                                                                    source=overlay.version_member)
    dist_members, unchanged_from = [], 0  # members from unchanged_from on are not written yet
    for index, member in enumerate([*source.members, None]):
        if member is not None and member.name.split("/", 1)[0] != old_dist_info and member.name not in changes:
            continue
        writer.copy_run(source, source.members[unchanged_from:index])
        record.copied(source.members[unchanged_from:index])
        unchanged_from = index + 1
        if member is None:
            break
        if member.name.split("/", 1)[0] == old_dist_info:
            dist_members.append(member)
        elif (content := changes[member.name]) is not None:
            writer.add(member.name, content, date_time=member.info.date_time, external_attr=member.info.external_attr)
            record.add(member.name, content)
    added = sorted((name, content) for name, content in changes.items()
                   if content is not None and name not in source.by_name)
    for name, content in [*added, (overlay.manifest_member, overlay.manifest)]:
        writer.add(name, content, date_time=stamp,
                   external_attr=EXECUTABLE_MODE if name in overlay.executable else FILE_MODE)
        record.add(name, content)
    for member in dist_members:
        new_name = new_dist_info + member.name[len(old_dist_info):]
        if member.name == metadata_path:
            metadata = naming.set_metadata_version(source.read(metadata_path), overlay.version, source=metadata_path)
            writer.add(new_name, metadata, date_time=member.info.date_time, external_attr=member.info.external_attr)
            record.add(new_name, metadata)
        elif member.name != record_path:
            writer.copy(source, member, name=new_name)
            if not member.is_dir:
                record.renamed(member.name, new_name)
    writer.add(f"{new_dist_info}/{DIST_INFO_FILE}", overlay.manifest, date_time=stamp)
    record.add(f"{new_dist_info}/{DIST_INFO_FILE}", overlay.manifest)
    new_record = f"{new_dist_info}/RECORD"
    writer.add_pieces(new_record, record.pieces_with(new_record), date_time=source.by_name[record_path].info.date_time)
    writer.close()
