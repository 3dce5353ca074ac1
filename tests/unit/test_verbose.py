"""-v shows git's own output: Git.run logs every command and its output to
"forkbuild.io.git" at DEBUG, and cli.main sends forkbuild's logs to stderr (DEBUG with -v)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fixtures import make_upstream_repo
from forkbuild.console import Reporter, configure_logging
from forkbuild.io import git as git_module
from forkbuild.io.git import GitFailed


@pytest.fixture(autouse=True)
def restore_forkbuild_logger():
    logger = logging.getLogger("forkbuild")
    handlers, level = list(logger.handlers), logger.level
    yield
    logger.handlers[:] = handlers
    logger.setLevel(level)


def test_every_git_command_and_its_output_is_logged_at_debug(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    repo = make_upstream_repo(tmp_path / "repo")[0]
    caplog.set_level(logging.DEBUG, logger="forkbuild.io.git")
    repo.run("log", "-1", "--format=%s")
    assert [record.name for record in caplog.records] == ["forkbuild.io.git", "forkbuild.io.git"]
    assert caplog.records[0].getMessage() == f"$ git -C {repo.path} log -1 --format=%s"
    assert caplog.records[1].getMessage() == "exit 0\npkg 1.0"
    caplog.clear()
    with pytest.raises(GitFailed):
        repo.run("rev-parse", "--verify", "no-such-ref")
    assert caplog.records[-1].getMessage().startswith("exit 128\nfatal: Needed a single revision")


def test_long_output_is_clipped(tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_upstream_repo(tmp_path / "repo")[0]
    monkeypatch.setattr(git_module, "LOGGED_LINES", 3)
    caplog.set_level(logging.DEBUG, logger="forkbuild.io.git")
    repo.run("show", "HEAD:python/pkg/core.py")
    assert caplog.records[-1].getMessage().splitlines()[-1].endswith("more lines)")
    assert len(caplog.records[-1].getMessage().splitlines()) == 1 + 3 + 1


def test_cli_verbose_shows_git_apply_output_on_stderr_and_quiet_does_not(series_fx, capsys: pytest.CaptureFixture) -> None:
    assert series_fx.cli("-v", "apply", "--all") == 0
    err = capsys.readouterr().err
    assert "$ git -C" in err and " apply --cached -v" in err
    assert "Applied patch python/pkg/core.py cleanly." in err  # git apply's own output
    assert logging.getLogger("forkbuild").level == logging.DEBUG
    assert len(logging.getLogger("forkbuild").handlers) == 1

    assert series_fx.cli("apply", "--all") == 0
    err = capsys.readouterr().err
    assert "$ git" not in err and "Applied patch" not in err
    assert logging.getLogger("forkbuild").level == logging.WARNING
    assert not logging.getLogger("forkbuild").handlers  # the -v handler removed, not piled up


def test_verbose_output_with_a_terminal_escape_is_shown_not_sent(capsys: pytest.CaptureFixture) -> None:
    # git's output (a commit subject, a file name) reaches -v's log lines: written out, not obeyed.
    configure_logging(Reporter(verbose=True))
    logging.getLogger("forkbuild.io.git").debug("exit 0\ntitle \x1b]0;owned\x07 clear \x1b[2J")
    err = capsys.readouterr().err
    assert "title \\x1b]0;owned clear \\x1b[2J" in err and "\x1b]" not in err and "\x1b[2J" not in err
