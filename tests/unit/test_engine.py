"""The apply engine through its call sites: plumbing commits equal `git am`'s, the
3-way rung merges commits (stale index lines do not matter), `apply --all` stops
at a failing patch and resumes, export never drops a patch implicitly, `drop`."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tomllib

from fixtures import PatchSpec, SeriesFixture, commit_all, git_am, make_series
from forkbuild.applier import apply_plan, apply_variant, plan_variant
from forkbuild.errors import ApplyError, DirtyTreeError, LockBusy, RebaseStopped
from forkbuild.io.git import Git
from forkbuild.series.combination import of_variant
from forkbuild.upstream.cache import UpstreamCache
from forkbuild.worktree.guard import tree_guard
from rebase_fixtures import CONFLICT_CHANGES, NEW_VERSION, move_pin, rebase_args, release, tree

INDEX_LINE = re.compile(r"^index ([0-9a-f]+)\.\.", re.MULTILINE)


def patch_files(fx: SeriesFixture) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(fx.patches_dir.glob("*.patch"))}


def listed(fx: SeriesFixture) -> list[str]:
    return [entry["file"] for entry in tomllib.loads(fx.series_toml.read_text())["patches"]]


def changed_lines(text: str) -> list[str]:
    return [line for line in text.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++ ", "--- ")) and line != "---"]


def work(fx: SeriesFixture) -> Git:
    return Git(fx.root / ".forkbuild-work" / "series")


# -- plumbing ------------------------------------------------------------------

def test_plumbing_commits_are_the_commits_git_am_makes(series_fx: SeriesFixture, tmp_path) -> None:
    result = apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "full"), dest=tmp_path / "w")
    cache_git = UpstreamCache(series_fx.cache).git()
    am_tree = cache_git.add_worktree(tmp_path / "am", result.base_commit)
    am = git_am(am_tree, [record.entry.path for record in result.records], three_way=False,
                    committer_date_is_author_date=True)
    assert am.status == 0, am.stderr
    # Same author, date, message, committer and tree: the same commit ids.
    assert [record.commit for record in result.records] == am_tree.commits(result.base_commit, am_tree.head())
    assert Git(tmp_path / "w").head() == am_tree.head()
    assert not Git(tmp_path / "w").status_porcelain()  # the one checkout at the end matches HEAD


# -- true 3-way from commits ------------------------------------------------------

def stale_index_lines(fx: SeriesFixture, name: str) -> None:
    """Point the patch's index lines at blobs that exist nowhere (as after an earlier patch changed)."""
    path = fx.patches_dir / name
    path.write_text(INDEX_LINE.sub(lambda m: m[0].replace(m[1], "1" * len(m[1])), path.read_text()))


def test_stale_index_lines_do_not_turn_off_the_3_way_rung(git_series_fx: SeriesFixture, tmp_path) -> None:
    fx = git_series_fx
    stale_index_lines(fx, "beta-limit.patch")
    commit = release(fx, CONFLICT_CHANGES)  # alpha conflicts with 2.0
    # The fixture is what it claims: `git am -3` of beta without alpha has no preimage to merge with.
    assert fx.cli(*rebase_args(commit)) == RebaseStopped.return_code
    guards_only = UpstreamCache(fx.cache).git().add_worktree(tmp_path / "am", tree(fx).head())
    am = git_am(guards_only, [fx.patches_dir / "beta-limit.patch"], three_way=True)
    assert am.status != 0 and "lacks necessary blobs" in am.stderr
    guards_only.run("am", "--abort")
    # After --skip, beta (whose context holds alpha's guard line) merges from its commit on the old pin.
    assert fx.cli("rebase", "--skip") == 0
    report = json.loads((fx.root / "build" / "rebase" / f"1.0-to-{NEW_VERSION}.json").read_text())
    outcomes = {patch["file"]: patch["outcome"] for patch in report["patches"]}
    assert outcomes == {"guards.patch": "exact", "alpha-scale.patch": "skipped", "beta-limit.patch": "3-way"}
    assert "not in the cache" not in json.dumps(report)


def test_after_a_skip_a_later_conflict_stops_with_markers_and_names_the_upstream_change(
        git_series_fx: SeriesFixture, capfd) -> None:
    fx = git_series_fx
    stale_index_lines(fx, "beta-limit.patch")
    # Both lines around beta's hunk change: no rung of git's, nor the porter, can place it.
    changes = (*CONFLICT_CHANGES, ("python/pkg/util.py", "def limit(value, ceiling=100):\n    return min(value, ceiling)\n",
                                   "def limit(value, ceiling=200):\n    return min(value, ceiling, 1000)\n"))
    assert fx.cli(*rebase_args(release(fx, changes))) == RebaseStopped.return_code
    capfd.readouterr()
    assert fx.cli("rebase", "--skip") == RebaseStopped.return_code  # now beta stops
    err = capfd.readouterr().err
    util = (tree(fx).path / "python/pkg/util.py").read_text()
    assert "<<<<<<<" in util and ">>>>>>>" in util  # markers a person can resolve
    assert tree(fx).unmerged_paths() == ["python/pkg/util.py"]
    assert "conflicted: python/pkg/util.py" in err
    assert "-def limit(value, ceiling=100):" in err and "+def limit(value, ceiling=200):" in err  # what collided
    # Resolve by keeping both: upstream's ceiling and the patch's guard.
    (tree(fx).path / "python/pkg/util.py").write_text(util.split("<<<<<<<")[0] + "def limit(value, ceiling=200):\n"
                                                    "    from pkg.environ import envs\n"
                                                    "    ceiling = 50 if envs.DSV41_BETA else ceiling\n"
                                                    "    return min(value, ceiling, 1000)\n"
                                                    + util.split(">>>>>>>")[1].split("\n", 1)[1])
    tree(fx).run("add", "python/pkg/util.py")
    assert fx.cli("rebase", "--continue") == 0
    report = json.loads((fx.root / "build" / "rebase" / f"1.0-to-{NEW_VERSION}.json").read_text())
    assert {patch["file"]: patch["outcome"] for patch in report["patches"]}["beta-limit.patch"] == "resolved"
    assert "ceiling=200" in report["patches"][2]["collided"]


# -- repair: apply --all stops at the failing patch ----------------------------------

def stopped_at_alpha(fx: SeriesFixture, capfd) -> str:
    assert fx.cli("apply", "--all") == 0  # 1.0 in the cache: the patches' preimage blobs are there
    move_pin(fx, release(fx, CONFLICT_CHANGES))
    capfd.readouterr()
    assert fx.cli("apply", "--all") == ApplyError.return_code
    return capfd.readouterr().err


def test_apply_all_stops_at_the_failing_patch_with_markers_then_continue_and_export(git_series_fx, capfd) -> None:
    fx = git_series_fx
    err = stopped_at_alpha(fx, capfd)
    assert "alpha-scale.patch does not apply" in err and "conflicted: python/pkg/core.py" in err
    core = work(fx).path / "python/pkg/core.py"
    assert "<<<<<<<" in core.read_text()
    # Any other apply or an export refuses while it is stopped.
    assert fx.cli("apply", "--all") == DirtyTreeError.return_code
    assert fx.cli("export") == DirtyTreeError.return_code
    assert fx.cli("apply", "--continue") == ApplyError.return_code  # still unmerged
    core.write_text(re.sub(r"<<<<<<<.*?>>>>>>> [^\n]*\n",
                           "def scale(value):  # 2.0\n    if envs.DSV41_ALPHA:\n        return value * 3\n    return value * 2  # doubled in 2.0\n",
                           core.read_text(), flags=re.S))
    work(fx).run("add", "python/pkg/core.py")
    assert fx.cli("apply", "--continue") == 0
    assert [subject for subject in work(fx).out("log", "--format=%s", "HEAD").splitlines()[:3]] == [
        "util: lower the limit when DSV41_BETA is set", "core: scale by alpha when DSV41_ALPHA is set",
        "environ: fork guard section"]
    assert fx.cli("export") == 0
    assert "return value * 2  # doubled in 2.0" in (fx.patches_dir / "alpha-scale.patch").read_text()
    assert listed(fx) == ["guards.patch", "alpha-scale.patch", "beta-limit.patch"]
    # The repaired series applies on the new pin without a stop.
    assert fx.cli("apply", "--all", "--dir", str(fx.root / "again")) == 0


def test_skip_then_export_stops_and_keep_holds_the_patch_as_it_is(git_series_fx, capfd) -> None:
    fx = git_series_fx
    stopped_at_alpha(fx, capfd)
    before = (fx.patches_dir / "alpha-scale.patch").read_bytes()
    assert fx.cli("apply", "--skip") == 0
    assert fx.cli("export") == DirtyTreeError.return_code
    err = capfd.readouterr().err
    assert "patches/alpha-scale.patch: it did not apply" in err
    assert "forkbuild export --keep alpha-scale.patch" in err and "--drop alpha-scale.patch" in err
    assert (fx.patches_dir / "alpha-scale.patch").read_bytes() == before
    # Follow the first hint: the patch stays, byte for byte and in its place.
    assert fx.cli("export", "--keep", "alpha-scale.patch") == 0
    assert (fx.patches_dir / "alpha-scale.patch").read_bytes() == before
    assert listed(fx) == ["guards.patch", "alpha-scale.patch", "beta-limit.patch"]
    assert "alpha-scale.patch" in (fx.patches_dir / "series").read_text()
    # ... and `apply --all` stops at it again, to repair it; --abort puts the tree back.
    head = work(fx).head()
    assert fx.cli("apply", "--all") == ApplyError.return_code
    assert fx.cli("apply", "--abort") == 0
    assert work(fx).head() == head and not work(fx).status_porcelain()


def test_skip_then_export_drop_removes_it_on_purpose_and_keeps_a_copy(git_series_fx, capfd) -> None:
    fx = git_series_fx
    stopped_at_alpha(fx, capfd)
    before = (fx.patches_dir / "alpha-scale.patch").read_bytes()
    assert fx.cli("apply", "--skip") == 0
    assert fx.cli("export", "--drop", "alpha-scale.patch") == 0
    assert "dropped (--drop" in capfd.readouterr().err
    assert listed(fx) == ["guards.patch", "beta-limit.patch"]
    assert not (fx.patches_dir / "alpha-scale.patch").exists()
    [copy] = (fx.root / ".forkbuild-work" / "dropped").glob("*/alpha-scale.patch")
    assert copy.read_bytes() == before


# -- no implicit drop ------------------------------------------------------------------

def test_export_refuses_a_commit_reset_away_and_its_hint_gets_it_back(series_fx, capfd) -> None:
    fx = series_fx
    assert fx.cli("apply", "--all") == 0
    before = patch_files(fx)
    beta = work(fx).head()
    work(fx).reset_hard("HEAD~1")
    capfd.readouterr()
    assert fx.cli("export") == DirtyTreeError.return_code
    err = capfd.readouterr().err
    hint = re.search(r"get it back: (git -C \S+ cherry-pick [0-9a-f]+)", err)
    assert "patches/beta-limit.patch: its commit" in err and hint
    assert patch_files(fx) == before
    assert hint[1].split()[-1] == beta[:12]
    work(fx).run("cherry-pick", beta[:12])  # the hint, as printed
    assert fx.cli("export") == 0
    assert patch_files(fx) == before and listed(fx) == ["guards.patch", "alpha-scale.patch", "beta-limit.patch"]


def test_export_drop_of_a_patch_still_in_the_tree_is_refused_and_its_hint_works(series_fx, capfd) -> None:
    fx = series_fx
    assert fx.cli("apply", "--all") == 0
    before = patch_files(fx)
    assert fx.cli("export", "--drop", "no-such.patch") == 2
    capfd.readouterr()
    assert fx.cli("export", "--drop", "alpha-scale.patch") == DirtyTreeError.return_code
    assert patch_files(fx) == before
    hint = re.search(r"git -C (\S+) rebase --onto ([0-9a-f]+)\^ ([0-9a-f]+)", capfd.readouterr().err)
    Git(hint[1]).run("rebase", "--onto", f"{hint[2]}^", hint[3])
    assert fx.cli("export", "--drop", "alpha-scale.patch") == 0
    assert listed(fx) == ["guards.patch", "beta-limit.patch"]
    [copy] = (fx.root / ".forkbuild-work" / "dropped").glob("*/alpha-scale.patch")
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == before["alpha-scale.patch"]


def test_drop_says_what_it_removes_and_its_hint_keeps_export_from_bringing_it_back(series_fx, capfd) -> None:
    fx = series_fx
    assert fx.cli("apply", "--all") == 0
    before = (fx.patches_dir / "alpha-scale.patch").read_bytes()
    capfd.readouterr()
    assert fx.cli("drop", "alpha-scale.patch") == 0
    err = capfd.readouterr().err
    assert "dropped patches/alpha-scale.patch (feature alpha, +3/-0 lines) and its series.toml entry" in err
    assert listed(fx) == ["guards.patch", "beta-limit.patch"]
    [copy] = (fx.root / ".forkbuild-work" / "dropped").glob("*/alpha-scale.patch")
    assert copy.read_bytes() == before
    hint = re.search(r"remove it there: (git -C (\S+) rebase --onto ([0-9a-f]+)\^ ([0-9a-f]+))", err)
    assert hint, err
    Git(hint[2]).run("rebase", "--onto", f"{hint[3]}^", hint[4])
    beta = (fx.patches_dir / "beta-limit.patch").read_bytes()
    assert fx.cli("export") == 0
    assert listed(fx) == ["guards.patch", "beta-limit.patch"]
    assert not (fx.patches_dir / "alpha-scale.patch").exists()
    # beta's context no longer holds alpha's guard line; its own change is the same.
    assert changed_lines((fx.patches_dir / "beta-limit.patch").read_text()) == changed_lines(beta.decode())


def test_a_patch_exported_from_the_tree_then_dropped_is_not_brought_back_by_export(series_fx, capfd) -> None:
    """export records the commit of every patch it writes: drop of a patch exported after the tree was
    applied names its commit, and export (and export --check, whose hint is export) refuses to
    write it back; the hint given (re-apply) leaves the drop standing."""
    fx = series_fx
    assert fx.cli("apply", "--all") == 0
    work = Git(fx.root / ".forkbuild-work" / "series")
    (work.path / "python/pkg/core.py").write_text((work.path / "python/pkg/core.py").read_text() + "# more\n")
    commit_all(work, "core: a comment\n\nFeature: alpha\nForwarded: no\n")
    assert fx.cli("export") == 0
    assert "alpha-core-a-comment.patch" in listed(fx)
    capfd.readouterr()
    assert fx.cli("drop", "alpha-core-a-comment.patch") == 0
    assert f"still holds its commit {work.head()[:12]}" in capfd.readouterr().err
    for args in (("export", "--check"), ("export",)):
        assert fx.cli(*args) == 5
        err = capfd.readouterr().err
        assert "is patches/alpha-core-a-comment.patch, which `forkbuild drop` removed" in err
    assert not (fx.patches_dir / "alpha-core-a-comment.patch").exists() and "alpha-core-a-comment.patch" not in listed(fx)
    command = re.search(r"`(forkbuild apply --all --dir \S+)`", err)[1]
    assert fx.cli(*command.split()[1:]) == 0
    assert fx.cli("export", "--check") == 0 and "alpha-core-a-comment.patch" not in listed(fx)


# -- --onto ---------------------------------------------------------------------------

def test_onto_the_pinned_version_is_a_no_op_and_an_older_one_warns(git_series_fx, capfd) -> None:
    fx = git_series_fx
    before = patch_files(fx), fx.series_toml.read_text()
    assert fx.cli("rebase", "--onto", fx.upstream_commit, "--version", "1.0") == 0
    assert "already on pkg 1.0: nothing to do" in capfd.readouterr().err
    assert (patch_files(fx), fx.series_toml.read_text()) == before
    assert not (fx.root / ".forkbuild-work" / "rebase-journal").exists()
    older = release(fx, (("python/pkg/__init__.py", '__version__ = "1.0"', '__version__ = "0.9"'),))
    assert fx.cli("rebase", "--onto", older, "--version", "0.9", "--accept-drops") == 0
    assert "0.9 is older than the pinned 1.0: this rebase is a downgrade" in capfd.readouterr().err


# -- the fast rung: one git apply for patches of different files, commits from one fast-import ----

DISJOINT = (
    PatchSpec(file="core-triple.patch", feature="guards", subject="core: triple", body="Three, not two.",
              edits=(("python/pkg/core.py", "    return value * 2\n", "    return value * 3\n"),)),
    PatchSpec(file="util-ceiling.patch", feature="alpha", subject="util: a lower ceiling", body="Ten.",
              edits=(("python/pkg/util.py", "def limit(value, ceiling=100):\n", "def limit(value, ceiling=10):\n"),)),
    PatchSpec(file="new-module.patch", feature="beta", subject="pkg: a new module", body="One constant.",
              edits=(("python/pkg/extra.py", "", "EXTRA = 1\n"),)),
)


def git_runs(monkeypatch) -> list[tuple[str, ...]]:
    """Every git command forkbuild runs from here on (its arguments), in order."""
    runs: list[tuple[str, ...]] = []
    real = Git.run

    def recording(self, *args, **kwargs):
        runs.append(args)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Git, "run", recording)
    return runs


def test_patches_of_different_files_apply_in_one_git_run_with_the_commits_git_am_makes(tmp_path, monkeypatch) -> None:
    fx = make_series(tmp_path, specs=DISJOINT)
    UpstreamCache(fx.cache).ensure(fx.load().upstream)
    runs = git_runs(monkeypatch)
    result = apply_variant(context=fx.context(), variant=of_variant(fx.load(), "full"), dest=tmp_path / "w")
    assert [record.outcome.value for record in result.records] == ["exact", "exact", "exact"]
    assert [run[0] for run in runs].count("apply") == 1
    assert [run[0] for run in runs].count("fast-import") == 1
    am_tree = UpstreamCache(fx.cache).git().add_worktree(tmp_path / "am", result.base_commit)
    assert git_am(am_tree, [record.entry.path for record in result.records], three_way=False,
                      committer_date_is_author_date=True).status == 0
    assert [record.commit for record in result.records] == am_tree.commits(result.base_commit, am_tree.head())
    assert (tmp_path / "w/python/pkg/extra.py").read_text() == "EXTRA = 1\n"
    assert not Git(tmp_path / "w").status_porcelain()


def test_a_re_apply_makes_the_same_commits_and_a_changed_patch_changes_only_its_own(tmp_path) -> None:
    fx = make_series(tmp_path, specs=DISJOINT)
    first = apply_variant(context=fx.context(), variant=of_variant(fx.load(), "full"), dest=tmp_path / "w")
    again = apply_variant(context=fx.context(), variant=of_variant(fx.load(), "full"), dest=tmp_path / "w")
    assert again.head_commit == first.head_commit
    patch = fx.patches_dir / "new-module.patch"
    patch.write_text(patch.read_text().replace("+EXTRA = 1", "+EXTRA = 2"))
    changed = apply_variant(context=fx.context(), variant=of_variant(fx.load(), "full"), dest=tmp_path / "w")
    assert [record.commit for record in changed.records][:2] == [record.commit for record in first.records][:2]
    assert changed.records[2].commit != first.records[2].commit
    assert (tmp_path / "w/python/pkg/extra.py").read_text() == "EXTRA = 2\n"


def test_a_failing_patch_in_a_group_leaves_the_others_their_own_commits(tmp_path) -> None:
    fx = make_series(tmp_path, specs=DISJOINT)
    patch = fx.patches_dir / "util-ceiling.patch"
    patch.write_text(patch.read_text().replace("\n     return min(value, ceiling)", "\n     return max(value, ceiling)"))
    plan = plan_variant(fx.load(), of_variant(fx.load(), "full"))
    result = apply_plan(context=fx.context(), plan=plan, dest=tmp_path / "w")
    assert [record.outcome.value for record in result.records] == ["exact", "conflict", "exact"]
    tree = Git(tmp_path / "w")
    assert "ceiling=100" in (tree.path / "python/pkg/util.py").read_text()
    assert (tree.path / "python/pkg/extra.py").read_text() == "EXTRA = 1\n"
    assert tree.out("log", "--format=%s", "-2", result.records[2].commit).splitlines() == [
        "pkg: a new module", "core: triple"]


BELOW_A_FILE = """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: Fixture Author <author@example.com>
Date: Tue, 14 Nov 2023 22:13:20 +0000
Subject: [PATCH] core: a file below core.py

---
diff --git a/python/pkg/core.py/below b/python/pkg/core.py/below
new file mode 100644
index 0000000000000000000000000000000000000000..587be6b4c3f93f93c489c0111bba5596147a26cb
--- /dev/null
+++ b/python/pkg/core.py/below
@@ -0,0 +1 @@
+x
"""


def test_a_patch_putting_a_file_below_an_upstream_file_is_refused_not_applied_over_it(tmp_path) -> None:
    # The fast rung's private index does not hold core.py: git would create core.py/below there,
    # and fast-import would then replace the file core.py by a directory. The full index refuses it.
    fx = make_series(tmp_path, specs=DISJOINT)
    (fx.patches_dir / "below.patch").write_text(BELOW_A_FILE)
    fx.series_toml.write_text(fx.series_toml.read_text().replace(
        '[[patches]]\nfile = "new-module.patch"', '[[patches]]\nfile = "below.patch"\nfeature = "beta"\n\n'
                                                  '[[patches]]\nfile = "new-module.patch"'))
    result = apply_plan(context=fx.context(), plan=plan_variant(fx.load(), of_variant(fx.load(), "full")), dest=tmp_path / "w")
    outcomes = {record.entry.file: record.outcome.value for record in result.records}
    assert outcomes == {"core-triple.patch": "exact", "util-ceiling.patch": "exact", "below.patch": "conflict",
                        "new-module.patch": "exact"}
    assert "return value * 3" in (tmp_path / "w/python/pkg/core.py").read_text()


def test_continue_skip_and_abort_take_the_tree_lock_and_a_second_run_refuses(git_series_fx, capfd) -> None:
    fx = git_series_fx
    stopped_at_alpha(fx, capfd)
    stop_file = work(fx).git_dir / "forkbuild-stop.json"
    before = stop_file.read_bytes(), work(fx).head(), (work(fx).path / "python/pkg/core.py").read_bytes()
    with tree_guard(work(fx).path, "apply"):  # another forkbuild works in the tree right now
        for action in ("--continue", "--skip", "--abort"):
            assert fx.cli("apply", action) == LockBusy.return_code
            assert f"forkbuild apply (pid {os.getpid()}" in capfd.readouterr().err
    # Nothing was settled, skipped or reset under the other run.
    assert (stop_file.read_bytes(), work(fx).head(), (work(fx).path / "python/pkg/core.py").read_bytes()) == before
    assert fx.cli("apply", "--abort") == 0  # once it is gone, the same command works
    assert not stop_file.exists()


def test_deletions_and_mode_changes_make_the_commits_git_am_makes(tmp_path) -> None:
    fx = make_series(tmp_path, specs=DISJOINT)
    repo = Git(fx.upstream_repo)
    repo.run("checkout", "--quiet", "series")
    repo.run("rm", "--quiet", "python/pkg/environ.py")
    (repo.path / "python/pkg/util.py").chmod(0o755)
    made = commit_all(repo, "pkg: no environ, an executable util\n\nFeature: beta\n")
    assert "new mode 100755" in repo.format_patch(made) and "deleted file mode" in repo.format_patch(made)
    (fx.patches_dir / "remove-environ.patch").write_text(repo.format_patch(made))
    repo.run("checkout", "--quiet", "main")
    fx.series_toml.write_text(fx.series_toml.read_text().replace(
        '[[patches]]\nfile = "new-module.patch"\nfeature = "beta"\n',
        '[[patches]]\nfile = "new-module.patch"\nfeature = "beta"\n\n'
        '[[patches]]\nfile = "remove-environ.patch"\nfeature = "beta"\n'))
    result = apply_variant(context=fx.context(), variant=of_variant(fx.load(), "full"), dest=tmp_path / "w")
    assert [record.outcome.value for record in result.records] == ["exact"] * 4
    am_tree = UpstreamCache(fx.cache).git().add_worktree(tmp_path / "am", result.base_commit)
    assert git_am(am_tree, [record.entry.path for record in result.records], three_way=False,
                      committer_date_is_author_date=True).status == 0
    assert [record.commit for record in result.records] == am_tree.commits(result.base_commit, am_tree.head())
    assert not (tmp_path / "w/python/pkg/environ.py").exists()
    assert os.access(tmp_path / "w/python/pkg/util.py", os.X_OK)


GROUPED = (DISJOINT[0], DISJOINT[1],
           PatchSpec(file="core-quadruple.patch", feature="beta", subject="core: quadruple", body="Four.",
                     edits=(("python/pkg/core.py", "    return value * 3\n", "    return value * 4\n"),)),
           DISJOINT[2])


def test_a_later_group_applies_on_the_small_index_the_first_one_wrote_with_the_commits_git_am_makes(
        tmp_path, monkeypatch) -> None:
    fx = make_series(tmp_path, specs=GROUPED)
    UpstreamCache(fx.cache).ensure(fx.load().upstream)
    runs = git_runs(monkeypatch)
    result = apply_variant(context=fx.context(), variant=of_variant(fx.load(), "full"), dest=tmp_path / "w")
    assert [record.outcome.value for record in result.records] == ["exact"] * 4
    commands = [run[0] for run in runs]
    assert commands.count("apply") == 2  # core.py is named again by the third patch: a second group
    assert commands.count("update-index") == 1  # the index is written once, for the files of both
    am_tree = UpstreamCache(fx.cache).git().add_worktree(tmp_path / "am", result.base_commit)
    assert git_am(am_tree, [record.entry.path for record in result.records], three_way=False,
                      committer_date_is_author_date=True).status == 0
    assert [record.commit for record in result.records] == am_tree.commits(result.base_commit, am_tree.head())
    assert "return value * 4" in (tmp_path / "w/python/pkg/core.py").read_text()


def test_after_a_group_that_does_not_apply_the_next_patches_apply_on_the_index_as_it_was(tmp_path, monkeypatch) -> None:
    """git applies a group all or nothing: the small index is reused as it was before the failed run."""
    fx = make_series(tmp_path, specs=GROUPED)
    patch = fx.patches_dir / "core-quadruple.patch"
    patch.write_text(patch.read_text().replace("-    return value * 3", "-    return value * 5"))
    runs = git_runs(monkeypatch)
    result = apply_plan(context=fx.context(), plan=plan_variant(fx.load(), of_variant(fx.load(), "full")), dest=tmp_path / "w")
    assert [record.outcome.value for record in result.records] == ["exact", "exact", "conflict", "exact"]
    assert [run[0] for run in runs].count("update-index") == 1
    tree = Git(tmp_path / "w")
    assert (tree.path / "python/pkg/extra.py").read_text() == "EXTRA = 1\n"
    assert "return value * 3" in (tree.path / "python/pkg/core.py").read_text()
    assert tree.out("log", "--format=%s", "-3", result.records[3].commit).splitlines() == [
        "pkg: a new module", "util: a lower ceiling", "core: triple"]
    assert tree.out("show", f"{result.records[3].commit}:python/pkg/util.py") == \
        (tree.path / "python/pkg/util.py").read_text().rstrip("\n")


def test_an_apply_removes_the_private_indexes_a_killed_engine_left_and_keeps_a_live_ones(tmp_path) -> None:
    import subprocess
    import sys

    fx = make_series(tmp_path, specs=DISJOINT)
    apply_variant(context=fx.context(), variant=of_variant(fx.load(), "full"), dest=tmp_path / "w")
    git_dir = Git(tmp_path / "w").git_dir
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        pid = int(dead.stdout)
        left = [git_dir / f"forkbuild-engine-small-{pid}-1.index", git_dir / f"forkbuild-engine-{pid}.index",
                git_dir / f"forkbuild-engine-{pid}.index.lock"]
        running = git_dir / f"forkbuild-engine-small-{live.pid}-1.index"
        for path in (*left, running):
            path.write_bytes(b"DIRC")
        apply_variant(context=fx.context(), variant=of_variant(fx.load(), "full"), dest=tmp_path / "w")
        assert [path.name for path in left if path.exists()] == []
        assert running.exists()  # its forkbuild is still running: its index is its own
    finally:
        live.kill()
        live.wait()


def test_drop_reads_a_patch_list_written_as_an_inline_array(series_fx, capfd) -> None:
    fx = series_fx
    text = fx.series_toml.read_text()
    entries = re.findall(r'\[\[patches\]\]\nfile = "([^"]+)"\nfeature = "([^"]+)"\n', text)
    assert len(entries) == 3
    inline = "patches = [" + ", ".join(f'{{ file = "{f}", feature = "{g}" }}' for f, g in entries) + "]\n"
    text = re.sub(r'\[\[patches\]\]\nfile = "[^"]+"\nfeature = "[^"]+"\n\n?', "", text)
    fx.series_toml.write_text(inline + text if text.startswith("[") else text.replace("[series]", inline + "\n[series]", 1))
    assert fx.load().patches  # valid TOML, the same series
    assert fx.cli("drop", "alpha-scale.patch") == 0, capfd.readouterr().err
    assert listed(fx) == ["guards.patch", "beta-limit.patch"]
    assert [entry.file for entry in fx.load().patches] == ["guards.patch", "beta-limit.patch"]
