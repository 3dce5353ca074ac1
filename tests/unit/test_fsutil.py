"""fsutil.write_atomic: whole files only, sane modes, no temporary left behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from forkbuild.io import fsutil
from forkbuild.io.fsutil import write_atomic
from forkbuild.series.combination import of_variant


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_file_is_0644_whatever_mkstemp_made(tmp_path: Path) -> None:
    write_atomic(tmp_path / "new.txt", "text\n")
    assert (tmp_path / "new.txt").read_text() == "text\n"
    assert mode(tmp_path / "new.txt") == 0o644


def test_an_existing_file_keeps_its_mode_and_bytes_are_written_as_is(tmp_path: Path) -> None:
    target = tmp_path / "tool.sh"
    target.write_text("old\n")
    target.chmod(0o755)
    write_atomic(target, b"\xff\x00new\n")
    assert target.read_bytes() == b"\xff\x00new\n"
    assert mode(target) == 0o755


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "keep.txt"
    target.write_text("old\n")

    def broken_replace(source, destination):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fsutil.os, "replace", broken_replace)
    with pytest.raises(OSError, match="No space"):
        write_atomic(target, "new\n")
    assert target.read_text() == "old\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["keep.txt"]


def test_every_write_uses_its_own_temporary_in_the_same_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sources = []
    real_replace = os.replace

    def spy(source, destination):
        sources.append(Path(source))
        real_replace(source, destination)

    monkeypatch.setattr(fsutil.os, "replace", spy)
    write_atomic(tmp_path / "a.json", "1")
    write_atomic(tmp_path / "a.json", "2")
    assert len(set(sources)) == 2 and all(source.parent == tmp_path for source in sources)
    assert (tmp_path / "a.json").read_text() == "2"


def test_apply_writes_its_work_tree_state_atomically(series_fx, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The state file had a fixed "<name>.tmp" (two writers clobbered each other, and
    # a failed rename left it behind); now it goes through write_atomic.
    from forkbuild.applier import apply_variant
    from forkbuild.io.git import Git
    from forkbuild.worktree.state import STATE_FILE

    written = []
    real = fsutil.write_atomic

    def spy(path, data):
        written.append(Path(path).name)
        real(path, data)

    monkeypatch.setattr("forkbuild.worktree.state.write_atomic", spy)
    apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "full"), dest=tmp_path / "w")
    assert written == [STATE_FILE]
    git_dir = Git(tmp_path / "w").git_dir
    assert sorted(path.name for path in git_dir.iterdir() if STATE_FILE in path.name) == [STATE_FILE]


def test_test_patch_records_leave_no_temporary_when_the_write_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from forkbuild.testpatch.records import write

    write(tmp_path / "out" / "stock.json", [{"a": 1}], variant="stock")
    monkeypatch.setattr(fsutil.os, "replace", lambda source, destination: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        write(tmp_path / "out" / "stock.json", [{"a": 2}], variant="stock")
    assert [path.name for path in (tmp_path / "out").iterdir()] == ["stock.json"]
    assert (tmp_path / "out" / "stock.json").read_text() == '[\n {\n  "variant": "stock",\n  "a": 1\n }\n]\n'
    assert mode(tmp_path / "out" / "stock.json") == 0o644


def test_compose_writes_through_write_atomic() -> None:
    # Its own mkstemp writer left compose.yaml 0600 and a temporary behind on errors.
    from forkbuild.commands import compose

    assert compose.write_atomic is fsutil.write_atomic
    assert not hasattr(compose, "_write_atomic")


def test_write_atomic_many_keeps_modes_and_an_error_leaves_no_temporary(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    tool = tmp_path / "tool.sh"
    tool.write_text("old tool\n")
    tool.chmod(0o755)
    files = {tool: b"new tool\n", tmp_path / "new.txt": b"new\n", tmp_path / "third.txt": b"third\n"}
    fsutil.write_atomic_many(files)
    assert {path: path.read_bytes() for path in files} == files
    assert mode(tool) == 0o755 and mode(tmp_path / "new.txt") == 0o644

    real, renamed = fsutil.os.replace, []

    def second_fails(source, destination):
        if renamed:
            raise OSError(28, "No space left on device")
        renamed.append(destination)
        real(source, destination)

    monkeypatch.setattr(fsutil.os, "replace", second_fails)
    with pytest.raises(OSError, match="No space"):
        fsutil.write_atomic_many({path: b"newer\n" for path in files})
    monkeypatch.undo()
    assert [path.read_bytes() for path in files] == [b"newer\n", b"new\n", b"third\n"]  # the first renamed, the rest old
    assert sorted(path.name for path in tmp_path.iterdir()) == ["new.txt", "third.txt", "tool.sh"]


def test_a_cache_record_is_renamed_into_place_without_a_flush_to_disk(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """durable=False (the cache's records: a damaged one is computed again) costs no fsync;
    every other write flushes the file and its directory."""
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda descriptor: synced.append(descriptor) or real(descriptor))
    write_atomic(tmp_path / "record.json", "{}", durable=False)
    assert synced == [] and (tmp_path / "record.json").read_text() == "{}"
    assert [path.name for path in tmp_path.iterdir()] == ["record.json"]
    write_atomic(tmp_path / "state.json", "{}")
    assert len(synced) == 2  # the file, then the directory holding the new name


def test_an_apply_flushes_the_trees_state_to_disk(
        series_fx, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda descriptor: synced.append(os.readlink(f"/proc/self/fd/{descriptor}"))
                        or real(descriptor))
    from forkbuild.applier import apply_variant

    apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "full"), dest=tmp_path / "w")
    assert any("/.forkbuild-worktree.json." in path for path in synced)  # its temporary, before the rename
