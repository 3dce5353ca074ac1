"""check: every variant in one pass, every failure listed, scratch trees removed, path safety."""

from __future__ import annotations

import pytest

from fixtures import SeriesFixture, commit_all, edit, write_through_upstream_symlink
from forkbuild.checker import check_series, raise_on_failures
from forkbuild.errors import ApplyError, UnsafePatchError
from forkbuild.io.git import Git
from forkbuild.upstream.cache import UpstreamCache
from forkbuild.worktree.state import read_state


def worktrees(fx: SeriesFixture) -> list[str]:
    listing = UpstreamCache(fx.cache).git().out("worktree", "list", "--porcelain")
    return [line for line in listing.splitlines() if line.startswith("worktree ")]


def break_context(fx: SeriesFixture, file: str, old: str, new: str) -> None:
    """Change a context line of a patch so it no longer matches upstream."""
    edit(fx.patches_dir, file, old, new)


def test_every_variant_applies(series_fx: SeriesFixture) -> None:
    results = check_series(context=series_fx.context())
    assert [result.label for result in results] == ["(whole series)", "full", "lite", "stock"]
    assert all(result.ok for result in results)
    assert [len(result.records) for result in results] == [3, 3, 2, 0]
    assert {record.outcome for record in results[2].records} == {"exact", "3-way"}
    raise_on_failures(results)
    assert len(worktrees(series_fx)) == 1  # only the bare cache itself: the scratch tree is gone
    assert series_fx.cli("check") == 0


def test_every_failing_patch_of_every_variant_in_one_pass(series_fx: SeriesFixture) -> None:
    break_context(series_fx, "alpha-scale.patch", " def scale(value):\n", " def scale(val):\n")
    break_context(series_fx, "beta-limit.patch", " def limit(value, ceiling=100):\n", " def limit(value, cap=100):\n")
    results = check_series(context=series_fx.context())
    failed = {result.label: [record.entry.file for record in result.failures] for result in results}
    assert failed["(whole series)"] == ["alpha-scale.patch", "beta-limit.patch"]
    assert failed["full"] == ["alpha-scale.patch", "beta-limit.patch"]
    lite = next(result for result in results if result.label == "lite")
    assert not lite.ok  # leaves alpha out: needs the whole series, which does not apply
    assert next(result for result in results if result.label == "stock").ok
    with pytest.raises(ApplyError) as error:
        raise_on_failures(results)
    assert "full: beta-limit.patch" in error.value.message and "full: alpha-scale.patch" in error.value.message
    assert len(worktrees(series_fx)) == 1
    assert series_fx.cli("check") == ApplyError.return_code


def test_a_variant_only_failure_is_found(series_fx: SeriesFixture) -> None:
    """A beta patch written on top of alpha's core.py change: fine in full, fails in lite (alpha left out)."""
    repo = Git(series_fx.upstream_repo)
    repo.run("checkout", "--quiet", "series")
    edit(repo.path, "python/pkg/core.py", "        return value * 3\n", "        return value * 30\n")
    commit = commit_all(repo, "core: beta scales by thirty\n\nFeature: beta\nGuard: DSV41_BETA\n")
    (series_fx.patches_dir / "beta-thirty.patch").write_text(repo.format_patch(commit))
    with series_fx.series_toml.open("a") as handle:
        handle.write('\n[[patches]]\nfile = "beta-thirty.patch"\nfeature = "beta"\n')
    results = check_series(context=series_fx.context())
    failed = {result.label: [record.entry.file for record in result.failures] for result in results}
    assert failed == {"(whole series)": [], "full": [], "lite": ["beta-thirty.patch"], "stock": []}
    lite = next(result for result in results if result.label == "lite")
    assert "alpha-scale.patch" in lite.failures[0].detail  # names the left-out patch it needs


def test_unsafe_patches_are_all_named(series_fx: SeriesFixture) -> None:
    for name in ("alpha-scale.patch", "beta-limit.patch"):
        text = (series_fx.patches_dir / name).read_text()
        (series_fx.patches_dir / name).write_text(text.replace("a/python/pkg/", "a/../pkg/").replace("b/python/pkg/", "b/../pkg/"))
    with pytest.raises(UnsafePatchError) as error:
        check_series(context=series_fx.context())
    assert "alpha-scale.patch" in error.value.message and "beta-limit.patch" in error.value.message
    assert "leaves the tree" in error.value.message


def test_patch_through_a_symlink_in_upstream_is_refused(git_series_fx: SeriesFixture) -> None:
    fx = git_series_fx
    write_through_upstream_symlink(fx)
    with pytest.raises(UnsafePatchError, match="symbolic link python/linked"):
        check_series(context=fx.context())


def test_a_patch_whose_change_an_earlier_patch_made_fails_naming_both(series_fx: SeriesFixture, capfd) -> None:
    """Before: `3-way`, exit 0 and an empty commit export could not write (issue 38)."""
    fx = series_fx
    text = (fx.patches_dir / "alpha-scale.patch").read_text().replace("Subject: core: scale", "Subject: core: again scale")
    (fx.patches_dir / "alpha-again.patch").write_text(text)
    with fx.series_toml.open("a") as handle:
        handle.write('\n[[patches]]\nfile = "alpha-again.patch"\nfeature = "alpha"\n')
    capfd.readouterr()
    assert fx.cli("check") == ApplyError.return_code
    err = capfd.readouterr().err
    assert "alpha-again.patch: its change is already in the tree, made by alpha-scale.patch" in err
    assert fx.cli("apply", "--all") == ApplyError.return_code
    assert "alpha-again.patch does not apply: its change is already in the tree, made by alpha-scale.patch" in \
        capfd.readouterr().err
    assert fx.cli("apply", "--skip") == 0  # nothing to resolve: skipped, the tree holds the other three
    state = read_state(fx.root / ".forkbuild-work/series")
    assert state.patches == ("guards.patch", "alpha-scale.patch", "beta-limit.patch")
    assert state.missing == {"alpha-again.patch": "skipped"}
