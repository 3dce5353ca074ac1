"""Zip archives at the byte level: read members' compressed bytes as they are and
write an archive from copied and new members, deterministically.

Why not zipfile alone: zipfile can only write a member by compressing it again
(15x slower on the 39 MB sglang wheel) and stamps new members with the clock.
Here every header field comes from the source archive or from fixed values, so
the output depends on nothing but the input bytes.
"""

from __future__ import annotations

import functools
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from forkbuild.errors import BuildError

_LOCAL = struct.Struct("<4s5H3L2H")
_CENTRAL = struct.Struct("<4s6H3L5H2L")
_END = struct.Struct("<4s4H2LH")
_LOCAL_SIGNATURE = b"PK\x03\x04"
_CENTRAL_SIGNATURE = b"PK\x01\x02"
_END_SIGNATURE = b"PK\x05\x06"
_DATA_DESCRIPTOR_FLAG = 0x08
_UTF8_FLAG = 0x800
_ZIP32_LIMIT = 0xFFFFFFFF
# Fixed values for members this module writes: "made by" Unix zip 2.0, a
# regular file with mode 0644 (never the umask), raw deflate at level 9.
_MADE_BY_UNIX = (3 << 8) | 20
_EXTRACT_VERSION = 20
FILE_MODE = 0o100644 << 16
DEFLATE_LEVEL = 9
_FLUSH_BYTES = 1 << 23


@dataclass(frozen=True, kw_only=True)
class Member:
    """One member of a source archive: its directory record and where its data lies."""

    info: zipfile.ZipInfo
    data_offset: int

    @property
    def name(self) -> str:
        return self.info.filename

    @property
    def is_dir(self) -> bool:
        return self.info.filename.endswith("/")


class ZipSource:
    """A read-only zip archive held in memory: member list, raw bytes, contents."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.data = self.path.read_bytes()
        try:
            with zipfile.ZipFile(self.path) as archive:
                infos = archive.infolist()
        except zipfile.BadZipFile as error:
            raise BuildError(f"{self.path}: not a zip archive: {error}") from error
        self.members = tuple(Member(info=info, data_offset=self._data_offset(info)) for info in infos)
        self.by_name = {member.name: member for member in self.members}
        # ZipWriter.copy's central directory entry per member, split where the offset goes
        self.central_entries: dict[str, tuple[bytes, bytes]] = {}
        self._remembered: dict[object, object] = {}

    def copy_table(self) -> CopyTable:
        """What copying members unchanged needs, as lists in member order (built once)."""
        return self.remember(CopyTable, lambda: CopyTable.of(self))

    def remember(self, key: object, compute):
        """compute(), once per source and key (the archive never changes once read)."""
        if key not in self._remembered:
            self._remembered[key] = compute()
        return self._remembered[key]

    def _data_offset(self, info: zipfile.ZipInfo) -> int:
        header = self.data[info.header_offset:info.header_offset + _LOCAL.size]
        fields = _LOCAL.unpack(header) if len(header) == _LOCAL.size else None
        if not fields or fields[0] != _LOCAL_SIGNATURE:
            raise BuildError(f"{self.path}: {info.filename}: no local file header at offset {info.header_offset}")
        name_length, extra_length = fields[-2], fields[-1]
        return info.header_offset + _LOCAL.size + name_length + extra_length

    def compressed(self, member: Member) -> bytes:
        """The member's data exactly as stored (still compressed)."""
        return self.data[member.data_offset:member.data_offset + member.info.compress_size]

    def local_entry(self, member: Member) -> bytes:
        """The member's local header and data exactly as stored."""
        return self.data[member.info.header_offset:self.entry_end(member)]

    def entry_end(self, member: Member) -> int:
        """Where the member's local header and data end in the archive."""
        return member.data_offset + member.info.compress_size

    def read(self, name: str) -> bytes:
        """A member's uncompressed content (checked against its CRC by zipfile)."""
        member = self.by_name.get(name)
        if member is None:
            raise BuildError(f"{self.path}: has no member {name}")
        info = member.info
        raw = self.compressed(member)
        if info.compress_type == zipfile.ZIP_STORED:
            content = raw
        elif info.compress_type == zipfile.ZIP_DEFLATED:
            content = zlib.decompress(raw, -15)
        else:
            raise BuildError(f"{self.path}: {name}: unsupported compression method {info.compress_type}")
        if zlib.crc32(content) != info.CRC:
            raise BuildError(f"{self.path}: {name}: CRC mismatch, the archive is damaged")
        return content


@dataclass(frozen=True, kw_only=True)
class CopyTable:
    """Per member of a source, in order: name, where its local entry starts and ends, its
    central directory entry split where the offset goes, and whether the next member's
    entry starts where its own ends. A range of members is then copied with list slices
    (ZipWriter.copy_range) instead of a Python step per member."""

    names: list[str]
    starts: list[int]
    ends: list[int]
    heads: list[bytes]
    tails: list[bytes]
    plain: list[bool]  # no data descriptor: the local header can be copied as it is
    adjacent: list[bool]  # adjacent[k]: member k + 1's entry starts where k's ends

    @classmethod
    def of(cls, source: ZipSource) -> CopyTable:
        entries = [_copied_record(member.info).central_entry() for member in source.members]
        starts = [member.info.header_offset for member in source.members]
        ends = [source.entry_end(member) for member in source.members]
        return cls(names=[member.name for member in source.members], starts=starts, ends=ends,
                   heads=[head for head, _ in entries], tails=[tail for _, tail in entries],
                   plain=[not member.info.flag_bits & _DATA_DESCRIPTOR_FLAG for member in source.members],
                   adjacent=[end == start for end, start in zip(ends, starts[1:], strict=False)])


@functools.lru_cache(maxsize=512)
def _deflate(content: bytes) -> tuple[bytes, int]:
    """Raw deflate (fixed level) and CRC-32 of `content`. Remembered: the wheels of a matrix
    hold the same few versions of each patched file over and over."""
    compressor = zlib.compressobj(DEFLATE_LEVEL, zlib.DEFLATED, -15)
    return compressor.compress(content) + compressor.flush(), zlib.crc32(content)


@functools.lru_cache(maxsize=1024)
def _deflate_piece(content: bytes) -> bytes:
    """Raw deflate (fixed level) of `content` as a piece of a longer member: ended with a sync
    flush (byte-aligned, no final block), so pieces deflated alone can be concatenated."""
    compressor = zlib.compressobj(DEFLATE_LEVEL, zlib.DEFLATED, -15)
    return compressor.compress(content) + compressor.flush(zlib.Z_SYNC_FLUSH)


def _copied_record(info: zipfile.ZipInfo, *, name: bytes | None = None, flags: int | None = None,
                   extra: bytes | None = None) -> _Record:
    """The central directory record of a member copied from a source archive."""
    dos_time, dos_date = _dos_date_time(info.date_time)
    encoded = info.orig_filename.encode("utf-8" if info.flag_bits & _UTF8_FLAG else "cp437")
    return _Record(name=encoded if name is None else name, made_by=(info.create_system << 8) | info.create_version,
                   extract_version=info.extract_version, flags=info.flag_bits if flags is None else flags,
                   method=info.compress_type, dos_time=dos_time, dos_date=dos_date, crc=info.CRC,
                   compress_size=info.compress_size, file_size=info.file_size,
                   extra=info.extra if extra is None else extra, comment=info.comment,
                   internal_attr=info.internal_attr, external_attr=info.external_attr)


def _dos_date_time(date_time: tuple[int, int, int, int, int, int]) -> tuple[int, int]:
    year, month, day, hour, minute, second = date_time
    return (hour << 11) | (minute << 5) | (second // 2), ((year - 1980) << 9) | (month << 5) | day


def _encode_name(name: str) -> tuple[bytes, int]:
    try:
        return name.encode("ascii"), 0
    except UnicodeEncodeError:
        return name.encode("utf-8"), _UTF8_FLAG


@dataclass(frozen=True, kw_only=True)
class _Record:
    """What the central directory says about one written member."""

    name: bytes
    made_by: int
    extract_version: int
    flags: int
    method: int
    dos_time: int
    dos_date: int
    crc: int
    compress_size: int
    file_size: int
    extra: bytes
    comment: bytes
    internal_attr: int
    external_attr: int

    def central_entry(self) -> tuple[bytes, bytes]:
        """The member's central directory entry, split where its local header's offset goes."""
        packed = _CENTRAL.pack(_CENTRAL_SIGNATURE, self.made_by, self.extract_version, self.flags, self.method,
                               self.dos_time, self.dos_date, self.crc, self.compress_size, self.file_size,
                               len(self.name), len(self.extra), len(self.comment), 0, self.internal_attr,
                               self.external_attr, 0)
        return packed[:-_OFFSET.size], self.name + self.extra + self.comment


_OFFSET = struct.Struct("<L")


class ZipWriter:
    """Writes members in the order given; `close()` adds the central directory."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        # per member: central directory entry before the offset, the offset, the entry after it
        self.records: list[tuple[bytes, int, bytes]] = []
        self.names: set[str] = set()
        self.position = 0
        # ~20,000 small chunks per wheel: one write call each cost more than the copying.
        self.pending = bytearray()
        # Members copied as they are and lying back to back in their source: (source, start, end)
        # of the bytes not written yet. Written as one slice when something else comes: the
        # unchanged members of a wheel are a few long runs, not 6,400 small writes.
        self.run: tuple[ZipSource, int, int] | None = None

    def _write(self, chunk: bytes) -> None:
        if self.run is not None:
            self._write_run()
        self.pending += chunk
        self.position += len(chunk)
        if len(self.pending) >= _FLUSH_BYTES:
            self._flush()

    def _flush(self) -> None:
        self.stream.write(self.pending)
        self.pending.clear()

    def _write_run(self) -> None:
        assert self.run is not None
        source, start, end = self.run
        self.run = None
        self._flush()
        self.stream.write(memoryview(source.data)[start:end])

    def _claim(self, name: str) -> None:
        if name in self.names:
            raise BuildError(f"internal error: zip member {name} written twice")
        self.names.add(name)
        if self.position > _ZIP32_LIMIT:
            raise BuildError("the wheel grew past 4 GiB: zip64 archives are not supported")

    def copy(self, source: ZipSource, member: Member, *, name: str | None = None) -> None:
        """Copy a member without touching its compressed bytes; `name` renames it."""
        info, target = member.info, name or member.name
        self._claim(target)
        offset = self.position
        if target == member.name and not info.flag_bits & _DATA_DESCRIPTOR_FLAG:
            # The local header is copied too: nothing in it changes. Its central entry is
            # remembered per source member (a matrix copies the same members again and again).
            head, tail = source.central_entries.get(member.name) or source.central_entries.setdefault(
                member.name, _copied_record(info).central_entry())
            self._extend_run(source, member)
            self.records.append((head, offset, tail))
            return
        encoded, utf8 = _encode_name(target)
        # A new name (or a trailing data descriptor) needs a new local header;
        # the compressed data after it stays as stored.
        flags = (info.flag_bits & ~(_DATA_DESCRIPTOR_FLAG | _UTF8_FLAG)) | utf8
        self._write_local_header(encoded, flags=flags, method=info.compress_type, date_time=info.date_time,
                                 crc=info.CRC, compress_size=info.compress_size, file_size=info.file_size)
        self._write(source.compressed(member))
        record = _copied_record(info, name=encoded, flags=flags, extra=b"")
        self.records.append((record.central_entry()[0], offset, record.central_entry()[1]))

    def copy_range(self, source: ZipSource, first: int, stop: int) -> None:
        """copy() of source.members[first:stop] under their own names, in order. Members that
        lie back to back (as a zip writer lays them out) take list slices, not a step each."""
        if first >= stop:
            return
        table = source.copy_table()
        if not (all(table.plain[first:stop]) and all(table.adjacent[first:stop - 1])):
            for member in source.members[first:stop]:
                self.copy(source, member)
            return
        names = table.names[first:stop]
        if not self.names.isdisjoint(names) or len(set(names)) != len(names):
            twice = next(name for name in names if name in self.names or names.count(name) > 1)
            raise BuildError(f"internal error: zip member {twice} written twice")
        self.names.update(names)
        shift = self.position - table.starts[first]
        self.records.extend(zip(table.heads[first:stop], [start + shift for start in table.starts[first:stop]],
                                table.tails[first:stop], strict=True))
        begin, end = table.starts[first], table.ends[stop - 1]
        if self.run is not None and (self.run[0] is not source or self.run[2] != begin):
            self._write_run()
        self.run = (source, self.run[1] if self.run is not None else begin, end)
        self.position += end - begin
        if self.position > _ZIP32_LIMIT:
            raise BuildError("the wheel grew past 4 GiB: zip64 archives are not supported")

    def _extend_run(self, source: ZipSource, member: Member) -> None:
        """Count the member's local entry as written; its bytes go out with its run."""
        start, end = member.info.header_offset, source.entry_end(member)
        if self.run is not None and (self.run[0] is not source or self.run[2] != start):
            self._write_run()  # not adjacent to the run: a run of its own
        self.run = (source, self.run[1] if self.run is not None else start, end)
        self.position += end - start

    def add_pieces(self, name: str, pieces: list[bytes], *, date_time: tuple[int, int, int, int, int, int],
                   external_attr: int = FILE_MODE) -> None:
        """add() of the concatenated pieces, each deflated on its own (and remembered) but the
        last: one valid deflate stream, and a long member that differs between wheels only
        in some pieces (RECORD) costs the deflating of those pieces only."""
        compressed = b"".join(_deflate_piece(piece) for piece in pieces[:-1])
        last = zlib.compressobj(DEFLATE_LEVEL, zlib.DEFLATED, -15)
        compressed += last.compress(pieces[-1]) + last.flush()
        crc = 0
        for piece in pieces:
            crc = zlib.crc32(piece, crc)
        self._add_deflated(name, compressed, crc=crc, size=sum(map(len, pieces)), date_time=date_time,
                           external_attr=external_attr)

    def add(self, name: str, content: bytes, *, date_time: tuple[int, int, int, int, int, int],
            external_attr: int = FILE_MODE) -> None:
        """Add a member from its content, deflated with fixed settings."""
        compressed, crc = _deflate(content)
        self._add_deflated(name, compressed, crc=crc, size=len(content), date_time=date_time,
                           external_attr=external_attr)

    def _add_deflated(self, name: str, compressed: bytes, *, crc: int, size: int,
                      date_time: tuple[int, int, int, int, int, int], external_attr: int) -> None:
        self._claim(name)
        offset = self.position
        encoded, flags = _encode_name(name)
        self._write_local_header(encoded, flags=flags, method=zipfile.ZIP_DEFLATED, date_time=date_time,
                                 crc=crc, compress_size=len(compressed), file_size=size)
        self._write(compressed)
        dos_time, dos_date = _dos_date_time(date_time)
        head, tail = _Record(
            name=encoded, made_by=_MADE_BY_UNIX, extract_version=_EXTRACT_VERSION, flags=flags,
            method=zipfile.ZIP_DEFLATED, dos_time=dos_time, dos_date=dos_date, crc=crc,
            compress_size=len(compressed), file_size=size, extra=b"", comment=b"",
            internal_attr=0, external_attr=external_attr).central_entry()
        self.records.append((head, offset, tail))

    def _write_local_header(self, name: bytes, *, flags: int, method: int, date_time, crc: int,
                            compress_size: int, file_size: int) -> None:
        dos_time, dos_date = _dos_date_time(date_time)
        self._write(_LOCAL.pack(_LOCAL_SIGNATURE, _EXTRACT_VERSION, flags, method, dos_time, dos_date,
                                crc, compress_size, file_size, len(name), 0))
        self._write(name)

    def close(self) -> None:
        if self.run is not None:
            self._write_run()
        start = self.position
        pack = _OFFSET.pack
        self._write(b"".join(head + pack(offset) + tail for head, offset, tail in self.records))
        if len(self.records) > 0xFFFF or self.position > _ZIP32_LIMIT:
            raise BuildError("the wheel needs zip64 (over 65535 members or 4 GiB): not supported")
        self._write(_END.pack(_END_SIGNATURE, 0, 0, len(self.records), len(self.records),
                              self.position - start, start, 0))
        self._flush()
