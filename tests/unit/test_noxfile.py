"""noxfile.py's machinery (.ci/nox_support.py): uv gets the sources and constraints pip is configured with, so the test
venv takes the same (local) wheels pip would, never a download pip would not make; and
`beside` runs image-tests beside test-patch (the `variants` session), as one session."""

from __future__ import annotations

import functools
import importlib.util
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SUPPORT = Path(__file__).resolve().parents[2] / ".ci" / "nox_support.py"

PIP_CONFIG = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.find-links='/opt/wheels'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels'
install.index-url='https://mirror.example/simple'
"""


@functools.cache
def _noxfile():
    spec = importlib.util.spec_from_file_location("nox_support_under_test", SUPPORT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _listing(text: str, returncode: int = 0):
    def run(command, **kwargs):
        assert command[1:] == ["-m", "pip", "config", "list"]
        return subprocess.CompletedProcess(command, returncode, stdout=text, stderr="")
    return run


def test_pips_sources_and_constraints_become_uvs_options_once_each(monkeypatch):
    noxfile = _noxfile()
    monkeypatch.setattr(noxfile.subprocess, "run", _listing(PIP_CONFIG))
    assert noxfile._pip_sources() == [
        "--find-links", "/opt/wheels", "--constraint", "/etc/xdg/pip/constraints.txt",
        "--extra-index-url", "file:///opt/pypi/simple", "--extra-index-url", "file:///opt/pypi-more/simple",
        "--index-url", "https://mirror.example/simple", "--index-strategy", "unsafe-best-match"]


def test_without_pip_configuration_uv_keeps_its_defaults(monkeypatch):
    noxfile = _noxfile()
    monkeypatch.setattr(noxfile.subprocess, "run", _listing(":env:.cert='/etc/ssl/certs/ca-certificates.crt'\n"))
    assert noxfile._pip_sources() == []
    monkeypatch.setattr(noxfile.subprocess, "run", _listing("", returncode=1))  # no pip anywhere
    assert noxfile._pip_sources() == []


class _Session:
    """What `beside` uses of a nox session; `error` raises as nox's does."""

    def __init__(self):
        self.logs: list[str] = []

    def log(self, message: str) -> None:
        self.logs.append(message)

    def error(self, message: str) -> None:
        raise RuntimeError(message)


def test_a_side_that_fails_fails_the_session_after_the_block_with_its_output(tmp_path, capsys):
    noxfile, session, started = _noxfile(), _Session(), tmp_path / "started"
    command = ["sh", "-c", 'echo from the side; touch "$0"; exit 3', str(started)]
    with pytest.raises(RuntimeError, match=r"image-tests failed \(exit 3\)"):
        with noxfile.beside(session, command, env={}, log=tmp_path / "side.log", name="image-tests"):
            deadline = time.monotonic() + 30
            while not started.exists():  # both run at once: the side is going while the block is
                assert time.monotonic() < deadline
                time.sleep(0.01)
    assert "from the side" in capsys.readouterr().out


def test_a_failed_command_in_the_block_lets_the_side_finish_and_report(tmp_path, capsys):
    noxfile, session = _noxfile(), _Session()
    command = ["sh", "-c", "sleep 0.5; echo the side finished"]
    with pytest.raises(noxfile.nox.command.CommandFailed):
        with noxfile.beside(session, command, env={}, log=tmp_path / "side.log", name="image-tests"):
            raise noxfile.nox.command.CommandFailed("test-patch failed")
    assert "the side finished" in capsys.readouterr().out
    assert session.logs[-1] == "image-tests ended (exit 0); its output:"


def test_ctrl_c_in_the_block_stops_the_side_and_its_exit_trap_runs(tmp_path, capsys):
    noxfile, session = _noxfile(), _Session()
    command = ["bash", "-c", "trap 'echo trap ran' EXIT; echo waiting; sleep 60"]
    log = tmp_path / "side.log"
    began = time.monotonic()
    # nox may run where SIGINT is ignored (nohup, a CI runner, an xdist worker): the side inherits that
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with pytest.raises(KeyboardInterrupt):
            with noxfile.beside(session, command, env={}, log=log, name="image-tests"):
                while "waiting" not in log.read_text():
                    assert time.monotonic() - began < 30
                    time.sleep(0.01)
                raise KeyboardInterrupt
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - began < 30
    assert "trap ran" in capsys.readouterr().out


def test_nox_killed_with_kill_9_stops_the_side_and_its_exit_trap_runs(tmp_path):
    trapped, log = tmp_path / "trapped", tmp_path / "side.log"
    nox_like = f"""
import importlib.util, pathlib, time
spec = importlib.util.spec_from_file_location("nox_support_under_test", {str(SUPPORT)!r})
noxfile = importlib.util.module_from_spec(spec)
spec.loader.exec_module(noxfile)
class Session:
    def log(self, message): pass
command = ["bash", "-c", "trap 'touch \\"$0\\"' EXIT; echo waiting; sleep 60", {str(trapped)!r}]
with noxfile.beside(Session(), command, env={{}}, log=pathlib.Path({str(log)!r}), name="image-tests"):
    time.sleep(60)
"""
    nox = subprocess.Popen([sys.executable, "-c", nox_like])
    try:
        deadline = time.monotonic() + 30
        while not (log.exists() and "waiting" in log.read_text()):
            assert time.monotonic() < deadline and nox.poll() is None
            time.sleep(0.01)
        nox.kill()
        nox.wait()
        while not trapped.exists():  # the side's EXIT trap: where docker-tests.sh stops its daemon
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        nox.kill()


def test_a_killed_runs_side_still_writing_does_not_reach_the_new_runs_output(tmp_path, capsys):
    noxfile, log = _noxfile(), tmp_path / "side.log"
    with log.open("ab") as left_running:  # the side of a killed run, still writing at the end of its log
        with noxfile.beside(_Session(), ["echo", "this run's side"], env={}, log=log, name="image-tests"):
            deadline = time.monotonic() + 30
            while not log.read_text():
                assert time.monotonic() < deadline
                time.sleep(0.01)
            left_running.write(b"the killed run's side\n")
            left_running.flush()
    shown = capsys.readouterr().out
    assert "this run's side" in shown and "killed run" not in shown
