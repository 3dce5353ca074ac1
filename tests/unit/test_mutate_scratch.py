"""The scratch folders of `forkbuild mutate`: a re-run removes those of killed runs, never
a live run's (tools/forkbuild/mutate/scratch.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from forkbuild.childgroup import proc_stat
from forkbuild.mutate import runner, scratch
from forkbuild.mutate.runner import run_all
from forkbuild.worktrees import Owner


@pytest.fixture
def temp_root(tmp_path, monkeypatch) -> Path:
    """The temp dir the runs use and scan: tmp_path, never the real /tmp."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def _owner(pid: int, started: str) -> Owner:
    return Owner(pid=pid, host=os.uname().nodename, started=started, command="mutate")


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def _left(root: Path, name: str, owner: Owner | None) -> Path:
    """A scratch folder as a run leaves it (a worker log, a mutant's folder), with its owner record."""
    folder = root / f"{scratch.PREFIX}{name}"
    (folder / "m0").mkdir(parents=True)
    (folder / "worker0.log").write_text("log\n")
    if owner is not None:
        (folder / scratch.OWNER_FILE).write_text(json.dumps(owner._asdict()))
    return folder


@pytest.fixture
def sleeper():
    child = subprocess.Popen(["sleep", "30"])
    yield child
    child.kill()
    child.wait()


def test_a_folder_whose_owner_is_dead_is_removed(temp_root):
    dead = _left(temp_root, "dead", _owner(_dead_pid(), "1"))
    assert scratch.remove_dead(temp_root) == [dead]
    assert not dead.exists()


def test_a_folder_whose_owner_is_alive_is_kept(temp_root, sleeper):
    stat = proc_stat(sleeper.pid)
    assert stat is not None
    live = _left(temp_root, "live", _owner(sleeper.pid, str(stat.started)))
    assert scratch.remove_dead(temp_root) == []
    assert (live / "m0").is_dir()


def test_a_live_pid_with_another_start_time_is_a_recycled_pid_and_its_folder_is_removed(temp_root, sleeper):
    stat = proc_stat(sleeper.pid)
    assert stat is not None
    recycled = _left(temp_root, "recycled", _owner(sleeper.pid, str(stat.started + 1)))
    assert scratch.remove_dead(temp_root) == [recycled]
    assert not recycled.exists()


def test_a_folder_without_owner_record_is_kept_until_a_day_old(temp_root):
    fresh = _left(temp_root, "fresh", None)
    old = _left(temp_root, "old", None)
    two_days_ago = time.time() - 2 * scratch.UNRECORDED_MAX_AGE_S
    os.utime(old, (two_days_ago, two_days_ago))
    assert scratch.remove_dead(temp_root) == [old]
    assert fresh.is_dir() and not old.exists()


def test_an_entry_another_run_removed_first_is_no_error(temp_root, monkeypatch):
    dead = _left(temp_root, "dead", _owner(_dead_pid(), "1"))
    unlink = os.unlink

    def raced(path, *args, **kwargs):
        # Another run clearing the same folder removed this file a moment before us.
        unlink(path, *args, **kwargs)
        raise FileNotFoundError(2, "No such file or directory", path)

    monkeypatch.setattr(os, "unlink", raced)
    scratch.remove_dead(temp_root)
    assert not dead.exists()


def test_a_mutate_run_removes_what_dead_runs_left_and_keeps_its_own_folder_while_it_runs(temp_root, monkeypatch):
    dead = _left(temp_root, "dead", _owner(_dead_pid(), "1"))
    seen: list[Path] = []
    me = proc_stat(os.getpid())
    assert me is not None

    class NoWorker:
        """Stands in for the fork server (the expensive part); looks at the run's own folder."""

        def __init__(self, python: Path, preload: list[str], log: Path) -> None:
            folder = log.parent
            owner = Owner.parse((folder / scratch.OWNER_FILE).read_text())
            assert owner is not None and (owner.pid, owner.started) == (os.getpid(), str(me.started))
            assert scratch.remove_dead(temp_root) == []  # a concurrent run's cleanup keeps it
            seen.append(folder)

        def close(self) -> None:
            pass

    monkeypatch.setattr(runner, "Worker", NoWorker)
    assert run_all({}, [], python=Path(sys.executable), preload=[], workers=1, done=lambda *_: None) == {}
    assert not dead.exists()
    assert [folder.parent for folder in seen] == [temp_root]
    assert list(temp_root.iterdir()) == []  # its own folder is gone once it ends



def test_a_cleanup_removes_the_owner_record_last(temp_root, monkeypatch):
    """So a cleanup killed part way leaves a folder that still names its dead owner, and
    the next run removes the rest (without the record it would wait a day)."""
    dead = _left(temp_root, "dead", _owner(_dead_pid(), "1"))
    for n in range(8):  # entries on both sides of the record in the folder's listing order
        (dead / f"z{n}.log").write_text("log\n")
        (dead / f"a{n}.log").write_text("log\n")
    record = dead / scratch.OWNER_FILE
    real_unlink, real_rmdir = os.unlink, os.rmdir
    removed_without_record = []

    def watch(real):
        def call(path, *args, **kwargs):
            if os.path.basename(path) != scratch.OWNER_FILE and not record.exists() and Path(path) != dead:
                removed_without_record.append(os.path.basename(path))
            return real(path, *args, **kwargs)
        return call

    monkeypatch.setattr(os, "unlink", watch(real_unlink))
    monkeypatch.setattr(os, "rmdir", watch(real_rmdir))
    assert scratch.remove_dead(temp_root) == [dead]
    assert not dead.exists()
    assert removed_without_record == []
