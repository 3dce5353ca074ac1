"""Resource limits are clear errors naming the file, and nothing half-made is left that the re-run
refuses: a patch too large to read, the file-size limit (ulimit -f: Python's EFBIG and git killed by
SIGXFSZ), a disk that fills during `apply --dir`, memory."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import SeriesFixture
from forkbuild.errors import DiskError, UnsafePatchError
from forkbuild.series.patchfile import MAX_PATCH_BYTES


def forkbuild(fx: SeriesFixture, *args: str, file_limit: int | None = None) -> subprocess.CompletedProcess:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))
    return subprocess.run([sys.executable, "-m", "forkbuild", "-C", str(fx.root), "--cache", str(fx.cache), *args],
                          capture_output=True, text=True, timeout=120, preexec_fn=limit if file_limit else None)


def test_a_patch_too_large_to_read_is_refused_naming_it(series_fx: SeriesFixture, capsys) -> None:
    fx = series_fx
    with open(fx.patches_dir / "beta-limit.patch", "r+b") as handle:  # sparse: costs no disk
        handle.truncate(MAX_PATCH_BYTES + 1)
    assert fx.cli("check") == UnsafePatchError.return_code
    err = capsys.readouterr().err
    assert "patches/beta-limit.patch: is 64 MiB; forkbuild reads patches of up to 64 MiB" in err
    assert "Traceback" not in err and "MemoryError" not in err


def test_the_file_size_limit_is_a_disk_error_and_the_rerun_works(series_fx: SeriesFixture) -> None:
    fx = series_fx
    assert fx.cli("fetch") == 0
    dest = fx.root / "tree"
    limited = forkbuild(fx, "apply", "--all", "--dir", str(dest), file_limit=300)
    assert limited.returncode == DiskError.return_code, limited.stderr
    assert "file-size limit (ulimit -f) (EFBIG)" in limited.stderr and "ulimit -f unlimited" in limited.stderr
    assert "Traceback" not in limited.stderr and "git failed" not in limited.stderr
    assert not dest.exists()  # nothing half-made: the re-run starts afresh
    rerun = forkbuild(fx, "apply", "--all", "--dir", str(dest))
    assert rerun.returncode == 0, rerun.stderr
    assert "return value * 3" in (dest / "python/pkg/core.py").read_text()


@pytest.fixture
def tiny_disk(tmp_path: Path):
    mount = tmp_path / "tiny"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12k", "tmpfs", str(mount)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a 12k tmpfs needs root (CI runs as root)")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_disk_that_fills_during_apply_dir(series_fx: SeriesFixture, tiny_disk: Path) -> None:
    fx = series_fx
    assert fx.cli("fetch") == 0
    dest = tiny_disk / "tree"
    full = forkbuild(fx, "apply", "--all", "--dir", str(dest))
    assert full.returncode == DiskError.return_code, full.stderr
    assert "the disk is full (ENOSPC)" in full.stderr and "git failed" not in full.stderr
    assert not dest.exists()  # the half-made tree is gone: nothing the re-run refuses
    again = forkbuild(fx, "apply", "--all", "--dir", str(dest))
    assert again.returncode == DiskError.return_code and "is not a forkbuild work tree" not in again.stderr
