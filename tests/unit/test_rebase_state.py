"""The rebase's typed state (rebase/journal.py): a rebase stopped by the forkbuild before
it (journal schema 2 as that version wrote it) goes on and aborts with this one;
the JSON form round-trips; a damaged or foreign state.json is one error naming it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from fixtures import SeriesFixture, make_series
from forkbuild.errors import ForkbuildError, RebaseStopped
from forkbuild.io import statefile
from forkbuild.rebase.journal import Journal, PatchState, Phase, RebaseState, RefMove
from forkbuild.rebase.upstreamed import HunkEvidence
from forkbuild.series.config import GitPin, Upstream, WheelPin
from forkbuild.worktree.engine import Outcome
from rebase_fixtures import CONFLICT_CHANGES, UPSTREAMED_CHANGES, WITH_DOCS, fingerprint, rebase_args, release, tree
from test_rebase import outcomes, pinned, report_of
from test_rebase_resume import ABORT_STEPS, CONTINUE_STEPS


def state_json(fx: SeriesFixture) -> Path:
    return fx.root / ".forkbuild-work" / "rebase-journal" / "state.json"


# -- the previous forkbuild's journal -------------------------------------------------------

def _previous_upstream(live: dict) -> dict:
    git = live["git"]
    return {"empty_dirs": list(live["empty_dirs"]),
            "git": git and {"commit": git["commit"], "ref": git["ref"], "url": git["url"]},
            "name": live["name"], "package_root": live["package_root"], "source": live["source"],
            "version": live["version"],
            "wheels": [{"filename": pin["filename"], "python_tag": pin["python_tag"], "sha256": pin["sha256"],
                        "url": pin["url"]} for pin in live["wheels"]]}


def _previous_patch(live: dict) -> dict:
    patch = {"commit": live["commit"], "conflicts": list(live["conflicts"]), "detail": live["detail"],
             "evidence": [{"end": item["end"], "file": item["file"], "found": item["found"], "how": item["how"],
                           "hunk": item["hunk"], "start": item["start"]} for item in live["evidence"]],
             "feature": live["feature"], "file": live["file"], "old_commit": live["old_commit"],
             "outcome": live.get("outcome")}
    if live.get("outcome") is not None:  # it wrote "collided" only once a patch was replayed
        patch["collided"] = live["collided"]
    return patch


def write_previous_journal(fx: SeriesFixture) -> dict:
    """Rewrite the stopped rebase's state.json as the forkbuild before typed state (cda39c4)
    wrote it at the same stop: its keys are written out here, not by the code under test
    (no "report" key, no "collided" in a patch not replayed yet, "tip" only once set); the
    values (commits, paths, the rebase id) are this run's. Returns what was written."""
    live = json.loads(state_json(fx).read_text())
    previous = {
        "accept_drops": live["accept_drops"], "cursor": live["cursor"], "head_before": live["head_before"],
        "id": live["id"], "new_base": live["new_base"], "old": _previous_upstream(live["old"]),
        "old_base": live["old_base"], "patches": [_previous_patch(patch) for patch in live["patches"]],
        "phase": live["phase"],
        "refs": {ref: {"after": move["after"], "before": move["before"]} for ref, move in live["refs"].items()},
        "schema": 2, "step": live["step"], "target": _previous_upstream(live["target"]),
        "timings": dict(live["timings"]), "worktree": live["worktree"], "writing": live["writing"],
        "written": dict(live["written"]),
    }
    if live["tip"]:
        previous["tip"] = live["tip"]
    state_json(fx).write_text(json.dumps(previous, indent=2, sort_keys=True) + "\n")
    return previous


def resolve_alpha(fx: SeriesFixture) -> None:
    core = tree(fx).path / "python/pkg/core.py"
    text = core.read_text()
    start, end = text.index("<<<<<<<"), text.index("\n", text.index(">>>>>>>")) + 1
    core.write_text(text[:start] + "    if envs.DSV41_ALPHA:\n        return value * 3\n"
                    "def scale(value):  # 2.0\n    return value * 2  # doubled in 2.0\n" + text[end:])
    tree(fx).run("add", "python/pkg/core.py")


def test_a_conflict_stop_of_the_previous_forkbuild_continues(git_series_fx: SeriesFixture) -> None:
    fx = git_series_fx
    commit = release(fx, CONFLICT_CHANGES)
    assert fx.cli(*rebase_args(commit)) == RebaseStopped.return_code
    previous = write_previous_journal(fx)
    assert "collided" not in previous["patches"][2] and "report" not in previous
    resolve_alpha(fx)
    assert fx.cli("rebase", "--continue") == 0
    assert outcomes(report_of(fx)) == {"guards.patch": "exact", "alpha-scale.patch": "resolved",
                                       "beta-limit.patch": "exact"}
    assert pinned(fx)["version"] == "2.0" and pinned(fx)["git"]["commit"] == commit
    assert "doubled in 2.0" in (fx.patches_dir / "alpha-scale.patch").read_text()
    assert not state_json(fx).parent.exists()


def test_a_conflict_stop_of_the_previous_forkbuild_aborts_to_exactly_before(git_series_fx: SeriesFixture) -> None:
    fx = git_series_fx
    commit = release(fx, CONFLICT_CHANGES)
    assert fx.cli("fetch") == 0
    before = fingerprint(fx)  # series files and every cache ref: the refs the journal records go again
    assert fx.cli(*rebase_args(commit)) == RebaseStopped.return_code
    write_previous_journal(fx)
    assert fx.cli("rebase", "--abort") == 0
    assert fingerprint(fx) == before
    assert not (fx.root / ".forkbuild-work" / "rebase").exists() and not state_json(fx).parent.exists()


def test_a_review_stop_of_the_previous_forkbuild_drops_with_its_evidence(tmp_path: Path) -> None:
    fx = make_series(tmp_path, source="git", specs=WITH_DOCS)
    assert fx.cli(*rebase_args(release(fx, UPSTREAMED_CHANGES))) == RebaseStopped.return_code  # the review
    previous = write_previous_journal(fx)
    assert previous["phase"] == "review" and previous["patches"][-1]["evidence"]
    assert fx.cli("rebase", "--continue") == 0
    report = report_of(fx)
    assert report["patches"][-1]["proposal"] == "dropped"
    assert report["patches"][-1]["evidence"] == previous["patches"][-1]["evidence"]
    assert not (fx.patches_dir / "beta-docs.patch").exists()


def test_an_early_schema_2_journal_reads_with_the_defaults_of_what_it_lacks() -> None:
    # Written before tip, the patches' conflicts/collided, written/writing, empty_dirs and
    # timings were recorded (all within schema 2): the engine of those versions defaulted them.
    upstream = {"name": "pkg", "version": "1.0", "package_root": "python", "source": "git",
                "git": {"url": "/u", "ref": "", "commit": "a" * 40}, "wheels": []}
    state = statefile.read(RebaseState, {
        "schema": 2, "id": "x", "phase": "replay", "step": "applied:a.patch", "worktree": "/t", "accept_drops": False,
        "old": upstream, "target": {**upstream, "version": "2.0"}, "old_base": "a" * 40, "new_base": "b" * 40,
        "cursor": 1, "head_before": "c" * 40, "refs": {"refs/tags/upstream/2.0": {"before": None, "after": None}},
        "patches": [{"file": "a.patch", "feature": "f", "old_commit": "d" * 40, "outcome": "exact",
                     "commit": "e" * 40, "detail": "", "evidence": []},
                    {"file": "b.patch", "feature": "f", "old_commit": "", "outcome": None, "commit": "",
                     "detail": "", "evidence": []}]}, (2,))
    assert (state.tip, state.written, state.writing, dict(state.timings), state.report) == ("", {}, False, {}, None)
    assert state.patches[1] == PatchState(file="b.patch", feature="f")
    assert state.old.empty_dirs == () and state.step == "applied:a.patch"
    assert state.refs == {"refs/tags/upstream/2.0": RefMove(before=None, after=None)}


# -- the JSON form --------------------------------------------------------------------------

def full_state() -> RebaseState:
    """A state with every field away from its default (a round trip that drops one fails)."""
    old = Upstream(name="pkg", version="1.0", package_root="python", source="wheel",
                   git=GitPin(url="https://x.invalid/pkg.git", ref="v1.0", commit="a" * 40),
                   wheels=(WheelPin(python_tag="py3", filename="pkg-1.0-py3-none-any.whl", sha256="1" * 64,
                                    url="https://x.invalid/pkg.whl"),), empty_dirs=("python/pkg/empty",))
    evidence = HunkEvidence(file="python/pkg/a.py", hunk=1, found=True, start=3, end=4, how="post-image")
    return RebaseState(
        id="abc", phase=Phase.CHECK_FAILED, step="settled:a.patch", worktree=Path("/tmp/tree"),
        accept_drops=True, old=old, target=dataclasses.replace(old, version="2.0", git=None), old_base="b" * 40,
        new_base="c" * 40, cursor=1, head_before="d" * 40, tip="e" * 40,
        patches=(PatchState(file="a.patch", feature="alpha", old_commit="f" * 40, outcome=Outcome.RESOLVED,
                            commit="0" * 40, detail="by hand", evidence=(evidence,), conflicts=("python/pkg/a.py",),
                            collided="@@ -1 +1 @@"),),
        refs={"refs/tags/upstream/2.0": RefMove(before=None, after="c" * 40),
              "refs/forkbuild/x": RefMove(before="9" * 40, after="8" * 40)},
        written={"series.toml": "7" * 64}, writing=True, timings={"replay": 1.5}, report=Path("/tmp/r.md"))


def test_the_json_form_round_trips_every_field() -> None:
    state = full_state()
    written = json.loads(statefile.dump(state, schema=2))
    assert statefile.read(RebaseState, written, (2,)) == state
    # An upstream field the state's reader does not know would be lost on the way: teach
    # rebase/journal.py's _upstream the new one (and this list).
    assert sorted(dataclasses.asdict(state.old)) == ["empty_dirs", "git", "name", "package_root", "source",
                                                      "version", "wheels"]
    assert {field.name for field in dataclasses.fields(RebaseState)} == \
        set(written) - {"schema"}


@pytest.mark.parametrize(("change", "problem"), [
    ({"schema": 3}, "unknown journal schema 3"),
    ({"schema": None}, "unknown journal schema None"),
    ({"phase": "reveiw"}, r"unreadable \(phase: unknown phase 'reveiw'\)"),
    ({"cursor": "1"}, r"unreadable \(cursor: an integer expected"),
    ({"patches": [{"file": "a.patch"}]}, r"unreadable \(patches\[0\]\.feature: missing\)"),
    ({"refs": {"r": {"before": 1}}}, r"unreadable \(refs\['r'\]\.before: a string or null expected"),
])
def test_an_unreadable_or_foreign_journal_is_one_error_naming_its_file(tmp_path: Path, change: dict,
                                                                       problem: str) -> None:
    journal = Journal(tmp_path)
    journal.path.mkdir(parents=True)
    (journal.path / "state.json").write_text(json.dumps({**json.loads(statefile.dump(full_state(), schema=2)), **change}))
    with pytest.raises(ForkbuildError, match=problem) as caught:
        journal.load()
    assert str(journal.path / "state.json") in caught.value.message and caught.value.hint


def test_a_journal_that_is_not_json_names_its_file_and_the_backup(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    journal.path.mkdir(parents=True)
    (journal.path / "state.json").write_text('{"schema": 2, "id"')
    with pytest.raises(ForkbuildError, match="state.json: the rebase journal's state is unreadable") as caught:
        journal.load()
    assert str(journal.backup) in (caught.value.hint or "")
