"""quilt interop: `quilt push -a` of the exported patches/series on the plain upstream
tree gives the same tree as `forkbuild apply --all`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fixtures import DEFAULT_PATCHES, PatchSpec, SeriesFixture, make_series
from forkbuild.applier import apply_variant
from forkbuild.exporter import export_series
from forkbuild.io.git import Git
from forkbuild.series.combination import whole_series
from forkbuild.upstream.cache import UpstreamCache

QUILT = shutil.which("quilt")
pytestmark = pytest.mark.skipif(QUILT is None, reason="quilt is not installed (apt-get install quilt)")

NEW_FILE = PatchSpec(file="beta-helpers.patch", feature="beta", subject="beta: a new helpers module",
                     body="A file the series creates.", guards=(),
                     edits=(("python/pkg/beta_helpers.py", "", '"""Beta helpers."""\n\nHALF = 0.5\n'),))


def tree_id(path: Path) -> str:
    """The git tree id of a directory's content (.pc, quilt's state, left out)."""
    scratch = Git.init(path.parent / f"{path.name}-ids")
    env = {"GIT_WORK_TREE": str(path), "GIT_INDEX_FILE": str(scratch.git_dir / "ids.index")}
    scratch.run("add", "--all", "--force", ".", ":(exclude).pc", env=env)
    return scratch.out("write-tree", env=env)


def quilt_push_all(fx: SeriesFixture, dest: Path) -> subprocess.CompletedProcess:
    cache_git = UpstreamCache(fx.cache).git()
    base = cache_git.rev(f"refs/tags/{fx.load().upstream.tag}")
    cache_git.add_worktree(dest, base)
    (dest / ".git").unlink()  # a plain upstream tree, as a user would unpack it
    env = {**os.environ, "QUILT_PATCHES": str(fx.patches_dir)}
    return subprocess.run([QUILT, "--quiltrc=-", "push", "-a"], cwd=dest, env=env, capture_output=True, text=True)


@pytest.mark.parametrize("specs", [DEFAULT_PATCHES, (*DEFAULT_PATCHES, NEW_FILE)], ids=["default", "new-file"])
def test_quilt_push_gives_the_forkbuild_tree(tmp_path: Path, specs: tuple[PatchSpec, ...]) -> None:
    fx = make_series(tmp_path, specs=specs)
    forkbuild_tree = fx.root / ".forkbuild-work" / "series"
    apply_variant(context=fx.context(), variant=whole_series(fx.load()), dest=forkbuild_tree)
    export_series(context=fx.context(), tree=forkbuild_tree)
    series_file = (fx.patches_dir / "series").read_text().splitlines()
    assert [line for line in series_file if not line.startswith("#")] == [spec.file for spec in specs]

    quilt_tree = tmp_path / "quilt-tree"
    result = quilt_push_all(fx, quilt_tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fuzz" not in result.stdout.lower()
    assert tree_id(quilt_tree) == Git(forkbuild_tree).out("rev-parse", "HEAD^{tree}")


def test_quilt_stops_where_forkbuild_would(series_fx: SeriesFixture, tmp_path: Path) -> None:
    """Sanity of the comparison: without the series file quilt applies nothing and the trees differ."""
    forkbuild_tree = series_fx.root / ".forkbuild-work" / "series"
    apply_variant(context=series_fx.context(), variant=whole_series(series_fx.load()), dest=forkbuild_tree)
    quilt_tree = tmp_path / "quilt-tree"
    result = quilt_push_all(series_fx, quilt_tree)
    assert result.returncode != 0
    assert tree_id(quilt_tree) != Git(forkbuild_tree).out("rev-parse", "HEAD^{tree}")
