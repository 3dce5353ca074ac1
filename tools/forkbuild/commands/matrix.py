"""`forkbuild matrix`: the feature combinations a strategy picks, as a table, JSON, a GitHub
Actions matrix or a docker-bake.json; with --test-patch, each one tested in one test venv."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

from rich.table import Table

from forkbuild.commands import add_command
from forkbuild.console import cells, styled
from forkbuild.errors import ForkbuildError
from forkbuild.image import build
from forkbuild.image.build_context import prepare_context
from forkbuild.io.fsutil import write_atomic
from forkbuild.matrix.strategies import ALL_LIMIT, STRATEGIES, Matrix, build_matrix, build_order
from forkbuild.series.combination import resolve
from forkbuild.series.config import arch_of, image_platforms
from forkbuild.testpatch.records import FAIL, PASS, SKIP
from forkbuild.testpatch.runner import Options, run_variant

FORMATS = ("table", "json", "github", "bake")
BASE_VARIABLE = "FORKBUILD_BASE_IMAGE"  # bake variable: point every target at another base without regenerating
ERROR = "error"  # --test-patch: the combination could not be tested at all (a build or install failed)


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "matrix", help="list feature combinations (variants, each, pairwise, all) "
                                   "as a table, JSON, a CI matrix or a docker-bake.json",
        description="Lists the feature combinations a --strategy picks, each resolved like --features, as a table, "
                    "JSON, a CI matrix or a docker-bake.json; with --test-patch, tests each one.",
        examples=["forkbuild matrix --strategy pairwise", "forkbuild matrix --strategy each --format json"])
    parser.add_argument("--strategy", choices=STRATEGIES, default="pairwise",
                        help="variants: the named ones; each: stock + every feature alone; pairwise: every two "
                             "features in all their in/out states (a greedy covering array); all: every valid "
                             "subset (default: pairwise)")
    parser.add_argument("--format", choices=FORMATS, default="table", dest="output_format")
    parser.add_argument("--variant", default="", help="the variant the runtime defaults come from (default: none)")
    parser.add_argument("--limit", type=int, default=ALL_LIMIT,
                        help=f"--strategy all refuses more combinations than this (default {ALL_LIMIT})")
    parser.add_argument("--force", action="store_true", help="--strategy all: go beyond --limit")
    parser.add_argument("--out", type=Path, help="write here instead of stdout (bake: default build/docker-bake.json)")
    bake = parser.add_argument_group("bake", "--format bake: prepares each combination's build context (its wheel "
                                             "built or reused) under build/image/")
    bake.add_argument("--mode", choices=build.MODES, default="wheel", help="every target's image mode (default: wheel)")
    bake.add_argument("--base", help=f"default base image (default: the official one; at bake time: ${BASE_VARIABLE})")
    bake.add_argument("--python-tag", action="append", default=[], metavar="TAG",
                      help="wheels only for these pinned tags (default: every pinned tag)")
    tests = parser.add_argument_group("test-patch", "run test-patch on every combination (`nox -s test-patch-matrix`)")
    tests.add_argument("--test-patch", action="store_true",
                       help="test every combination: one table, build/test-patch/matrix-<strategy>.json")
    tests.add_argument("--python", type=Path, default=Path(sys.executable),
                       help="interpreter of the test venv (default: the one running forkbuild)")
    tests.add_argument("--structure-only", action="store_true", help="only the structure checks (fast, no torch)")
    tests.add_argument("--from-tree", action="store_true",
                       help="test each applied work tree on PYTHONPATH instead of installing its wheel")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    series = context.series
    base = resolve(series, variant=args.variant).name if args.variant else ""
    matrix = build_matrix(series, args.strategy, base=base, force=args.force, limit=args.limit)
    summary = f"{len(matrix.combinations)} combinations ({matrix.strategy}; lower bound {matrix.lower_bound})"
    summary += f"; {matrix.note}" if matrix.note else ""
    context.reporter.info(summary)
    if args.test_patch:
        return _test_patch(args, context, matrix)
    if args.output_format == "table":
        grid = Table("#", "name", "n", "features", "runtime defaults",
                     title=f"forkbuild matrix --strategy {matrix.strategy}", caption=summary)
        for number, combination in enumerate(matrix.combinations, start=1):
            grid.add_row(*cells(str(number), combination.name, str(len(combination.features)),
                         ", ".join(combination.features) or "-", combination.base or "guard defaults"))
        context.reporter.console.print(grid)
    elif args.output_format == "bake":
        _bake(args, context, matrix)
    elif args.output_format == "json":
        _emit([{"name": item.name, "features": list(item.features)} for item in matrix.combinations],
              args.out and context.outside_series(args.out, "--out"))
    else:  # github: a job's `strategy.matrix`; `${{ matrix.features }}` is ready for --features
        _emit({"include": [{"name": item.name, "features": ",".join(item.features)}
                           for item in matrix.combinations]}, args.out and context.outside_series(args.out, "--out"))
    return 0


def _emit(data: object, out: Path | None) -> None:
    text = json.dumps(data, indent=2) + "\n"
    if out is None:
        sys.stdout.write(text)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, text)
    print(out)


def _bake(args, context, matrix: Matrix) -> None:
    """docker-bake.json: one target per combination (its build context prepared), all in group `default`."""
    out = context.outside_series(args.out or context.build_dir / "docker-bake.json", "--out")
    targets = {}
    names = []  # the file lists them in the matrix's order
    for combination in build_order(context.series, matrix.combinations):
        for platform in image_platforms(combination.platforms):
            with context.reporter.step(f"build context for {combination.name} ({combination.label}, {platform})"):
                image_context = prepare_context(context, variant=combination, platform=platform,
                                                python_tags=args.python_tag)
            targets[f"{combination.name}-{arch_of(platform)}"] = {
                "context": os.path.relpath(image_context.path, out.parent), "dockerfile": "Dockerfile",
                "target": build.TARGET, "args": build.build_args(image_context, mode=args.mode,
                                                                 base=f"${{{BASE_VARIABLE}}}"),
                "platforms": [platform], "tags": [build.default_tag(combination.name, args.mode, platform)],
                "network": "none"}
    names = [f"{combination.name}-{arch_of(platform)}" for combination in matrix.combinations
             for platform in image_platforms(combination.platforms)]
    base = args.base or build.official_base(context.series.upstream.version)
    _emit({"variable": {BASE_VARIABLE: {"default": base}}, "group": {"default": {"targets": names}},
           "target": {name: targets[name] for name in names}}, out)
    context.reporter.info(f"build them all in parallel: docker buildx bake -f {out}")


def _test_patch(args, context, matrix: Matrix) -> int:
    """test-patch on each combination in the one test venv: a table and build/test-patch/matrix-<strategy>.json."""
    rows: list[dict] = []
    for number, combination in enumerate(matrix.combinations, start=1):
        context.reporter.info(f"[{number}/{len(matrix.combinations)}] {combination.name}: {combination.label}")
        row: dict = {"name": combination.name, "features": list(combination.features), "base": combination.base}
        try:
            outcome = run_variant(context=context, options=Options(
                variant=combination, python=args.python, structure_only=args.structure_only, from_tree=args.from_tree))
        except ForkbuildError as error:
            rows.append({**row, "outcome": ERROR, "counts": {}, "failing": [], "reason": error.message, "report": ""})
            continue
        counts = Counter(cell["outcome"] for cell in outcome.rows)
        failing = sorted({f"{cell['feature'] or '-'}:{cell['check']}" for cell in outcome.failed})
        rows.append({**row, "outcome": FAIL if failing else PASS,
                     "counts": {key: counts.get(key, 0) for key in (PASS, FAIL, SKIP)},
                     "failing": failing, "reason": "", "report": str(outcome.report)})
    report = context.build_dir / "test-patch" / f"matrix-{matrix.strategy}.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(report, json.dumps({"strategy": matrix.strategy, "count": len(matrix.combinations),
                                     "lower_bound": matrix.lower_bound, "combinations": rows}, indent=2) + "\n")
    grid = Table("combination", "features", "outcome", "pass", "fail", "skip", "failing checks",
                 title=f"test-patch over the {matrix.strategy} matrix")
    for row in rows:
        color = "green" if row["outcome"] == PASS else "red"
        grid.add_row(*cells(row["name"], ", ".join(row["features"]) or "-", styled((row["outcome"], color)),
                     *(str(row["counts"].get(key, "")) for key in (PASS, FAIL, SKIP)),
                     "\n".join(row["failing"]) or row["reason"][:200]))
    context.reporter.console.print(grid)
    context.reporter.info(f"written: {report}")
    if failed := [row for row in rows if row["outcome"] != PASS]:
        context.reporter.warn(f"{len(failed)} of {len(rows)} combination(s) failed; details in {report}")
    return 1 if failed else 0
