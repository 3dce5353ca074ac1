"""The mutation report: results.json's entry for one variant, joined with the
recorded reasons, as a per-feature table (rich, markdown) and per-mutant lists."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from rich.table import Table

from forkbuild.fsutil import write_atomic
from forkbuild.mutate.mutants import HUNK
from forkbuild.mutate.results import KILLED, SURVIVED, Reasons

# A survivor whose recorded reason starts with this word is an *equivalent* mutant:
# the reverted lines cannot change what the code does (a `from __future__` import, a
# trailing `return None`, an import under TYPE_CHECKING). No test can kill one, so the
# behavioural kill rate leaves them out: killed / (mutants - equivalent), the usual
# mutation score. The raw rate beside it still counts them.
EQUIVALENT = "equivalent"


def is_equivalent(reason: str) -> bool:
    return reason.lower().startswith(EQUIVALENT)


def feature_rows(patches: dict, reasons: Reasons | None = None) -> list[dict]:
    """Per feature: hunk and statement mutants, killed, survived (and of those, equivalent),
    the raw kill rate and the behavioural one (equivalent survivors left out)."""
    counts: dict[str, dict] = defaultdict(lambda: {"hunks": 0, "hunks_killed": 0, "statements": 0,
                                                   "statements_killed": 0, "survived": 0, "equivalent": 0,
                                                   "skipped": 0})
    for patch, entry in patches.items():
        row = counts[entry["feature"]]
        row["skipped"] += len(entry.get("skipped", []))
        for mutant in entry["mutants"]:
            kind = "hunks" if mutant["kind"] == HUNK else "statements"
            row[kind] += 1
            row[f"{kind}_killed"] += mutant["status"] == KILLED
            row["survived"] += mutant["status"] == SURVIVED
            row["equivalent"] += mutant["status"] == SURVIVED and reasons is not None and \
                is_equivalent(reasons.of(patch, mutant["id"]))
    return [_with_rates({"feature": feature, **row}) for feature, row in sorted(counts.items())]


def totals(rows: list[dict]) -> dict:
    keys = ("hunks", "hunks_killed", "statements", "statements_killed", "survived", "equivalent", "skipped")
    return _with_rates({"feature": "all", **{key: sum(row[key] for row in rows) for key in keys}})


def _with_rates(row: dict) -> dict:
    total = row["hunks"] + row["statements"]
    killed = row["hunks_killed"] + row["statements_killed"]
    return {**row, "mutants": total, "killed": killed, "rate": _rate(killed, total),
            "behavioural_rate": _rate(killed, total - row["equivalent"])}


def _rate(killed: int, total: int) -> float | None:
    return round(100.0 * killed / total, 1) if total else None


def _percent(rate: float | None) -> str:
    return "–" if rate is None else f"{rate:.1f} %"


def survivors(patches: dict, reasons: Reasons) -> list[dict]:
    return [{"patch": patch, "feature": entry["feature"], **mutant, "reason": reasons.of(patch, mutant["id"])}
            for patch, entry in sorted(patches.items()) for mutant in entry["mutants"]
            if mutant["status"] == SURVIVED]


COLUMNS = ("feature", "hunks killed", "statements killed", "survived", "of them equivalent", "kill rate",
           "behavioural")


def _cells(row: dict) -> list[str]:
    return [row["feature"], f"{row['hunks_killed']}/{row['hunks']}", f"{row['statements_killed']}/{row['statements']}",
            str(row["survived"]), str(row["equivalent"]), _percent(row["rate"]), _percent(row["behavioural_rate"])]


def table(rows: list[dict], *, variant: str) -> Table:
    grid = Table(title=f"mutation: {variant}", title_justify="left")
    for column in COLUMNS:
        grid.add_column(column, justify="left" if column == "feature" else "right")
    for row in [*rows, totals(rows)]:
        grid.add_row(*_cells(row), style="bold" if row["feature"] == "all" else None)
    return grid


def markdown(rows: list[dict], lost: list[dict], patches: dict, *, variant: str) -> str:
    lines = [f"# Mutation results: {variant}", "",
             "Each mutant reverts one hunk of a patch (or replaces one statement a hunk adds with `pass`)",
             "in the installed patched sglang and runs the feature's tests; killed = some test failed.", "",
             "Behavioural: killed / (mutants - equivalent survivors), those whose reason says `equivalent`.", "",
             f"| {' | '.join(COLUMNS)} |", "|---|---:|---:|---:|---:|---:|---:|"]
    for row in [*rows, totals(rows)]:
        cells = _cells(row)
        if row["feature"] == "all":
            cells[0] = "**all**"
        lines.append(f"| {' | '.join(cells)} |")
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
    rows = feature_rows(patches, reasons)
    lost = survivors(patches, reasons)
    data = {"variant": variant, "features": rows, "total": totals(rows), "survivors": lost, "patches": patches,
            "seconds": seconds}
    written = [build_dir / "mutate" / f"{variant}.json", build_dir / "mutate" / f"{variant}.md"]
    written[0].parent.mkdir(parents=True, exist_ok=True)
    write_atomic(written[0], json.dumps(data, indent=1) + "\n", durable=False)
    write_atomic(written[1], markdown(rows, lost, patches, variant=variant) + "\n", durable=False)
    return written
