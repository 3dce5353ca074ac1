"""`forkbuild check` of the rebased series (series.toml's promises, the whole series and
every variant), as a result the report records instead of an error that would end the rebase."""

from __future__ import annotations

from pathlib import Path

from forkbuild.check import check_series, consistency, describe
from forkbuild.context import Context
from forkbuild.errors import ForkbuildError


def check_every_variant(context: Context, tree: Path) -> dict:
    """{"ok": bool, "detail": text}: one line per variant, then every failure. `tree`: the
    rebase's work tree (checked out already: each variant changes only the files that differ)."""
    try:
        errors, _ = consistency(context.series)
        results = check_series(context=context, dest=tree)
    except ForkbuildError as error:
        return {"ok": False, "detail": error.message}
    lines = [f"{result.label}: {'ok' if result.ok else 'FAILED'} "
             f"({', '.join(f'{record.entry.file} {record.outcome}' for record in result.records) or 'no patches'})"
             for result in results]
    failures = "\n".join([describe(results), *(f"  - {error}" for error in errors)]).strip("\n")
    return {"ok": not errors and all(result.ok for result in results), "detail": "\n".join(lines + ([failures] if failures else []))}
