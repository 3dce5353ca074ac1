"""The records test-patch produces: one per (feature, check, step or test),
summarised into one cell per (feature, check) and written as JSON."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from forkbuild.fsutil import write_atomic

STRUCTURE = "structure"
GUARD_OFF = "guard_off"
GUARD_ON = "guard_on"
ABSENT = "absent"
# On a variant without features the tests run once more with every feature
# claimed as built in, against stock sglang plus only the guard declarations
# (testpatch.proof): guard_on tests must fail there, guard_off tests must pass.
GUARD_ON_UNPATCHED = "guard_on_unpatched"
GUARD_OFF_UNPATCHED = "guard_off_unpatched"
CHECKS = (STRUCTURE, GUARD_OFF, GUARD_ON, ABSENT)
UNPATCHED_CHECKS = (GUARD_OFF_UNPATCHED, GUARD_ON_UNPATCHED)

PASS, FAIL, SKIP = "pass", "fail", "skip"


@dataclass(frozen=True, kw_only=True)
class Record:
    feature: str
    check: str
    outcome: str  # pass | fail | skip
    reason: str = ""
    step: str = ""  # structure: apply | compile | guard_read | guard_decl
    test: str = ""  # behaviour: the pytest node id
    exception: str = ""  # behaviour, failed: "<type>: <message>" of what the test raised
    proof: str = ""  # guard_on_unpatched: how the test failed without its patch (see testpatch.proof)


def summarise(records: Iterable[Record]) -> tuple[str, str]:
    """One cell: fail if anything failed; pass if something passed and nothing
    failed; skip otherwise. The reason is the first failure's, else the first
    skip's (when nothing passed), else a count."""
    records = list(records)
    if not records:
        return SKIP, "no tests"
    failures = [record for record in records if record.outcome == FAIL]
    if failures:
        first = failures[0]
        where = f"{first.test or first.step}: " if first.test or first.step else ""
        return FAIL, f"{len(failures)}/{len(records)} failed; {where}{first.reason}"
    passed = [record for record in records if record.outcome == PASS]
    if not passed:
        return SKIP, records[0].reason
    return PASS, f"{len(passed)} passed" + (f", {len(records) - len(passed)} skipped" if len(passed) < len(records) else "")


def failed(records: Iterable[Record]) -> list[Record]:
    return [record for record in records if record.outcome == FAIL]


def write_json(path: Path, data: list[dict]) -> None:
    """Atomically: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=1) + "\n")
