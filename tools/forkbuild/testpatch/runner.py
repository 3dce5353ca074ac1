"""One variant, end to end: structure, behaviour, (for a variant without features) the stock
proof (testpatch.proof), summary."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from forkbuild.applier import scratch_tree
from forkbuild.context import Context
from forkbuild.errors import BuildError
from forkbuild.series.combination import Combination
from forkbuild.testpatch import behaviour, proof, records
from forkbuild.testpatch import device as device_module
from forkbuild.testpatch.behaviour import TestPython
from forkbuild.testpatch.records import ABSENT, CHECKS, FAIL, GUARD_OFF, GUARD_ON, STRUCTURE, UNPATCHED_CHECKS, Record
from forkbuild.testpatch.structure import check_structure


@dataclass(frozen=True, kw_only=True)
class Options:
    variant: Combination  # what to test, resolved once by the caller
    python: Path  # the interpreter the behaviour tests run with
    from_tree: bool = False  # PYTHONPATH the applied tree instead of installing the wheel
    structure_only: bool = False
    device: str = "cpu"  # cpu | cuda: where the behaviour tests run (testpatch.device)
    installed: bool = False  # test the sglang `python` imports already: no apply, structure or wheel


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
    combination = options.variant
    if options.installed:
        return _run_installed(context=context, options=options, variant=combination.name)
    variant, features = combination.name, combination.features
    # A CPU run keeps require_torch's check below; a CUDA run fails here, before applying, without a GPU.
    cuda = options.device != "cpu" and not options.structure_only
    found = device_module.probe(options.python, options.device) if cuda else None
    # A variant without features is stock sglang: the place to prove that every
    # guard_on test fails when its patch is missing.
    prove = not features and not options.structure_only
    made: list[Record] = []
    with context.reporter.step(f"{variant}: applying and checking structure"), \
            scratch_tree(context=context, variant=combination, strict=False) as result:
        made += check_structure(series=series, variant=combination, result=result)
        behave = not options.structure_only and not result.failures
        if options.from_tree and behave:
            python = TestPython(executable=options.python,
                                env={"PYTHONPATH": str(result.dest / series.upstream.package_root),
                                     device_module.DEVICE_ENV: options.device})
            made += _behaviour(context, python, features=features, prove=prove)
    if result.failures and not options.structure_only:
        # No wheel can be built: say so in every behaviour cell instead of stopping without a summary.
        reason = f"not run: {len(result.failures)} patch(es) of {variant} do not apply (see structure)"
        made += [Record(feature=name, check=check, outcome=FAIL, reason=reason)
                 for name in features for check in (GUARD_OFF, GUARD_ON)]
    elif not options.from_tree and behave:
        behaviour.require_torch(options.python)
        behaviour.install_variant_wheel(context=context, variant=combination, python=options.python)
        python = TestPython(executable=options.python, env={device_module.DEVICE_ENV: options.device})
        made += _behaviour(context, python, features=None, prove=prove)
    checks = (STRUCTURE,) if options.structure_only else CHECKS + (UNPATCHED_CHECKS if prove else ())
    numbers = proof.counts(made) if prove else None
    extra = ([found] if found else []) + ([proof.summary_row(numbers)] if numbers else [])
    return _summed(context, made, variant=variant, device=options.device, checks=checks, extra=extra,
                   built=None if options.structure_only else set(features), proof=numbers)


def _run_installed(*, context: Context, options: Options, variant: str) -> Outcome:
    """The behaviour tests against the sglang `options.python` imports (its manifest says what
    is built in): for a machine without the upstream cache, e.g. a lent GPU."""
    found = device_module.probe(options.python, options.device)
    manifest = behaviour.installed_manifest(options.python)
    if manifest is None:
        raise BuildError(f"--installed: the sglang {options.python} imports has no forkbuild manifest",
                         hint="install a variant's wheel there (`forkbuild build-wheel`), or unpack its files "
                              "onto that Python's path")
    if manifest.variant != variant:
        raise BuildError(f"--installed: the sglang {options.python} imports is variant {manifest.variant!r}, "
                         f"not {variant!r}", hint=f"pass --variant {manifest.variant}")
    python = TestPython(executable=options.python, env={device_module.DEVICE_ENV: options.device})
    made = _behaviour(context, python, features=None, prove=False)
    # the device record names the build that ran: a GPU report is evidence of that wheel only
    ran = {**found, "wheel_version": manifest.version, "series_hash": manifest.series_hash}
    return _summed(context, made, variant=variant, device=options.device, checks=(GUARD_OFF, GUARD_ON, ABSENT),
                   extra=[ran], built=set(manifest.features))


def _summed(context: Context, made: list[Record], *, variant: str, device: str, checks: tuple[str, ...],
            extra: list[dict], built: set[str] | None, proof: dict | None = None) -> Outcome:
    """The cells, each built-in feature (`built`; None: no behaviour ran) wanting guard_off and
    guard_on tests and each left-out one an absent test; written to build/test-patch/."""
    rows = records.cells(made, features=list(context.series.features), checks=checks)
    for row in rows if built is not None else []:
        wanted = (GUARD_OFF, GUARD_ON) if row["feature"] in (built or ()) else (ABSENT,)
        if row["check"] in wanted and not row["details"]:
            row["outcome"], row["reason"] = FAIL, f"no {row['check']} test for {row['feature']} in tests/patches"
    name = variant if device == "cpu" else f"{variant}-{device}"
    report = context.build_dir / "test-patch" / f"{name}.json"
    records.write(report, rows, variant=variant, extra=extra)
    return Outcome(rows=rows, checks=checks, report=report, proof=proof)


def _behaviour(context: Context, python: TestPython, *, features, prove: bool) -> list[Record]:
    """`features` None: the installed manifest says what is built in. With `prove`, the stock
    proof's two pytest runs go beside it."""
    claimed = None if features is None else ",".join(features)
    title = "behaviour: tests/patches" + (", and the stock proof's two runs beside it" if prove else "")
    # On the CPU the longest run is dealt out over every core; -v keeps one run per purpose,
    # naming its tests as they end (how far a killed run got).
    cpu = not context.reporter.verbose and python.env.get(device_module.DEVICE_ENV) == "cpu"
    shards = (os.cpu_count() or 1) if cpu else 1
    with context.reporter.step(title), ThreadPoolExecutor(max_workers=3) as pool:
        behave = pool.submit(behaviour.run_tests, context=context, python=python, features=claimed,
                             shards=1 if prove else shards)
        proven = proof.run_proof(context=context, stock=python, pool=pool, shards=shards) if prove else []
        return [Record(feature=item["feature"], check=item["check"], outcome=item["outcome"], reason=item["reason"],
                       test=item["test"], exception=behaviour.exception_text(item)) for item in behave.result()] + proven
