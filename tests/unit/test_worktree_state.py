"""A work tree's typed state (worktree/state.py): a tree, and a stopped `apply --all`,
left by the forkbuild before it (state files without a schema key, as that version
wrote them) are re-applied, exported, continued and aborted by this one; the JSON
form round-trips; a state of another schema is refused naming the file."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fixtures import SeriesFixture
from forkbuild.errors import ApplyError, DirtyTreeError
from forkbuild.io import statefile
from forkbuild.io.git import Git
from forkbuild.series.edit import quilt_series_text
from forkbuild.worktree.engine import Outcome
from forkbuild.worktree.state import STATE_FILE, STOP_FILE, WorktreeState, read_state
from rebase_fixtures import CONFLICT_CHANGES, release
from test_engine import move_pin, work


def _previous_tree_state(live: dict, *, built_outside_apply: bool = False) -> dict:
    """The tree state as forkbuild before typed state (cda39c4) wrote it: no "schema", no "dropped";
    for a tree built outside apply (record_series_tree: the rebase's, an import's) no "commits" or "missing"."""
    if built_outside_apply:
        return {"base": live["base"], "head": live["head"], "patches": list(live["patches"]),
                "sha256": dict(live["sha256"]), "variant": live["variant"]}
    return {"base": live["base"], "commits": dict(live["commits"]), "head": live["head"],
            "missing": dict(live["missing"]), "patches": list(live["patches"]), "sha256": dict(live["sha256"]),
            "variant": live["variant"]}


def write_previous_tree_state(tree: Git, *, built_outside_apply: bool = False) -> dict:
    """Rewrite the tree's state file as the previous forkbuild wrote it (keys written out here,
    values this run's); returns what was written."""
    path = tree.git_dir / STATE_FILE
    previous = _previous_tree_state(json.loads(path.read_text()), built_outside_apply=built_outside_apply)
    path.write_text(json.dumps(previous, indent=2, sort_keys=True) + "\n")
    return previous


def write_previous_stop(tree: Git) -> dict:
    """The same for a stopped `apply --all`: the stop file (schema 1) holding the tree's state
    before the apply in the previous form, and the tree's state file."""
    path = tree.git_dir / STOP_FILE
    live = json.loads(path.read_text())
    previous = {
        "base": live["base"], "cursor": live["cursor"], "hashes": dict(live["hashes"]),
        "jobs": [{"name": job["name"], "path": job["path"], "source": job["source"]} for job in live["jobs"]],
        "previous_state": live["previous_state"] and _previous_tree_state(live["previous_state"]),
        "results": [{"commit": result["commit"], "conflicts": list(result["conflicts"]), "detail": result["detail"],
                     "name": result["name"], "offsets": list(result["offsets"]), "outcome": result["outcome"]}
                    for result in live["results"]],
        "schema": 1, "started_from": live["started_from"], "variant": ""}  # the previous one named none
    path.write_text(json.dumps(previous, indent=2, sort_keys=True) + "\n")
    write_previous_tree_state(tree)
    return previous


def stopped_at_alpha(fx: SeriesFixture) -> None:
    assert fx.cli("apply", "--all") == 0  # 1.0 in the cache: the patches' preimage blobs are there
    move_pin(fx, release(fx, CONFLICT_CHANGES))
    assert fx.cli("apply", "--all") == ApplyError.return_code


@pytest.mark.parametrize("built_outside_apply", [False, True], ids=["applied", "built-outside-apply"])
def test_a_tree_the_previous_forkbuild_made_is_exported_and_reapplied(series_fx: SeriesFixture, capfd,
                                                                      built_outside_apply: bool) -> None:
    fx = series_fx
    (fx.patches_dir / "series").write_text(quilt_series_text(spec.file for spec in fx.specs))  # as export writes it
    assert fx.cli("apply", "--all") == 0
    previous = write_previous_tree_state(work(fx), built_outside_apply=built_outside_apply)
    assert "schema" not in previous
    assert read_state(work(fx).path) == WorktreeState(
        variant="", base=previous["base"], head=previous["head"], patches=tuple(previous["patches"]),
        commits=previous.get("commits", {}), sha256=previous["sha256"])
    capfd.readouterr()
    assert fx.cli("export", "--check") == 0
    assert "records no patch hashes" not in capfd.readouterr().err  # its sha256 were read
    assert fx.cli("apply", "--all") == 0  # re-applied in place: forkbuild knows the tree as its own
    assert json.loads((work(fx).git_dir / STATE_FILE).read_text())["schema"] == 1
    # ... and a commit made in it exports.
    util = work(fx).path / "python/pkg/util.py"
    util.write_text(util.read_text().replace("UTIL_CONSTANT_0 = 0\n", "UTIL_CONSTANT_0 = 10\n"))
    work(fx).run("commit", "--quiet", "-am", "util: a new constant\n\nFeature: beta\n")
    write_previous_tree_state(work(fx), built_outside_apply=built_outside_apply)
    assert fx.cli("export") == 0
    assert "UTIL_CONSTANT_0 = 10" in "".join(path.read_text() for path in fx.patches_dir.glob("*.patch"))


def test_an_apply_the_previous_forkbuild_stopped_aborts_back(git_series_fx: SeriesFixture) -> None:
    fx = git_series_fx
    stopped_at_alpha(fx)
    previous = write_previous_stop(work(fx))
    assert fx.cli("apply", "--abort") == 0
    assert work(fx).head() == previous["started_from"] and not work(fx).status_porcelain()
    # The tree's state before that apply is back, as the previous forkbuild had recorded it.
    assert read_state(work(fx).path) == statefile.decode(WorktreeState, previous["previous_state"])
    assert not (work(fx).git_dir / STOP_FILE).exists()


def test_an_apply_the_previous_forkbuild_stopped_continues_and_exports(git_series_fx: SeriesFixture) -> None:
    fx = git_series_fx
    stopped_at_alpha(fx)
    write_previous_stop(work(fx))
    core = work(fx).path / "python/pkg/core.py"
    core.write_text(re.sub(r"<<<<<<<.*?>>>>>>> [^\n]*\n",
                           "def scale(value):  # 2.0\n    if envs.DSV41_ALPHA:\n        return value * 3\n    return value * 2  # doubled in 2.0\n",
                           core.read_text(), flags=re.S))
    work(fx).run("add", "python/pkg/core.py")
    assert fx.cli("apply", "--continue") == 0
    assert fx.cli("export") == 0
    assert "return value * 2  # doubled in 2.0" in (fx.patches_dir / "alpha-scale.patch").read_text()


# -- the JSON form ----------------------------------------------------------------------------

def _written(tmp_path: Path, state: WorktreeState) -> Path:
    path = tmp_path / "state.json"
    path.write_text(statefile.dump(state, schema=1))
    return path


def test_the_json_form_round_trips_and_leaves_unrecorded_hashes_out(tmp_path: Path) -> None:
    state = WorktreeState(variant="lite", base="a" * 40, head="b" * 40, patches=("a.patch",),
                          commits={"a.patch": "c" * 40}, missing={"b.patch": Outcome.SKIPPED},
                          sha256={"a.patch": "1" * 64}, dropped=("old.patch",))
    assert statefile.load(_written(tmp_path, state), WorktreeState, (1,)) == state
    unrecorded = WorktreeState(variant="", base="a" * 40, head="b" * 40, patches=())
    # The previous forkbuild reads an absent key as "not recorded", and refuses a null one.
    assert "sha256" not in json.loads(_written(tmp_path, unrecorded).read_text())
    assert statefile.load(_written(tmp_path, unrecorded), WorktreeState, (1,)) == unrecorded


@pytest.mark.parametrize(("change", "problem"), [
    ({"schema": 2}, r"is of schema 2, this forkbuild reads none, 1: another forkbuild made it"),
    ({"missing": {"a.patch": "fuzzed"}}, r"is unreadable \(missing\['a.patch'\]: unknown outcome 'fuzzed'\)"),
    ({"patches": "a.patch"}, r"is unreadable \(patches: a list expected"),
    ({"sha256": ["1" * 64]}, r"is unreadable \(sha256: an object or null expected"),
])
def test_a_state_of_another_schema_or_damaged_is_refused_naming_the_file(series_fx: SeriesFixture, change: dict,
                                                                        problem: str) -> None:
    fx = series_fx
    assert fx.cli("apply", "--all") == 0
    path = work(fx).git_dir / STATE_FILE
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.raises(DirtyTreeError, match=problem) as caught:
        read_state(work(fx).path)
    assert str(path) in caught.value.message and "apply again" in (caught.value.hint or "")
    assert fx.cli("apply", "--all") == DirtyTreeError.return_code  # the tree is left alone
