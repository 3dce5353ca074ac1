"""`check`: every variant and the whole series applied strictly, every failure in one pass."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from forkbuild.applier import PatchRecord, apply_plan, plan_variant, upstream_listing
from forkbuild.context import Context
from forkbuild.errors import ApplyError
from forkbuild.series.combination import Combination, of_variant, whole_series
from forkbuild.series.config import Series
from forkbuild.series.dep3 import placeholder_problem, provenance_problem
from forkbuild.series.patchfile import check_patches, read_patch
from forkbuild.worktree.guard import temporary_worktree


@dataclass(frozen=True, kw_only=True)
class VariantCheck:
    variant: Combination
    records: tuple[PatchRecord, ...] = ()
    error: str = ""  # set when the variant could not be tried at all

    @property
    def label(self) -> str:
        return "(whole series)" if self.variant.whole else self.variant.name

    @property
    def failures(self) -> tuple[PatchRecord, ...]:
        return tuple(record for record in self.records if record.failed)

    @property
    def ok(self) -> bool:
        return not self.error and not self.failures


def consistency(series: Series) -> tuple[list[str], list[str]]:
    """(errors, warnings): a variant holding a feature no patch implements; a feature in no variant."""
    implemented = {entry.feature for entry in series.patches}
    errors = [f"variants.{name}: holds feature {feature!r}, but no patch of series.toml implements it"
              for name, variant in series.variants.items() for feature in variant.features
              if feature not in implemented]
    held = {feature for variant in series.variants.values() for feature in variant.features}
    warnings = [f"features.{name}: no variant holds it (it is never built or tested)"
                for name, feature in series.features.items() if name not in held and feature.ported]
    return errors, warnings


def provenance(series: Series) -> list[str]:
    """A patch without its DEP-3 `Forwarded:` (where it was sent upstream, if anywhere), or whose
    message is still the commit template's, one line each; run after the patches passed
    check_patches (whose problems come first)."""
    problems = []
    for entry in series.patches:
        info = read_patch(entry.path)
        for problem in (provenance_problem(info.trailer_map()), placeholder_problem(info)):
            if problem:
                problems.append(f"patches/{entry.file}: {problem}")
    return problems


def check_series(*, context: Context, dest: Path | None = None) -> list[VariantCheck]:
    """Apply the whole series, then each variant, into one scratch work tree or `dest` (rebase's)."""
    series = context.series
    cache = context.upstream
    # Every parse and path problem of every patch at once; the same check apply and import run.
    parsed = check_patches([entry.path for entry in series.patches])
    upstream_listing(cache.git(), cache.ensure(series.upstream), parsed, series=series)
    checks = []
    with nullcontext(dest) if dest else temporary_worktree(cache, purpose="check") as tree:
        for variant in (whole_series(series), *(of_variant(series, name) for name in series.variants)):
            try:  # the failures recorded rather than raised
                result = apply_plan(context=context, plan=plan_variant(series, variant), dest=tree,
                                    report_offsets=False)
            except ApplyError as error:  # a variant leaving patches out needs the whole series to apply
                checks.append(VariantCheck(variant=variant, error=error.message))
            else:
                checks.append(VariantCheck(variant=variant, records=result.records))
    return checks


def describe(results: list[VariantCheck]) -> str:
    """Every failure of every variant, for the error message."""
    lines = []
    for result in results:
        if result.error:
            lines.append(f"  - {result.label}: not tried: {result.error.splitlines()[0]}")
        lines += [f"  - {result.label}: {record.entry.file}: {record.detail}" for record in result.failures]
    return "\n".join(lines)


def raise_on_failures(results: list[VariantCheck]) -> None:
    failing = [result for result in results if not result.ok]
    if failing:
        raise ApplyError(f"{len(failing)} of {len(results)} applies fail:\n{describe(results)}",
                         hint="fix the patch in the series work tree (forkbuild apply --all), export, check again")
