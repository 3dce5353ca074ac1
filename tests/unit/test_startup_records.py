"""What a re-run reads from the cache instead of computing again: the file listing of the
upstream base (Git.tree_entries keep=True), checked through a real `forkbuild` process: which
git commands it ran (GIT_TRACE), what it printed and returned."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fixtures import SeriesFixture
from forkbuild.git import TREES_DIR, Git

PROBE = """
import sys
from forkbuild.cli import main
code = main(sys.argv[1:])
print("imported:", " ".join(name for name in ("email.parser", "unidiff", "tomllib") if name in sys.modules))
sys.exit(code)
"""


def forkbuild(fx: SeriesFixture, *args: str, trace: Path | None = None, probe: bool = False,
              extra: str = "") -> subprocess.CompletedProcess[str]:
    """`forkbuild -C <series> --cache <cache> args` in a new Python process."""
    env = {**os.environ, **({"GIT_TRACE": str(trace)} if trace else {})}
    env.pop("PYTHONUNBUFFERED", None)  # output to a pipe stays in Python's buffers until something flushes it
    code = PROBE if probe else extra + "from forkbuild.cli import run\nrun()\n"
    return subprocess.run([sys.executable, "-c", code, "-C", str(fx.root), "--cache", str(fx.cache), *args],
                          capture_output=True, text=True, env=env, check=False)


def apply_all(fx: SeriesFixture, dest: Path, **options) -> subprocess.CompletedProcess[str]:
    done = forkbuild(fx, "apply", "--all", "--dir", str(dest), **options)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def forget_results(fx: SeriesFixture) -> None:
    """Drop the apply engine's remembered results: the next apply computes every patch."""
    (fx.cache / "upstream.git" / "forkbuild-apply-memo.json").unlink(missing_ok=True)


def traced_commands(trace: Path) -> list[str]:
    return [line.split("trace: built-in: ", 1)[1] for line in trace.read_text().splitlines() if "trace: built-in: " in line]


def test_a_rerun_reads_the_upstream_listing_it_kept_instead_of_listing_the_tree(
        series_fx: SeriesFixture, tmp_path: Path) -> None:
    apply_all(series_fx, tmp_path / "tree")
    base = Git(tmp_path / "tree").out("rev-list", "--max-parents=0", "HEAD")
    kept = series_fx.cache / "upstream.git" / TREES_DIR / base
    listed = Git(tmp_path / "tree").out("ls-tree", "-r", "--name-only", base).splitlines()
    assert json.loads(kept.read_text())["paths"] == listed
    forget_results(series_fx)
    trace = tmp_path / "trace"
    apply_all(series_fx, tmp_path / "tree", trace=trace)
    # One listing: the symbolic-link check's, which git makes every run (a verdict is never read from the cache).
    assert len([command for command in traced_commands(trace) if command.startswith("git ls-tree -r")]) == 1
    # Damaged: listed again, and the same commits come out.
    head = Git(tmp_path / "tree").head()
    kept.write_text("[1, 2")
    forget_results(series_fx)
    trace.unlink()
    apply_all(series_fx, tmp_path / "tree", trace=trace)
    assert [command for command in traced_commands(trace) if command.startswith("git ls-tree -r")]
    assert Git(tmp_path / "tree").head() == head
    assert isinstance(json.loads(kept.read_text()), dict)


