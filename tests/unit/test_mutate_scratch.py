"""The scratch folder of `forkbuild mutate` (build/mutate/scratch, used under the run's
lock): a run clears what a killed run left there and removes its own when it ends; a
second run on the same tree stops instead of sharing it."""

from __future__ import annotations

import sys
from pathlib import Path

from forkbuild.cli import main
from forkbuild.errors import MutationError
from forkbuild.io.fsutil import flocked
from forkbuild.mutate import workers
from forkbuild.mutate.workers import run_all


def test_a_run_clears_what_a_killed_run_left_and_removes_its_scratch_when_it_ends(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    (scratch / "m0" / "src").mkdir(parents=True)
    (scratch / "worker0.log").write_text("left by a killed run\n")
    seen: list[list[str]] = []

    class NoWorker:
        """Stands in for the fork server (the expensive part); looks at the folder as the run starts."""

        def __init__(self, python: Path, preload: list[str], log: Path) -> None:
            seen.append(sorted(path.name for path in log.parent.iterdir()))

        def close(self) -> None:
            pass

    monkeypatch.setattr(workers, "Worker", NoWorker)
    assert run_all({}, [], root=tmp_path, site_packages=tmp_path, python=Path(sys.executable), preload=[], workers=1,
                   scratch=scratch,
                   done=lambda *_: None) == {}
    assert seen == [[]]
    assert not scratch.exists()


def test_a_second_mutate_run_on_the_same_tree_stops_while_the_first_holds_the_lock(series_fx, capsys):
    lock = series_fx.root / "build" / "mutate" / ".lock"
    lock.parent.mkdir(parents=True)
    with flocked(lock):
        assert main(["-C", str(series_fx.root), "mutate"]) == MutationError.return_code
    assert "another `forkbuild mutate` is running" in capsys.readouterr().err
