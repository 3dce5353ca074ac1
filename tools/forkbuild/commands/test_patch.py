"""`forkbuild test-patch`: prove a variant (structure, then behaviour under pytest)."""

from __future__ import annotations

import sys
from pathlib import Path

from forkbuild.commands import add_command
from forkbuild.errors import BuildError
from forkbuild.matrix import arguments
from forkbuild.testpatch import proof, records
from forkbuild.testpatch.device import DEVICES
from forkbuild.testpatch.records import FAIL, GUARD_ON_UNPATCHED, SKIP
from forkbuild.testpatch.runner import Options, run_variant


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "test-patch", help="structure checks and behaviour tests of a variant's patched sglang",
        description="Proves a variant: structure checks (every patch applies, compiles, reads its guard; declarations match series.toml), then tests/patches against the variant's wheel installed in the test venv, each test with the guard off, on, or the feature absent; writes build/test-patch/<variant>.json.",
        examples=['nox -s "test-patch(tp4)"   (creates the test venv, runs this)', 'forkbuild test-patch --variant tp3 --structure-only'])
    arguments.add_arguments(parser)
    parser.add_argument("--python", type=Path, default=Path(sys.executable),
                        help="interpreter of the test venv; the variant's wheel is installed there --no-deps "
                             "(default: the one running forkbuild, as in `nox -s test-patch`)")
    parser.add_argument("--from-tree", action="store_true",
                        help="test the applied work tree on PYTHONPATH instead of installing the wheel")
    parser.add_argument("--structure-only", action="store_true", help="only the structure checks (fast, no torch)")
    parser.add_argument("--device", choices=DEVICES, default="cpu",
                        help="where the behaviour tests run; cuda adds the GPU-only tests and fails when "
                             "--python sees no CUDA GPU (default: cpu)")
    parser.add_argument("--installed", action="store_true",
                        help="test the sglang --python imports as it is (no apply, structure checks or wheel "
                             "build): for a machine without the upstream cache, e.g. a lent GPU")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    if args.installed and (args.from_tree or args.structure_only):
        raise BuildError("--installed tests what --python imports: it takes neither --from-tree nor --structure-only")
    combination = arguments.from_args(args, context)
    options = Options(variant=combination, python=args.python, from_tree=args.from_tree,
                      structure_only=args.structure_only, device=args.device, installed=args.installed)
    outcome = run_variant(context=context, options=options)
    context.reporter.console.print(records.table(outcome.rows, variant=combination.name, checks=outcome.checks))
    for row in outcome.failed:  # what and why: the table has no room
        context.reporter.info(f"{row['feature'] or '(no feature)'} / {row['check']}: {row['reason']}")
    if outcome.proof is not None:  # the stock proof: counts, per feature; the tests that did not count (-v: all)
        context.reporter.info(f"stock proof: {proof.sentence(outcome.proof)}")
        for feature, kinds in outcome.proof["by_feature"].items():
            context.reporter.info(f"  {feature or '(no feature)'}: "
                                  + ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items())))
        for row in outcome.rows:
            for detail in row["details"] if row["check"] == GUARD_ON_UNPATCHED else []:
                if detail["outcome"] == FAIL:
                    context.reporter.info(f"  does not count: {detail['test']}: {detail['reason']}")
                elif detail["outcome"] != SKIP:
                    context.reporter.detail(f"  counts: {detail['test']}: {detail['reason']}")
    context.reporter.info(f"written: {outcome.report}")
    if outcome.failed:
        context.reporter.warn(f"{len(outcome.failed)} check(s) failed; details in {outcome.report}")
        return 1
    return 0
