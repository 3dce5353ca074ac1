"""`forkbuild matrix`: the feature combinations a strategy picks, as a table,
JSON, a GitHub Actions matrix or a docker-bake.json; with --test-patch, test
every one of them in one test venv."""

from __future__ import annotations

import sys
from pathlib import Path

from forkbuild.commands import add_command
from forkbuild.fsutil import write_atomic
from forkbuild.image import build
from forkbuild.image.context import prepare_context
from forkbuild.matrix import formats, testing
from forkbuild.matrix.strategies import ALL_LIMIT, STRATEGIES, build_matrix, build_order

BAKE_COMMAND = "docker buildx bake -f {path}"


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "matrix", help="list feature combinations (variants, each, pairwise, all) "
                                   "as a table, JSON, a CI matrix or a docker-bake.json",
        description="Lists the feature combinations a strategy picks (the named variants; stock and each feature "
                    "alone; pairwise: every two features in all their in/out states; all valid subsets), each "
                    "resolved like --features/--with/--without, as a table, JSON, a CI matrix or a docker-bake.json.",
        examples=["forkbuild matrix --strategy pairwise", "forkbuild matrix --strategy each --format json"])
    parser.add_argument("--strategy", choices=STRATEGIES, default="pairwise",
                        help="variants: the named ones; each: stock + every feature alone; pairwise: every two "
                             "features in all their in/out states (a greedy covering array); all: every valid "
                             "subset (default: pairwise)")
    parser.add_argument("--format", choices=formats.FORMATS, default="table", dest="output_format")
    parser.add_argument("--variant", default="", help="runtime defaults of the combinations come from this variant "
                                                      "(default: none, every guard at its default)")
    parser.add_argument("--limit", type=int, default=ALL_LIMIT,
                        help=f"--strategy all refuses more combinations than this (default {ALL_LIMIT})")
    parser.add_argument("--force", action="store_true", help="--strategy all: go beyond --limit")
    parser.add_argument("--out", type=Path, help="write here instead of stdout (bake: default build/docker-bake.json)")
    bake = parser.add_argument_group("bake", "--format bake: prepares each combination's build context (its wheel "
                                             "built or reused) under build/image/")
    bake.add_argument("--mode", choices=build.MODES, default="wheel", help="image mode of every target (default: wheel)")
    bake.add_argument("--base", help="default base image (default: the official image; "
                                     f"override at bake time with ${formats.BASE_VARIABLE})")
    bake.add_argument("--python-tag", action="append", default=[], metavar="TAG",
                      help="wheels only for these pinned tags (default: every pinned tag)")
    tests = parser.add_argument_group("test-patch", "run test-patch on every combination (`nox -s test-patch-matrix`)")
    tests.add_argument("--test-patch", action="store_true", help="test every combination; one summary table, "
                                                                 "JSON in build/test-patch/matrix-<strategy>.json")
    tests.add_argument("--python", type=Path, default=Path(sys.executable),
                       help="interpreter of the test venv (default: the one running forkbuild)")
    tests.add_argument("--structure-only", action="store_true", help="only the structure checks (fast, no torch)")
    tests.add_argument("--from-tree", action="store_true",
                       help="test each applied work tree on PYTHONPATH instead of installing its wheel")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    series = context.series
    base = series.variant(args.variant).name if args.variant else ""
    matrix = build_matrix(series, args.strategy, base=base, force=args.force, limit=args.limit)
    context.reporter.info(formats.summary_line(matrix))
    if args.test_patch:
        return _test_patch(args, context, matrix)
    if args.output_format == "table":
        context.reporter.console.print(formats.table(matrix))
        return 0
    if args.output_format == "bake":
        return _bake(args, context, matrix)
    data = formats.as_json(matrix) if args.output_format == "json" else formats.as_github(matrix)
    _emit(formats.dumps(data), args.out)
    return 0


def _emit(text: str, out: Path | None) -> None:
    if out is None:
        sys.stdout.write(text)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, text)
    print(out)


def _bake(args, context, matrix) -> int:
    out = (args.out or context.build_dir / "docker-bake.json").resolve()
    contexts = {}
    for combination in build_order(context.series, matrix.combinations):
        with context.reporter.step(f"build context for {combination.name} ({combination.label})"):
            contexts[combination.name] = prepare_context(context, variant=combination, python_tags=args.python_tag)
    items = [(combination, contexts[combination.name]) for combination in matrix.combinations]
    data = formats.as_bake(items, mode=args.mode, base=args.base or build.official_base(context.series.upstream.version),
                           relative_to=out.parent)
    _emit(formats.dumps(data), out)
    context.reporter.info(f"build them all in parallel: {BAKE_COMMAND.format(path=out)}")
    return 0


def _test_patch(args, context, matrix) -> int:
    run_ = testing.run_matrix(context=context, matrix=matrix, python=args.python, structure_only=args.structure_only,
                              from_tree=args.from_tree)
    context.reporter.console.print(testing.table(run_, strategy=matrix.strategy))
    context.reporter.info(f"written: {run_.report}")
    if run_.failed:
        context.reporter.warn(f"{len(run_.failed)} of {len(run_.rows)} combination(s) failed; details in {run_.report}")
        return 1
    return 0
