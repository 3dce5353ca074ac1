"""`forkbuild check` of the rebased series (the whole series and every variant),
as a result the report records instead of an error that would end the rebase."""

from __future__ import annotations

from forkbuild.check import check_series, describe
from forkbuild.context import Context
from forkbuild.errors import ForkbuildError


def check_every_variant(context: Context) -> dict:
    """{"ok": bool, "detail": text}: one line per variant, then every failure."""
    try:
        results = check_series(context=context)
    except ForkbuildError as error:
        return {"ok": False, "detail": error.message}
    lines = []
    for result in results:
        outcomes = ", ".join(f"{record.entry.file} {record.outcome}" for record in result.records)
        lines.append(f"{result.label}: {'ok' if result.ok else 'FAILED'} ({outcomes or 'no patches'})")
    failures = describe(results)
    return {"ok": all(result.ok for result in results), "detail": "\n".join(lines + ([failures] if failures else []))}
