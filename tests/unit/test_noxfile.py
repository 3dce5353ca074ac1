"""noxfile.py: uv gets the sources and constraints pip is configured with, so the test
venv takes the same (local) wheels pip would, never a download pip would not make."""

from __future__ import annotations

import functools
import importlib.util
import subprocess
from pathlib import Path

NOXFILE = Path(__file__).resolve().parents[2] / "noxfile.py"

PIP_CONFIG = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.find-links='/opt/wheels'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels'
install.index-url='https://mirror.example/simple'
"""


@functools.cache  # once: loading it registers its sessions with nox
def _noxfile():
    spec = importlib.util.spec_from_file_location("noxfile_under_test", NOXFILE)
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
