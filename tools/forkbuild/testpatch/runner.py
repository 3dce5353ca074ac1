"""One variant, end to end: structure, behaviour, (for a variant without
features) the proof that the tests fail without the patches (testpatch.proof),
summary."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from forkbuild.apply import scratch_tree
from forkbuild.context import Context
from forkbuild.matrix.combination import Combination, as_combination
from forkbuild.testpatch import behaviour, proof, summary
from forkbuild.testpatch.behaviour import TestPython
from forkbuild.testpatch.records import ABSENT, CHECKS, FAIL, GUARD_OFF, GUARD_ON, STRUCTURE, UNPATCHED_CHECKS, Record
from forkbuild.testpatch.structure import check_structure


@dataclass(frozen=True, kw_only=True)
class Options:
    variant: Combination | str  # what to test: a Combination, or a variant's name
    python: Path  # the interpreter the behaviour tests run with
    from_tree: bool = False  # PYTHONPATH the applied tree instead of installing the wheel
    structure_only: bool = False


@dataclass(frozen=True, kw_only=True)
class Outcome:
    rows: list[dict]
    checks: tuple[str, ...]
    report: Path
    proof: dict | None = None  # proof.counts() of the stock proof, when it ran

    @property
    def failed(self) -> list[dict]:
        return [row for row in self.rows if row["outcome"] == FAIL]


def run_variant(*, context: Context, options: Options) -> Outcome:
    series = context.series
    combination = as_combination(series, options.variant)
    variant, features = combination.name, combination.features
    # A variant without features is stock sglang: the place to prove that every
    # guard_on test fails when its patch is missing.
    prove = not features and not options.structure_only
    records: list[Record] = []
    with context.reporter.step(f"{variant}: applying and checking structure"), \
            scratch_tree(context=context, variant=combination, strict=False) as result:
        records += check_structure(series=series, variant=combination, result=result)
        behave = not options.structure_only and not result.failures
        if options.from_tree and behave:
            python = TestPython(executable=options.python,
                                env={"PYTHONPATH": str(result.dest / series.upstream.package_root)})
            records += _behaviour(context, python, features=features, prove=prove)
    if result.failures and not options.structure_only:
        # No wheel can be built: say so in every behaviour cell instead of stopping without a summary.
        reason = f"not run: {len(result.failures)} patch(es) of {variant} do not apply (see structure)"
        records += [Record(feature=name, check=check, outcome=FAIL, reason=reason)
                    for name in features for check in (GUARD_OFF, GUARD_ON)]
    elif not options.from_tree and behave:
        behaviour.require_torch(options.python)
        behaviour.install_variant_wheel(context=context, variant=combination, python=options.python)
        records += _behaviour(context, TestPython(executable=options.python, env={}), features=None, prove=prove)
    checks = (STRUCTURE,) if options.structure_only else CHECKS + (UNPATCHED_CHECKS if prove else ())
    rows = summary.cells(records, features=list(series.features), checks=checks)
    if not options.structure_only:
        _require_tests(rows, built=set(features))
    numbers = proof.counts(records) if prove else None
    report = context.build_dir / "test-patch" / f"{variant}.json"
    summary.write(report, rows, variant=variant, extra=[proof.summary_row(numbers)] if numbers else [])
    return Outcome(rows=rows, checks=checks, report=report, proof=numbers)


def _behaviour(context: Context, python: TestPython, *, features, prove: bool) -> list[Record]:
    """`features` None: the installed manifest says what is built in; else the
    variant's features (an applied tree has no manifest)."""
    claimed = None if features is None else ",".join(features)
    with context.reporter.step("behaviour: tests/patches"):
        records = behaviour.behaviour_records(behaviour.run_tests(context=context, python=python, features=claimed))
    if prove:
        records += proof.run_proof(context=context, stock=python)
    return records


def _require_tests(rows: list[dict], *, built: set[str]) -> None:
    """A built-in feature needs guard_off and guard_on tests; a left-out one, an absent test."""
    for row in rows:
        wanted = (GUARD_OFF, GUARD_ON) if row["feature"] in built else (ABSENT,)
        if row["check"] in wanted and not row["details"]:
            row["outcome"], row["reason"] = FAIL, f"no {row['check']} test for {row['feature']} in tests/patches"
