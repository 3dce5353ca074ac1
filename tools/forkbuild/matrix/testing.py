"""test-patch over every combination of a matrix, in one test venv: each
combination's wheel is installed --no-deps in turn (the heavy dependencies stay),
its structure and behaviour checked as `forkbuild test-patch` does, and the
outcomes gathered into one table (combination x outcome) and one JSON file."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from forkbuild.context import Context
from forkbuild.errors import ForkbuildError
from forkbuild.fsutil import write_atomic
from forkbuild.matrix.strategies import Matrix
from forkbuild.testpatch.records import FAIL, PASS, SKIP
from forkbuild.testpatch.runner import Options, run_variant

ERROR = "error"  # the combination could not be tested at all (a build or install failed)


@dataclass(frozen=True, kw_only=True)
class MatrixRun:
    rows: list[dict]
    report: Path

    @property
    def failed(self) -> list[dict]:
        return [row for row in self.rows if row["outcome"] != PASS]


def run_matrix(*, context: Context, matrix: Matrix, python: Path, structure_only: bool = False,
               from_tree: bool = False) -> MatrixRun:
    rows = []
    for number, combination in enumerate(matrix.combinations, start=1):
        context.reporter.info(f"[{number}/{matrix.count}] {combination.name}: {combination.label}")
        row = {"name": combination.name, "features": list(combination.features), "base": combination.base}
        try:
            outcome = run_variant(context=context, options=Options(variant=combination, python=python,
                                                                   structure_only=structure_only, from_tree=from_tree))
        except ForkbuildError as error:
            rows.append({**row, "outcome": ERROR, "counts": {}, "failing": [], "reason": error.message,
                         "report": ""})
            continue
        counts = Counter(cell["outcome"] for cell in outcome.rows)
        failing = sorted({f"{cell['feature'] or '-'}:{cell['check']}" for cell in outcome.failed})
        rows.append({**row, "outcome": FAIL if failing else PASS, "counts": {key: counts.get(key, 0) for key in
                                                                              (PASS, FAIL, SKIP)},
                     "failing": failing, "reason": "", "report": str(outcome.report)})
    report = context.build_dir / "test-patch" / f"matrix-{matrix.strategy}.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(report, json.dumps({"strategy": matrix.strategy, "count": matrix.count,
                                     "lower_bound": matrix.lower_bound, "combinations": rows}, indent=2) + "\n")
    return MatrixRun(rows=rows, report=report)


def table(run: MatrixRun, *, strategy: str) -> Table:
    grid = Table("combination", "features", "outcome", "pass", "fail", "skip", "failing checks",
                 title=f"test-patch over the {strategy} matrix")
    styles = {PASS: "green", FAIL: "red", ERROR: "red"}
    for row in run.rows:
        counts = row["counts"]
        grid.add_row(row["name"], ", ".join(row["features"]) or "-",
                     f"[{styles[row['outcome']]}]{row['outcome']}[/]",
                     *(str(counts.get(key, "")) for key in (PASS, FAIL, SKIP)),
                     "\n".join(row["failing"]) or row["reason"][:200])
    return grid
