"""childgroup: the group forkbuild's git children run in, and what recovery may kill of it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from forkbuild.io.childgroup import GROUP, members, stop_orphans


def _start_time(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


def _named_git(tmp_path: Path) -> Path:
    """A long-running process whose command name is `git`, as git's own children are."""
    script = tmp_path / "git"
    script.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    script.chmod(0o755)
    return script


def _gone(process: subprocess.Popen, seconds: float = 5.0) -> bool:
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return False
    return True


def test_git_children_join_one_group_that_is_not_forkbuilds(tmp_path: Path) -> None:
    group = GROUP.id()
    assert group > 0 and group != os.getpgrp() and GROUP.id() == group  # made once
    child = subprocess.Popen([str(_named_git(tmp_path))], process_group=group)
    try:
        assert os.getpgid(child.pid) == group
        assert set(members(group)) >= {group, child.pid}  # the keeper and the child
    finally:
        child.kill()
        child.wait()


def test_what_a_dead_owner_left_in_its_group_is_killed(tmp_path: Path) -> None:
    orphan = subprocess.Popen([str(_named_git(tmp_path))], process_group=0)
    owner_started = "0"  # an owner that started before it (it did: it made the group)
    stopped = stop_orphans(orphan.pid, started=owner_started)
    assert stopped == [f"git (pid {orphan.pid})"] and _gone(orphan)


def test_a_group_that_holds_anything_but_git_is_left_alone(tmp_path: Path) -> None:
    """A reused group id (another program's group now) must never be killed."""
    stranger = subprocess.Popen(["sleep", "60"], process_group=0)
    try:
        assert stop_orphans(stranger.pid, started="0") == []
        assert not _gone(stranger, seconds=0.3)
    finally:
        stranger.kill()
        stranger.wait()


def test_a_git_started_before_the_owner_is_not_its_orphan(tmp_path: Path) -> None:
    older = subprocess.Popen([str(_named_git(tmp_path))], process_group=0)
    try:
        time.sleep(0.05)
        later_owner = str(int(_start_time(older.pid)) + 1)  # the owner started after it
        assert stop_orphans(older.pid, started=later_owner) == []
        assert not _gone(older, seconds=0.3)
    finally:
        older.kill()
        older.wait()


def test_no_group_recorded_kills_nothing() -> None:
    assert stop_orphans(0, started="0") == []
