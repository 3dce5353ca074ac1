"""A full or read-only disk, a cache path that is a file: one paragraph (DiskError, exit
13), no traceback, and series.toml + patches/ exactly as before."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from fixtures import SeriesFixture, commit_all, edit
from forkbuild.errors import DiskError
from forkbuild.io import fsutil
from forkbuild.io.git import Git
from forkbuild.series import writer as series_writer
from rebase_fixtures import fingerprint

DISK = DiskError.return_code


def output(capsys) -> str:
    captured = capsys.readouterr()
    return captured.out + captured.err


def _changed_tree(fx: SeriesFixture) -> None:
    """A series work tree whose export writes a new patch, series.toml and patches/series."""
    assert fx.cli("apply", "--all") == 0
    tree = Git(fx.root / ".forkbuild-work" / "series")
    edit(tree.path, "python/pkg/util.py", "UTIL_CONSTANT_0 = 0\n", "UTIL_CONSTANT_0 = 10\n")
    commit_all(tree, "util: a new constant\n\nFeature: beta\n")


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_a_disk_failure_mid_export_leaves_the_series_as_it_was(series_fx: SeriesFixture, capsys,
                                                               monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    _changed_tree(series_fx)
    before = fingerprint(series_fx)
    real, calls = fsutil.os.replace, []

    def failing_second_replace(source, target):
        calls.append(target)
        if len(calls) == 2:  # after the first file was written: a half-done export if not rolled back
            raise OSError(code, os.strerror(code), str(target))
        return real(source, target)

    monkeypatch.setattr(fsutil.os, "replace", failing_second_replace)
    assert series_fx.cli("export") == DISK
    said = output(capsys)
    assert "Traceback" not in said
    assert os.strerror(code) not in said or errno.errorcode[code] in said
    assert errno.errorcode[code] in said
    monkeypatch.undo()
    assert fingerprint(series_fx) == before
    assert not (series_fx.root / ".forkbuild-work" / series_writer.JOURNAL).exists()
    assert not [path.name for path in series_fx.patches_dir.iterdir() if path.name.startswith(".")]
    # The disk has room again: the same command now works.
    assert series_fx.cli("export") == 0


def test_enospc_while_preparing_the_transaction_touches_nothing(series_fx: SeriesFixture, capsys,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _changed_tree(series_fx)
    before = fingerprint(series_fx)

    def full(self, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    monkeypatch.setattr(Path, "write_bytes", full)
    assert series_fx.cli("export") == DISK
    monkeypatch.undo()
    assert "disk is full" in output(capsys)
    assert fingerprint(series_fx) == before
    assert list((series_fx.root / ".forkbuild-work").glob(f"*{series_writer.JOURNAL}*")) == []


@pytest.mark.parametrize("where", ["file", "under-a-file"])
def test_a_cache_path_that_is_a_file_is_one_paragraph(series_fx: SeriesFixture, tmp_path: Path, capsys,
                                                      where: str) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file\n")
    cache = blocker if where == "file" else blocker / "cache"
    from forkbuild.cli import main

    assert main(["-C", str(series_fx.root), "--cache", str(cache), "apply", "--all"]) == DISK
    said = output(capsys)
    assert "Traceback" not in said and str(blocker) in said
    assert "a file is in the way" in said or "is a file, not a directory" in said
    assert blocker.read_text() == "a file\n"
