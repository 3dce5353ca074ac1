"""rebase on fixture repos: the ladder's outcomes, conflicts (--continue, --skip),
upstreamed and emptied patches, the pin and the report."""

from __future__ import annotations

import json
import shutil
import tomllib

from fixtures import SeriesFixture, make_series
from forkbuild.errors import DirtyTreeError, LockBusy, LockTimeout, RebaseStopped
from forkbuild.io.fsutil import flocked
from forkbuild.io.git import Git
from forkbuild.series.writer import SeriesChange, SeriesTransaction
from forkbuild.worktree.guard import TreeGuard
from rebase_fixtures import (
    CONFLICT_CHANGES,
    LADDER_CHANGES,
    NEW_VERSION,
    UPSTREAMED_CHANGES,
    WITH_DOCS,
    fingerprint,
    rebase_args,
    release,
    tree,
)


def stopped_at_a_conflict(fx: SeriesFixture) -> dict[str, str]:
    """A rebase stopped at a conflict; the fingerprint of before it (the pinned upstream fetched)."""
    commit = release(fx, CONFLICT_CHANGES)
    fx.cli("fetch")
    before = fingerprint(fx)
    assert fx.cli(*rebase_args(commit)) == RebaseStopped.return_code
    return before


def report_of(fx: SeriesFixture) -> dict:
    return json.loads((fx.root / "build" / "rebase" / f"1.0-to-{NEW_VERSION}.json").read_text())


def outcomes(report: dict) -> dict[str, str]:
    return {patch["file"]: patch["outcome"] for patch in report["patches"]}


def pinned(fx: SeriesFixture) -> dict:
    return tomllib.loads(fx.series_toml.read_text())["upstream"]


def test_ladder_clean_offset_three_way(git_series_fx: SeriesFixture, capfd) -> None:
    fx = git_series_fx
    commit = release(fx, LADDER_CHANGES)
    assert fx.cli(*rebase_args(commit)) == 0
    # No warnings on a clean run (the export knows which patch files the rebase tree was built from).
    assert "warning" not in capfd.readouterr().err
    report = report_of(fx)
    assert outcomes(report) == {"guards.patch": "exact", "alpha-scale.patch": "offset", "beta-limit.patch": "3-way"}
    assert "python/pkg/core.py hunk 1: +5 lines" in report["patches"][1]["detail"]
    assert report["auto_applied"] == 3 and report["check"]["ok"]
    assert report["patches"][2]["files"] == ["python/pkg/environ.py", "python/pkg/util.py"]
    # Range-diff pairs the old and new commit of each patch ("1: ... = 1: ..." or "! ").
    assert all(patch["range_diff"].startswith("1:  ") for patch in report["patches"])
    assert pinned(fx)["version"] == NEW_VERSION and pinned(fx)["git"]["commit"] == commit
    assert "# The fixture's upstream." in fx.series_toml.read_text()  # comments survive
    # The 3-way merged patch was re-exported against 2.0; the series now applies as is.
    assert "UTIL_CONSTANT_0 = 100" in (fx.patches_dir / "beta-limit.patch").read_text()
    assert fx.cli("apply", "--all", "--dir", str(fx.root / "check-tree")) == 0
    assert not (fx.root / ".forkbuild-work" / "rebase-journal").exists()
    assert not (fx.root / ".forkbuild-work" / "rebase").exists()
    md = (fx.root / "build" / "rebase" / f"1.0-to-{NEW_VERSION}.md").read_text()
    assert "| 3 | `beta-limit.patch` | beta | 3-way |" in md


def test_offsets_come_from_git_apply_verbose(git_series_fx: SeriesFixture) -> None:
    # One offset reader for apply and rebase: git apply -v's "Hunk #1 succeeded at ... (offset 5 lines)".
    fx = git_series_fx
    assert fx.cli(*rebase_args(release(fx, LADDER_CHANGES))) == 0
    assert [patch["detail"] for patch in report_of(fx)["patches"][:2]] == ["", "python/pkg/core.py hunk 1: +5 lines"]


def test_conflict_resolved_then_continue(git_series_fx: SeriesFixture) -> None:
    fx = git_series_fx
    commit = release(fx, CONFLICT_CHANGES)
    assert fx.cli(*rebase_args(commit)) == RebaseStopped.return_code
    work = tree(fx)
    core = work.path / "python/pkg/core.py"
    assert "<<<<<<<" in core.read_text()
    # Resolve: keep 2.0's comment and the patch's alpha branch.
    text = core.read_text()
    start, end = text.index("<<<<<<<"), text.index(">>>>>>>")
    end = text.index("\n", end) + 1
    text = text[:start] + "def scale(value):  # 2.0\n    if envs.DSV41_ALPHA:\n        return value * 3\n    return value * 2  # doubled in 2.0\n" + text[end:]
    core.write_text(text)
    # Unstaged resolution: --continue refuses and changes nothing.
    assert fx.cli("rebase", "--continue") == RebaseStopped.return_code
    work.run("add", "python/pkg/core.py")
    assert fx.cli("rebase", "--continue") == 0
    report = report_of(fx)
    assert outcomes(report)["alpha-scale.patch"] == "resolved"
    assert "doubled in 2.0" in (fx.patches_dir / "alpha-scale.patch").read_text()
    assert report["check"]["ok"]


def test_skip_drops_the_stopped_patch(git_series_fx: SeriesFixture) -> None:
    fx = git_series_fx
    commit = release(fx, CONFLICT_CHANGES)
    assert fx.cli(*rebase_args(commit)) == RebaseStopped.return_code
    assert fx.cli("rebase", "--skip") == 0
    report = report_of(fx)
    assert outcomes(report) == {"guards.patch": "exact", "alpha-scale.patch": "skipped", "beta-limit.patch": "3-way"}
    assert not (fx.patches_dir / "alpha-scale.patch").exists()
    assert [entry["file"] for entry in tomllib.loads(fx.series_toml.read_text())["patches"]] == [
        "guards.patch", "beta-limit.patch"]


def test_abort_restores_everything_byte_for_byte(git_series_fx: SeriesFixture) -> None:
    fx = git_series_fx
    before = stopped_at_a_conflict(fx)
    assert fingerprint(fx) != before  # the new upstream's tag at least
    assert fx.cli("rebase", "--abort") == 0
    assert fingerprint(fx) == before
    assert not (fx.root / ".forkbuild-work" / "rebase").exists()
    assert fx.cli("rebase", "--continue") != 0  # nothing in progress any more


def test_a_removed_work_tree_is_named_and_abort_goes_on(git_series_fx: SeriesFixture, capsys) -> None:
    """Before, --continue and --skip said only "... is not a git repository"."""
    fx = git_series_fx
    before = stopped_at_a_conflict(fx)
    shutil.rmtree(fx.root / ".forkbuild-work" / "rebase")
    capsys.readouterr()
    assert fx.cli("status") == 0  # says so, and no hint to resolve a conflict in a tree that is gone
    said = " ".join(capsys.readouterr().out.split())
    assert "its work tree" in said and "is gone" in said and "`--abort` puts everything back" in said
    assert "resolve it" not in said
    for action in ("--continue", "--skip"):
        capsys.readouterr()
        assert fx.cli("rebase", action) == 1
        err = " ".join(capsys.readouterr().err.split())
        assert "the rebase's work tree is gone" in err and "`forkbuild rebase --abort` puts series.toml" in err
    assert fx.cli("rebase", "--abort") == 0
    assert fingerprint(fx) == before


def test_upstreamed_patch_is_proposed_for_dropping_with_evidence(tmp_path) -> None:
    fx = make_series(tmp_path, source="git", specs=WITH_DOCS)
    commit = release(fx, UPSTREAMED_CHANGES)
    before = fingerprint(fx)
    assert fx.cli(*rebase_args(commit)) == RebaseStopped.return_code  # stops for review
    draft = json.loads((fx.root / ".forkbuild-work" / "rebase-journal" / "report.json").read_text())
    docs = next(patch for patch in draft["patches"] if patch["file"] == "beta-docs.patch")
    assert docs["outcome"] == "upstreamed" and docs["proposal"] == "drop"
    assert docs["evidence"] == [{"file": "python/pkg/util.py", "hunk": 1, "found": True, "start": 1, "end": 1,
                                 "how": "post-image"}]
    assert (fx.patches_dir / "beta-docs.patch").exists()  # nothing deleted before the yes
    assert {k: v for k, v in fingerprint(fx).items() if not k.startswith("ref ")} == \
        {k: v for k, v in before.items() if not k.startswith("ref ")}
    assert fx.cli("rebase", "--continue") == 0
    report = report_of(fx)
    assert outcomes(report)["beta-docs.patch"] == "upstreamed"
    assert report["patches"][-1]["proposal"] == "dropped"
    assert not (fx.patches_dir / "beta-docs.patch").exists()
    md = (fx.root / "build" / "rebase" / f"1.0-to-{NEW_VERSION}.md").read_text()
    assert "python/pkg/util.py:1-1 (hunk 1, post-image)" in md


def test_accept_drops_does_not_stop(tmp_path) -> None:
    fx = make_series(tmp_path, source="git", specs=WITH_DOCS)
    commit = release(fx, UPSTREAMED_CHANGES)
    assert fx.cli(*rebase_args(commit), "--accept-drops") == 0
    assert outcomes(report_of(fx))["beta-docs.patch"] == "upstreamed"


def test_patch_emptied_by_resolution_is_told_apart(git_series_fx: SeriesFixture) -> None:
    fx = git_series_fx
    commit = release(fx, CONFLICT_CHANGES)
    assert fx.cli(*rebase_args(commit)) == RebaseStopped.return_code
    # Take 2.0's side for everything the patch touches: nothing of it remains.
    tree(fx).run("checkout", "HEAD", "--", "python")
    assert fx.cli("rebase", "--continue") == RebaseStopped.return_code  # proposed drop: review
    assert fx.cli("rebase", "--continue") == 0
    report = report_of(fx)
    alpha = next(patch for patch in report["patches"] if patch["file"] == "alpha-scale.patch")
    assert alpha["outcome"] == "emptied" and alpha["proposal"] == "dropped"
    # Told apart from "upstream has it": upstream lacks the patch's hunks.
    assert alpha["evidence"] and not any(item["found"] for item in alpha["evidence"])
    assert "emptied by resolution" in (fx.root / "build" / "rebase" / f"1.0-to-{NEW_VERSION}.md").read_text()


def test_start_refuses_while_a_rebase_is_in_progress(git_series_fx: SeriesFixture) -> None:
    fx = git_series_fx
    commit = release(fx, CONFLICT_CHANGES)
    assert fx.cli(*rebase_args(commit)) == RebaseStopped.return_code
    assert fx.cli(*rebase_args(commit)) == 1
    assert fx.cli("rebase", "--abort") == 0


def test_skip_needs_a_conflict(git_series_fx: SeriesFixture) -> None:
    fx = git_series_fx
    assert fx.cli("rebase", "--skip") == 1  # no rebase in progress


def test_short_commit_is_refused(git_series_fx: SeriesFixture) -> None:
    fx = git_series_fx
    commit = release(fx, LADDER_CHANGES)
    assert fx.cli("rebase", "--onto", commit[:10], "--version", NEW_VERSION) == 3
    assert not (fx.root / ".forkbuild-work" / "rebase-journal").exists()


def test_failing_check_keeps_the_journal_for_continue_or_abort(git_series_fx: SeriesFixture, monkeypatch) -> None:
    fx = git_series_fx
    commit = release(fx, LADDER_CHANGES)
    fx.cli("fetch")
    before = fingerprint(fx)
    verdicts = iter([{"ok": False, "detail": "lite: beta-limit.patch: does not apply"}, {"ok": True, "detail": "ok"}])
    monkeypatch.setattr("forkbuild.rebase.phases._check_every_variant", lambda context, tree: next(verdicts))
    assert fx.cli(*rebase_args(commit)) == RebaseStopped.return_code
    assert report_of(fx)["check"] == {"ok": False, "detail": "lite: beta-limit.patch: does not apply"}
    assert (fx.root / ".forkbuild-work" / "rebase-journal").exists()
    assert pinned(fx)["version"] == NEW_VERSION  # written, awaiting a fix or an abort
    assert fx.cli("rebase", "--continue") == 0  # checks again (now passing) and finishes
    assert report_of(fx)["check"]["ok"]
    assert not (fx.root / ".forkbuild-work" / "rebase-journal").exists()
    assert fingerprint(fx) != before


def test_abort_after_a_failing_check_restores(git_series_fx: SeriesFixture, monkeypatch) -> None:
    fx = git_series_fx
    commit = release(fx, LADDER_CHANGES)
    fx.cli("fetch")
    before = fingerprint(fx)
    monkeypatch.setattr("forkbuild.rebase.phases._check_every_variant", lambda context, tree: {"ok": False, "detail": "x"})
    assert fx.cli(*rebase_args(commit)) == RebaseStopped.return_code
    assert fx.cli("rebase", "--abort") == 0
    assert fingerprint(fx) == before


def test_finish_and_abort_write_the_series_through_the_series_writer(git_series_fx: SeriesFixture, monkeypatch) -> None:
    fx = git_series_fx
    commit = release(fx, LADDER_CHANGES)
    fx.cli("fetch")
    before = fingerprint(fx)
    writes: list[SeriesChange] = []
    real = SeriesTransaction.write
    monkeypatch.setattr(SeriesTransaction, "write", lambda self, change: (writes.append(change), real(self, change))[1])
    monkeypatch.setattr("forkbuild.rebase.phases._check_every_variant", lambda context, tree: {"ok": False, "detail": "x"})
    assert fx.cli(*rebase_args(commit)) == RebaseStopped.return_code  # written, then the check failed
    assert any(change.series_toml and NEW_VERSION in change.series_toml for change in writes)  # the moved pin
    writes.clear()
    assert fx.cli("rebase", "--abort") == 0
    restored = [change for change in writes if change.series_toml]
    assert restored and NEW_VERSION not in restored[0].series_toml  # the backup's series.toml, by the writer
    assert fingerprint(fx) == before


def test_the_rebase_tree_holds_the_files_the_series_changes(git_series_fx: SeriesFixture) -> None:
    fx = git_series_fx
    commit = release(fx, CONFLICT_CHANGES)
    assert fx.cli(*rebase_args(commit)) == RebaseStopped.return_code
    work = tree(fx)
    tracked = work.out("ls-files").splitlines()
    changed = {path for _, path in work.changed_files(work.rev("HEAD~1") or "", "HEAD")}  # guards.patch's
    absent = [path for path in tracked if not (work.path / path).exists()]
    assert (work.path / "python/pkg/core.py").is_file() and changed <= set(tracked) - set(absent)
    status = work.status_porcelain().splitlines()
    assert absent and "UU python/pkg/core.py" in status and not [line for line in status if "D" in line[:2]]
    # (sparse: the files left out do not show as deleted)


def test_abort_while_another_process_holds_the_cache_lock(git_series_fx: SeriesFixture, monkeypatch) -> None:
    fx = git_series_fx
    before = stopped_at_a_conflict(fx)
    monkeypatch.setattr("forkbuild.upstream.cache.LOCK_TIMEOUT_SECONDS", 0.2)
    with flocked(fx.cache / "lock"):
        # A LockTimeout (exit 10, with a hint), not a traceback; the journal stays for a retry.
        assert fx.cli("rebase", "--abort") == LockTimeout.return_code
    assert (fx.root / ".forkbuild-work" / "rebase-journal").exists()
    assert fx.cli("rebase", "--abort") == 0
    assert fingerprint(fx) == before


def test_abort_keeps_refs_other_processes_made_meanwhile(git_series_fx: SeriesFixture) -> None:
    fx = git_series_fx
    before = stopped_at_a_conflict(fx)
    # Another forkbuild run sharing the cache imports a version and keeps a ref while the rebase waits.
    cache = Git(fx.cache / "upstream.git")
    base = before[f"ref refs/tags/{fx.load().upstream.tag}"]
    cache.run("tag", "--no-sign", "upstream/0.9", base)
    cache.update_ref("refs/forkbuild/other-run/series", base)
    assert fx.cli("rebase", "--abort") == 0
    after = fingerprint(fx)
    assert after.pop("ref refs/tags/upstream/0.9") == base
    assert after.pop("ref refs/forkbuild/other-run/series") == base
    assert after == before  # what the rebase itself made (tag upstream/2.0, its series refs) is gone


def test_finishing_refuses_to_overwrite_series_edits_made_while_stopped(git_series_fx: SeriesFixture) -> None:
    fx = git_series_fx
    commit = release(fx, CONFLICT_CHANGES)
    assert fx.cli(*rebase_args(commit)) == RebaseStopped.return_code
    # While the rebase waits at the conflict, the user (or a pull) changes the series.
    original = fx.series_toml.read_text()
    fx.series_toml.write_text(original + "# a note added meanwhile\n")
    (fx.patches_dir / "gamma-new.patch").write_text("a patch written meanwhile\n")
    assert fx.cli("rebase", "--skip") == DirtyTreeError.return_code
    # Nothing overwritten or deleted; the rebase waits.
    assert fx.series_toml.read_text().endswith("# a note added meanwhile\n")
    assert (fx.patches_dir / "gamma-new.patch").read_text() == "a patch written meanwhile\n"
    assert (fx.root / ".forkbuild-work" / "rebase-journal").exists()
    # Put back as the hint says: the rebase finishes.
    fx.series_toml.write_text(original)
    (fx.patches_dir / "gamma-new.patch").unlink()
    assert fx.cli("rebase", "--continue") == 0
    assert outcomes(report_of(fx))["alpha-scale.patch"] == "skipped"


def test_abort_saves_series_edits_made_while_stopped(git_series_fx: SeriesFixture, monkeypatch) -> None:
    fx = git_series_fx
    commit = release(fx, LADDER_CHANGES)
    fx.cli("fetch")
    before = fingerprint(fx)
    monkeypatch.setattr("forkbuild.rebase.phases._check_every_variant", lambda context, tree: {"ok": False, "detail": "x"})
    assert fx.cli(*rebase_args(commit)) == RebaseStopped.return_code  # written, then the check failed
    alpha = fx.patches_dir / "alpha-scale.patch"
    alpha.write_text(alpha.read_text() + "-- \nfixed by hand\n")
    (fx.patches_dir / "beta-limit.patch").unlink()
    assert fx.cli("rebase", "--abort") == 0
    assert fingerprint(fx) == before
    [saved] = (fx.root / ".forkbuild-work").glob("rebase-edits-*")
    assert (saved / "patches" / "alpha-scale.patch").read_text().endswith("fixed by hand\n")
    assert [path.name for path in saved.rglob("*") if path.is_file()] == ["alpha-scale.patch"]


def test_a_rebase_that_cannot_start_puts_back_the_tags_its_imports_made(git_series_fx: SeriesFixture, capfd) -> None:
    # The series does not apply on its own pin: the prepare fails after both imports made
    # their tags. The abort reads what to undo from the journal: those tags go again.
    fx = git_series_fx
    alpha = fx.patches_dir / "alpha-scale.patch"
    alpha.write_text(alpha.read_text().replace("     return value * 2", "     return value * 5"))
    before = fingerprint(fx)  # no cache yet: the rebase's imports make it
    assert fx.cli(*rebase_args(release(fx, LADDER_CHANGES))) == 1
    err = capfd.readouterr().err
    assert "the rebase could not start" in err and "does not apply on its own pin 1.0" in err
    assert fingerprint(fx) == before and "left as it is" not in err
    assert not (fx.root / ".forkbuild-work" / "rebase-journal").exists()


def test_a_second_rebase_while_one_runs_is_refused_clearly(git_series_fx: SeriesFixture, capsys) -> None:
    fx = git_series_fx
    commit = release(fx, LADDER_CHANGES)
    fx.cli("fetch")
    before = fingerprint(fx)
    # A first rebase running: it holds the series' rebase lock while its journal is being created.
    journal = fx.root / ".forkbuild-work" / "rebase-journal"
    creating = journal.with_name(".rebase-journal.first")
    creating.mkdir(parents=True)
    guard = TreeGuard(journal, "rebase")
    guard.acquire()
    try:
        for args in (rebase_args(commit), ["rebase", "--abort"], ["rebase", "--continue"]):
            assert fx.cli(*args) == LockBusy.return_code
            assert "another rebase is running" in capsys.readouterr().err
    finally:
        guard.release()
    assert creating.is_dir() and fingerprint(fx) == before  # the first one's journal-to-be is untouched
    assert fx.cli(*rebase_args(commit)) == 0  # once it is gone, a rebase runs


def test_ctrl_c_early_or_late_exits_130_and_the_next_command_recovers(git_series_fx: SeriesFixture, monkeypatch,
                                                                      capsys) -> None:
    fx = git_series_fx
    commit = release(fx, LADDER_CHANGES)
    fx.cli("fetch")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:  # while Python loads the commands: before anything began
        patch.setattr("forkbuild.cli.build_parser", interrupted)
        assert fx.cli(*rebase_args(commit)) == 130
    assert "Traceback" not in capsys.readouterr().err
    with monkeypatch.context() as patch:  # while the rebase imports the upstreams: the journal exists
        patch.setattr("forkbuild.rebase.phases.Rebase._import", interrupted)
        assert fx.cli(*rebase_args(commit)) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and "`forkbuild rebase --continue` goes on" in err
    assert fx.cli("rebase", "--continue") == 0
    assert pinned(fx)["version"] == NEW_VERSION
