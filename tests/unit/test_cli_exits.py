"""How the `forkbuild` process ends when its output cannot go anywhere: a reader that went
away is 141, silently (the SIGPIPE convention); a closed or full stdout is a clear error about
stdout, never a traceback nor a disk error about the series' files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from fixtures import SeriesFixture


def shell(fx: SeriesFixture, line: str) -> subprocess.CompletedProcess[str]:
    """`line` in bash, `FB` standing for this fixture's forkbuild; exits with forkbuild's status."""
    forkbuild = f"{sys.executable} -m forkbuild -C {fx.root} --cache {fx.cache}"
    return subprocess.run(["bash", "-c", f'FB="{forkbuild}"; {line}; exit ${{PIPESTATUS[0]}}'],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("line", ["$FB status | true", "$FB status --wide | head -n 0",
                                  "$FB status --json | head -c 0", "$FB --help | true", "$FB status --help | true"])
def test_a_reader_that_goes_away_ends_forkbuild_with_141_silently(series_fx: SeriesFixture, line: str) -> None:
    done = shell(series_fx, line)
    assert (done.returncode, done.stderr) == (141, ""), done.stderr


@pytest.mark.parametrize("line", ["$FB status >&-", "$FB status --json >/dev/full", "$FB status --wide >/dev/full",
                                  "$FB --help >/dev/full", "$FB launch --help >&-"])
def test_a_closed_or_full_stdout_is_an_error_about_stdout(series_fx: SeriesFixture, line: str) -> None:
    done = shell(series_fx, line)
    assert done.returncode == 1, done.stderr
    assert "error: cannot write the output to stdout" in done.stderr
    assert "Traceback" not in done.stderr and "transaction" not in done.stderr


@pytest.mark.parametrize("command", ["check", "matrix"])
def test_a_command_that_writes_to_stderr_runs_with_stdout_closed(series_fx: SeriesFixture, command: str) -> None:
    done = shell(series_fx, f"$FB {command} >&-")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


def test_ctrl_c_while_forkbuild_starts_is_130_without_a_traceback(series_fx: SeriesFixture) -> None:
    """The Ctrl-C comes while cli.py is imported (the chaos point "start"): before main() is there."""
    from forkbuild.io.chaos import CHAOS_ENV, SIGNAL_ENV

    # SIGINT at its default, as in a terminal's foreground job (a job started in the background
    # of a script inherits it ignored, and then Python installs no KeyboardInterrupt for it).
    done = subprocess.run([sys.executable, "-m", "forkbuild", "-C", str(series_fx.root), "status"],
                          env={**os.environ, CHAOS_ENV: "start", SIGNAL_ENV: "INT"}, capture_output=True, text=True,
                          timeout=120, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "")
