"""The overlay build: a patched wheel made from the release wheel plus the files
the series changes, without recompressing anything else.

Member order: the package members in upstream's order (changed ones rewritten
in place, deleted ones left out), then added files, then the renamed
.dist-info with RECORD last.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import BinaryIO

from installer.records import RecordEntry

from forkbuild import naming
from forkbuild.errors import BuildError
from forkbuild.manifest import DIST_INFO_FILE, PACKAGE_FILE
from forkbuild.wheel.record import entry_for, parse_record, record_line, record_lines, renamed, render_record
from forkbuild.wheel.zipraw import FILE_MODE, Member, ZipSource, ZipWriter

EXECUTABLE_MODE = 0o100755 << 16
VERSION_MODULE = "_version.py"


@dataclass(frozen=True, kw_only=True)
class Overlay:
    """What to write over an upstream wheel.

    `changes` maps wheel member paths to their new content, or None to delete
    the member; `executable` lists added members that get mode 0755.
    """

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
        return f"{self.package}/{VERSION_MODULE}"


def find_dist_info(source: ZipSource) -> str:
    tops = {member.name.split("/", 1)[0] for member in source.members}
    found = sorted(top for top in tops if top.endswith(".dist-info"))
    if len(found) != 1:
        raise BuildError(f"{source.path}: expected one .dist-info directory, found {found or 'none'}")
    return found[0]


def _check_changes(source: ZipSource, overlay: Overlay, dist_info: str) -> None:
    problems = []
    for member, content in sorted(overlay.changes.items()):
        top = member.split("/", 1)[0]
        if top == dist_info or top.endswith(".data") or member.endswith("/"):
            problems.append(f"{member}: not a package file (the overlay writes .dist-info and .data itself)")
        elif member == overlay.manifest_member:
            problems.append(f"{member}: reserved for forkbuild's manifest")
        elif content is None and member not in source.by_name:
            problems.append(f"{member}: deleted by the series but not in the upstream wheel")
    if problems:
        raise BuildError(f"{source.path.name}: the overlay cannot apply:\n" + "\n".join(f"  - {p}" for p in problems))


class _Writer:
    """ZipWriter plus the RECORD rows of what it wrote (record_line's)."""

    def __init__(self, stream: BinaryIO, source: ZipSource, *, upstream_record: Mapping[str, RecordEntry],
                 upstream_lines: Mapping[str, str]) -> None:
        self.zip = ZipWriter(stream)
        self.source = source
        self.upstream_record = upstream_record
        self.upstream_lines = upstream_lines
        # Per source member: its RECORD row ("" for a directory, which has none; None: missing).
        self.upstream_lines_by_index: list[str | None] = source.remember(("record-lines-by-index", id(upstream_lines)), lambda: [
            "" if member.is_dir else upstream_lines.get(member.name) for member in source.members])
        # RECORD's text in pieces: a copied range's rows are one piece (zipraw deflates a piece
        # once per process: the ranges between changed files recur across a matrix); the rows
        # written one by one gather in the next piece.
        self.pieces: list[str] = []
        self.rows: list[str] = []

    def copy(self, member: Member, *, name: str | None = None) -> None:
        self.zip.copy(self.source, member, name=name)
        if member.is_dir:
            return
        if name is None or name == member.name:
            line = self.upstream_lines.get(member.name)
            if line is None:
                raise BuildError(f"the upstream RECORD has no row for {member.name}")
            self.rows.append(line)
        else:
            self.rows.append(record_line(renamed(self.upstream_record, old=member.name, new=name)))

    def copy_range(self, first: int, stop: int) -> None:
        """copy() of source.members[first:stop] under their own names (one call for thousands)."""
        self.zip.copy_range(self.source, first, stop)
        lines = self.upstream_lines_by_index[first:stop]
        if None in lines:
            missing = self.source.members[first + lines.index(None)].name
            raise BuildError(f"the upstream RECORD has no row for {missing}")
        if stop > first:
            self._end_piece()
            self.pieces.append("".join(lines))  # type: ignore[arg-type]  # no None left

    def _end_piece(self) -> None:
        if self.rows:
            self.pieces.append("".join(self.rows))
            self.rows = []

    def record(self, record_path: str) -> list[bytes]:
        """RECORD's content (every row so far, then its own) in the pieces ZipWriter.add_pieces takes."""
        self._end_piece()
        pieces = [piece.encode("utf-8") for piece in self.pieces]
        return [*pieces[:-1], pieces[-1] + render_record([], record_path=record_path)] if pieces else \
            [render_record([], record_path=record_path)]

    def add(self, name: str, content: bytes, *, date_time, external_attr: int = FILE_MODE) -> None:
        self.zip.add(name, content, date_time=date_time, external_attr=external_attr)
        self.rows.append(record_line(entry_for(name, content)))


def _full_changes(source: ZipSource, overlay: Overlay) -> dict[str, bytes | None]:
    """The series' changes plus the version module carrying the new version."""
    changes = dict(overlay.changes)
    current = changes.get(overlay.version_member)
    if current is None and overlay.version_member in source.by_name and overlay.version_member not in changes:
        current = source.read(overlay.version_member)
    if current is not None:
        changes[overlay.version_member] = naming.set_version_module(
            current, overlay.version, source=overlay.version_member)
    return changes


def write_overlay(source: ZipSource, overlay: Overlay, stream: BinaryIO) -> None:
    """Write the patched wheel for `overlay` to `stream`."""
    old_dist_info = find_dist_info(source)
    _check_changes(source, overlay, old_dist_info)
    new_dist_info = naming.dist_info_dir(overlay.name, overlay.version)
    record_path = f"{old_dist_info}/RECORD"
    metadata_path = f"{old_dist_info}/METADATA"
    upstream_record = source.remember(("record", record_path), lambda: parse_record(
        source.read(record_path).decode("utf-8"), source=source.path.name))
    upstream_lines = source.remember(("record-lines", record_path), lambda: record_lines(upstream_record))
    writer = _Writer(stream, source, upstream_record=upstream_record, upstream_lines=upstream_lines)
    # New members carry the upstream METADATA's timestamp: fixed by the pinned
    # wheel, never the clock, the time zone or SOURCE_DATE_EPOCH.
    stamp = source.by_name[metadata_path].info.date_time
    changes = _full_changes(source, overlay)

    dist_members, unchanged_from = [], 0  # members unchanged_from.. not written yet are unchanged
    for index, member in enumerate(source.members):
        if member.name.split("/", 1)[0] == old_dist_info or member.name in changes:
            writer.copy_range(unchanged_from, index)
            unchanged_from = index + 1
            if member.name.split("/", 1)[0] == old_dist_info:
                dist_members.append(member)
            elif (content := changes[member.name]) is not None:
                writer.add(member.name, content, date_time=member.info.date_time,
                           external_attr=member.info.external_attr)
    writer.copy_range(unchanged_from, len(source.members))
    added = sorted((name, content) for name, content in changes.items()
                   if content is not None and name not in source.by_name)
    for name, content in added:
        mode = EXECUTABLE_MODE if name in overlay.executable else FILE_MODE
        writer.add(name, content, date_time=stamp, external_attr=mode)
    writer.add(overlay.manifest_member, overlay.manifest, date_time=stamp)

    for member in dist_members:
        new_name = new_dist_info + member.name[len(old_dist_info):]
        if member.name == record_path:
            continue
        if member.name == metadata_path:
            metadata = naming.set_metadata_version(source.read(metadata_path), overlay.version, source=metadata_path)
            writer.add(new_name, metadata, date_time=member.info.date_time, external_attr=member.info.external_attr)
        else:
            writer.copy(member, name=new_name)
    writer.add(f"{new_dist_info}/{DIST_INFO_FILE}", overlay.manifest, date_time=stamp)
    new_record = f"{new_dist_info}/RECORD"
    writer.zip.add_pieces(new_record, writer.record(new_record),
                   date_time=source.by_name[record_path].info.date_time)
    writer.zip.close()
