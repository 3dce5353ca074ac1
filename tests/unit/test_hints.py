"""Every hint forkbuild prints on the integrity paths (kills, pending writes, a damaged
cache) is followed here, literally, and nothing of the user's is lost afterwards.

(Also followed elsewhere: test_crash_recovery (rebuild a half-built tree, a busy tree),
test_series_writer (keep your version), test_bad_disks (free space, run again).)"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import SeriesFixture, commit_all, edit
from forkbuild.io.chaos import CHAOS_ENV
from forkbuild.io.git import Git
from forkbuild.series.edit import quilt_series_text
from forkbuild.series.writer import SeriesChange, write_series
from rebase_fixtures import fingerprint


def forkbuild(fx: SeriesFixture, *args: str, kill_at: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **({CHAOS_ENV: kill_at} if kill_at else {})}
    return subprocess.run([sys.executable, "-m", "forkbuild", "-C", str(fx.root), "--cache", str(fx.cache), *args],
                          env=env, capture_output=True, text=True, timeout=300)


def hint_of(result: subprocess.CompletedProcess) -> str:
    text = " ".join((result.stdout + result.stderr).split())
    assert "hint: " in text, text
    return text.split("hint: ", 1)[1]


def backquoted(hint: str) -> list[str]:
    """The commands a hint names between backquotes."""
    return hint.split("`")[1::2]


def follow(fx: SeriesFixture, command: str) -> subprocess.CompletedProcess:
    words = shlex.split(command)
    assert words[0] == "forkbuild", command
    return forkbuild(fx, *words[1:])


@pytest.fixture
def series_fx(series_fx: SeriesFixture) -> SeriesFixture:
    (series_fx.patches_dir / "series").write_text(quilt_series_text(spec.file for spec in series_fx.specs))
    return series_fx


def test_export_after_an_apply_killed_mid_am_follows_its_hint_and_keeps_a_new_commit(series_fx: SeriesFixture) -> None:
    fx = series_fx
    assert forkbuild(fx, "apply", "--all").returncode == 0
    tree = Git(fx.root / ".forkbuild-work" / "series")
    edit(tree.path, "python/pkg/util.py", "UTIL_CONSTANT_0 = 0\n", "UTIL_CONSTANT_0 = 10\n")
    commit_all(tree, "util: a new constant\n\nFeature: beta\n")
    assert forkbuild(fx, "export").returncode == 0  # the user's commit is a patch now
    saved = fingerprint(fx)
    assert len(saved) > 0 and any("new-constant" in name for name in saved)
    # Killed after git am made the commits, before the tree's state was written.
    assert forkbuild(fx, "apply", "--all", kill_at="apply:applied").returncode == -9
    refused = forkbuild(fx, "export")
    assert refused.returncode == 5
    (command,) = backquoted(hint_of(refused))
    assert follow(fx, command).returncode == 0
    assert forkbuild(fx, "export").returncode == 0
    assert forkbuild(fx, "export", "--check").returncode == 0
    assert fingerprint(fx) == saved


def test_a_pending_write_over_an_edit_take_forkbuilds_version(series_fx: SeriesFixture) -> None:
    """The other branch of the pending-journal hint: undo your edit and run any forkbuild command."""
    fx = series_fx
    old = fx.series_toml.read_text()
    code = ("from pathlib import Path; from forkbuild.series.writer import SeriesChange, write_series;"
            "write_series(Path(%r), SeriesChange(series_toml=%r))") % (str(fx.root), old + "# forkbuild's\n")
    assert subprocess.run([sys.executable, "-c", code], env={**os.environ, CHAOS_ENV: "series:committed"}).returncode == -9
    fx.series_toml.write_text(old + "# mine\n")
    refused = forkbuild(fx, "status")
    assert refused.returncode == 1
    assert "undo your edit and run any forkbuild command" in hint_of(refused)
    fx.series_toml.write_text(old)  # undo the edit
    assert forkbuild(fx, "status").returncode == 0
    assert fx.series_toml.read_text() == old + "# forkbuild's\n"
    write_series(fx.root, SeriesChange(series_toml=old))  # and the next write works as usual


def test_a_damaged_cached_wheel_offline_then_its_hint(series_fx: SeriesFixture, tmp_path: Path) -> None:
    fx = series_fx
    assert forkbuild(fx, "fetch", "--wheels").returncode == 0
    cached = next((fx.cache / "wheels").glob("*.whl"))
    good = cached.read_bytes()
    cached.write_bytes(good + b"tampered")
    # Offline: the pinned url is gone.
    moved = fx.wheel.with_suffix(".away")
    fx.wheel.rename(moved)
    refused = forkbuild(fx, "fetch", "--wheels")
    assert refused.returncode == 3
    hint = hint_of(refused)
    assert "fetch --verify" in hint
    assert cached.read_bytes() == good + b"tampered"  # never used, never deleted
    moved.rename(fx.wheel)  # back online
    assert follow(fx, "forkbuild fetch --verify").returncode == 0
    assert cached.read_bytes() == good


def test_a_hint_quotes_a_path_with_a_space_so_that_it_pastes_as_one_word(tmp_path: Path) -> None:
    from fixtures import make_series

    fx = make_series(tmp_path / "my projects")
    tree = fx.root / "my trees" / "series tree"
    tree.mkdir(parents=True)
    refused = forkbuild(fx, "export", "--dir", str(tree))
    assert refused.returncode != 0
    [command] = backquoted(hint_of(refused))
    assert shlex.split(command) == ["forkbuild", "apply", "--all", "--dir", str(tree)]
    assert follow(fx, command).returncode == 0
    assert forkbuild(fx, "export", "--dir", str(tree)).returncode == 0


def test_apply_s_discard_hint_quotes_a_tree_with_a_space(tmp_path: Path) -> None:
    """apply's hints put the tree's path into git commands: pasted, each is one word."""
    from fixtures import edit, make_series

    fx = make_series(tmp_path / "my projects")
    tree = fx.root / "my trees" / "series tree"
    assert forkbuild(fx, "apply", "--all", "--dir", str(tree)).returncode == 0
    edit(tree, "python/pkg/core.py", "value + 1", "value + 5")
    refused = forkbuild(fx, "apply", "--all", "--dir", str(tree))
    assert refused.returncode != 0
    discard = hint_of(refused).split("discard them: ", 1)[1]
    subprocess.run(discard, shell=True, check=True, capture_output=True)  # as pasted into a shell
    assert "value + 5" not in (tree / "python/pkg/core.py").read_text()
    assert forkbuild(fx, "apply", "--all", "--dir", str(tree)).returncode == 0


def test_export_of_a_directory_that_is_no_tree_hints_only_what_works(series_fx: SeriesFixture, tmp_path: Path) -> None:
    """A missing --dir: the hint makes it, and export then works (an empty one: the same, in
    test_a_hint_quotes_a_path_with_a_space_...). A directory holding files that is not a tree: the
    hint names no `apply --dir` of it (apply leaves a directory it did not make alone)."""
    fx = series_fx
    missing = tmp_path / "new tree"
    (command,) = backquoted(hint_of(forkbuild(fx, "export", "--dir", str(missing))))
    assert follow(fx, command).returncode == 0
    assert forkbuild(fx, "export", "--dir", str(missing)).returncode == 0
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine\n")
    refused = forkbuild(fx, "export", "--dir", str(other))
    assert refused.returncode == 1 and not any(str(other) in command for command in backquoted(hint_of(refused)))


def test_export_s_keep_hint_quotes_a_patch_name_that_is_shell_text(tmp_path: Path) -> None:
    """A patch's file name comes from series.toml (a pull request's): in a hint it is one word, never code."""
    from fixtures import make_series

    fx = make_series(tmp_path / "project")
    name = "beta $(touch pwned).patch"
    (fx.patches_dir / "beta-limit.patch").rename(fx.patches_dir / name)
    fx.series_toml.write_text(fx.series_toml.read_text().replace('"beta-limit.patch"', f'"{name}"'))
    tree = fx.root / "tree"
    assert forkbuild(fx, "apply", "--all", "--dir", str(tree)).returncode == 0
    Git(tree).run("reset", "--quiet", "--hard", "HEAD~1")  # the last patch's commit gone from the tree
    refused = forkbuild(fx, "export", "--dir", str(tree))
    keep = backquoted(hint_of(refused))[0]
    assert shlex.split(keep) == ["forkbuild", "export", "--keep", name]
    result = subprocess.run(keep.replace("forkbuild", f"{shlex.quote(sys.executable)} -m forkbuild -C "
                                         f"{shlex.quote(str(fx.root))} --cache {shlex.quote(str(fx.cache))}", 1)
                            + f" --dir {shlex.quote(str(tree))}", shell=True, cwd=tmp_path, capture_output=True)
    assert result.returncode == 0 and not (tmp_path / "pwned").exists()
