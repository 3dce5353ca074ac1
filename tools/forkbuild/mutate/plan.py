"""What a mutate run does, decided before anything runs: the patches, which of them have
current results, and the mutants of the others."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from forkbuild.config import PatchEntry, Series, near_miss
from forkbuild.errors import MutationError
from forkbuild.mutate.mutants import Mutant, Skipped, mutants_of
from forkbuild.mutate.results import feature_tests, patch_key


@dataclass(frozen=True)
class PatchPlan:
    entry: PatchEntry
    key: str
    tests: tuple[Path, ...]
    cached: bool
    mutants: tuple[Mutant, ...] = ()
    skipped: tuple[Skipped, ...] = ()


def select(series: Series, variant: str, names: list[str]) -> tuple[PatchEntry, ...]:
    """The variant's patches, or those of them named by file (with or without .patch)."""
    entries = series.patches_for(variant)
    if not names:
        return entries
    by_file = {entry.file: entry for entry in entries}
    chosen, problems = [], []
    for name in names:
        file = Path(name if name.endswith(".patch") else f"{name}.patch").name
        if file in by_file:
            chosen.append(by_file[file])
        else:
            problems.append(f"--patch {name}: not a patch of variant {variant}{near_miss(file, by_file)}")
    if problems:
        raise MutationError("; ".join(problems))
    return tuple(chosen)


def plan(series: Series, variant: str, entries: tuple[PatchEntry, ...], *, recorded: dict,
         site_packages: Path, force: bool) -> list[PatchPlan]:
    """`recorded`: results.json's patches of the variant."""

    def installed(path: str) -> str | None:
        return (site_packages / path).read_text(encoding="utf-8") if (site_packages / path).is_file() else None

    plans = []
    for entry in entries:
        key = patch_key(series, entry)
        tests = tuple(feature_tests(series.root, entry.feature))
        if not force and recorded.get(entry.file, {}).get("key") == key:
            plans.append(PatchPlan(entry, key, tests, cached=True))
            continue
        mutants, skipped = mutants_of(entry, package_root=series.upstream.package_root, installed=installed)
        if mutants and not tests:
            raise MutationError(f"patches/{entry.file}: feature {entry.feature} has no tests "
                                f"(tests/patches/test_*.py with FEATURE = {entry.feature!r}): its mutants cannot die")
        plans.append(PatchPlan(entry, key, tests, cached=False, mutants=tuple(mutants), skipped=tuple(skipped)))
    return plans
