"""The in-image runtime (forkbuild_runtime, stdlib only, runs without
forkbuild installed) keeps its own copies of two rules; they must stay equal
to forkbuild's: the manifest file names (forkbuild.wheel.manifest) and the guard
value rule (forkbuild.series.guards, the third copy next to the patched EnvSwitch of
tests/unit/test_guards_rule.py)."""

from __future__ import annotations

import pytest

from forkbuild.series import guards
from forkbuild.wheel import manifest
from forkbuild_runtime import migration, records

SWITCH_VALUES = ["0", "1", "off", "on", "false", "true", "", "garbage", "OFF", " On ", "yes", "n", "2", "enabled"]
TYPED_VALUES = ["0", "16", "-3", " 7 ", "1.5", "1e-3", "-0.25", "nan", "inf", "", "garbage", "b12x", "0x10", "1_000"]


def test_the_manifest_file_names_are_forkbuilds():
    assert records.MANIFEST == manifest.PACKAGE_FILE
    assert records.DIST_INFO_MANIFEST == manifest.DIST_INFO_FILE


def test_the_switch_sets_are_forkbuilds():
    assert migration.SWITCH_ON == guards.SWITCH_ON
    assert migration.SWITCH_OFF == guards.SWITCH_OFF


def _forkbuild_accepts(kind: str, value: str) -> bool:
    try:
        guards.check_value(kind, value)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("value", SWITCH_VALUES, ids=repr)
def test_switch_values_are_judged_alike(value):
    assert (migration.problem("switch", value) is None) == _forkbuild_accepts("switch", value)


@pytest.mark.parametrize("kind", ["int", "float", "str"])
@pytest.mark.parametrize("value", TYPED_VALUES, ids=repr)
def test_typed_values_are_judged_alike(kind, value):
    assert (migration.problem(kind, value) is None) == _forkbuild_accepts(kind, value)


def test_the_cases_cover_both_answers():
    """A parity test over values both sides accept only would prove nothing."""
    for kind, values in [("switch", SWITCH_VALUES), ("int", TYPED_VALUES), ("float", TYPED_VALUES)]:
        assert {_forkbuild_accepts(kind, value) for value in values} == {True, False}, kind
