"""test-patch --device: CUDA runs fail without a GPU, GPU-only tests skip on
CPU and run under --device cuda, and the report names the device.

No GPU is needed: a stand-in `torch` package on PYTHONPATH (a few attributes,
what testpatch.device's probe reads) plays a CPU-only or a CUDA machine; the
tests themselves run through the real CLI on test_testpatch's fixture series.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from forkbuild.cli import main as cli_main
from test_testpatch import _make

GPU_ONLY_TEST = '''

@pytest.mark.guard_on
@pytest.mark.cuda
def test_scale_on_the_gpu(monkeypatch, test_device):
    assert test_device == "cuda"
    monkeypatch.setenv("DSV41_ALPHA", "1")
    from sglang.core import scale
    assert scale(5) == 15
'''


def _fake_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, cuda: bool) -> None:
    package = tmp_path / "fake-torch" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(f'''\
        __version__ = "2.14.1"
        class version:
            cuda = {"'13.0'" if cuda else None}
        class _Props:
            name, major, minor = "Fake GPU", 9, 0
        class cuda:
            @staticmethod
            def is_available():
                return {cuda}
            @staticmethod
            def get_device_properties(index):
                return _Props()
        '''))
    monkeypatch.setenv("PYTHONPATH", str(package.parent))


def _run(root: Path, *extra: str) -> int:
    return cli_main(["-C", str(root), "--cache", str(root.parent / "cache"),
                     "test-patch", "--variant", "full", "--from-tree", *extra])


def _cells(root: Path, name: str) -> dict:
    rows = json.loads((root / "build" / "test-patch" / f"{name}.json").read_text())
    return {(row["feature"], row["check"]): row for row in rows}


def test_device_cuda_without_a_gpu_says_so_and_fails_before_applying(tmp_path, monkeypatch, capsys):
    root = _make(tmp_path)
    _fake_torch(tmp_path, monkeypatch, cuda=False)
    assert _run(root, "--device", "cuda") == 8
    err = capsys.readouterr().err
    assert "--device cuda: no CUDA GPU here" in err and "torch 2.14.1, CPU build" in err
    assert not (root / "build" / "test-patch").exists()


def test_gpu_only_tests_skip_on_cpu_and_run_under_device_cuda(tmp_path, monkeypatch):
    root = _make(tmp_path)
    with open(root / "tests" / "patches" / "test_alpha.py", "a") as handle:
        handle.write(GPU_ONLY_TEST)
    assert _run(root) == 0
    details = {d["test"].split("::")[-1]: d for d in _cells(root, "full")["alpha", "guard_on"]["details"]}
    assert details["test_scale_on_the_gpu"]["outcome"] == "skip"
    assert "GPU-only" in details["test_scale_on_the_gpu"]["reason"]

    _fake_torch(tmp_path, monkeypatch, cuda=True)
    assert _run(root, "--device", "cuda") == 0
    cells = _cells(root, "full-cuda")
    details = {d["test"].split("::")[-1]: d for d in cells["alpha", "guard_on"]["details"]}
    assert details["test_scale_on_the_gpu"]["outcome"] == "pass"
    device = cells["", "device"]
    assert (device["name"], device["capability"], device["torch"]) == ("Fake GPU", "9.0", "2.14.1")
    assert device["stubs"] == []


def test_installed_needs_a_variant_build_on_the_python(tmp_path, monkeypatch, capsys):
    root = _make(tmp_path)
    _fake_torch(tmp_path, monkeypatch, cuda=True)  # a GPU, but no sglang with a manifest there
    code = cli_main(["-C", str(root), "--cache", str(root.parent / "cache"),
                     "test-patch", "--variant", "full", "--installed", "--device", "cuda"])
    assert code == 8
    assert "has no forkbuild manifest" in capsys.readouterr().err
    assert cli_main(["-C", str(root), "test-patch", "--installed", "--from-tree"]) == 8


def test_installed_run_names_the_wheel_it_ran(tmp_path, monkeypatch):
    """A GPU report is evidence of one build: the device record carries the installed wheel's version."""
    from types import SimpleNamespace

    from forkbuild.testpatch import behaviour, runner
    root = _make(tmp_path)
    _fake_torch(tmp_path, monkeypatch, cuda=True)
    built = SimpleNamespace(variant="full", version="0.1.0+full.0123abcd", series_hash="0123abcd",
                            features=("guards", "alpha", "beta"))
    monkeypatch.setattr(behaviour, "installed_manifest", lambda python: built)
    monkeypatch.setattr(runner, "_behaviour", lambda *args, **kwargs: [])
    cli_main(["-C", str(root), "test-patch", "--variant", "full", "--installed", "--device", "cuda"])
    device = _cells(root, "full-cuda")["", "device"]
    assert (device["wheel_version"], device["series_hash"]) == ("0.1.0+full.0123abcd", "0123abcd")
