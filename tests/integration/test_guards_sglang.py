"""Guards out of the conflict zone, on the real series: the guard declarations
are generated from series.toml, so no feature patch touches sglang's shared
envs registry, and leaving one feature's patch out, or having it conflict,
changes no other patch's outcome. The only coupling left is two features
changing the same source file: a later hunk may then move (offset), never
need a 3-way merge or fail."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from forkbuild.applier import ApplyPlan, apply_plan, plan_variant
from forkbuild.upstream.cache import UpstreamCache
from forkbuild.console import Reporter
from forkbuild.context import Context
from forkbuild.worktree.guards_module import module_path, read_module
from forkbuild.series.combination import from_features, whole_series
from forkbuild.series.config import Series, load_series
from forkbuild.series.patchfile import read_patch
from forkbuild.testpatch.structure import environ_path
from forkbuild.worktree.engine import Outcome

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def context() -> Context:
    return Context.create(series_dir=REPO, cache_dir=None, reporter=Reporter())


@pytest.fixture(scope="module")
def scratch(context, tmp_path_factory):
    """One work tree for every apply of this module (apply resets it to upstream each time)."""
    dest = tmp_path_factory.mktemp("guards") / "tree"
    yield dest
    if dest.exists():
        UpstreamCache(context.cache_dir, reporter=context.reporter).git().remove_worktree(dest)


def plan_without(series: Series, feature: str) -> ApplyPlan:
    """The whole series but `feature`'s patches (a build that leaves it out)."""
    return plan_variant(series, from_features(series, [name for name in series.features if name != feature]))


def files_of(series: Series, feature: str) -> set[str]:
    return {change.path for entry in series.patches if entry.feature == feature
            for change in read_patch(entry.path).files}


def guarded_features(series: Series) -> list[str]:
    return [name for name, feature in series.features.items() if feature.guards]


def test_only_the_guards_patch_touches_the_registry(context):
    series = context.series
    environ = environ_path(series)
    touching = {entry.file for entry in series.patches if environ in {c.path for c in read_patch(entry.path).files}}
    assert touching == {"guards-env-switch.patch"}


def test_the_whole_series_applies_exact(context, scratch):
    result = apply_plan(context=context, plan=plan_variant(context.series, whole_series(context.series)), dest=scratch)
    assert {record.entry.file: record.outcome for record in result.records} == {
        entry.file: Outcome.EXACT for entry in context.series.patches}


def _check_others(series: Series, feature: str, records, *, own: Outcome | None) -> None:
    """Every patch but `feature`'s: exact, or (sharing a source file with it) offset at most."""
    shared = files_of(series, feature)
    for record in records:
        if record.entry.feature == feature:
            assert record.outcome == own, record
        elif shared & {change.path for change in read_patch(record.entry.path).files}:
            assert record.outcome in (Outcome.EXACT, Outcome.OFFSET), (feature, record)
        else:
            assert record.outcome == Outcome.EXACT, (feature, record)


@pytest.mark.parametrize("feature", guarded_features(load_series(REPO / "series.toml")))
def test_leaving_one_feature_out_changes_no_other_patch_outcome(context, scratch, feature):
    series = context.series
    result = apply_plan(context=context, plan=plan_without(series, feature), dest=scratch)
    assert feature not in {record.entry.feature for record in result.records}
    _check_others(series, feature, result.records, own=None)
    # Its guards are not declared; every other feature's are, as series.toml says them.
    generated = {entry.env: entry.feature for entry in read_module(scratch / module_path(series))}
    assert generated == {guard.env: guard.feature for guard in series.all_guards() if guard.feature != feature}


@pytest.mark.parametrize("feature", ["thinking_alias", "wo_a_w8"])  # each shares a file with a later feature
def test_a_conflicting_patch_changes_no_other_patch_outcome(context, scratch, tmp_path, feature):
    """A feature's patch that no longer applies (its first context line changed) fails
    alone: the others apply as they would without it."""
    copy = tmp_path / "series"
    shutil.copytree(REPO / "patches", copy / "patches")
    shutil.copy(REPO / "series.toml", copy / "series.toml")
    broken = Context.create(series_dir=copy, cache_dir=context.cache_dir, reporter=Reporter())
    entry = next(entry for entry in broken.series.patches if entry.feature == feature)
    lines = entry.path.read_text().splitlines(keepends=True)
    first_hunk = next(index for index, line in enumerate(lines) if line.startswith("@@"))
    first_context = next(index for index in range(first_hunk, len(lines)) if lines[index].startswith(" "))
    lines[first_context] = " # this line is not upstream's\n"
    entry.path.write_text("".join(lines))
    result = apply_plan(context=broken, plan=plan_variant(broken.series, whole_series(broken.series)), dest=scratch)
    _check_others(broken.series, feature, result.records, own=Outcome.CONFLICT)
