"""Strict apply on the fixture series: one commit per patch, offsets reported,
never fuzz, left-out patches merged with the series' blobs, dependencies named,
work never clobbered, unsafe patches refused."""

from __future__ import annotations

import re

import pytest

from fixtures import DEFAULT_PATCHES, FEATURES_TOML, VARIANTS_TOML, PatchSpec, make_series
from forkbuild.applier import apply_plan, apply_variant, plan_variant, read_state
from forkbuild.errors import ApplyError, DirtyTreeError, UnsafePatchError
from forkbuild.io.fsutil import flocked
from forkbuild.io.git import Git
from forkbuild.series.combination import of_variant, whole_series


def log(tree) -> list[str]:
    return Git(tree).out("log", "--format=%an <%ae>|%ad|%s", "--date=raw", "HEAD").splitlines()[::-1]


def test_one_commit_per_patch_with_the_patch_author_date_and_message(series_fx, tmp_path):
    result = apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "full"), dest=tmp_path / "w")
    assert [record.outcome for record in result.records] == ["exact", "exact", "exact"]
    assert log(tmp_path / "w")[1:] == [f"Fixture Author <author@example.com>|1700000000 +0000|{spec.subject}"
                                       for spec in DEFAULT_PATCHES]
    body = Git(tmp_path / "w").out("log", "-1", "--format=%B", result.records[1].commit)
    assert "Feature: alpha" in body and "Guard: DSV41_ALPHA" in body
    assert "return value * 3" in (tmp_path / "w" / "python/pkg/core.py").read_text()


def test_same_patches_same_commit_ids(series_fx, tmp_path):
    first = apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "full"), dest=tmp_path / "a")
    second = apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "full"), dest=tmp_path / "b")
    assert first.head_commit == second.head_commit


def test_variant_leaving_a_patch_out_merges_the_later_one_with_the_series_blobs(series_fx, tmp_path):
    result = apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "lite"), dest=tmp_path / "w")
    assert [(record.entry.file, record.outcome) for record in result.records] == [
        ("guards.patch", "exact"), ("beta-limit.patch", "3-way")]
    environ = (tmp_path / "w" / "python/pkg/environ.py").read_text()
    assert "DSV41_BETA" in environ and "DSV41_ALPHA" not in environ


def _shift_hunks(text: str, by: int) -> str:
    def shift(match: re.Match) -> str:
        return f"@@ -{int(match[1]) + by},{match[2]} +{int(match[3]) + by},{match[4]} @@"
    return re.sub(r"@@ -(\d+),(\d+) \+(\d+),(\d+) @@", shift, text)


def test_offsets_are_applied_and_reported(series_fx, tmp_path):
    patch = series_fx.patches_dir / "beta-limit.patch"
    patch.write_text(_shift_hunks(patch.read_text(), 2))
    result = apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "full"), dest=tmp_path / "w")
    record = result.records[-1]
    assert record.outcome == "offset"
    assert "python/pkg/util.py hunk 1: -2 lines" in record.detail


def test_apply_reports_one_line_a_patch_with_outcome_feature_and_detail(series_fx, tmp_path, capsys):
    patch = series_fx.patches_dir / "beta-limit.patch"
    patch.write_text(_shift_hunks(patch.read_text(), 2))
    assert series_fx.cli("apply", "--variant", "full", "--dir", str(tmp_path / "w")) == 0
    lines = [line.split() for line in capsys.readouterr().err.splitlines()]
    assert [words[:3] for words in lines if words and words[0] in ("exact", "offset")] == [
        ["exact", "guards.patch", "guards"], ["exact", "alpha-scale.patch", "alpha"],
        ["offset", "beta-limit.patch", "beta:"]]
    assert "python/pkg/util.py hunk 1: -2 lines" in " ".join(lines[-2])


def test_a_patch_whose_context_does_not_match_is_never_fuzzed_in(series_fx, tmp_path):
    patch = series_fx.patches_dir / "beta-limit.patch"
    patch.write_text(patch.read_text().replace(" def limit(value, ceiling=100):", " def limit(value, ceiling=99):"))
    with pytest.raises(ApplyError, match="beta-limit.patch"):
        apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "full"), dest=tmp_path / "w")
    assert "ceiling = 50" not in (tmp_path / "w" / "python/pkg/util.py").read_text()


GAMMA = PatchSpec(file="gamma.patch", feature="gamma", subject="core: scale alpha further", body="Builds on alpha.",
                  guards=("DSV41_GAMMA",),
                  edits=(("python/pkg/core.py", "        return value * 3\n", "        return value * 3 + envs.DSV41_GAMMA\n"),))
GAMMA_FEATURE = '\n[features.gamma]\ndescription = "on top of alpha"\nguards = [{ env = "DSV41_GAMMA", type = "int", default = "0" }]\n'
GAMMA_VARIANT = '\n[variants.nogamma]\nfeatures = ["guards", "beta", "gamma"]\n'


def test_a_patch_that_needs_a_left_out_one_names_it(tmp_path):
    fixture = make_series(tmp_path, specs=(*DEFAULT_PATCHES, GAMMA), features_toml=FEATURES_TOML + GAMMA_FEATURE,
                          variants_toml=VARIANTS_TOML + GAMMA_VARIANT)
    with pytest.raises(ApplyError) as caught:
        apply_variant(context=fixture.context(), variant=of_variant(fixture.load(), "nogamma"), dest=tmp_path / "w")
    assert "gamma.patch" in caught.value.message
    assert "it needs alpha-scale.patch (left out of nogamma" in caught.value.message


def test_uncommitted_changes_are_never_clobbered(series_fx, tmp_path):
    apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "full"), dest=tmp_path / "w")
    core = tmp_path / "w" / "python/pkg/core.py"
    core.write_text(core.read_text() + "# my work\n")
    with pytest.raises(DirtyTreeError, match="uncommitted changes") as caught:
        apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "lite"), dest=tmp_path / "w")
    assert "git -C" in caught.value.hint and "export" in caught.value.hint
    assert core.read_text().endswith("# my work\n")


def test_commits_not_in_the_series_are_never_clobbered(series_fx, tmp_path):
    apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "full"), dest=tmp_path / "w")
    tree = Git(tmp_path / "w")
    (tmp_path / "w" / "notes.txt").write_text("mine\n")
    tree.run("add", "notes.txt")
    tree.run("commit", "-qm", "my commit")
    mine = tree.head()
    with pytest.raises(DirtyTreeError, match="1 commit"):
        apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "full"), dest=tmp_path / "w")
    assert tree.head() == mine


def test_a_clean_forkbuild_tree_is_refreshed_in_place(series_fx, tmp_path):
    apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "full"), dest=tmp_path / "w")
    result = apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "lite"), dest=tmp_path / "w")
    assert read_state(tmp_path / "w").head == result.head_commit
    assert "DSV41_ALPHA" not in (tmp_path / "w" / "python/pkg/environ.py").read_text()


def test_a_directory_forkbuild_did_not_make_is_left_alone(series_fx, tmp_path):
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "keep.txt").write_text("x")
    with pytest.raises(DirtyTreeError, match="not a forkbuild work tree"):
        apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "full"), dest=tmp_path / "w")
    assert (tmp_path / "w" / "keep.txt").read_text() == "x"
    # a refused apply leaves no lock file beside the folder (inside the series tree one made it "dirty")
    assert not list(tmp_path.glob(".w.forkbuild-lock"))


@pytest.mark.parametrize(("old", "new", "problem"), [
    ("a/python/pkg/util.py", "a/../outside.py", "leaves the tree"),
    ("b/python/pkg/util.py", "b//etc/passwd", "absolute path"),
    ("b/python/pkg/util.py", "b/.git/hooks/pre-commit", "touches .git/"),
])
def test_unsafe_patches_are_refused_naming_patch_and_path(series_fx, tmp_path, old, new, problem):
    patch = series_fx.patches_dir / "beta-limit.patch"
    patch.write_text(patch.read_text().replace(old, new))
    with pytest.raises(UnsafePatchError) as caught:
        apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "full"), dest=tmp_path / "w")
    assert "patches/beta-limit.patch" in caught.value.message and problem in caught.value.message
    assert not (tmp_path / "w").exists()


def test_a_patch_creating_a_symlink_is_refused(series_fx, tmp_path):
    link = ("diff --git a/python/pkg/link b/python/pkg/link\nnew file mode 120000\nindex 0000000..1111111\n"
            "--- /dev/null\n+++ b/python/pkg/link\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n")
    patch = series_fx.patches_dir / "beta-limit.patch"
    patch.write_text(patch.read_text() + link)
    with pytest.raises(UnsafePatchError, match="symbolic link"):
        apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "full"), dest=tmp_path / "w")


def test_a_failing_patch_keeps_the_ones_applied_before_it(series_fx, tmp_path):
    patch = series_fx.patches_dir / "alpha-scale.patch"
    patch.write_text(patch.read_text().replace("     return value * 2", "     return value * 5"))
    context = series_fx.context()
    result = apply_plan(context=context, plan=plan_variant(context.series, of_variant(context.series, "full")), dest=tmp_path / "w")
    # beta's environ.py context holds alpha's guard: without alpha its exact apply fails,
    # and the 3-way rung (the preimage blobs its index lines name) merges it next to guards'.
    assert [(record.entry.file, record.outcome) for record in result.records] == [
        ("guards.patch", "exact"), ("alpha-scale.patch", "conflict"), ("beta-limit.patch", "3-way")]
    assert [line.split("|")[-1] for line in log(tmp_path / "w")[1:]] == [DEFAULT_PATCHES[0].subject,
                                                                          DEFAULT_PATCHES[2].subject]
    assert result.head_commit == result.records[2].commit
    assert not Git(tmp_path / "w").status_porcelain()


def test_a_held_cache_lock_is_a_lock_timeout_not_a_traceback(series_fx, tmp_path, monkeypatch):
    from forkbuild.errors import LockTimeout
    from forkbuild.upstream import cache as cache_module

    apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "full"), dest=tmp_path / "full")  # upstream imported
    monkeypatch.setattr(cache_module, "LOCK_TIMEOUT_SECONDS", 0.1)
    # "lite" leaves alpha out: the whole series' blobs are made under the lock first.
    with flocked(series_fx.cache / "lock"), pytest.raises(LockTimeout, match="held by another process"):
        apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "lite"), dest=tmp_path / "lite")


def test_dir_naming_an_existing_file_is_refused_and_the_file_kept(series_fx, tmp_path):
    (tmp_path / "w").write_text("mine\n")
    with pytest.raises(DirtyTreeError, match="is not a directory"):
        apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "full"), dest=tmp_path / "w")
    assert series_fx.cli("apply", "--dir", str(tmp_path / "w")) == DirtyTreeError.return_code
    assert (tmp_path / "w").read_text() == "mine\n"
    # No --dir given: the series tree's own place is taken. The hint says to move the file, not to pick a --dir
    # (export reads the series tree there).
    tree = series_fx.root / ".forkbuild-work" / "series"
    tree.parent.mkdir(exist_ok=True)
    tree.write_text("mine\n")
    with pytest.raises(DirtyTreeError, match="is not a directory") as caught:
        apply_variant(context=series_fx.context(), variant=whole_series(series_fx.load()), dest=tree)
    assert caught.value.hint.startswith(f"move {tree} away")
    tree.rename(tmp_path / "moved")  # the hint followed
    assert series_fx.cli("apply", "--all") == 0 and (tmp_path / "moved").read_text() == "mine\n"


@pytest.mark.parametrize("text", ["{not json", '{"variant": "", "base": "abc", "patches": []}', '["a list"]'])
def test_a_corrupt_state_file_is_a_dirty_tree_error_with_a_hint(series_fx, tmp_path, text):
    from forkbuild.worktree.state import STATE_FILE

    apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "full"), dest=tmp_path / "w")
    (Git(tmp_path / "w").git_dir / STATE_FILE).write_text(text)
    with pytest.raises(DirtyTreeError, match="forkbuild state .* is unreadable") as caught:
        apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "full"), dest=tmp_path / "w")
    assert "apply again" in caught.value.hint
    assert series_fx.cli("export", "--dir", str(tmp_path / "w")) == DirtyTreeError.return_code


@pytest.mark.parametrize(("command", "place"), [
    (["apply", "--variant", "full", "--dir"], "patches/tree"), (["apply", "--all", "--dir"], "patches/tree"),
    (["rebase", "--onto", "0" * 40, "--version", "2.0", "--dir"], "patches/tree"),
    (["build-wheel", "--out"], "patches/x.patch"), (["compose", "--out"], "patches/c.patch"),
    (["matrix", "--format", "json", "--out"], "series.toml"), (["matrix", "--format", "bake", "--out"], "patches"),
    (["--cache"], "patches/cache")])  # and then the command: the cache is no output, yet a rebase would restore it
def test_no_output_goes_into_the_series_files(series_fx, capsys, command, place):
    """series.toml and every file under patches/ are the series' own (written by its writer alone; a
    rebase backs them all up and puts them back): --dir, --out name a place outside them."""
    before = {path.name: path.read_bytes() for path in [series_fx.series_toml, *series_fx.patches_dir.iterdir()]}
    assert series_fx.cli(*command, str(series_fx.root / place), *(["status"] if command == ["--cache"] else [])) == 2
    assert "forkbuild would write into the series' own files" in " ".join(capsys.readouterr().err.split())
    assert {path.name: path.read_bytes() for path in [series_fx.series_toml, *series_fx.patches_dir.iterdir()]} == before
