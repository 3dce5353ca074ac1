"""Validate a built wheel as `python -m installer --validate-record all` does (pip and uv
install a wrong RECORD without a word, pypa/pip#4705); file name, .dist-info and METADATA agree."""

from __future__ import annotations

import contextlib
import functools
import zipfile
from pathlib import Path
from typing import NamedTuple

from installer.exceptions import InstallerError
from installer.records import InvalidRecordEntry, RecordEntry, parse_record_file
from installer.sources import WheelFile
from packaging.utils import parse_wheel_filename

from forkbuild.errors import BuildError
from forkbuild.io.fsutil import write_atomic
from forkbuild.wheel import naming

_ERRORS = (InstallerError, ValueError, zipfile.BadZipFile, KeyError)
# Beside a pinned release wheel in the cache: its sha256, written once installer validated that
# wheel's RECORD in full. The same bytes validate the same: a later process whose wheel hashes to
# the sha256 named reads only its RECORD and central directory (bench/bench_memos.py: the saving).
RECORD_CHECKED = ".record-checked"


class PinnedWheel(NamedTuple):
    """A release wheel the upstream cache has just hashed: its bytes are the ones `sha256` pins."""

    path: Path
    sha256: str


def validate_wheel(path: Path, *, verified_source: PinnedWheel | None = None) -> None:
    """Raise BuildError naming every problem installer finds in `path`. verified_source: the
    wheel `path` was overlaid on, validated once per process; its members are not hashed again."""
    try:
        with zipfile.ZipFile(path) as archive:
            source = WheelFile(archive)
            if verified_source is None:
                source.validate_record(validate_contents=True)
            issues = [] if verified_source is None else \
                _changed_issues(archive, source, trusted=_verified_members(verified_source))
            metadata, dist_info = source.read_dist_info("METADATA"), source.dist_info_dir
    except _ERRORS as error:
        issues = getattr(error, "issues", None) or [str(error)]
    if issues:
        raise BuildError(f"{path.name} failed RECORD validation:\n" + "\n".join(f"  - {issue}" for issue in issues),
                         hint="the wheel was not moved into place; rebuild it")
    _check_version(path, metadata=metadata, dist_info=dist_info)


def _rows(source: WheelFile) -> dict[str, tuple[str, str, str]]:
    return {row[0]: row for row in parse_record_file(source.read_dist_info("RECORD").splitlines())}


@functools.lru_cache(maxsize=8)
def _verified_members_of(path: str, size: int, mtime_ns: int, checked: bool) -> frozenset[tuple]:
    with zipfile.ZipFile(path) as archive:
        source = WheelFile(archive)
        source.validate_record(validate_contents=not checked)
        rows = _rows(source)
        return frozenset((item.CRC, item.compress_size, item.file_size, *rows[item.filename][1:3])
                         for item in archive.infolist() if item.filename in rows)


def _verified_members(source: PinnedWheel) -> frozenset[tuple]:
    """(CRC-32, compressed size, size, RECORD hash, RECORD size) of the members of `source`,
    whose RECORD installer validated in full (in this process, or in one that marked its sha256)."""
    path, status = source.path, source.path.stat()
    marker, checked = path.with_name(path.name + RECORD_CHECKED), False
    with contextlib.suppress(OSError):
        checked = marker.read_text(errors="replace").strip() == source.sha256  # damaged: validated again
    try:
        members = _verified_members_of(str(path), status.st_size, status.st_mtime_ns, checked)
    except _ERRORS as error:
        issues = getattr(error, "issues", None) or [str(error)]
        raise BuildError(f"{path.name} (the wheel the overlay starts from) failed RECORD validation:\n"
                         + "\n".join(f"  - {issue}" for issue in issues)) from error
    if not checked:
        with contextlib.suppress(OSError):  # a read-only cache: validated in full again next time
            write_atomic(marker, f"{source.sha256}\n")
    return members


def _changed_issues(archive: zipfile.ZipFile, source: WheelFile, *, trusted: frozenset[tuple]) -> list[str]:
    """installer's validate_record, skipping the hash of members that are the verified source's."""
    rows = _rows(source)
    record_path = f"{source.dist_info_dir}/RECORD"
    issues = []
    for item in archive.infolist():
        row = rows.get(item.filename)
        if item.filename.endswith("/"):
            continue
        if row is None:
            issues.append(f"In {archive.filename}, {item.filename} is not mentioned in RECORD")
            continue
        if item.filename != record_path and (item.CRC, item.compress_size, item.file_size, *row[1:]) in trusted:
            continue
        try:
            record = RecordEntry.from_elements(*row)
        except InvalidRecordEntry as error:
            issues += [f"In {archive.filename}, entry in RECORD file for {item.filename} is invalid: {issue}"
                       for issue in error.issues]
            continue
        if item.filename == record_path:
            if record.hash_ is not None or record.size is not None:
                issues.append(f"In {archive.filename}, RECORD file incorrectly contains hash / size.")
        elif record.hash_ is None or record.size is None:
            issues.append(f"In {archive.filename}, hash / size of {item.filename} is not included in RECORD")
        else:
            with archive.open(item) as stream:
                if not record.validate_stream(stream):  # type: ignore[arg-type]  # a ZipExtFile reads like BinaryIO
                    issues.append(f"In {archive.filename}, hash / size of {item.filename} didn't match RECORD")
    return issues


def _check_version(path: Path, *, metadata: str, dist_info: str) -> None:
    name, version, _, _ = parse_wheel_filename(path.name)
    declared = next((line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Version:")), None)
    expected_dist_info = naming.dist_info_dir(name, str(version))
    if declared != str(version) or dist_info != expected_dist_info:
        raise BuildError(f"{path.name}: versions disagree: file name {version}, METADATA {declared}, "
                         f"{dist_info} (expected {expected_dist_info})")
