"""`forkbuild mutate`: hunk-revert mutation testing of the series against the patched sglang of
the test venv; `--check` proves mutation/results.json current without running a mutant."""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from forkbuild.commands import add_command
from forkbuild.errors import MutationError
from forkbuild.io.fsutil import flocked
from forkbuild.mutate import results, summary
from forkbuild.mutate.mutants import Mutant, Skipped, mutants_of
from forkbuild.mutate.workers import Outcome, run_all
from forkbuild.series.combination import Combination, resolve
from forkbuild.series.config import PatchEntry, Series, near_miss


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "mutate", help="revert each code hunk of the patches, one at a time, and see the feature's tests fail",
        examples=['nox -s mutate   (the test venv; every patch of the default variant whose results are stale)',
                  'forkbuild mutate --variant tp4 --patch loop-abort --jobs 2',
                  'forkbuild mutate --check   (CI: recorded results current, every survivor has a reason)'],
        description="Each hunk of a patch that changes code (and each statement a hunk adds) is reverted in the "
                    "patched sglang of the test venv, and the feature's tests run against it. Results are kept in "
                    f"{results.RESULTS_FILE} per (patch, tests, upstream pin); current ones are not run again.")
    parser.add_argument("--variant", help="variant whose patches to mutate (default: series.default_variant)")
    parser.add_argument("--patch", action="append", default=[], metavar="FILE",
                        help="only this patch (repeatable; with or without .patch)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel pytest workers (default: cores)")
    parser.add_argument("--force", action="store_true", help="re-run patches whose recorded results are current")
    parser.add_argument("--python", type=Path, default=Path(sys.executable),
                        help="interpreter of the test venv (default: the one running forkbuild, as in `nox -s mutate`)")
    parser.add_argument("--check", action="store_true",
                        help=f"run nothing: fail when {results.RESULTS_FILE} is stale for a patch or a survivor has "
                             f"no reason in {results.REASONS_FILE}")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    if args.jobs < 1:
        raise MutationError(f"--jobs {args.jobs}: needs at least 1")
    if args.check:
        return _check(context)
    lock_path = context.build_dir / "mutate" / ".lock"
    # Two runs on one tree would each write results.json from what they read.
    with flocked(lock_path, wait_s=0, busy=MutationError(
            f"another `forkbuild mutate` is running on {context.series_dir} ({lock_path} is held)",
            hint="wait for it to finish; its results land in mutation/results.json")):
        return _run(args, context)


def _run(args, context) -> int:
    series = context.series
    combination = resolve(series, variant=args.variant)  # an unknown one stops here, with its near miss
    variant = combination.name
    entries = select(series, combination, args.patch)
    data = results.load(series.root)
    recorded = data["variants"].setdefault(variant, {"patches": {}})["patches"]
    _apply_moves(context, recorded)  # those a killed run recorded, before this run records anew
    reasons = results.load_reasons(series.root)
    from forkbuild.testpatch import behaviour

    behaviour.require_torch(args.python)
    behaviour.install_variant_wheel(context=context, variant=combination, python=args.python)
    site_packages = behaviour.installed_package_dir(args.python, series.upstream.name).parent
    plans = plan(context, entries, recorded=recorded, site_packages=site_packages, force=args.force)
    if not args.patch:
        for file in set(recorded) - {entry.file for entry in entries}:  # patches that left the variant
            del recorded[file]
    start = time.monotonic()
    _execute(context, plans, python=args.python, jobs=args.jobs,
             data=data, recorded=recorded, site_packages=site_packages, reasons=reasons)
    seconds = time.monotonic() - start
    results.write(series.root, data)
    _apply_moves(context, recorded)
    reasons = results.load_reasons(series.root)
    context.reporter.console.print(summary.table(summary.feature_rows(recorded, reasons), variant=variant))
    for item in summary.survivors(recorded, reasons):
        context.reporter.info(f"survived: {item['patch']} {item['id']} {item['summary']!r}: "
                              f"{item['reason'] or 'NO REASON RECORDED'}")
    for path in summary.write(context.build_dir, variant=variant, patches=recorded, reasons=reasons, seconds=seconds):
        context.reporter.info(f"written: {path}")
    context.reporter.info(f"mutants run in {seconds:.0f} s with {args.jobs} worker(s); "
                          f"results in {results.RESULTS_FILE}")
    return 0


@dataclass(frozen=True)
class PatchPlan:
    entry: PatchEntry
    key: str
    tests: tuple[Path, ...]
    mutants: tuple[Mutant, ...]
    skipped: tuple[Skipped, ...] = ()


def select(series: Series, variant: Combination, names: list[str]) -> tuple[PatchEntry, ...]:
    """The variant's patches, or those of them named by file (with or without .patch)."""
    by_file = {entry.file: entry for entry in variant.patches(series)}
    files = {name: Path(name if name.endswith(".patch") else f"{name}.patch").name for name in names}
    if problems := [f"--patch {name}: not a patch of variant {variant.name}{near_miss(file, by_file)}"
                    for name, file in files.items() if file not in by_file]:
        raise MutationError("; ".join(problems))
    return tuple(by_file[file] for file in files.values()) if names else tuple(by_file.values())


def plan(context, entries: tuple[PatchEntry, ...], *, recorded: dict, site_packages: Path,
         force: bool) -> list[PatchPlan]:
    """The patches to run, with their mutants (`recorded`: results.json's patches of the variant)."""
    series = context.series
    plans = []
    for entry in entries:
        key = results.patch_key(series, entry)
        if not force and recorded.get(entry.file, {}).get("key") == key:
            context.reporter.info(f"{entry.file}: results current, not run (--force runs it again)")
            continue
        tests = tuple(results.feature_tests(series.root, entry.feature))
        mutants, skipped = mutants_of(entry, package_root=series.upstream.package_root, installed=lambda path: (
            (site_packages / path).read_text(encoding="utf-8") if (site_packages / path).is_file() else None))
        if mutants and not tests:
            raise MutationError(f"patches/{entry.file}: feature {entry.feature} has no tests "
                                f"(tests/patches/test_*.py with FEATURE = {entry.feature!r}): its mutants cannot die")
        plans.append(PatchPlan(entry, key, tests, tuple(mutants), tuple(skipped)))
    return plans


def _apply_moves(context, recorded: dict) -> None:
    for file, old, new in results.apply_moves(context.series.root, recorded):
        context.reporter.info(f"{results.REASONS_FILE}: [\"{file}\"] the reason for {old} moved to {new}, "
                              f"the same statement renumbered by the patch's edit")


def _check(context) -> int:
    series = context.series
    data, reasons = results.load(series.root), results.load_reasons(series.root)
    if found := results.problems(series, data, reasons):
        raise MutationError(f"{len(found)} problem(s) with the mutation results:\n" +
                            "\n".join(f"  - {line}" for line in found),
                            hint="`nox -s mutate` re-runs what is stale (it needs the test venv of "
                                 "`nox -s \"test-patch(tp4)\"`)")
    not_run = {file: table[results.NOT_RUN] for file, table in reasons.by_patch.items() if results.NOT_RUN in table}
    for file, why in sorted(not_run.items()):
        context.reporter.warn(f"patches/{file} has no mutation results: {why}")
    context.reporter.info(f"{results.RESULTS_FILE} is current for every patch"
                          f"{f' but the {len(not_run)} above' if not_run else ''}; every survivor has a reason")
    return 0


def _execute(context, plans: list[PatchPlan], *, python: Path, jobs: int, data: dict, recorded: dict,
             site_packages: Path, reasons: results.Reasons) -> None:
    for item in [item for item in plans if not item.mutants]:
        _record(recorded, item, {}, reasons)
    if not (plans := [item for item in plans if item.mutants]):
        return
    root = context.series.root
    mutants = [mutant for item in plans for mutant in item.mutants]
    # The mutated modules pull in (nearly) every third-party import the tests need: preloaded once.
    preload = sorted({mutant.module for mutant in mutants if mutant.source is not None})
    lock = threading.Lock()
    by_file = {item.entry.file: item for item in plans}
    outcomes: dict[str, dict[str, Outcome]] = {file: {} for file in by_file}

    def done(mutant, outcome: Outcome) -> None:
        with lock:
            outcomes[mutant.patch][mutant.id] = outcome
            verdict = f"killed by {outcome.killed_by}" if outcome.status == results.KILLED else "SURVIVED"
            context.reporter.info(f"[{sum(map(len, outcomes.values()))}/{len(mutants)}] {mutant.patch} {mutant.id}: "
                                  f"{verdict} ({outcome.seconds:.0f} s)")
            if len(outcomes[mutant.patch]) == len(by_file[mutant.patch].mutants):
                # Each patch is written as soon as its mutants are done: a killed run keeps them.
                _record(recorded, by_file[mutant.patch], outcomes[mutant.patch], reasons)
                results.write(root, data)

    # The test that killed a mutant of the same id last time runs first: a hint for speed only.
    killers = {(file, record["id"]): record["killed_by"] for file in by_file
               for record in recorded.get(file, {}).get("mutants", [])
               if record.get("status") == results.KILLED and "::" in record.get("killed_by", "")}
    with context.reporter.step(f"{len(mutants)} mutant(s) of {len(plans)} patch(es) on {jobs} worker(s), "
                               f"each feature's tests first unmutated"):
        baselines = run_all({item.entry.feature: item.tests for item in plans}, mutants, root=root, python=python,
                            site_packages=site_packages, preload=preload, workers=jobs, done=done, killers=killers,
                            scratch=context.build_dir / "mutate" / "scratch")  # under run()'s lock
    if broken := {key: outcome for key, outcome in baselines.items() if outcome.status != results.SURVIVED}:
        raise MutationError("baselines failed, so the mutants of their features were not run:\n" +
                            "\n".join(f"  - {key}: {outcome.killed_by}" for key, outcome in sorted(broken.items())),
                            hint="a baseline is the feature's tests with the modules its mutants touch imported "
                                 "again from unchanged copies: fix failing tests first (`nox -s \"test-patch(tp4)\"`); "
                                 f"results of the other patches are in {results.RESULTS_FILE}")


def _record(recorded: dict, item: PatchPlan, outcomes: dict[str, Outcome], reasons: results.Reasons) -> None:
    file = item.entry.file
    mutants = [{"id": mutant.id, "kind": mutant.kind, "path": mutant.path, "lines": list(mutant.lines),
                "summary": mutant.summary, "status": outcomes[mutant.id].status,
                "killed_by": outcomes[mutant.id].killed_by} for mutant in item.mutants]
    record: dict[str, object] = {"feature": item.entry.feature, "key": item.key, "mutants": mutants,
                                 "skipped": [asdict(skip) for skip in item.skipped]}
    table = reasons.by_patch.get(file, {})
    if moved := results.follow(recorded.get(file, {}).get("mutants", []), mutants, table):
        record[results.MOVED] = {old: {"id": new, "reason": table[old]} for old, new in moved.items()}
    recorded[file] = record
