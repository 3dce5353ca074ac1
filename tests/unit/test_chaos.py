"""Chaos: kill -9 forkbuild (and Ctrl-C it) at every step of its series transaction (the test hook
FORKBUILD_CHAOS_KILL_AT) and at spread moments (SIGKILL from outside), for apply,
export, import, build-wheel and rebase (start, --continue, --abort). Then:
series.toml + patches/ are as before or fully new (as any forkbuild command sees
them: it finishes a pending transaction first), re-running the command succeeds,
`export --check` is clean and `git fsck` of the cache is clean.

A rebase is one transaction one level up: its journal holds the old series until
--continue writes the new one or --abort puts the old one back, so for it the
check is that --continue ends fully new and --abort exactly as before.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixtures import SeriesFixture, commit_all, edit, make_series
from forkbuild.io.chaos import CHAOS_ENV, SIGNAL_ENV
from forkbuild.io.git import Git
from forkbuild.series.edit import quilt_series_text
from forkbuild.series.writer import STEPS, recover_series
from rebase_fixtures import LADDER_CHANGES, rebase_args, release

SERIES_STEPS = list(STEPS)
# The default run (CI) takes one kill per command and kind; `nox -s chaos` sets
# FORKBUILD_CHAOS_ALL=1 and runs every step and every timed point.
ALL = bool(os.environ.get("FORKBUILD_CHAOS_ALL"))
DEFAULT = {("apply", "apply:applied"), ("export", "series:applied-one"), ("export", 1.2),
           ("import", "series:committed"), ("build-wheel", "wheel:validated"),
           ("rebase-continue", "series:committed"), ("rebase-abort", "rebase:worktree")}


FULL_ONLY = pytest.mark.skipif(not ALL, reason="the full chaos matrix: nox -s chaos (FORKBUILD_CHAOS_ALL=1)")


def chosen(command: str, cases: list[tuple]) -> list:
    """pytest params for `cases` ((step or None, seconds or None)); outside DEFAULT only with FORKBUILD_CHAOS_ALL."""
    return [pytest.param(*case, marks=() if (command, case[0] or case[1]) in DEFAULT else FULL_ONLY)
            for case in cases]
TIMED = [0.6, 1.2, 2.0]  # seconds after start: import time, planning, writing (on a 2-core CI box)
QUILT_PATCH = """\
Description: a lower default limit
Author: Someone <someone@example.com>

--- a/python/pkg/util.py
+++ b/python/pkg/util.py
@@ -1,4 +1,4 @@
-\"\"\"Helpers.\"\"\"
+\"\"\"Helpers that limit.\"\"\"
 
 
 def limit(value, ceiling=100):
"""


def _default_signals() -> None:
    """The signals the test sends at their defaults in the child, as in a terminal's foreground job: a
    run under nohup (or in a script's background) hands them on ignored, and forkbuild keeps an ignored
    signal ignored."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def forkbuild(fx_root: Path, cache: Path, *args: str, kill_at: str | None = None,
              kill_after: float | None = None, interrupt: bool | str = False) -> int:
    """Run forkbuild; kill -9 it at step `kill_at` or after `kill_after` seconds (interrupt: True or
    "INT" a Ctrl-C, "TERM"/"HUP" a service stopped or a terminal closed;
    Ctrl-C instead, as a terminal's foreground job gets it). Returns its exit status (-9: killed)."""
    name = "INT" if interrupt is True else (interrupt or "KILL")
    env = {**os.environ, **({CHAOS_ENV: kill_at} if kill_at else {}), SIGNAL_ENV: name}
    command = [sys.executable, "-m", "forkbuild", "-C", str(fx_root), "--cache", str(cache), *args]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               preexec_fn=_default_signals)
    if kill_after is not None:
        try:
            process.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            process.send_signal(getattr(signal, f"SIG{name}"))
    _, stderr = process.communicate(timeout=300)
    forkbuild.last_stderr = stderr  # type: ignore[attr-defined]
    if interrupt:
        assert "Traceback" not in stderr, stderr
    return process.returncode


def series_files(root: Path) -> dict[str, bytes]:
    """series.toml and patches/ as every forkbuild command sees them (a pending transaction finished)."""
    recover_series(root)
    found = {"series.toml": (root / "series.toml").read_bytes()}
    found.update({f"patches/{path.name}": path.read_bytes() for path in sorted((root / "patches").iterdir())})
    return found


def assert_cache_fsck_clean(cache: Path) -> None:
    repo = cache / "upstream.git"
    if (repo / "HEAD").exists():
        result = subprocess.run(["git", "-C", str(repo), "fsck", "--no-dangling", "--no-progress"],
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr


def fixture(tmp_path: Path, *, source: str = "wheel") -> SeriesFixture:
    fx = make_series(tmp_path, source=source)
    (fx.patches_dir / "series").write_text(quilt_series_text(spec.file for spec in fx.specs))
    return fx


def run(fx: SeriesFixture, *args: str, **kill) -> int:
    return forkbuild(fx.root, fx.cache, *args, **kill)


def check_after(fx: SeriesFixture, before: dict, after: dict) -> None:
    assert run(fx, "export", "--check") == 0, forkbuild.last_stderr  # type: ignore[attr-defined]
    assert_cache_fsck_clean(fx.cache)
    assert not list((fx.root / ".forkbuild-work").glob("*series-transaction*"))


# -- apply, export, import: the same command re-run ----------------------------------

def _new_commit(fx: SeriesFixture) -> None:
    assert run(fx, "apply", "--all") == 0
    tree = Git(fx.root / ".forkbuild-work" / "series")
    edit(tree.path, "python/pkg/util.py", "UTIL_CONSTANT_0 = 0\n", "UTIL_CONSTANT_0 = 10\n")
    commit_all(tree, "util: a new constant\n\nFeature: beta\n")


def _quilt(fx: SeriesFixture) -> list[str]:
    directory = fx.root.parent / "quilt"
    directory.mkdir()
    (directory / "lower.patch").write_text(QUILT_PATCH)
    (directory / "series").write_text("lower.patch\n")
    return ["import", "--quilt", str(directory), "--feature", "beta"]


CASES = (
    [("apply", step, None) for step in ("apply:prepared", "apply:changing", "apply:applied")]
    + [("apply", None, seconds) for seconds in TIMED[:2]]
    + [("export", step, None) for step in SERIES_STEPS]
    + [("export", None, seconds) for seconds in TIMED]
    + [("import", step, None) for step in ("series:committed", "series:applied-one", "series:done")]
    + [("import", None, seconds) for seconds in TIMED[1:]]
)
# SIGTERM and SIGHUP end forkbuild as a Ctrl-C does (exit 128 + the signal); the default run takes one of each.
DEFAULT_SIGNALED = {("export", "series:applied-one", "TERM"), ("apply", "apply:changing", "HUP")}
SUFFIX = {False: "", True: "-ctrl-c", "TERM": "-sigterm", "HUP": "-sighup"}
PARAMS = [pytest.param(*case, interrupt, id=f"{case[0]}-{case[1] or f'{case[2]}s'}{SUFFIX[interrupt]}",
                       marks=() if (case[0], case[1] or case[2]) in DEFAULT and interrupt in (False, True)
                       or (*case[:2], interrupt) in DEFAULT_SIGNALED else FULL_ONLY)
          for case in CASES for interrupt in (False, True, "TERM", "HUP")]
# killed; interrupted: 128 + the signal (no traceback: forkbuild() checks)
STOPPED = {False: -9, True: 130, "TERM": 128 + signal.SIGTERM, "HUP": 128 + signal.SIGHUP}
SIGNUM = {True: signal.SIGINT, "TERM": signal.SIGTERM, "HUP": signal.SIGHUP}


@pytest.mark.parametrize(("command", "step", "seconds", "interrupt"), PARAMS)
def test_kill_then_rerun(tmp_path: Path, command: str, step: str | None, seconds: float | None,
                         interrupt: bool | str) -> None:
    fx = fixture(tmp_path)
    args = {"apply": lambda: ["apply", "--all"], "export": lambda: (_new_commit(fx), ["export"])[1],
            "import": lambda: _quilt(fx)}[command]()
    before = series_files(fx.root)
    code = run(fx, *args, kill_at=step, kill_after=seconds, interrupt=interrupt)
    stopped = STOPPED[interrupt]
    # A timed Ctrl-C may also land after the command finished, while Python shuts down and its
    # handler is gone: killed by SIGINT, which a shell reports as 130 too.
    finished = (0, -SIGNUM[interrupt]) if interrupt else (0,)
    assert code in ((stopped,) if step else (stopped, *finished)), forkbuild.last_stderr  # type: ignore[attr-defined]
    middle = series_files(fx.root)
    unfinished = (fx.root / ".forkbuild-work" / "import-quilt.json").exists()  # written, its tree not checked out
    rerun = run(fx, *args)
    after = series_files(fx.root)
    if command == "import" and middle != before and not unfinished:
        # The import had finished before the signal: importing it again is refused, never doubled.
        assert rerun == 2 and "exists already" in forkbuild.last_stderr  # type: ignore[attr-defined]
    else:  # nothing written, or written and its series tree not checked out: the re-run finishes it
        assert rerun == 0, forkbuild.last_stderr  # type: ignore[attr-defined]
    assert middle in (before, after)
    if command != "apply":
        assert after != before  # the command did its job
    check_after(fx, before, after)


# -- build-wheel -------------------------------------------------------------------------

@pytest.mark.parametrize(("step", "seconds"), chosen("build-wheel", [("wheel:validated", None), (None, 1.5)]))
def test_build_wheel_killed_leaves_no_partial_wheel(tmp_path: Path, step: str | None, seconds: float | None) -> None:
    from forkbuild.wheel.validate import validate_wheel
    from wheelkit import wheel_series

    series_dir, cache, _ = wheel_series(tmp_path)
    out = tmp_path / "dist"
    args = ("build-wheel", "--variant", "full", "--out", str(out))
    assert forkbuild(series_dir, cache, *args, kill_at=step, kill_after=seconds) in (-9, 0)
    for wheel in out.glob("*.whl"):
        validate_wheel(wheel)  # complete, or absent: never half
    assert forkbuild(series_dir, cache, *args) == 0
    assert len(list(out.glob("*.whl"))) == 1
    assert [path.name for path in out.iterdir() if path.name.startswith(".")] == []
    assert_cache_fsck_clean(cache)


# -- rebase: start, --continue, --abort -------------------------------------------------

def _rebase_fixture(tmp_path: Path) -> tuple[SeriesFixture, list[str], dict]:
    fx = fixture(tmp_path, source="git")
    before = series_files(fx.root)
    return fx, rebase_args(release(fx, LADDER_CHANGES)), before


def _assert_rebased(fx: SeriesFixture, before: dict) -> None:
    after = series_files(fx.root)
    assert after != before and b'version = "2.0"' in after["series.toml"]
    assert not (fx.root / ".forkbuild-work" / "rebase-journal").exists()
    check_after(fx, before, after)


@pytest.mark.parametrize(("step", "seconds", "interrupt"), chosen("rebase-continue", [
    ("rebase:worktree", None, False), ("series:committed", None, False), ("series:applied-one", None, False),
    (None, 2.0, False), ("series:committed", None, True), ("rebase:worktree", None, True), (None, 2.0, True),
    ("series:committed", None, "TERM"), ("rebase:worktree", None, "HUP")]))
def test_rebase_killed_then_continue_ends_fully_new(tmp_path: Path, step: str | None, seconds: float | None,
                                                    interrupt: bool | str) -> None:
    fx, args, before = _rebase_fixture(tmp_path)
    code = run(fx, *args, kill_at=step, kill_after=seconds, interrupt=interrupt)
    assert code in (STOPPED[interrupt], 0), forkbuild.last_stderr  # type: ignore[attr-defined]
    if code != 0 and (fx.root / ".forkbuild-work" / "rebase-journal").exists():
        # --continue itself killed once more, at the series transaction, then run to the end. A
        # timed kill that landed after the transaction leaves only the finish to do: that
        # --continue reaches no transaction, ends the rebase (0), and nothing is left to continue.
        resumed = run(fx, "rebase", "--continue", kill_at="series:committed")
        assert resumed in (-9, 0), forkbuild.last_stderr  # type: ignore[attr-defined]
        if resumed == -9:
            assert run(fx, "rebase", "--continue") == 0, forkbuild.last_stderr  # type: ignore[attr-defined]
    elif code != 0:
        assert series_files(fx.root) == before  # stopped before its journal existed: nothing changed
        assert run(fx, *args) == 0, forkbuild.last_stderr  # type: ignore[attr-defined]
    _assert_rebased(fx, before)


@pytest.mark.parametrize("step", chosen("rebase-abort", [("rebase:worktree",), ("series:applied-one",)]))
def test_rebase_killed_then_abort_killed_then_abort_is_as_before(tmp_path: Path, step: str) -> None:
    fx, args, before = _rebase_fixture(tmp_path)
    assert run(fx, *args, kill_at=step) == -9
    assert run(fx, "rebase", "--abort", kill_at="rebase:abort:tree") == -9
    assert run(fx, "rebase", "--abort") == 0, forkbuild.last_stderr  # type: ignore[attr-defined]
    assert series_files(fx.root) == before
    assert Git(fx.cache / "upstream.git").worktrees()[1:] == []
    assert_cache_fsck_clean(fx.cache)
    assert run(fx, "export", "--check") == 0
    time.sleep(0)  # (no timed kill here: abort's steps are all journaled)
