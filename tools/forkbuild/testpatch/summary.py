"""The summary: one row per feature, one cell per check; as a rich table and JSON."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Iterable, Sequence

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


def table(rows: list[dict], *, variant: str, checks: Sequence[str]) -> Table:
    grid = Table("feature", *checks, title=f"test-patch {variant}")
    by_feature: dict[str, dict[str, dict]] = {}
    for row in rows:
        by_feature.setdefault(row["feature"] or "(no feature)", {})[row["check"]] = row
    for feature, row in by_feature.items():
        grid.add_row(feature, *(_cell(row[check]) for check in checks))
    return grid


def _cell(row: dict) -> str:
    style = _STYLE.get(row["outcome"], "yellow")
    counts = _counts(row["details"])
    return f"[{style}]{row['outcome']}[/{style}]" + (f" [dim]{counts}[/dim]" if counts else "")


def _counts(details: list[dict]) -> str:
    tally: dict[str, int] = {}
    for detail in details:
        tally[detail["outcome"]] = tally.get(detail["outcome"], 0) + 1
    return " ".join(f"{count} {outcome}" for outcome, count in sorted(tally.items()))


def problems(rows: list[dict]) -> list[str]:
    """One line per failed or skipped cell: what and why (the table has no room)."""
    return [f"{row['feature'] or '(no feature)'} / {row['check']}: {row['outcome']}: {row['reason']}"
            for row in rows if row["outcome"] != PASS]


def write(path: Path, rows: list[dict], *, variant: str) -> None:
    write_json(path, [{"variant": variant, **row} for row in rows])
