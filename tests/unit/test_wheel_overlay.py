"""The overlay writer on tiny wheels: what changes, what stays byte for byte."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
import zipfile
import zlib
from pathlib import Path

import pytest

from forkbuild.errors import BuildError
from forkbuild.wheel.builder import install_validated
from forkbuild.wheel.overlay import Overlay, write_overlay
from forkbuild.wheel.validate import validate_wheel
from forkbuild.wheel.zipraw import ZipSource
from wheelkit import DEMO_FILES, make_wheel, record_hash

VERSION = "1.0+full.abc123def0"
NEW_NAME = f"demo-{VERSION}-py3-none-any.whl"
DIST_INFO = f"demo-{VERSION}.dist-info"
MANIFEST = b'{"schema": 1, "variant": "full"}\n'
CHANGES = {
    "demo/core.py": b"def answer():\n    return 42\n",
    "demo/added/mod.py": b"ADDED = 1\n",
    "demo/run.sh": b"#!/bin/sh\n",
    "demo/extra.py": None,
}


def build(tmp_path: Path, *, changes=CHANGES, source: Path | None = None) -> Path:
    source = source or make_wheel(tmp_path / "upstream")
    overlay = Overlay(name="demo", package="demo", version=VERSION, manifest=MANIFEST, changes=changes,
                      executable=frozenset({"demo/run.sh"}))
    target = tmp_path / "dist" / NEW_NAME
    zip_source = ZipSource(source)
    install_validated(target, lambda stream: write_overlay(zip_source, overlay, stream))
    return target


def read_all(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist() if not name.endswith("/")}


def test_changed_files_are_replaced_added_and_deleted(tmp_path):
    contents = read_all(build(tmp_path))
    assert contents["demo/core.py"] == CHANGES["demo/core.py"]
    assert contents["demo/added/mod.py"] == b"ADDED = 1\n"
    assert "demo/extra.py" not in contents
    assert contents["demo/__init__.py"] == DEMO_FILES["demo/__init__.py"]
    assert not any(name.startswith("demo-1.0.dist-info/") for name in contents)


def test_unchanged_members_keep_their_compressed_bytes(tmp_path):
    big = b"".join(b"value_%d = %d * 3\n" % (i, i % 7) for i in range(2000))
    # Deflated at level 1 upstream; the writer deflates new content at level 9, so a
    # recompressed member would not match byte for byte.
    upstream = make_wheel(tmp_path / "upstream", files={**DEMO_FILES, "demo/big.py": big})
    source, built = ZipSource(upstream), ZipSource(build(tmp_path, source=upstream))
    level9 = zlib.compressobj(9, zlib.DEFLATED, -15)
    assert source.compressed(source.by_name["demo/big.py"]) != level9.compress(big) + level9.flush()
    for name in ("demo/big.py", "demo/__init__.py", "demo/kernels/gemm.cu", "demo/tool.sh", "demo/"):
        new, old = built.by_name[name], source.by_name[name]
        assert built.data[new.info.header_offset:new.end] == source.data[old.info.header_offset:old.end]
    renamed = built.by_name[f"{DIST_INFO}/WHEEL"]
    assert built.compressed(renamed) == source.compressed(source.by_name["demo-1.0.dist-info/WHEEL"])


def test_metadata_changes_only_the_version_line(tmp_path):
    before = ZipSource(make_wheel(tmp_path / "upstream")).read("demo-1.0.dist-info/METADATA").decode()
    after = read_all(build(tmp_path))[f"{DIST_INFO}/METADATA"].decode()
    differing = [(old, new) for old, new in zip(before.splitlines(True), after.splitlines(True), strict=True) if old != new]
    assert differing == [("Version: 1.0\n", f"Version: {VERSION}\n")]
    assert len(before.splitlines()) == len(after.splitlines())


def test_version_module_and_manifests_carry_the_version(tmp_path):
    contents = read_all(build(tmp_path))
    module = contents["demo/_version.py"].decode()
    assert f"__version__ = version = '{VERSION}'" in module
    assert "__version_tuple__ = version_tuple = (1, 0, 'full.abc123def0')" in module
    assert contents["demo/_forkbuild_manifest.json"] == MANIFEST
    assert contents[f"{DIST_INFO}/forkbuild_manifest.json"] == MANIFEST


def test_record_is_rewritten_and_written_last(tmp_path):
    path = build(tmp_path)
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        record = archive.read(f"{DIST_INFO}/RECORD").decode().splitlines()
        files = [name for name in names if not name.endswith("/")]
    assert names[-1] == f"{DIST_INFO}/RECORD"
    first_dist_info = next(i for i, name in enumerate(names) if name.startswith(DIST_INFO))
    assert all(name.startswith(DIST_INFO) for name in names[first_dist_info:])
    rows = {line.split(",")[0]: line for line in record}
    assert sorted(rows) == sorted(files)
    assert rows["demo/core.py"] == f"demo/core.py,{record_hash(CHANGES['demo/core.py'])},{len(CHANGES['demo/core.py'])}"
    assert record[-1] == f"{DIST_INFO}/RECORD,,"
    validate_wheel(path)


def test_modes_come_from_upstream_or_the_tree_never_the_umask(tmp_path):
    with zipfile.ZipFile(build(tmp_path)) as archive:
        modes = {info.filename: info.external_attr >> 16 for info in archive.infolist()}
    assert modes["demo/tool.sh"] == 0o100755
    assert modes["demo/run.sh"] == 0o100755
    assert modes["demo/added/mod.py"] == 0o100644
    assert modes["demo/core.py"] == 0o100644


def _tamper(path: Path, member: str, content: bytes) -> None:
    """Rewrite one member with a correct zip CRC but leave RECORD as it was."""
    with zipfile.ZipFile(path) as archive:
        items = [(info, archive.read(info)) for info in archive.infolist()]
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for info, data in items:
            archive.writestr(info, content if info.filename == member else data)


def test_tampered_member_fails_validation_though_the_zip_is_intact(tmp_path):
    path = build(tmp_path)
    _tamper(path, "demo/core.py", b"import os; os.system('evil')\n")
    with zipfile.ZipFile(path) as archive:
        assert archive.testzip() is None  # every CRC is right: unzip, pip and uv see nothing wrong
    with pytest.raises(BuildError, match="demo/core.py didn't match RECORD"):
        validate_wheel(path)


def test_invalid_wheel_is_never_moved_into_place(tmp_path):
    target = tmp_path / "dist" / NEW_NAME
    good = build(tmp_path / "good")
    _tamper(good, "demo/core.py", b"tampered\n")

    def write_tampered(stream):
        stream.write(good.read_bytes())

    with pytest.raises(BuildError, match="failed RECORD validation"):
        install_validated(target, write_tampered)
    assert list(target.parent.iterdir()) == []


@pytest.mark.parametrize("changes, message", [
    ({"demo-1.0.dist-info/METADATA": b"x"}, "not a package file"),
    ({"demo/_forkbuild_manifest.json": b"{}"}, "reserved"),
    ({"demo/missing.py": None}, "not in the upstream wheel"),
])
def test_changes_the_overlay_cannot_make_are_refused(tmp_path, changes, message):
    with pytest.raises(BuildError, match=message):
        build(tmp_path, changes=changes)


def _build_under(tmp_path: Path, *, tz: str, umask: int, epoch: str, mtime: float, monkeypatch) -> str:
    monkeypatch.setenv("TZ", tz)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
    time.tzset()
    old_umask = os.umask(umask)
    try:
        upstream = tmp_path / "upstream" / "demo-1.0-py3-none-any.whl"
        if not upstream.exists():
            make_wheel(upstream.parent)
        os.utime(upstream, (mtime, mtime))
        path = build(tmp_path / f"out-{umask:o}", source=upstream)
        return hashlib.sha256(path.read_bytes()).hexdigest()
    finally:
        os.umask(old_umask)
        monkeypatch.undo()
        time.tzset()


def test_byte_reproducible_whatever_tz_umask_epoch_and_mtimes(tmp_path, monkeypatch):
    first = _build_under(tmp_path, tz="UTC", umask=0o022, epoch="0", mtime=1e9, monkeypatch=monkeypatch)
    second = _build_under(tmp_path, tz="Asia/Kathmandu", umask=0o077, epoch="1700000000", mtime=1.7e9,
                          monkeypatch=monkeypatch)
    assert first == second


def test_a_member_added_in_pieces_is_one_member_any_zip_reader_reads(tmp_path):
    # RECORD is written in pieces deflated one by one; standard readers must see one member.
    from forkbuild.wheel.zipraw import ZipWriter

    pieces = [b"".join(b"pkg/m%d.py,sha256=x,%d\n" % (i, i) for i in range(start, start + 3000))
              for start in (0, 3000, 6000)] + [b"pkg-1.0.dist-info/RECORD,,\n"]
    path = tmp_path / "pieces.zip"
    with path.open("wb") as stream:
        writer = ZipWriter(stream)
        writer.add_pieces("RECORD", pieces, date_time=(2020, 1, 1, 0, 0, 0))
        writer.add("after.txt", b"next member\n", date_time=(2020, 1, 1, 0, 0, 0))
        writer.close()
    with zipfile.ZipFile(path) as archive:
        assert archive.testzip() is None
        assert archive.read("RECORD") == b"".join(pieces) and archive.read("after.txt") == b"next member\n"
    assert subprocess.run(["unzip", "-tq", str(path)], capture_output=True).returncode == 0
