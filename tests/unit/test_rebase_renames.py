"""Renames under a rebase: a patch whose file upstream renamed (or renamed and edited) is ported to
the new name with every line it added, and a rebase whose replay lost a patch's lines stops for
review naming them (rebase/kept.py) instead of writing a series without them."""

from __future__ import annotations

import json

from fixtures import DEFAULT_PATCHES, PatchSpec, SeriesFixture, commit_all, edit, make_series
from forkbuild.errors import RebaseStopped
from forkbuild.io.git import Git
from rebase_fixtures import CONFLICT_CHANGES, NEW_VERSION, rebase_args, release, tree

MORE = PatchSpec(file="alpha-offset.patch", feature="alpha", subject="core: offset by two", body="Offset by two.",
                 edits=(("python/pkg/core.py", "    return value + 1\n", "    return value + 2\n"),))


def renamed_release(fx: SeriesFixture, *, edit: bool) -> str:
    repo = Git(fx.upstream_repo)
    repo.run("checkout", "--quiet", "main")
    repo.run("mv", "python/pkg/core.py", "python/pkg/compute.py")
    if edit:
        moved = repo.path / "python/pkg/compute.py"
        moved.write_text(moved.read_text().replace('"""The core computation."""', '"""The computation."""\n\nimport math')
                         .replace("CORE_CONSTANT_1 ", "CORE_CONSTANT_ONE "))
    return commit_all(repo, f"pkg {NEW_VERSION}", date="1710000000 +0000")


def test_a_renamed_file_takes_every_patch_with_it(tmp_path) -> None:
    for edit in (False, True):
        fx = make_series(tmp_path / str(edit), source="git", specs=(*DEFAULT_PATCHES, MORE))
        assert fx.cli(*rebase_args(renamed_release(fx, edit=edit))) == 0
        scale, offset = ((fx.patches_dir / name).read_text() for name in ("alpha-scale.patch", "alpha-offset.patch"))
        assert "+++ b/python/pkg/compute.py" in scale and "core.py" not in scale
        assert "+        return value * 3" in scale
        # The next patch on the same file changes only its own line: nothing of alpha-scale's is taken out.
        assert "+    return value + 2" in offset and "\n-    if envs" not in offset and "\n-        return" not in offset
        assert fx.cli("apply", "--all", "--dir", str(fx.root / "check")) == 0
        text = (fx.root / "check/python/pkg/compute.py").read_text()
        assert "return value * 3" in text and "return value + 2" in text and not (fx.root / "check/python/pkg/core.py").exists()


def test_a_replay_that_lost_a_patchs_lines_stops_for_review(git_series_fx: SeriesFixture) -> None:
    fx = git_series_fx
    assert fx.cli(*rebase_args(release(fx, CONFLICT_CHANGES))) == RebaseStopped.return_code
    work = tree(fx)
    core = work.path / "python/pkg/core.py"
    text = core.read_text()
    start, end = text.index("<<<<<<<"), text.index("\n", text.index(">>>>>>>")) + 1
    # A careless resolution: upstream's side only, alpha's two lines gone (the environ.py guard stays).
    core.write_text(text[:start] + "def scale(value):  # 2.0\n    return value * 2  # doubled in 2.0\n" + text[end:])
    work.run("add", "python/pkg/core.py")
    before = fx.series_toml.read_text(), (fx.patches_dir / "alpha-scale.patch").read_text()
    assert fx.cli("rebase", "--continue") == RebaseStopped.return_code
    draft = json.loads((fx.root / ".forkbuild-work/rebase-journal/report.json").read_text())
    lost = {patch["file"]: patch["lost"] for patch in draft["patches"] if patch["lost"]}
    assert lost == {"alpha-scale.patch": ["python/pkg/core.py: if envs.DSV41_ALPHA:",
                                          "python/pkg/core.py: return value * 3"]}
    assert "Lines the rebased series lacks" in (fx.root / ".forkbuild-work/rebase-journal/report.md").read_text()
    # Nothing written yet: the old series is still what series.toml and patches/ hold.
    assert (fx.series_toml.read_text(), (fx.patches_dir / "alpha-scale.patch").read_text()) == before
    assert fx.cli("rebase", "--continue") == 0  # the user's yes: written as replayed
    assert "return value * 3" not in (fx.patches_dir / "alpha-scale.patch").read_text()


def test_a_conflict_in_a_file_upstream_renamed_is_resolved_under_its_new_name(git_series_fx: SeriesFixture,
                                                                               capfd) -> None:
    fx = git_series_fx
    repo = Git(fx.upstream_repo)
    repo.run("checkout", "--quiet", "main")
    repo.run("mv", "python/pkg/core.py", "python/pkg/compute.py")
    (_, old, new), = CONFLICT_CHANGES
    edit(repo.path, "python/pkg/compute.py", old, new)
    assert fx.cli(*rebase_args(commit_all(repo, f"pkg {NEW_VERSION}", date="1710000000 +0000"))) \
        == RebaseStopped.return_code
    err = capfd.readouterr().err
    # The porter tried the new name (not "moot: its file is not in the new release"); upstream's change is shown.
    assert "conflicted: python/pkg/compute.py" in err and "not in the new release" not in err
    assert "python/pkg/compute.py:\n    @@" in err and "\n    -def scale(value):\n" in err  # the rename's own change
    work = tree(fx)
    moved = work.path / "python/pkg/compute.py"  # outside the sparse tree's files: the person can still add it
    text = moved.read_text()
    start, end = text.index("<<<<<<<"), text.index("\n", text.index(">>>>>>>")) + 1
    moved.write_text(text[:start] + "def scale(value):  # 2.0\n    if envs.DSV41_ALPHA:\n        return value * 3\n"
                     "    return value * 2  # doubled in 2.0\n" + text[end:])
    work.run("add", "python/pkg/compute.py")
    assert fx.cli("rebase", "--continue") == 0
    scale = (fx.patches_dir / "alpha-scale.patch").read_text()
    assert "+++ b/python/pkg/compute.py" in scale and "+        return value * 3" in scale


def test_a_file_upstream_removed_is_named_not_shown_line_by_line(git_series_fx: SeriesFixture, capfd) -> None:
    fx = git_series_fx
    repo = Git(fx.upstream_repo)
    repo.run("checkout", "--quiet", "main")
    repo.run("rm", "--quiet", "python/pkg/core.py")
    assert fx.cli(*rebase_args(commit_all(repo, f"pkg {NEW_VERSION}", date="1710000000 +0000"))) \
        == RebaseStopped.return_code  # alpha's core.py hunk is moot: the porter's proposal leaves it out
    journaled = json.loads((fx.root / ".forkbuild-work/rebase-journal/state.json").read_text())
    alpha, = (patch for patch in journaled["patches"] if patch["file"] == "alpha-scale.patch")
    assert alpha["collided"].startswith("python/pkg/core.py: removed upstream (all ")  # what the report shows
    capfd.readouterr()
    # The proposal accepted as staged, its moot hunk with it: said, and not asked about again as lost lines.
    assert fx.cli("rebase", "--continue") == 0
    assert "alpha-scale.patch: ported: hunk by hunk (2 hunks, 1 moot left out)" in capfd.readouterr().err
