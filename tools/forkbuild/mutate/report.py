"""The mutation report: results.json's entry for one variant, joined with the
recorded reasons, as a per-feature table (rich, markdown) and per-mutant lists."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

from rich.table import Table

from forkbuild.mutate.mutants import HUNK
from forkbuild.mutate.results import KILLED, SURVIVED, Reasons


def feature_rows(patches: dict) -> list[dict]:
    """Per feature: hunk and statement mutants, killed, survived, kill rate."""
    counts: dict[str, dict] = defaultdict(lambda: {"hunks": 0, "hunks_killed": 0, "statements": 0,
                                                   "statements_killed": 0, "survived": 0, "skipped": 0})
    for entry in patches.values():
        row = counts[entry["feature"]]
        row["skipped"] += len(entry.get("skipped", []))
        for mutant in entry["mutants"]:
            kind = "hunks" if mutant["kind"] == HUNK else "statements"
            row[kind] += 1
            row[f"{kind}_killed"] += mutant["status"] == KILLED
            row["survived"] += mutant["status"] == SURVIVED
    rows = []
    for feature, row in sorted(counts.items()):
        total = row["hunks"] + row["statements"]
        killed = row["hunks_killed"] + row["statements_killed"]
        rows.append({"feature": feature, **row, "mutants": total, "killed": killed, "rate": _rate(killed, total)})
    return rows


def totals(rows: list[dict]) -> dict:
    keys = ("hunks", "hunks_killed", "statements", "statements_killed", "survived", "skipped", "mutants", "killed")
    total = {key: sum(row[key] for row in rows) for key in keys}
    return {"feature": "all", **total, "rate": _rate(total["killed"], total["mutants"])}


def _rate(killed: int, total: int) -> float | None:
    return round(100.0 * killed / total, 1) if total else None


def _percent(rate: float | None) -> str:
    return "–" if rate is None else f"{rate:.1f} %"


def survivors(patches: dict, reasons: Reasons) -> list[dict]:
    return [{"patch": patch, "feature": entry["feature"], **mutant, "reason": reasons.of(patch, mutant["id"])}
            for patch, entry in sorted(patches.items()) for mutant in entry["mutants"]
            if mutant["status"] == SURVIVED]


def table(rows: list[dict], *, variant: str) -> Table:
    grid = Table(title=f"mutation: {variant}", title_justify="left")
    for column in ("feature", "hunks killed", "statements killed", "survived", "kill rate"):
        grid.add_column(column, justify="left" if column == "feature" else "right")
    for row in [*rows, totals(rows)]:
        style = "bold" if row["feature"] == "all" else None
        grid.add_row(row["feature"], f"{row['hunks_killed']}/{row['hunks']}",
                     f"{row['statements_killed']}/{row['statements']}", str(row["survived"]), _percent(row["rate"]),
                     style=style)
    return grid


def markdown(rows: list[dict], lost: list[dict], patches: dict, *, variant: str) -> str:
    lines = [f"# Mutation results: {variant}", "",
             "Each mutant reverts one hunk of a patch (or replaces one statement a hunk adds with `pass`)",
             "in the installed patched sglang and runs the feature's tests; killed = some test failed.", "",
             "| feature | hunks killed | statements killed | survived | kill rate |", "|---|---:|---:|---:|---:|"]
    for row in [*rows, totals(rows)]:
        name = f"**{row['feature']}**" if row["feature"] == "all" else row["feature"]
        lines.append(f"| {name} | {row['hunks_killed']}/{row['hunks']} | {row['statements_killed']}/"
                     f"{row['statements']} | {row['survived']} | {_percent(row['rate'])} |")
    lines += ["", "## Survivors", ""]
    lines += [f"- `{item['patch']}` `{item['id']}` (lines {item['lines'][0]}–{item['lines'][1]}) "
              f"`{item['summary']}`: {item['reason'] or '**no reason recorded**'}" for item in lost] or ["none"]
    lines += ["", "## Every mutant", ""]
    for patch, entry in sorted(patches.items()):
        lines += [f"### {patch} ({entry['feature']})", ""]
        for mutant in entry["mutants"]:
            how = f"killed by `{mutant['killed_by']}`" if mutant["status"] == KILLED else "**survived**"
            lines.append(f"- `{mutant['id']}` `{mutant['summary']}`: {how}")
        lines += [f"- `{item['id']}` not mutated: {item['why']}" for item in entry.get("skipped", [])]
        lines.append("")
    return "\n".join(lines)


def write(build_dir: Path, *, variant: str, patches: dict, reasons: Reasons, seconds: float | None) -> list[Path]:
    rows = feature_rows(patches)
    lost = survivors(patches, reasons)
    target = build_dir / "mutate"
    target.mkdir(parents=True, exist_ok=True)
    data = {"variant": variant, "features": rows, "total": totals(rows), "survivors": lost, "patches": patches,
            "seconds": seconds}
    written = []
    for name, text in ((f"{variant}.json", json.dumps(data, indent=1) + "\n"),
                       (f"{variant}.md", markdown(rows, lost, patches, variant=variant) + "\n")):
        path = target / name
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(text)
        os.replace(temporary, path)
        written.append(path)
    return written
