"""The summary: one row per feature, one cell per check; as a rich table and JSON."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path

from rich.table import Table

from forkbuild.testpatch.records import FAIL, PASS, Record, summarise, write_json

_STYLE = {PASS: "green", FAIL: "bold red"}


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


# Short headers: CI's console is 80 columns wide.
HEADERS = {"structure": "structure", "guard_off": "off", "guard_on": "on", "absent": "absent",
           "guard_off_unpatched": "off@stock", "guard_on_unpatched": "on@stock"}


def table(rows: list[dict], *, variant: str, checks: Sequence[str]) -> Table:
    grid = Table("feature", *(HEADERS.get(check, check) for check in checks), title=f"test-patch {variant}")
    by_feature: dict[str, dict[str, dict]] = {}
    for row in rows:
        by_feature.setdefault(row["feature"] or "(no feature)", {})[row["check"]] = row
    for feature, row in by_feature.items():
        grid.add_row(feature, *(_cell(row[check]) for check in checks))
    return grid


def _cell(row: dict) -> str:
    """'pass 12', 'fail 2/12', 'skip': the outcome and how many details share it."""
    style = _STYLE.get(row["outcome"], "yellow")
    same = sum(1 for detail in row["details"] if detail["outcome"] == row["outcome"])
    total = len(row["details"])
    count = "" if not total else (f" {same}" if same == total else f" {same}/{total}")
    return f"[{style}]{row['outcome']}{count}[/{style}]"


def problems(rows: list[dict]) -> list[str]:
    """One line per failed cell: what and why (the table has no room)."""
    return [f"{row['feature'] or '(no feature)'} / {row['check']}: {row['reason']}"
            for row in rows if row["outcome"] == FAIL]


def write(path: Path, rows: list[dict], *, variant: str, extra: Sequence[dict] = ()) -> None:
    """The cells, then `extra` records (the stock proof's counts)."""
    write_json(path, [{"variant": variant, **row} for row in [*rows, *extra]])
