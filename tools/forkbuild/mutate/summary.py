"""The mutation report of one variant: results.json's records joined with the reasons, as a
per-feature table (rich, markdown) and per-mutant lists."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from rich.table import Table

from forkbuild.io.fsutil import write_atomic
from forkbuild.mutate.mutants import HUNK
from forkbuild.mutate.results import KILLED, SURVIVED, Reasons

# A survivor whose reason starts with this word cannot change what the code does: no test can
# kill it, so the behavioural rate, killed / (mutants - equivalent), leaves it out.
EQUIVALENT = "equivalent"
COUNTS = ("hunks", "hunks_killed", "statements", "statements_killed", "survived", "equivalent", "skipped")
COLUMNS = ("feature", "hunks killed", "statements killed", "survived", "of them equivalent", "kill rate",
           "behavioural")


def feature_rows(patches: dict, reasons: Reasons) -> list[dict]:
    """Per feature: the COUNTS, the raw kill rate and the behavioural one."""
    counts: dict[str, dict] = defaultdict(lambda: dict.fromkeys(COUNTS, 0))
    for patch, entry in patches.items():
        row = counts[entry["feature"]]
        row["skipped"] += len(entry.get("skipped", []))
        for mutant in entry["mutants"]:
            kind = "hunks" if mutant["kind"] == HUNK else "statements"
            row[kind] += 1
            row[f"{kind}_killed"] += mutant["status"] == KILLED
            row["survived"] += mutant["status"] == SURVIVED
            row["equivalent"] += mutant["status"] == SURVIVED and \
                reasons.of(patch, mutant["id"]).lower().startswith(EQUIVALENT)
    return [_with_rates({"feature": feature, **row}) for feature, row in sorted(counts.items())]


def totals(rows: list[dict]) -> dict:
    return _with_rates({"feature": "all", **{key: sum(row[key] for row in rows) for key in COUNTS}})


def _with_rates(row: dict) -> dict:
    total = row["hunks"] + row["statements"]
    killed = row["hunks_killed"] + row["statements_killed"]
    behavioural = total - row["equivalent"]
    return {**row, "mutants": total, "killed": killed, "rate": round(100.0 * killed / total, 1) if total else None,
            "behavioural_rate": round(100.0 * killed / behavioural, 1) if behavioural else None}


def survivors(patches: dict, reasons: Reasons) -> list[dict]:
    return [{"patch": patch, "feature": entry["feature"], **mutant, "reason": reasons.of(patch, mutant["id"])}
            for patch, entry in sorted(patches.items()) for mutant in entry["mutants"]
            if mutant["status"] == SURVIVED]


def _cells(row: dict) -> list[str]:
    rates = ["–" if rate is None else f"{rate:.1f} %" for rate in (row["rate"], row["behavioural_rate"])]
    return [row["feature"], f"{row['hunks_killed']}/{row['hunks']}", f"{row['statements_killed']}/{row['statements']}",
            str(row["survived"]), str(row["equivalent"]), *rates]


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
    lines += [f"| {' | '.join(_cells(row))} |" for row in rows]
    lines.append(f"| {' | '.join(['**all**', *_cells(totals(rows))[1:]])} |")
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
