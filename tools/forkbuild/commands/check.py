"""`forkbuild check`: every variant applies strictly; every failure reported in one pass."""

from __future__ import annotations

from rich.table import Table

from forkbuild.checker import check_series, consistency, provenance, raise_on_failures
from forkbuild.commands import add_command
from forkbuild.console import cells, styled
from forkbuild.errors import ConfigError
from forkbuild.worktree.engine import Outcome


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "check", help="apply the whole series and every variant in scratch trees; report every failing patch",
        description="Applies the whole series and every variant in scratch trees and reports every failing patch at once (after validating series.toml and the patches' path safety). Exit 0 when every variant applies.",
        examples=['forkbuild check', 'forkbuild check -v'])
    parser.set_defaults(run=run)


def run(args, context) -> int:
    with context.reporter.step("Checking series.toml, path safety and every variant"):
        # Here, not in check_series: a finished rebase may leave a variant a feature without a patch.
        errors, warnings = consistency(context.series)
        for warning in warnings:
            context.reporter.warn(warning)
        if errors:
            raise ConfigError(errors, hint="export a patch of it (a commit with a `Feature:` trailer naming it in the "
                              "series tree, then `forkbuild export`), or take it out of the variant's features")
        results = check_series(context=context)
    counted = (Outcome.EXACT, Outcome.OFFSET, Outcome.THREE_WAY)
    summary = Table("variant", "patches", *map(str, counted), "failed", title="forkbuild check")
    for result in results:
        failed = str(len(result.failures)) if not result.error else "not tried"
        counts = (sum(record.outcome is outcome for record in result.records) for outcome in counted)
        summary.add_row(*cells(result.label, str(len(result.records)), *map(str, counts),
                        styled((failed, "red")) if not result.ok else failed))
    context.reporter.console.print(summary)
    failures = Table("variant", "patch", "feature", "why", title="failing patches")
    for result in results:
        if result.error:
            failures.add_row(*cells(result.label, "", "", result.error), style="red")
        for record in result.failures:
            failures.add_row(*cells(result.label, record.entry.file, record.entry.feature, record.detail), style="red")
    if failures.row_count:
        context.reporter.console.print(failures)
    raise_on_failures(results)
    missing = provenance(context.series)
    if missing:
        raise ConfigError(missing)
    context.reporter.info("every variant applies")
    return 0
