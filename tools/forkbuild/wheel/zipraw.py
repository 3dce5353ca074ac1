"""Zip archives at the byte level: members copied as stored (zipfile would recompress them:
15x slower on sglang's wheel), new ones deflated with fixed settings and no clock."""

from __future__ import annotations

import functools
import io
import struct
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import BinaryIO

from forkbuild.errors import BuildError

_LOCAL = struct.Struct("<4s5H3L2H")
_CENTRAL = struct.Struct("<4s6H3L5HL")  # without the local header's offset, which follows it
_OFFSET = struct.Struct("<L")
_END = struct.Struct("<4s4H2LH")
_DATA_DESCRIPTOR_FLAG = 0x08
_UTF8_FLAG = 0x800
_ZIP32_LIMIT = 0xFFFFFFFF
DateTime = tuple[int, int, int, int, int, int]
FILE_MODE = 0o100644 << 16  # new members: a regular file with mode 0644, never the umask
DEFLATE_LEVEL = 9


@dataclass(frozen=True, kw_only=True)
class Member:
    """One member of a source archive: its directory record and where its data lies."""

    info: zipfile.ZipInfo
    data_offset: int
    central: tuple[bytes, bytes]  # its central directory entry as copied, split where the offset goes

    @property
    def name(self) -> str:
        return self.info.filename

    @property
    def is_dir(self) -> bool:
        return self.info.filename.endswith("/")

    @property
    def end(self) -> int:
        return self.data_offset + self.info.compress_size

    @property
    def plain(self) -> bool:
        """No data descriptor: the local header is copied as it is."""
        return not self.info.flag_bits & _DATA_DESCRIPTOR_FLAG


class ZipSource:
    """A read-only zip archive held in memory: member list, raw bytes, contents."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.data = self.path.read_bytes()
        try:
            self.archive = zipfile.ZipFile(io.BytesIO(self.data))
        except zipfile.BadZipFile as error:
            raise BuildError(f"{self.path}: not a zip archive: {error}") from error
        infos = self.archive.infolist()
        self.members = tuple(Member(info=info, data_offset=self._data_offset(info), central=_central(
            info, name=info.orig_filename.encode("utf-8" if info.flag_bits & _UTF8_FLAG else "cp437"),
            flags=info.flag_bits, extra=info.extra)) for info in infos)
        self.by_name = {member.name: member for member in self.members}

    def _data_offset(self, info: zipfile.ZipInfo) -> int:
        fields = _LOCAL.unpack_from(self.data, info.header_offset) \
            if info.header_offset + _LOCAL.size <= len(self.data) else None
        if not fields or fields[0] != b"PK\x03\x04":
            raise BuildError(f"{self.path}: {info.filename}: no local file header at offset {info.header_offset}")
        return info.header_offset + _LOCAL.size + fields[-2] + fields[-1]

    def compressed(self, member: Member) -> bytes:
        """The member's data exactly as stored (still compressed)."""
        return self.data[member.data_offset:member.end]

    def read(self, name: str) -> bytes:
        """A member's uncompressed content, checked against its CRC."""
        try:
            return self.archive.read(name)
        except (KeyError, zipfile.BadZipFile, NotImplementedError) as error:
            raise BuildError(f"{self.path}: {name}: {error}") from error


@functools.lru_cache(maxsize=512)
def _deflate(content: bytes) -> tuple[bytes, int]:
    """Raw deflate and CRC-32; remembered: a matrix's wheels repeat the same patched files."""
    compressor = zlib.compressobj(DEFLATE_LEVEL, zlib.DEFLATED, -15)
    return compressor.compress(content) + compressor.flush(), zlib.crc32(content)


@functools.lru_cache(maxsize=1024)
def _deflate_piece(content: bytes) -> bytes:
    """Raw deflate ended by a sync flush (no final block): pieces deflated alone concatenate."""
    compressor = zlib.compressobj(DEFLATE_LEVEL, zlib.DEFLATED, -15)
    return compressor.compress(content) + compressor.flush(zlib.Z_SYNC_FLUSH)


def _dos_date_time(date_time: DateTime) -> tuple[int, int]:
    year, month, day, hour, minute, second = date_time
    return (hour << 11) | (minute << 5) | (second // 2), ((year - 1980) << 9) | (month << 5) | day


def _encode_name(name: str) -> tuple[bytes, int]:
    return (name.encode("ascii"), 0) if name.isascii() else (name.encode("utf-8"), _UTF8_FLAG)


def _local(info: zipfile.ZipInfo, *, name: bytes, flags: int) -> bytes:
    """A local header (version 2.0, no extra field) for `info`'s data under `name`."""
    return _LOCAL.pack(b"PK\x03\x04", 20, flags, info.compress_type, *_dos_date_time(info.date_time), info.CRC,
                       info.compress_size, info.file_size, len(name), 0) + name


def _central(info: zipfile.ZipInfo, *, name: bytes, flags: int, extra: bytes) -> tuple[bytes, bytes]:
    head = _CENTRAL.pack(b"PK\x01\x02", (info.create_system << 8) | info.create_version, info.extract_version,
                         flags, info.compress_type, *_dos_date_time(info.date_time), info.CRC, info.compress_size,
                         info.file_size, len(name), len(extra), len(info.comment), 0, info.internal_attr,
                         info.external_attr)
    return head, name + extra + info.comment


class ZipWriter:
    """Writes members in the order given; `close()` adds the central directory."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.central: list[tuple[bytes, int, bytes]] = []  # entry before the offset, offset, entry after it
        self.names: set[str] = set()
        self.position = 0
        # Bytes not written yet, (data, start, end): copied members lying back to back in
        # their source go out as one slice, not 6,400 small writes.
        self.run: tuple[bytes, int, int] | None = None

    def _write(self, data: bytes, start: int = 0, end: int | None = None) -> None:
        end = len(data) if end is None else end
        if self.run is not None and self.run[0] is data and self.run[2] == start:
            self.run = (data, self.run[1], end)
        else:
            self._flush()
            self.run = (data, start, end)
        self.position += end - start

    def _flush(self) -> None:
        if self.run is not None:
            data, start, end = self.run
            self.stream.write(memoryview(data)[start:end])
            self.run = None

    def _claim(self, name: str) -> int:
        if name in self.names:
            raise BuildError(f"internal error: zip member {name} written twice")
        self.names.add(name)
        return self.position

    def copy_run(self, source: ZipSource, members: Sequence[Member]) -> None:
        """copy() of each member, in order; members lying back to back go as one slice."""
        names = [member.name for member in members]
        if not (members and all(member.plain for member in members)
                and all(one.end == two.info.header_offset for one, two in pairwise(members))
                and self.names.isdisjoint(names) and len(set(names)) == len(names)):
            for member in members:
                self.copy(source, member)
            return
        self.names.update(names)
        shift = self.position - members[0].info.header_offset
        self.central += [(member.central[0], member.info.header_offset + shift, member.central[1])
                         for member in members]
        self._write(source.data, members[0].info.header_offset, members[-1].end)

    def copy(self, source: ZipSource, member: Member, *, name: str | None = None) -> None:
        """Copy a member without touching its compressed bytes; `name` renames it."""
        offset = self._claim(name or member.name)
        info = member.info
        if name is None and member.plain:
            self._write(source.data, info.header_offset, member.end)
            head, tail = member.central
        else:  # a new name (or a trailing data descriptor) needs a new local header
            encoded, utf8 = _encode_name(name or member.name)
            flags = (info.flag_bits & ~(_DATA_DESCRIPTOR_FLAG | _UTF8_FLAG)) | utf8
            self._write(_local(info, name=encoded, flags=flags))
            self._write(source.data, member.data_offset, member.end)
            head, tail = _central(info, name=encoded, flags=flags, extra=b"")
        self.central.append((head, offset, tail))

    def add(self, name: str, content: bytes, *, date_time: DateTime, external_attr: int = FILE_MODE) -> None:
        """Add a member from its content, deflated with fixed settings."""
        compressed, crc = _deflate(content)
        self._add(name, compressed, crc=crc, size=len(content), date_time=date_time, external_attr=external_attr)

    def add_pieces(self, name: str, pieces: list[bytes], *, date_time: DateTime) -> None:
        """add() of the joined pieces, each but the last deflated alone (and remembered): a long
        member that differs between wheels only in some pieces (RECORD) deflates only those."""
        last = zlib.compressobj(DEFLATE_LEVEL, zlib.DEFLATED, -15)
        compressed = b"".join(map(_deflate_piece, pieces[:-1])) + last.compress(pieces[-1]) + last.flush()
        crc = 0
        for piece in pieces:
            crc = zlib.crc32(piece, crc)
        self._add(name, compressed, crc=crc, size=sum(map(len, pieces)), date_time=date_time,
                  external_attr=FILE_MODE)

    def _add(self, name: str, compressed: bytes, *, crc: int, size: int, date_time: DateTime,
             external_attr: int) -> None:
        offset = self._claim(name)
        info = zipfile.ZipInfo(name, date_time)  # "made by" Unix zip 2.0, no extra field or comment
        info.create_system, info.compress_type, info.external_attr = 3, zipfile.ZIP_DEFLATED, external_attr
        info.CRC, info.compress_size, info.file_size = crc, len(compressed), size
        encoded, flags = _encode_name(name)
        self._write(_local(info, name=encoded, flags=flags))
        self._write(compressed)
        head, tail = _central(info, name=encoded, flags=flags, extra=b"")
        self.central.append((head, offset, tail))

    def close(self) -> None:
        if len(self.central) > 0xFFFF or self.position > _ZIP32_LIMIT:
            raise BuildError("the wheel needs zip64 (over 65535 members or 4 GiB): not supported")
        start = self.position
        self._write(b"".join(head + _OFFSET.pack(offset) + tail for head, offset, tail in self.central))
        self._write(_END.pack(b"PK\x05\x06", 0, 0, len(self.central), len(self.central), self.position - start,
                              start, 0))
        self._flush()
