"""export: apply -> export is a no-op; drift, noise, refresh, trailers, new/removed/reordered commits."""

from __future__ import annotations

import tomllib

import pytest

from fixtures import SeriesFixture, commit_all, edit, git_am
from forkbuild.applier import apply_variant
from forkbuild.errors import ConfigError, DirtyTreeError, ExportDriftError, ForkbuildError
from forkbuild.exporter import export_series, normalized, patch_name
from forkbuild.io.git import Git
from forkbuild.series.combination import of_variant, whole_series
from forkbuild.series.edit import quilt_series_text
from forkbuild.series.patchfile import read_patch


def make_tree(fx: SeriesFixture, *, variant: str | None = None) -> Git:
    dest = fx.root / ".forkbuild-work" / (variant or "series")
    series = fx.load()
    apply_variant(context=fx.context(), variant=of_variant(series, variant) if variant else whole_series(series), dest=dest)
    return Git(dest)


def snapshot(fx: SeriesFixture) -> dict[str, bytes]:
    files = {path.name: path.read_bytes() for path in fx.patches_dir.iterdir()}
    files["series.toml"] = fx.series_toml.read_bytes()
    return files


def toml_patches(fx: SeriesFixture) -> list[tuple[str, str]]:
    return [(entry["file"], entry["feature"]) for entry in tomllib.loads(fx.series_toml.read_text())["patches"]]


def amend(tree: Git, commit: str, change) -> None:
    """Rewrite `commit` in place with `change(tree)` applied, keeping the commits after it."""
    later = tree.commits(commit, tree.head())
    tree.run("checkout", "--quiet", "--detach", commit)
    change(tree)
    tree.run("add", "--all", ".")
    tree.run("commit", "--quiet", "--amend", "--no-edit")
    for sha in later:
        tree.run("cherry-pick", "--allow-empty", sha)


def test_apply_then_export_is_a_noop(series_fx: SeriesFixture) -> None:
    tree = make_tree(series_fx)
    before = snapshot(series_fx)
    plan = export_series(context=series_fx.context(), tree=tree.path)
    assert [p.action for p in plan.patches] == ["unchanged"] * 3
    after = snapshot(series_fx)
    assert after.pop("series") == quilt_series_text(spec.file for spec in series_fx.specs).encode()
    assert after == before
    assert series_fx.cli("export", "--check") == 0


def test_check_lists_a_changed_patch_and_writes_nothing(series_fx: SeriesFixture) -> None:
    tree = make_tree(series_fx)
    export_series(context=series_fx.context(), tree=tree.path)
    amend(tree, tree.commits(tree.head() + "~3", tree.head())[1],
          lambda t: edit(t.path, "python/pkg/core.py", "return value * 3", "return value * 4"))
    before = snapshot(series_fx)
    with pytest.raises(ExportDriftError) as error:
        export_series(context=series_fx.context(), tree=tree.path, check=True)
    assert "patches/alpha-scale.patch (changed)" in error.value.message
    assert "beta-limit.patch" not in error.value.message
    assert snapshot(series_fx) == before
    assert series_fx.cli("export", "--check") == ExportDriftError.return_code
    assert series_fx.cli("export") == 0
    assert "value * 4" in (series_fx.patches_dir / "alpha-scale.patch").read_text()
    assert series_fx.cli("export", "--check") == 0


def test_offset_only_change_is_left_alone_unless_refresh(series_fx: SeriesFixture) -> None:
    tree = make_tree(series_fx)
    export_series(context=series_fx.context(), tree=tree.path)
    # Three lines more at the top of util.py: beta's util.py hunk moves by 3 lines
    # and its blob ids change, nothing else does.
    first = tree.commits(tree.head() + "~3", tree.head())[0]
    amend(tree, first, lambda t: edit(t.path, "python/pkg/util.py", '"""Helpers."""\n', '"""Helpers."""\n\n# one\n# two\n'))
    before = (series_fx.patches_dir / "beta-limit.patch").read_text()
    plan = export_series(context=series_fx.context(), tree=tree.path)
    actions = {p.file: p.action for p in plan.patches}
    assert actions == {"guards.patch": "changed", "alpha-scale.patch": "unchanged", "beta-limit.patch": "noise"}
    assert (series_fx.patches_dir / "beta-limit.patch").read_text() == before
    assert series_fx.cli("export", "--check") == 0

    plan = export_series(context=series_fx.context(), tree=tree.path, refresh=True)
    refreshed = (series_fx.patches_dir / "beta-limit.patch").read_text()
    assert {p.file: p.action for p in plan.patches}["beta-limit.patch"] == "changed"
    assert refreshed != before and normalized(refreshed) == normalized(before)
    assert series_fx.cli("export", "--check", "--refresh") == 0


def test_trailers_round_trip(series_fx: SeriesFixture) -> None:
    tree = make_tree(series_fx)
    message = tree.out("log", "-1", "--format=%B", tree.head())
    assert message.endswith("Feature: beta\nGuard: DSV41_BETA\nForwarded: no")
    export_series(context=series_fx.context(), tree=tree.path)
    text = (series_fx.patches_dir / "beta-limit.patch").read_text()
    assert "\nFeature: beta\nGuard: DSV41_BETA\nForwarded: no\n\ndiff --git" in text
    assert read_patch(series_fx.patches_dir / "beta-limit.patch").trailers == (
        ("Feature", "beta"), ("Guard", "DSV41_BETA"), ("Forwarded", "no"))


def test_feature_trailer_disagreeing_with_series_toml_names_both(series_fx: SeriesFixture) -> None:
    tree = make_tree(series_fx)
    message = tree.out("log", "-1", "--format=%B").replace("Feature: beta", "Feature: alpha").replace("Guard: DSV41_BETA", "Guard: DSV41_ALPHA")
    tree.run("commit", "--quiet", "--amend", "-m", message)
    with pytest.raises(ConfigError) as error:
        export_series(context=series_fx.context(), tree=tree.path)
    text = str(error.value)
    assert "Feature: alpha" in text and "patches/beta-limit.patch" in text and "'beta'" in text


def test_guard_trailer_must_belong_to_the_feature(series_fx: SeriesFixture) -> None:
    tree = make_tree(series_fx)
    message = tree.out("log", "-1", "--format=%B") + "\nGuard: DSV41_ALPHA\n"
    tree.run("commit", "--quiet", "--amend", "-m", message)
    with pytest.raises(ConfigError, match="Guard: DSV41_ALPHA is not a guard of feature 'beta'"):
        export_series(context=series_fx.context(), tree=tree.path)


def test_new_commit_becomes_a_new_entry_keeping_comments(series_fx: SeriesFixture) -> None:
    tree = make_tree(series_fx)
    edit(tree.path, "python/pkg/core.py", "    return value + 1\n", "    return value + 2\n")
    commit_all(tree, "core: offset by two\n\nTwo is better.\n\nFeature: alpha\n")
    assert series_fx.cli("export", "--check") == ExportDriftError.return_code
    assert series_fx.cli("export") == 0
    name = "alpha-core-offset-by-two.patch"
    assert toml_patches(series_fx)[-1] == (name, "alpha")
    assert "# The series, in order." in series_fx.series_toml.read_text()
    assert "# Variants" in series_fx.series_toml.read_text().split(name)[1]
    assert (series_fx.patches_dir / "series").read_text().splitlines()[-1] == name
    series_fx.load()  # still valid
    assert series_fx.cli("export", "--check") == 0
    # The tree's new commit is now part of the series: apply may refresh the tree.
    assert series_fx.cli("apply", "--all", "--dir", str(tree.path)) == 0


def test_new_commit_without_feature_trailer_is_refused(series_fx: SeriesFixture) -> None:
    tree = make_tree(series_fx)
    edit(tree.path, "python/pkg/core.py", "    return value + 1\n", "    return value + 2\n")
    commit_all(tree, "core: offset by two\n\nNo trailer.\n")
    with pytest.raises(ConfigError, match="needs exactly one `Feature: <name>` trailer"):
        export_series(context=series_fx.context(), tree=tree.path)


def test_unknown_feature_suggests_near_miss(series_fx: SeriesFixture) -> None:
    tree = make_tree(series_fx)
    edit(tree.path, "python/pkg/core.py", "    return value + 1\n", "    return value + 2\n")
    commit_all(tree, "core: offset by two\n\nFeature: alpah\n")
    with pytest.raises(ConfigError, match="perhaps you meant 'alpha'"):
        export_series(context=series_fx.context(), tree=tree.path)


def test_a_commit_gone_stops_export_and_only_drop_removes_its_entry_and_file(series_fx: SeriesFixture) -> None:
    tree = make_tree(series_fx)
    commits = tree.commits(tree.head() + "~3", tree.head())
    tree.run("reset", "--quiet", "--hard", commits[1])
    before = (series_fx.patches_dir / "beta-limit.patch").read_bytes()
    assert series_fx.cli("export") == 5  # never an implicit drop
    assert (series_fx.patches_dir / "beta-limit.patch").read_bytes() == before
    assert series_fx.cli("export", "--drop", "beta-limit.patch") == 0
    assert toml_patches(series_fx) == [("guards.patch", "guards"), ("alpha-scale.patch", "alpha")]
    assert not (series_fx.patches_dir / "beta-limit.patch").exists()
    assert (series_fx.patches_dir / "series").read_text().split("\n")[-3:] == ["guards.patch", "alpha-scale.patch", ""]


def test_reordered_commits_reorder_series_toml(series_fx: SeriesFixture) -> None:
    tree = make_tree(series_fx)
    guards, alpha, beta = tree.commits(tree.head() + "~3", tree.head())
    tree.run("reset", "--quiet", "--hard", guards)
    tree.run("cherry-pick", beta)
    tree.run("cherry-pick", alpha)
    assert series_fx.cli("export") == 0
    assert [file for file, _ in toml_patches(series_fx)] == ["guards.patch", "beta-limit.patch", "alpha-scale.patch"]
    assert series_fx.cli("export", "--check") == 0


def test_reworded_subject_keeps_the_entry_by_position(series_fx: SeriesFixture) -> None:
    tree = make_tree(series_fx)
    message = tree.out("log", "-1", "--format=%B").replace("util: lower the limit", "util: a lower limit")
    tree.run("commit", "--quiet", "--amend", "-m", message)
    plan = export_series(context=series_fx.context(), tree=tree.path)
    assert [(p.file, p.action) for p in plan.patches][-1] == ("beta-limit.patch", "changed")
    assert "Subject: util: a lower limit" in (series_fx.patches_dir / "beta-limit.patch").read_text()


def test_dirty_tree_is_refused_and_left_alone(series_fx: SeriesFixture) -> None:
    tree = make_tree(series_fx)
    edit(tree.path, "python/pkg/core.py", "value + 1", "value + 5")
    before = snapshot(series_fx)
    with pytest.raises(DirtyTreeError, match="uncommitted changes"):
        export_series(context=series_fx.context(), tree=tree.path)
    assert "value + 5" in (tree.path / "python/pkg/core.py").read_text()
    assert snapshot(series_fx) == before


def test_variant_tree_is_refused(series_fx: SeriesFixture) -> None:
    tree = make_tree(series_fx, variant="lite")
    with pytest.raises(ForkbuildError, match="holds variant 'lite' only"):
        export_series(context=series_fx.context(), tree=tree.path)


def test_missing_tree_says_how_to_make_it(series_fx: SeriesFixture) -> None:
    with pytest.raises(ForkbuildError) as error:
        export_series(context=series_fx.context(), tree=series_fx.root / "nowhere")
    assert "forkbuild apply --all" in error.value.hint


def test_patch_name_from_feature_and_subject() -> None:
    assert patch_name("draft_tau", "sampling: scale the draft temperature") == "draft-tau-sampling-scale-the-draft-temperature.patch"
    assert patch_name("guards", "guards: startup report") == "guards-startup-report.patch"
    assert len(patch_name("x", "word " * 40)) <= len("x-") + 48 + len(".patch")


def test_check_on_a_fresh_clone_applies_the_series_first(series_fx: SeriesFixture) -> None:
    assert not (series_fx.root / ".forkbuild-work").exists()
    assert series_fx.cli("export", "--check") == ExportDriftError.return_code  # patches/series not written yet
    assert (series_fx.root / ".forkbuild-work" / "series" / "python" / "pkg" / "core.py").is_file()
    assert series_fx.cli("export") == 0
    assert series_fx.cli("export", "--check") == 0


def test_apply_and_export_refuse_unsaved_work_with_the_same_advice(series_fx: SeriesFixture) -> None:
    tree = make_tree(series_fx)
    edit(tree.path, "python/pkg/core.py", "value + 1", "value + 5")

    def refusals() -> tuple[DirtyTreeError, DirtyTreeError]:
        with pytest.raises(DirtyTreeError) as by_export:
            export_series(context=series_fx.context(), tree=tree.path)
        with pytest.raises(DirtyTreeError) as by_apply:
            apply_variant(context=series_fx.context(), variant=whole_series(series_fx.load()), dest=tree.path)
        return by_export.value, by_apply.value

    by_export, by_apply = refusals()
    assert (by_export.message, by_export.hint) == (by_apply.message, by_apply.hint)
    assert "uncommitted changes" in by_export.message
    assert f"forkbuild export --dir {tree.path}" in by_export.hint and "reset --hard" in by_export.hint

    tree.run("checkout", "--", ".")
    stale = series_fx.patches_dir / "beta-limit.patch"  # applied already: `git am` stops on it
    assert git_am(tree, [stale]).status != 0
    by_export, by_apply = refusals()
    assert (by_export.message, by_export.hint) == (by_apply.message, by_apply.hint)
    assert "`git am` is in progress" in by_export.message and "am --abort" in by_export.hint


def pull_a_newer_alpha(fx: SeriesFixture) -> bytes:
    """patches/alpha-scale.patch changes under the tree, as a `git pull` of the series would."""
    path = fx.patches_dir / "alpha-scale.patch"
    path.write_text(path.read_text().replace("Scale by three instead of two.", "Scale by three (reviewed)."))
    return path.read_bytes()


def test_export_refuses_a_tree_older_than_patches(series_fx: SeriesFixture) -> None:
    tree = make_tree(series_fx)
    newer = pull_a_newer_alpha(series_fx)
    before = snapshot(series_fx)
    for check in (False, True):
        with pytest.raises(DirtyTreeError) as error:
            export_series(context=series_fx.context(), tree=tree.path, check=check)
        assert "patches/alpha-scale.patch (changed)" in error.value.message
        assert "beta-limit.patch" not in error.value.message
        assert f"forkbuild apply --all --dir {tree.path}" in error.value.hint
    assert series_fx.cli("export") == DirtyTreeError.return_code
    assert series_fx.cli("export", "--check") == DirtyTreeError.return_code
    assert snapshot(series_fx) == before and before["alpha-scale.patch"] == newer
    # The advice works: the re-applied tree exports to exactly what patches/ holds.
    assert series_fx.cli("apply", "--all") == 0
    assert series_fx.cli("export", "--check") == ExportDriftError.return_code  # only patches/series is missing
    assert series_fx.cli("export") == 0
    assert (series_fx.patches_dir / "alpha-scale.patch").read_bytes() == newer


def test_a_stale_tree_with_own_commits_is_told_how_to_move_them(series_fx: SeriesFixture) -> None:
    tree = make_tree(series_fx)
    applied = tree.head()
    edit(tree.path, "python/pkg/core.py", "    return value + 1\n", "    return value + 2\n")
    mine = commit_all(tree, "core: offset by two\n\nFeature: alpha\n")
    pull_a_newer_alpha(series_fx)
    with pytest.raises(DirtyTreeError) as error:
        export_series(context=series_fx.context(), tree=tree.path)
    assert f"cherry-pick {applied[:12]}..{mine[:12]}" in error.value.hint
    assert not (series_fx.patches_dir / "alpha-core-offset-by-two.patch").exists()


def test_patches_added_or_dropped_since_apply_are_named(series_fx: SeriesFixture) -> None:
    tree = make_tree(series_fx)
    text = series_fx.series_toml.read_text()
    series_fx.series_toml.write_text(text.replace('[[patches]]\nfile = "beta-limit.patch"\nfeature = "beta"\n', ""))
    (series_fx.patches_dir / "beta-limit.patch").unlink()
    with pytest.raises(DirtyTreeError, match=r"patches/beta-limit.patch \(no longer in series.toml\)"):
        export_series(context=series_fx.context(), tree=tree.path)
    assert not (series_fx.patches_dir / "beta-limit.patch").exists()


def test_export_records_what_it_wrote_so_the_next_export_is_allowed(series_fx: SeriesFixture) -> None:
    tree = make_tree(series_fx)
    amend(tree, tree.commits(tree.head() + "~3", tree.head())[1],
          lambda t: edit(t.path, "python/pkg/core.py", "return value * 3", "return value * 4"))
    assert series_fx.cli("export") == 0
    amend(tree, tree.commits(tree.head() + "~3", tree.head())[1],
          lambda t: edit(t.path, "python/pkg/core.py", "return value * 4", "return value * 5"))
    assert series_fx.cli("export") == 0
    assert "value * 5" in (series_fx.patches_dir / "alpha-scale.patch").read_text()


@pytest.mark.parametrize("body", ["Scale by three.\n---\ntext after a dashes line\n\nFeature: alpha\nGuard: DSV41_ALPHA\n",
                                  "Scale by three.\n---\nFeature: alpha\nGuard: DSV41_ALPHA\n"])
def test_a_commit_message_round_trips_byte_for_byte_through_export_and_apply(series_fx: SeriesFixture, body) -> None:
    """A `---` line in a message is no diffstat separator (export writes none): the text after it
    survives export -> apply -> export, and trailers after it are found (issue 38)."""
    tree = make_tree(series_fx)
    _, alpha, beta = tree.commits(tree.head() + "~3", tree.head())
    message = f"core: scale by alpha when DSV41_ALPHA is set\n\n{body}"
    tree.run("checkout", "--quiet", "--detach", alpha)
    tree.run("commit", "--quiet", "--amend", "-m", message)
    tree.run("cherry-pick", beta)

    def alpha_message() -> str:
        raw = tree.out("cat-file", "commit", tree.commits(tree.head() + "~3", tree.head())[1])
        return raw.split("\n\n", 1)[1] + "\n"

    assert alpha_message() == message
    assert series_fx.cli("export") == 0
    exported = snapshot(series_fx)
    assert series_fx.cli("apply", "--all") == 0
    assert alpha_message() == message
    assert series_fx.cli("export") == 0
    assert snapshot(series_fx) == exported


def test_a_hand_reorder_of_series_toml_is_refused_by_export_and_honoured_by_apply(series_fx: SeriesFixture, capfd) -> None:
    """Before, the next export silently put the tree's order back (issue 38)."""
    fx = series_fx
    assert fx.cli("apply", "--all") == 0
    text = fx.series_toml.read_text()
    alpha = text[text.index('[[patches]]\nfile = "alpha-scale.patch"'):text.index('[[patches]]\nfile = "beta-limit.patch"')]
    fx.series_toml.write_text(text.replace(alpha, "") + "\n" + alpha)  # alpha after beta
    reordered = fx.series_toml.read_bytes()
    capfd.readouterr()
    assert fx.cli("export") == DirtyTreeError.return_code
    assert "the order of [[patches]]" in capfd.readouterr().err
    assert fx.series_toml.read_bytes() == reordered
    assert fx.cli("apply", "--all") == 0  # the hint: re-apply, in the new order
    assert fx.cli("export") == 0
    assert [file for file, _ in toml_patches(fx)] == ["guards.patch", "beta-limit.patch", "alpha-scale.patch"]


def test_a_copy_patch_applies_and_exports_with_its_trailers(series_fx: SeriesFixture) -> None:
    # A `copy from`/`copy to` section (format-patch -C): apply --all takes it, and export writes the commit
    # forkbuild made from it (the copy as a new file) with its Feature:/Guard: trailers; then the series is stable.
    fx = series_fx
    patch = fx.patches_dir / "beta-limit.patch"
    patch.write_text(patch.read_text().rstrip("\n") + "\ndiff --git a/python/pkg/util.py b/python/pkg/util_copy.py\n"
                     "similarity index 100%\ncopy from python/pkg/util.py\ncopy to python/pkg/util_copy.py\n")
    assert fx.cli("apply", "--all") == 0
    assert fx.cli("export") == 0
    info = read_patch(patch)
    assert info.trailer("Feature") == ["beta"] and "python/pkg/util_copy.py" in {change.path for change in info.files}
    assert fx.cli("apply", "--all", "--dir", str(fx.root / "again")) == 0
    assert fx.cli("export", "--check", "--dir", str(fx.root / "again")) == 0
