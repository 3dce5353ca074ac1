"""kill -9 of forkbuild's own process: re-running the command (or the one its
message names) recovers, with no manual step, and never clears a live process's work."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixtures import SeriesFixture, make_series
from forkbuild.io.chaos import CHAOS_ENV
from forkbuild.io.git import Git
from forkbuild.series.edit import quilt_series_text
from forkbuild.worktree.guard import Owner, clear_stale_index_lock, tree_guard
from rebase_fixtures import LADDER_CHANGES, fingerprint, rebase_args, release, run_killed


def forkbuild(fx: SeriesFixture, *args: str, kill_at: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **({CHAOS_ENV: kill_at} if kill_at else {})}
    return subprocess.run([sys.executable, "-m", "forkbuild", "-C", str(fx.root), "--cache", str(fx.cache), *args],
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def series_fx(series_fx: SeriesFixture) -> SeriesFixture:
    """The fixture series with its quilt `patches/series`, as export writes it (so `export --check` is clean)."""
    (series_fx.patches_dir / "series").write_text(quilt_series_text(spec.file for spec in series_fx.specs))
    return series_fx


def series_tree(fx: SeriesFixture) -> Path:
    return fx.root / ".forkbuild-work" / "series"


def admin_dir(fx: SeriesFixture, tree: Path) -> Path:
    for admin in (fx.cache / "upstream.git" / "worktrees").iterdir():
        if Path((admin / "gitdir").read_text().strip()).parent == tree:
            return admin
    raise AssertionError(f"{tree} is not registered")


def leave_killed_add_residue(fx: SeriesFixture, tree: Path) -> None:
    """What a `git worktree add` killed mid-checkout leaves: a locked registration and an index.lock."""
    admin = admin_dir(fx, tree)
    (admin / "locked").write_text("initializing")
    (admin / "index.lock").write_bytes(b"")


def cache_worktrees(fx: SeriesFixture) -> list[Path]:
    return Git(fx.cache / "upstream.git").worktrees()[1:]


@pytest.mark.parametrize("step", ["apply:prepared", "apply:applied"])
def test_a_killed_first_apply_is_rebuilt_by_the_rerun(series_fx: SeriesFixture, step: str) -> None:
    assert forkbuild(series_fx, "apply", "--all", kill_at=step).returncode == -9
    leave_killed_add_residue(series_fx, series_tree(series_fx))
    again = forkbuild(series_fx, "apply", "--all")
    assert again.returncode == 0, again.stderr + again.stdout
    assert "killed forkbuild apply" in again.stderr + again.stdout
    assert len(Git(series_tree(series_fx)).commits("HEAD~3", "HEAD")) == 3
    assert forkbuild(series_fx, "export", "--check").returncode == 0


def test_a_reapply_killed_before_it_touched_the_tree_leaves_it_to_export(series_fx: SeriesFixture) -> None:
    """Until the engine first changes the work tree (after its `git status` found nothing
    unsaved), the tree is the user's as it was: a kill there leaves nothing to refuse."""
    assert series_fx.cli("apply", "--all") == 0
    before = fingerprint(series_fx)
    assert forkbuild(series_fx, "apply", "--all", kill_at="apply:prepared").returncode == -9
    exported = forkbuild(series_fx, "export")
    assert exported.returncode == 0, exported.stderr + exported.stdout
    assert fingerprint(series_fx) == before


def test_a_reapply_refuses_unsaved_work_before_it_touches_the_tree(series_fx: SeriesFixture) -> None:
    """The refusal comes before any change: the uncommitted edit is still there, and the
    tree is not marked as changing (a re-run must not clear it)."""
    assert series_fx.cli("apply", "--all") == 0
    tree = series_tree(series_fx)
    edited = tree / "python" / "pkg" / "core.py"
    edited.write_text(edited.read_text() + "# mine\n")
    refused = forkbuild(series_fx, "apply", "--all")
    assert refused.returncode == 5, refused.stderr + refused.stdout  # DirtyTreeError
    assert "has uncommitted changes" in refused.stderr + refused.stdout
    assert edited.read_text().endswith("# mine\n")
    again = forkbuild(series_fx, "apply", "--all")
    assert again.returncode == 5 and "removed what" not in again.stderr + again.stdout
    assert edited.read_text().endswith("# mine\n")


def test_a_killed_reapply_then_export_refuses_and_its_hint_recovers_everything(series_fx: SeriesFixture) -> None:
    assert series_fx.cli("apply", "--all") == 0
    before = fingerprint(series_fx)
    assert forkbuild(series_fx, "apply", "--all", kill_at="apply:changing").returncode == -9
    # Killed as it started to change the tree: exporting that could delete patches.
    refused = forkbuild(series_fx, "export")
    assert refused.returncode == 5, refused.stderr + refused.stdout
    assert "was killed while it was building this tree" in refused.stderr + refused.stdout
    assert fingerprint(series_fx) == before
    # It keeps refusing until the tree is rebuilt (the refusal does not forget the kill).
    assert forkbuild(series_fx, "export").returncode == 5
    # The hint, followed.
    assert forkbuild(series_fx, "apply", "--all", "--dir", str(series_tree(series_fx))).returncode == 0
    exported = forkbuild(series_fx, "export")
    assert exported.returncode == 0, exported.stderr + exported.stdout
    assert fingerprint(series_fx) == before


def test_a_second_run_on_the_same_tree_refuses_cleanly(series_fx: SeriesFixture) -> None:
    assert series_fx.cli("apply", "--all") == 0
    head = Git(series_tree(series_fx)).head()
    with tree_guard(series_tree(series_fx), "apply"):  # a live forkbuild (this process) works there
        busy = forkbuild(series_fx, "apply", "--all")
        assert busy.returncode == 10
        assert f"forkbuild apply (pid {os.getpid()}" in busy.stderr + busy.stdout
        assert forkbuild(series_fx, "export").returncode == 10
    assert Git(series_tree(series_fx)).head() == head
    assert forkbuild(series_fx, "apply", "--all").returncode == 0


def test_killed_scratch_trees_are_cleared_by_the_next_run(series_fx: SeriesFixture) -> None:
    killed = forkbuild(series_fx, "check", kill_at="apply:applied")
    assert killed.returncode == -9
    left = cache_worktrees(series_fx)
    assert len(left) == 1 and left[0].exists()
    leave_killed_add_residue(series_fx, left[0])
    assert forkbuild(series_fx, "check").returncode == 0
    assert cache_worktrees(series_fx) == []
    assert not left[0].parent.exists()


def test_a_live_owners_scratch_tree_is_left_alone(series_fx: SeriesFixture) -> None:
    from forkbuild.upstream.cache import UpstreamCache
    from forkbuild.worktree.guard import clear_dead_scratch_trees, temporary_worktree

    cache = UpstreamCache(series_fx.cache)
    base = cache.ensure(series_fx.load().upstream)
    with temporary_worktree(cache, purpose="test") as dest:
        cache.git().add_worktree(dest, base)
        assert clear_dead_scratch_trees(cache.git()) == 0  # its owner (this process) is alive
        assert dest.is_dir()
    assert not dest.exists()


def test_an_index_lock_someone_holds_open_is_never_removed(tmp_path: Path) -> None:
    repo = Git.init(tmp_path / "repo")
    lock = repo.git_dir / "index.lock"
    with lock.open("w"):
        assert clear_stale_index_lock(repo.path) is False
        assert lock.exists()
    assert clear_stale_index_lock(repo.path) is True
    assert not lock.exists()


def test_a_recycled_pid_is_not_the_owner() -> None:
    me = Owner.me("apply")
    assert me.alive()
    assert not Owner(pid=me.pid, host=me.host, started="1", command="apply").alive()
    assert Owner(pid=me.pid, host="another-host", started="1", command="apply").alive()


@pytest.mark.parametrize("then", ["--continue", "--abort"])
def test_a_rebase_killed_while_adding_its_tree_continues_and_aborts(tmp_path: Path, then: str) -> None:
    fx = make_series(tmp_path, source="git")
    target = release(fx, LADDER_CHANGES)
    before = fingerprint(fx)
    assert run_killed(fx, rebase_args(target), step="worktree").returncode == -9
    leave_killed_add_residue(fx, fx.root / ".forkbuild-work" / "rebase")
    result = forkbuild(fx, "rebase", then)
    assert result.returncode == 0, result.stderr + result.stdout
    if then == "--abort":
        assert fingerprint(fx) == before
    else:
        assert "2.0" in fx.series_toml.read_text()
        assert forkbuild(fx, "check").returncode == 0
    assert cache_worktrees(fx) == []


# -- git children that outlive forkbuild -------------------------------------------------

SLOW_GIT = '''#!{python}
"""git, slow on one command: on the first `reset --hard` (a new tree's checkout) a child of
it goes on writing files into the tree for a while, as a big checkout's workers do, then git runs."""
import os, signal, sys, time
args = sys.argv[1:]
if "reset" in args and "--hard" in args and not os.path.exists({mark!r}):
    writer = os.fork()  # the writing is git's own child, as checkout workers are
    if writer == 0:
        # The first write, then the mark, from the writer itself: a Ctrl-C sent on seeing the
        # mark reaches both (one that came before Python's after-fork reset in the child would
        # be cleared, and it would write on), and finds the directory the test lists.
        late = os.path.join({tree!r}, "written-after-forkbuild-ended")
        os.makedirs(late, exist_ok=True)
        open({mark!r}, "w").close()
        end = time.monotonic() + {seconds!r}
        while time.monotonic() < end:
            try:
                os.makedirs(late, exist_ok=True)
                open(os.path.join(late, str(time.monotonic_ns())), "w").close()
            except OSError:
                pass
            time.sleep(0.005)
        os._exit(0)
    while not os.path.exists({mark!r}):
        time.sleep(0.001)
    if {kill_parent!r}:
        os.kill(os.getppid(), signal.SIGKILL)  # forkbuild is killed while its git works on
    os.waitpid(writer, 0)
os.execv({git!r}, ["git", *args])
'''


def slow_git_env(tmp_path: Path, tree: Path, *, kill_parent: bool, seconds: float) -> tuple[dict[str, str], Path]:
    """PATH with a `git` that writes into `tree` for `seconds` (after killing forkbuild, when
    asked) on the first checkout."""
    shim_dir = tmp_path / "slow-git"
    shim_dir.mkdir()
    mark = tmp_path / "slow-git-ran"
    shim = shim_dir / "git"
    shim.write_text(SLOW_GIT.format(python=sys.executable, mark=str(mark), kill_parent=kill_parent, seconds=seconds,
                                    tree=str(tree), git=shutil.which("git")))
    shim.chmod(0o755)
    return {**os.environ, "PATH": f"{shim_dir}{os.pathsep}{os.environ['PATH']}"}, mark


def test_a_kill_during_a_new_trees_checkout_leaves_no_git_writing_into_the_rerun(series_fx: SeriesFixture,
                                                                                   tmp_path: Path) -> None:
    """The killed run's `git reset --hard` is still working when the re-run starts: the re-run
    stops it before clearing the tree, so nothing writes into the tree it rebuilds."""
    tree = series_tree(series_fx)
    env, mark = slow_git_env(tmp_path, tree, kill_parent=True, seconds=1.5)
    command = [sys.executable, "-m", "forkbuild", "-C", str(series_fx.root), "--cache", str(series_fx.cache),
               "apply", "--all"]
    killed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9 and mark.exists()
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr + again.stdout
    assert "killed forkbuild apply" in again.stderr + again.stdout
    time.sleep(2)  # past the time the killed run's git would have gone on writing
    assert not (tree / "written-after-forkbuild-ended").exists()
    assert Git(tree).status_porcelain() == ""
    assert forkbuild(series_fx, "export", "--check").returncode == 0


def test_ctrl_c_reaches_the_git_forkbuild_is_waiting_for(series_fx: SeriesFixture, tmp_path: Path) -> None:
    """git runs outside the terminal's process group: forkbuild passes a Ctrl-C on to it."""
    env, mark = slow_git_env(tmp_path, series_tree(series_fx), kill_parent=False, seconds=3)
    # As a terminal's foreground job: SIGINT at its default (a job started in the background
    # of a script inherits it ignored, and then neither forkbuild nor its git may take it).
    process = subprocess.Popen([sys.executable, "-m", "forkbuild", "-C", str(series_fx.root), "--cache",
                                str(series_fx.cache), "apply", "--all"], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not mark.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert mark.exists()
    process.send_signal(signal.SIGINT)  # what the terminal does: forkbuild's group, not git's
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    late = series_tree(series_fx) / "written-after-forkbuild-ended"
    written = sorted(late.iterdir())
    time.sleep(3.5)  # past the time an uninterrupted git would have gone on writing
    assert sorted(late.iterdir()) == written
    # The tree it was building is marked as such: the re-run rebuilds it.
    again = forkbuild(series_fx, "apply", "--all")
    assert again.returncode == 0, again.stderr + again.stdout
    assert "removed what an interrupted or killed forkbuild apply left half-built there" in again.stderr + again.stdout
    assert Git(series_tree(series_fx)).status_porcelain() == ""
