"""The reporter's output: steps, the table and the head, in order on stderr."""

from __future__ import annotations

import subprocess
import sys

from fixtures import SeriesFixture


def test_an_apply_prints_its_step_table_and_head_in_order(series_fx: SeriesFixture, tmp_path) -> None:
    done = subprocess.run([sys.executable, "-m", "forkbuild", "-C", str(series_fx.root), "--cache", str(series_fx.cache),
                           "apply", "--all", "--dir", str(tmp_path / "tree")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    marks = ["> Applying 3 patches", "  Applying 3 patches", "series ->", "guards.patch", "beta-limit.patch", "  HEAD "]
    found = [next(index for index, line in enumerate(lines) if mark in line) for mark in marks]
    assert found == sorted(found), done.stderr
