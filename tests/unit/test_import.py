"""import: quilt series (DEP-3 headers kept) and git commit ranges into series.toml + patches/."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from fixtures import SeriesFixture, commit_all, edit
from forkbuild.applier import apply_variant
from forkbuild.errors import ApplyError, ConfigError
from forkbuild.exporter import export_series
from forkbuild.importer import git_range_incoming
from forkbuild.io.git import Git
from forkbuild.quiltimport import import_quilt, read_quilt_dir
from forkbuild.series.combination import whole_series
from forkbuild.series.dep3 import parse_dep3
from forkbuild.series.patchfile import read_patch

QUILT_PATCH = """\
Description: core: offset by ten
 The offset was too small for the new callers.
 .
 Second paragraph of the description.
Author: Quilt Person <quilt@example.com>
Origin: vendor, https://example.com/offset
Forwarded: https://example.com/pr/7
Last-Update: 2024-05-01

--- a/python/pkg/core.py
+++ b/python/pkg/core.py
@@ -8,7 +8,7 @@ def scale(value):
 
 
 def offset(value):
-    return value + 1
+    return value + 10
 
 CORE_CONSTANT_0 = 0
 CORE_CONSTANT_1 = 1
"""

QUILT_GUARDED = """\
From: Other Person <other@example.com>
Subject: util: beta helper
Date: Wed, 01 May 2024 10:00:00 +0000

Reads the beta guard.
---
 python/pkg/util.py | 1 +
Index: pkg/python/pkg/util.py
===================================================================
--- pkg.orig/python/pkg/util.py
+++ pkg/python/pkg/util.py
@@ -1,3 +1,4 @@
 \"\"\"Helpers.\"\"\"
+BETA_ENV = "DSV41_BETA"
 
 
"""


def quilt_dir(tmp_path: Path, patches: dict[str, str], series: str) -> Path:
    directory = tmp_path / "quilt"
    directory.mkdir()
    for name, text in patches.items():
        (directory / name).write_text(text)
    (directory / "series").write_text(series)
    return directory


def entries(fx: SeriesFixture) -> list[dict]:
    return tomllib.loads(fx.series_toml.read_text())["patches"]


def test_parse_dep3_keeps_every_field() -> None:
    header = parse_dep3(QUILT_PATCH, fallback_subject="x")
    assert header.subject == "core: offset by ten"
    assert header.body == "The offset was too small for the new callers.\n\nSecond paragraph of the description."
    assert header.author == "Quilt Person <quilt@example.com>"
    assert header.date == "1714521600 +0000"  # Last-Update 2024-05-01, midnight UTC
    assert header.trailers == (("Origin", "vendor, https://example.com/offset"), ("Forwarded", "https://example.com/pr/7"),
                               ("Last-Update", "2024-05-01"))
    assert header.upstream == "submitted"


def test_parse_mail_style_header() -> None:
    header = parse_dep3(QUILT_GUARDED, fallback_subject="x")
    assert (header.subject, header.author, header.body) == ("util: beta helper", "Other Person <other@example.com>",
                                                           "Reads the beta guard.")
    assert header.date == "1714557600 +0000" and header.upstream == "local"


def test_import_quilt_series(series_fx: SeriesFixture, tmp_path: Path) -> None:
    directory = quilt_dir(tmp_path, {"offset.diff": QUILT_PATCH, "beta-env.patch": QUILT_GUARDED},
                          "# comment\noffset.diff\nbeta-env.patch -p1\n")
    before = series_fx.series_toml.read_text()
    assert series_fx.cli("import", "--quilt", str(directory), "--feature", "beta") == 0
    after = entries(series_fx)
    assert [(e["file"], e["feature"], e.get("upstream", "local")) for e in after[-2:]] == [
        ("offset.patch", "beta", "submitted"), ("beta-env.patch", "beta", "local")]
    assert series_fx.series_toml.read_text().startswith(before.split("[[patches]]")[0])  # comments and tables kept
    offset = read_patch(series_fx.patches_dir / "offset.patch")
    assert offset.author == "Quilt Person <quilt@example.com>"
    assert offset.subject == "core: offset by ten"
    assert offset.trailers == (("Origin", "vendor, https://example.com/offset"), ("Forwarded", "https://example.com/pr/7"),
                               ("Last-Update", "2024-05-01"), ("Feature", "beta"))
    assert "Second paragraph of the description." in offset.message
    guarded = read_patch(series_fx.patches_dir / "beta-env.patch")
    assert guarded.trailer("Guard") == ["DSV41_BETA"] and guarded.files[0].path == "python/pkg/util.py"
    assert (series_fx.patches_dir / "series").read_text().splitlines()[-2:] == ["offset.patch", "beta-env.patch"]
    series_fx.load()
    # The imported files are what export writes: apply -> export --check is clean.
    tree = series_fx.root / ".forkbuild-work" / "series"
    apply_variant(context=series_fx.context(), variant=whole_series(series_fx.load()), dest=tree)
    export_series(context=series_fx.context(), tree=tree, check=True)


def test_import_refuses_to_overwrite(series_fx: SeriesFixture, tmp_path: Path) -> None:
    directory = quilt_dir(tmp_path, {"beta-limit.patch": QUILT_PATCH}, "beta-limit.patch\n")
    before = {path.name: path.read_bytes() for path in series_fx.patches_dir.iterdir()}
    toml = series_fx.series_toml.read_bytes()
    with pytest.raises(ConfigError, match="patches/beta-limit.patch exists already"):
        import_quilt(context=series_fx.context(), directory=directory, feature="beta")
    assert {path.name: path.read_bytes() for path in series_fx.patches_dir.iterdir()} == before
    assert series_fx.series_toml.read_bytes() == toml


def test_import_unknown_feature(series_fx: SeriesFixture, tmp_path: Path) -> None:
    directory = quilt_dir(tmp_path, {"offset.patch": QUILT_PATCH}, "offset.patch\n")
    with pytest.raises(ConfigError, match="perhaps you meant 'beta'"):
        import_quilt(context=series_fx.context(), directory=directory, feature="betta")


def test_import_patch_that_does_not_apply_writes_nothing(series_fx: SeriesFixture, tmp_path: Path) -> None:
    directory = quilt_dir(tmp_path, {"bad.patch": QUILT_PATCH.replace("return value + 1", "return value + 2")}, "bad.patch\n")
    toml = series_fx.series_toml.read_bytes()
    with pytest.raises(ApplyError, match="bad.patch does not apply"):
        import_quilt(context=series_fx.context(), directory=directory, feature="beta")
    assert not (series_fx.patches_dir / "bad.patch").exists()
    assert series_fx.series_toml.read_bytes() == toml


def make_source_range(fx: SeriesFixture) -> tuple[Git, str, str]:
    """A repository laid out like upstream + the series, with two new commits on top."""
    repo = Git(fx.upstream_repo)
    repo.run("checkout", "--quiet", "series")
    start = repo.head()
    edit(repo.path, "python/pkg/core.py", "    return value + 1\n", "    return value + 3\n")
    commit_all(repo, "core: offset by three\n\nThree.\n\nFeature: alpha\n")
    edit(repo.path, "python/pkg/util.py", '"""Helpers."""\n', '"""Helpers."""\nBETA = "DSV41_BETA"\n')
    commit_all(repo, "util: name the beta guard\n\nNo trailer here.\n\nReviewed-by: Someone <s@example.com>\n")
    return repo, start, repo.head()


def test_import_git_range_feature_disagreement_writes_nothing(series_fx: SeriesFixture) -> None:
    repo, start, end = make_source_range(series_fx)
    assert series_fx.cli("import", "--git-range", str(repo.path), f"{start}..{end}", "--feature", "beta") == ConfigError.return_code
    # The first commit says alpha, --feature says beta: refused, nothing written.
    assert len(entries(series_fx)) == 3


@pytest.mark.parametrize(("shape", "said"), [
    ("{start}..nope", "'nope' is no commit of"), ("{start}..--all", "'--all' is no commit of"),
    ("{start}...{end}", "A...B (the commits of either side) is no series")])
def test_a_range_end_that_is_no_commit_is_named(series_fx: SeriesFixture, capsys, shape, said) -> None:
    """Before, git's "ambiguous argument" came back under the whole git command line."""
    repo, start, end = make_source_range(series_fx)
    assert series_fx.cli("import", "--git-range", str(repo.path), shape.format(start=start, end=end)) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert said in err and "git failed" not in err
    assert len(entries(series_fx)) == 3


def test_importing_the_first_patch_of_a_feature_new_made_ends_with_a_series_check_accepts(
        series_fx: SeriesFixture, capsys: pytest.CaptureFixture) -> None:
    """Before, the feature kept its `ported = false` beside its new patch: every command then refused series.toml."""
    assert series_fx.cli("new", "gamma", "--variant", "full", "--requires", "beta") == 0
    repo = Git(series_fx.upstream_repo)
    repo.run("checkout", "--quiet", "series")
    start = repo.head()
    edit(repo.path, "python/pkg/util.py", '"""Helpers."""\n', '"""Helpers."""\nGAMMA = 1\n')
    commit_all(repo, "util: gamma\n\nFeature: gamma\n")
    capsys.readouterr()
    assert series_fx.cli("import", "--git-range", str(repo.path), f"{start}..{repo.head()}") == 0
    err = capsys.readouterr().err
    assert "feature gamma has a patch: its `ported = false` marker is removed, and it joins full" in err
    assert "warning" not in err, err  # what was asked, done: said, not warned of
    series = series_fx.load()
    assert series.features["gamma"].ported and "gamma" in series.variants["full"].features  # as `new` asked
    assert not (series_fx.root / ".forkbuild-work" / "new" / "gamma.variants").exists()
    assert series_fx.cli("check") == 0


def test_import_git_range_uses_each_commits_feature(series_fx: SeriesFixture) -> None:
    repo, start, end = make_source_range(series_fx)
    with pytest.raises(ConfigError, match="has no `Feature:` trailer"):
        git_range_incoming(repo.path, f"{start}..{end}", feature=None)
    repo.run("commit", "--quiet", "--amend", "-m",
             "util: name the beta guard\n\nNo trailer here.\n\nReviewed-by: Someone <s@example.com>\nFeature: beta\n")
    end = repo.head()
    assert series_fx.cli("import", "--git-range", str(repo.path), f"{start}..{end}") == 0
    assert [(e["file"], e["feature"]) for e in entries(series_fx)[-2:]] == [
        ("alpha-core-offset-by-three.patch", "alpha"), ("beta-util-name-the-beta-guard.patch", "beta")]
    info = read_patch(series_fx.patches_dir / "beta-util-name-the-beta-guard.patch")
    assert info.trailers == (("Reviewed-by", "Someone <s@example.com>"), ("Feature", "beta"), ("Guard", "DSV41_BETA"),
                             ("Forwarded", "no"))  # DEP-3's default where the commit says nothing
    assert info.author == "Fixture Author <author@example.com>"
    assert series_fx.cli("check") == 0


def _symlink(repo: Git) -> str:
    (repo.path / "python/pkg/link").symlink_to("/etc/passwd")
    return "creates or changes a symbolic link"


def _generated_module(repo: Git) -> str:
    (repo.path / "python/pkg/fork_guards.py").write_text("GUARDS = ()\n")
    return "changes python/pkg/fork_guards.py, which forkbuild generates"


@pytest.mark.parametrize("change", [_symlink, _generated_module], ids=["symlink", "generated-guards-module"])
def test_a_git_range_commit_the_series_may_not_hold_is_refused_and_nothing_is_written(
        series_fx: SeriesFixture, capfd: pytest.CaptureFixture[str], change) -> None:
    """The rule every patch of the series is held to (check, apply) holds at the import: it used to
    write the patch, and the series it left failed `forkbuild check`. A range from a series work
    tree may hold the generated guards commit, or a change to it: a patch of a file that exists
    only after the series (check said "applies only with fuzz 1")."""
    text = series_fx.series_toml.read_text()
    series_fx.series_toml.write_text(text.replace("[upstream]", 'guards_module = "pkg.fork_guards"\n\n[upstream]', 1))
    repo, _, start = make_source_range(series_fx)
    problem = change(repo)
    commit_all(repo, "pkg: a change\n\nFeature: alpha\n")
    toml, files = series_fx.series_toml.read_bytes(), sorted(series_fx.patches_dir.iterdir())
    assert series_fx.cli("import", "--git-range", str(repo.path), f"{start}..{repo.head()}") == 7
    assert f"{repo.path}@{repo.head()[:12]}: {problem}" in capfd.readouterr().err
    assert series_fx.series_toml.read_bytes() == toml and sorted(series_fx.patches_dir.iterdir()) == files
    assert series_fx.cli("check") == 0


def test_a_subject_with_brackets_is_printed_as_it_is(series_fx: SeriesFixture, capfd: pytest.CaptureFixture[str]) -> None:
    """A subject is the user's text, not rich markup: "[fix]" is kept and "[/b]" does not crash the table."""
    repo, start, _ = make_source_range(series_fx)
    repo.run("commit", "--quiet", "--amend", "-m", "[fix] beta [/b]\n\nFeature: beta\n")
    capfd.readouterr()
    assert series_fx.cli("import", "--git-range", str(repo.path), f"{start}..{repo.head()}") == 0
    assert "[fix] beta [/b]" in capfd.readouterr().err

def test_import_and_export_suggest_features_through_config_near_miss(series_fx: SeriesFixture, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from forkbuild import exporter, importer

    # One "perhaps you meant" for series.toml, export and import (no inline difflib copies).
    monkeypatch.setattr(importer, "near_miss", lambda name, known: " (suggested by config.near_miss)")
    monkeypatch.setattr(exporter, "near_miss", lambda name, known: " (suggested by config.near_miss)")
    directory = quilt_dir(tmp_path, {"offset.patch": QUILT_PATCH}, "offset.patch\n")
    with pytest.raises(ConfigError, match="suggested by config.near_miss"):
        import_quilt(context=series_fx.context(), directory=directory, feature="betta")
    tree = Git(apply_variant(context=series_fx.context(), variant=whole_series(series_fx.load()), dest=tmp_path / "tree").dest)
    edit(tree.path, "python/pkg/core.py", "    return value + 1\n", "    return value + 2\n")
    commit_all(tree, "core: offset by two\n\nFeature: alpah\n")
    with pytest.raises(ConfigError, match="suggested by config.near_miss"):
        export_series(context=series_fx.context(), tree=tree.path)


def test_import_unknown_feature_without_a_near_miss_says_to_add_it(series_fx: SeriesFixture, tmp_path: Path) -> None:
    directory = quilt_dir(tmp_path, {"offset.patch": QUILT_PATCH}, "offset.patch\n")
    with pytest.raises(ConfigError, match=r"add a \[features.NAME\] table first"):
        import_quilt(context=series_fx.context(), directory=directory, feature="zzzz")


def test_a_bad_dep3_date_is_a_config_error_naming_each_patch(series_fx: SeriesFixture, tmp_path: Path) -> None:
    bad = QUILT_GUARDED.replace("Date: Wed, 01 May 2024 10:00:00 +0000", "Date: last tuesday")
    directory = quilt_dir(tmp_path, {"one.patch": bad, "two.patch": bad.replace("tuesday", "friday")},
                          "one.patch\ntwo.patch\n")
    with pytest.raises(ConfigError) as caught:
        read_quilt_dir(directory, feature="beta")
    assert caught.value.problems == (
        f"{directory / 'one.patch'}: Date: 'last tuesday' is not a mail (RFC 2822) date, e.g. 'Wed, 01 May 2024 10:00:00 +0000'",
        f"{directory / 'two.patch'}: Date: 'last friday' is not a mail (RFC 2822) date, e.g. 'Wed, 01 May 2024 10:00:00 +0000'")
    assert series_fx.cli("import", "--quilt", str(directory), "--feature", "beta") == ConfigError.return_code


def test_a_failure_before_series_toml_is_written_removes_the_patches_written(series_fx: SeriesFixture, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from forkbuild.io import fsutil

    directory = quilt_dir(tmp_path, {"offset.patch": QUILT_PATCH, "guarded.patch": QUILT_GUARDED},
                          "offset.patch\nguarded.patch\n")
    before = {path.name: path.read_bytes() for path in series_fx.patches_dir.iterdir()}
    toml = series_fx.series_toml.read_bytes()
    real = fsutil.os.replace
    renamed = []

    def full_disk_at_series_toml(source, target):
        if Path(target).name == "series.toml":  # the last file written: the patches are in place by now
            raise OSError(28, "No space left on device")
        renamed.append(Path(target).name)
        real(source, target)

    monkeypatch.setattr(fsutil.os, "replace", full_disk_at_series_toml)
    with pytest.raises(OSError, match="No space"):
        import_quilt(context=series_fx.context(), directory=directory, feature="beta")
    monkeypatch.undo()
    assert {"offset.patch", "guarded.patch"} <= set(renamed)
    assert {path.name: path.read_bytes() for path in series_fx.patches_dir.iterdir()} == before
    assert series_fx.series_toml.read_bytes() == toml
    series_fx.load()  # still valid: no unlisted patch file left behind


def test_a_reversed_quilt_patch_is_refused_not_imported_forward(series_fx: SeriesFixture, tmp_path: Path) -> None:
    directory = quilt_dir(tmp_path, {"offset.diff": QUILT_PATCH}, "offset.diff -p1 -R\n")
    toml = series_fx.series_toml.read_bytes()
    with pytest.raises(ConfigError) as raised:
        import_quilt(context=series_fx.context(), directory=directory, feature="beta")
    assert any("series:1: offset.diff -R: quilt applies it reversed" in problem for problem in raised.value.problems)
    assert series_fx.series_toml.read_bytes() == toml and not (series_fx.patches_dir / "offset.patch").exists()


def test_import_moves_an_existing_series_tree_to_the_new_series(series_fx: SeriesFixture, tmp_path: Path) -> None:
    tree = series_fx.root / ".forkbuild-work" / "series"
    assert series_fx.cli("apply", "--all") == 0
    before = Git(tree).head()
    directory = quilt_dir(tmp_path, {"offset.diff": QUILT_PATCH}, "offset.diff\n")
    result = import_quilt(context=series_fx.context(), directory=directory, feature="beta")
    assert result.tree == tree
    worktree = Git(tree)
    assert worktree.commits(before, worktree.head()) and worktree.log1("%s", worktree.head()) == "core: offset by ten"
    assert "return value + 10" in (tree / "python/pkg/core.py").read_text()
    series_fx.load()
    export_series(context=series_fx.context(), tree=tree, check=True)  # export agrees: nothing to write
