"""`forkbuild import`: patches from a quilt series or a git commit range into the series."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from forkbuild.commands import add_command
from forkbuild.errors import ForkbuildError
from forkbuild.importer import git_range_incoming, import_patches, quilt_incoming


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "import", help="add patches from a quilt series directory or a git commit range",
        description='Adds patches to the series from a quilt patches directory (its `series` file; DEP-3 headers kept) or from a git commit range of a repository laid out like upstream; updates series.toml and patches/series.',
        examples=['forkbuild import --quilt ../old-fork/patches --feature loop_abort', 'forkbuild import --git-range ../sglang-fork v0.5.23..my-branch'])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--quilt", type=Path, metavar="DIR",
                        help="a quilt patches directory (its `series` file and patches; DEP-3 headers kept)")
    source.add_argument("--git-range", nargs=2, metavar=("REPO", "A..B"),
                        help="the commits A..B of a git repository laid out like upstream")
    parser.add_argument("--feature", help="the feature of the imported patches (git commits may carry their own Feature: trailer)")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    series = context.series
    if args.quilt:
        if not args.feature:
            raise ForkbuildError("--quilt needs --feature NAME (quilt patches carry no Feature: trailer)")
        incoming = quilt_incoming(series, args.quilt.resolve(), feature=args.feature)
    else:
        repo, revisions = args.git_range
        incoming = git_range_incoming(series, Path(repo).resolve(), revisions, feature=args.feature)
    imported = import_patches(context=context, incoming=incoming)
    table = Table("patch", "feature", "subject", "from", title=f"imported into {series.patches_dir}")
    for item in imported:
        table.add_row(item.file, item.feature, item.subject, item.source)
    context.reporter.console.print(table)
    context.reporter.info("series.toml and patches/series updated; review, then `forkbuild check`")
    return 0
