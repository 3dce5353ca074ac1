"""`forkbuild export`: regenerate patches/ from the full-series work tree's commits."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from forkbuild.applier import apply_variant
from forkbuild.commands import add_command
from forkbuild.console import cells, styled
from forkbuild.exporter import export_series
from forkbuild.series.combination import whole_series
from forkbuild.series.layout import SERIES_TREE

ACTION_STYLE = {"unchanged": "dim", "noise": "dim", "changed": "yellow", "new": "green"}


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "export", help="regenerate patches/ (and series.toml's patch list) from the series work tree",
        description="Regenerates patches/ (one `git format-patch` file per commit), series.toml's [[patches]] and patches/series from the series work tree's commits. Churn-free: index/offset noise keeps a file as it is. --check writes nothing and fails when patches/ would change (the CI gate). Never drops a patch by itself: an entry with no commit in the tree stops the export until you --keep or --drop it.",
        examples=['forkbuild export', 'forkbuild export --check', 'forkbuild export --refresh',
                  'forkbuild export --keep loop-abort.patch', 'forkbuild export --drop loop-abort.patch'])
    parser.add_argument("--dir", type=Path, default=None,
                        help=f"the full-series work tree (`forkbuild apply --all`; default: {SERIES_TREE})")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit non-zero listing the files export would change (a CI gate)")
    parser.add_argument("--refresh", action="store_true",
                        help="also rewrite patches whose only change is index/offset noise")
    parser.add_argument("--drop", action="append", default=[], metavar="NAME",
                        help="remove this patch (no commit in the tree) from the series on purpose; a copy is kept")
    parser.add_argument("--keep", action="append", default=[], metavar="NAME",
                        help="keep this patch (no commit in the tree: it did not apply) as its file is, in its place")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    tree = (args.dir or context.series_dir / SERIES_TREE).resolve()
    if args.check and not tree.exists():
        # A fresh clone (CI): patches/ must be exactly what applying and exporting it gives.
        context.reporter.info(f"{tree} does not exist: applying the whole series there first")
        apply_variant(context=context, variant=whole_series(context.series), dest=tree)
    with context.reporter.step(f"{'Checking' if args.check else 'Exporting'} {tree} against patches/"):
        plan = export_series(context=context, tree=tree, check=args.check, refresh=args.refresh,
                             drops=tuple(args.drop), keeps=tuple(args.keep))
    table = Table("patch", "feature", "commit", "result", title=f"export of {tree}")
    for patch in plan.patches:
        result = "kept (index/offset noise only)" if patch.action == "noise" else patch.action
        table.add_row(*cells(patch.file, patch.feature, patch.commit[:12], styled((result, ACTION_STYLE[patch.action]))))
    for name in plan.removed:
        table.add_row(*cells(name, "", "", styled(("dropped (--drop; a copy is in .forkbuild-work/dropped/)", "red"))))
    for name in plan.kept:
        table.add_row(*cells(name, "", "", styled(("kept as it is (--keep; no commit in the tree)", "yellow"))))
    context.reporter.console.print(table)
    for note in plan.joined:
        context.reporter.info(note)
    for note in plan.unported:
        context.reporter.warn(note)
    changes = plan.changes()
    # A feature no variant holds is built nowhere: `test-patch(tp4)` would test a tp4 without it.
    held = {feature for variant in context.series.variants.values() for feature in variant.features}
    for feature in sorted({patch.feature for patch in plan.patches} - held):
        context.reporter.warn(f"feature {feature} is in no variant: no build holds its patch "
                              f"(add it: forkbuild new {feature} --variant {context.series.default_variant})")
    context.reporter.info("patches/ is up to date" if args.check
                          else f"{len(changes)} file(s) written" if changes else "nothing to write")
    return 0
