"""A rebase killed (SIGKILL) at any journal step: --continue finishes it with the
same result as an uninterrupted run; --abort puts everything back byte for byte."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import SeriesFixture, make_series
from forkbuild.errors import RebaseStopped
from forkbuild.io.chaos import CHAOS_ENV
from forkbuild.io.git import Git
from forkbuild.series.writer import recover_series
from rebase_fixtures import CONFLICT_CHANGES, LADDER_CHANGES, NEW_VERSION, fingerprint, rebase_args, release, run_killed

# Every kind of step: before/after the import, the work tree, mid-patch, between
# patches, the end of the replay, each write of the finalize, the clean-up.
CONTINUE_STEPS = ["begun", "imported", "worktree", "prepared", "applying:alpha-scale.patch",
                  "applied:beta-limit.patch", "replayed", "finalize:restored", "finalize:exported", "exported",
                  "finish:cleaned"]
ABORT_STEPS = ["importing:2.0", "imported", "applying:beta-limit.patch", "finalize:restored", "finalize:exported",
               "finish:cleaned"]


def series_files(fx: SeriesFixture) -> dict[str, bytes]:
    """series.toml and patches/, with the fixture's own tmp path blanked (it differs between fixtures)."""
    # The killed fixture lives in <tmp>/killed, the reference in <tmp'>/reference: blank both.
    files = {str(path.relative_to(fx.root)): path.read_bytes()
             for path in [fx.series_toml, *fx.patches_dir.rglob("*")] if path.is_file()}
    return {name: data.replace(str(fx.root.parent).encode(), b"<tmp>") for name, data in files.items()}


def outcomes(fx: SeriesFixture) -> list[str]:
    report = json.loads((fx.root / "build" / "rebase" / f"1.0-to-{NEW_VERSION}.json").read_text())
    return [patch["outcome"] for patch in report["patches"]]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The result of an uninterrupted rebase of the same series onto the same 2.0 (made once)."""
    tmp_path = tmp_path_factory.mktemp("rebase-reference")
    with pytest.MonkeyPatch.context() as patch:
        # Module scope: conftest's per-test isolation is not active here yet.
        patch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
        patch.setenv("GIT_CONFIG_NOSYSTEM", "1")
        patch.setenv("FORKBUILD_CACHE", str(tmp_path / "reference" / "cache"))
        fx = make_series(tmp_path / "reference", source="git")
        fx.cache = tmp_path / "reference" / "cache"
        assert fx.cli(*rebase_args(release(fx, LADDER_CHANGES))) == 0
        return {"files": series_files(fx), "outcomes": outcomes(fx)}


def killed_fixture(tmp_path: Path, changes) -> tuple[SeriesFixture, str]:
    fx = make_series(tmp_path / "killed", source="git")
    fx.cache = tmp_path / "killed" / "cache"
    commit = release(fx, changes)
    assert fx.cli("fetch") == 0
    return fx, commit


@pytest.mark.parametrize("step", CONTINUE_STEPS)
def test_kill_then_continue_loses_nothing(tmp_path: Path, reference: dict, step: str) -> None:
    fx, commit = killed_fixture(tmp_path, LADDER_CHANGES)
    killed = run_killed(fx, rebase_args(commit), step=step)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert fx.cli("rebase", "--continue") == 0
    assert series_files(fx) == reference["files"]
    assert outcomes(fx) == reference["outcomes"]
    assert not (fx.root / ".forkbuild-work" / "rebase-journal").exists()
    assert not (fx.root / ".forkbuild-work" / "rebase").exists()


@pytest.mark.parametrize("step", ABORT_STEPS)
def test_kill_then_abort_restores_everything(tmp_path: Path, step: str) -> None:
    fx, commit = killed_fixture(tmp_path, LADDER_CHANGES)
    before = fingerprint(fx)
    killed = run_killed(fx, rebase_args(commit), step=step)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert fx.cli("rebase", "--abort") == 0
    assert fingerprint(fx) == before
    assert not (fx.root / ".forkbuild-work" / "rebase").exists()


def test_kill_at_conflict_then_continue_then_abort(tmp_path: Path) -> None:
    fx, commit = killed_fixture(tmp_path, CONFLICT_CHANGES)
    before = fingerprint(fx)
    killed = run_killed(fx, rebase_args(commit), step="conflict")
    assert killed.returncode == -signal.SIGKILL
    # The conflict is on disk even though the killed process never said so.
    assert "<<<<<<<" in (fx.root / ".forkbuild-work/rebase/python/pkg/core.py").read_text()
    assert fx.cli("rebase", "--continue") == RebaseStopped.return_code  # still unmerged
    assert fx.cli("rebase", "--abort") == 0
    assert fingerprint(fx) == before


def test_kill_while_continuing_after_a_resolution(tmp_path: Path) -> None:
    fx, commit = killed_fixture(tmp_path, CONFLICT_CHANGES)
    assert fx.cli(*rebase_args(commit)) == RebaseStopped.return_code
    core = fx.root / ".forkbuild-work/rebase/python/pkg/core.py"
    text = core.read_text()
    start, end = text.index("<<<<<<<"), text.index("\n", text.index(">>>>>>>")) + 1
    core.write_text(text[:start] + "    if envs.DSV41_ALPHA:\n        return value * 3\n"
                    "def scale(value):  # 2.0\n    return value * 2  # doubled in 2.0\n" + text[end:])
    Git(fx.root / ".forkbuild-work" / "rebase").run("add", "python/pkg/core.py")
    killed = run_killed(fx, ["rebase", "--continue"], step="settled:alpha-scale.patch")
    assert killed.returncode == -signal.SIGKILL
    assert fx.cli("rebase", "--continue") == 0
    assert outcomes(fx) == ["exact", "resolved", "exact"]
    assert "doubled in 2.0" in (fx.patches_dir / "alpha-scale.patch").read_text()


def test_the_finalize_writes_the_new_pin_and_the_rebased_patches_in_one_transaction(tmp_path: Path,
                                                                                   reference: dict) -> None:
    # Killed right after the finalize's first series_writer commit: what is on disk (once the
    # writer's recovery ran) is the whole rebased series, never the new pin over the old patches.
    fx, commit = killed_fixture(tmp_path, LADDER_CHANGES)
    before = series_files(fx)
    env = {**os.environ, CHAOS_ENV: "series:committed"}
    killed = subprocess.run([sys.executable, "-m", "forkbuild", "-C", str(fx.root), "--cache", str(fx.cache),
                             *rebase_args(commit)], env=env, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert recover_series(fx.root)  # the commit was made: the write rolls forward
    after = series_files(fx)
    assert f'version = "{NEW_VERSION}"' in after["series.toml"].decode()
    assert {name: data for name, data in after.items() if name != "series.toml"} == {
        name: data for name, data in reference["files"].items() if name != "series.toml"}
    assert after != before
    assert fx.cli("rebase", "--continue") == 0
    assert series_files(fx) == reference["files"]


@pytest.mark.parametrize("record", ['{"series.toml": ', '["series.toml"]', '{"patches/../../outside": "0"}', None])
def test_a_damaged_backup_record_is_an_error_naming_it_and_the_backup(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                                     record: str | None) -> None:
    fx, commit = killed_fixture(tmp_path, CONFLICT_CHANGES)
    before = fingerprint(fx)
    assert fx.cli(*rebase_args(commit)) == RebaseStopped.return_code
    hashes = fx.root / ".forkbuild-work" / "rebase-journal" / "backup" / "hashes.json"
    saved = hashes.read_text()
    if record is None:
        hashes.unlink()
    else:
        hashes.write_text(record)
    for action in ("--abort", "--abort"):  # and again: nothing was touched
        capsys.readouterr()
        assert fx.cli("rebase", action) == 1
        err = capsys.readouterr().err
        assert "hashes.json: the rebase journal's record of its backup is unreadable" in err, err
        assert "put them back by hand" in err
    hashes.write_text(saved)  # the record back: the abort restores the series exactly
    assert fx.cli("rebase", "--abort") == 0
    assert fingerprint(fx) == before
