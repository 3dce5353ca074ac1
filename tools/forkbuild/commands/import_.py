"""`forkbuild import`: patches from a quilt series or a git commit range into the series."""

from __future__ import annotations

from pathlib import Path

from forkbuild.commands import add_command
from forkbuild.console import cells
from forkbuild.errors import ForkbuildError


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
    parser.add_argument("--tree", type=Path, metavar="DIR",
                        help="with --quilt: the unpatched tree the series applies to; its empty directories "
                             "(which git cannot track) are recorded and recreated by apply "
                             "(default for DIR/debian/patches: DIR)")
    parser.add_argument("--feature", help="the feature of the imported patches (git commits may carry their own Feature: trailer)")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    # Here, not at the top: every forkbuild command builds the parser, only import needs these.
    from rich.table import Table

    from forkbuild.importer import git_range_incoming, import_patches
    from forkbuild.quiltimport import import_quilt

    series = context.series
    if args.quilt:
        if not args.feature:
            raise ForkbuildError("--quilt needs --feature NAME (quilt patches carry no Feature: trailer)")
        return _report_quilt(context, import_quilt(context=context, directory=args.quilt.resolve(), feature=args.feature,
                                                   source_tree=args.tree.resolve() if args.tree else None))
    if args.tree:
        raise ForkbuildError("--tree goes with --quilt (a git range has no upstream tree of its own)")
    repo, revisions = args.git_range
    incoming = git_range_incoming(Path(repo).resolve(), revisions, feature=args.feature)
    imported = import_patches(context=context, incoming=incoming)
    table = Table("patch", "feature", "subject", "from", title=f"imported into {series.patches_dir}")
    for item, subject in imported:
        table.add_row(*cells(item.name, item.feature, subject, item.source))
    context.reporter.console.print(table)
    context.reporter.info("series.toml and patches/series updated; review, then `forkbuild check`")
    return 0


def _report_quilt(context, result) -> int:
    """Per patch: where it went, what was normalised or skipped (lines, not a table: many rich rows take seconds)."""
    lines = [line for outcome in result.patches for line in (f"  {outcome.source} -> {outcome.file or '(not imported)'}",
                                                              *(f"      {note}" for note in outcome.notes))]
    context.reporter.line("\n".join(lines))
    imported = sum(1 for outcome in result.patches if outcome.file)
    changed = sum(1 for outcome in result.patches if outcome.notes)
    context.reporter.info(f"{imported} of {len(result.patches)} patch(es) imported into {context.series.patches_dir}, "
                          f"{changed} normalised or skipped")
    if result.empty_dirs:
        context.reporter.info(f"{len(result.empty_dirs)} empty upstream director(ies) git cannot track: recorded in "
                              f"series.toml [upstream] empty_dirs; apply recreates them: {', '.join(result.empty_dirs[:5])}"
                              + (" ..." if len(result.empty_dirs) > 5 else ""))
    if result.tree:
        context.reporter.info(f"{result.tree} holds the new series; review, then `forkbuild check`")
    else:
        context.reporter.info(f"{result.tree_note}\nseries.toml and patches/series updated; "
                              "`forkbuild apply --all` makes the new series' tree, then `forkbuild check`")
    return 0
