"""test-patch's records, one per (feature, check, step or test), summed up in one cell per
(feature, check), as a rich table and as JSON."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.table import Table
from rich.text import Text

from forkbuild.console import styled
from forkbuild.io.fsutil import write_atomic

STRUCTURE = "structure"
GUARD_OFF = "guard_off"
GUARD_ON = "guard_on"
ABSENT = "absent"
# The stock proof's checks (testpatch.proof).
GUARD_ON_UNPATCHED = "guard_on_unpatched"
GUARD_OFF_UNPATCHED = "guard_off_unpatched"
CHECKS = (STRUCTURE, GUARD_OFF, GUARD_ON, ABSENT)
UNPATCHED_CHECKS = (GUARD_OFF_UNPATCHED, GUARD_ON_UNPATCHED)
# Short headers: CI's console is 80 columns wide.
HEADERS = {STRUCTURE: "structure", GUARD_OFF: "off", GUARD_ON: "on", ABSENT: "absent",
           GUARD_OFF_UNPATCHED: "off@stock", GUARD_ON_UNPATCHED: "on@stock"}

PASS, FAIL, SKIP = "pass", "fail", "skip"
_STYLE = {PASS: "green", FAIL: "bold red"}


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


def summarise(records: list[Record]) -> tuple[str, str]:
    """One cell: fail if anything failed, else pass if something passed, else skip; with the
    first failure's reason, else the first skip's (nothing passed), else a count."""
    if not records:
        return SKIP, "no tests"
    failures = [record for record in records if record.outcome == FAIL]
    if failures:
        first = failures[0]
        where = f"{first.test or first.step}: " if first.test or first.step else ""
        return FAIL, f"{len(failures)}/{len(records)} failed; {where}{first.reason}"
    passed = sum(record.outcome == PASS for record in records)
    if not passed:
        return SKIP, records[0].reason
    return PASS, f"{passed} passed" + (f", {len(records) - passed} skipped" if passed < len(records) else "")


def cells(records: Iterable[Record], *, features: Sequence[str], checks: Sequence[str]) -> list[dict]:
    """One summary record per (feature, check), with the detail records it sums up."""
    by_cell: dict[tuple[str, str], list[Record]] = {}
    for record in records:
        by_cell.setdefault((record.feature, record.check), []).append(record)
    extra = sorted({feature for feature, _ in by_cell} - set(features))
    rows = []
    for feature in [*features, *extra]:
        for check in checks:
            details = by_cell.get((feature, check), [])
            outcome, reason = summarise(details)
            rows.append({"feature": feature, "check": check, "outcome": outcome, "reason": reason,
                         "details": [asdict(detail) for detail in details]})
    return rows


def table(rows: list[dict], *, variant: str, checks: Sequence[str]) -> Table:
    grid = Table("feature", *(HEADERS.get(check, check) for check in checks), title=f"test-patch {variant}")
    by_feature: dict[str, dict[str, dict]] = {}
    for row in rows:
        by_feature.setdefault(row["feature"] or "(no feature)", {})[row["check"]] = row
    for feature, row in by_feature.items():
        grid.add_row(feature, *(_cell(row[check]) for check in checks))
    return grid


def _cell(row: dict) -> Text:
    """'pass 12', 'fail 2/12', 'skip': the outcome and how many details share it."""
    style = _STYLE.get(row["outcome"], "yellow")
    same = sum(1 for detail in row["details"] if detail["outcome"] == row["outcome"])
    total = len(row["details"])
    count = "" if not total else (f" {same}" if same == total else f" {same}/{total}")
    return styled((f"{row['outcome']}{count}", style))


def write(path: Path, rows: list[dict], *, variant: str, extra: Sequence[dict] = ()) -> None:
    """The cells, then `extra` records (the device, the stock proof's counts); atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps([{"variant": variant, **row} for row in [*rows, *extra]], indent=1) + "\n")
