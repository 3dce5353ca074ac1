"""`forkbuild drop`: remove patches from the series on purpose (saved aside first)."""

from __future__ import annotations

from forkbuild.commands import add_command
from forkbuild.drop import drop_patches
from forkbuild.errors import quoted
from forkbuild.series.layout import SERIES_TREE


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "drop", help="remove patches and their series.toml entries on purpose (a copy is kept)",
        description="The only ways a patch leaves the series are this and `export --drop`: export never drops a "
                    "patch because its commit is missing. Each file is copied to .forkbuild-work/dropped/ first.",
        examples=["forkbuild drop loop-abort.patch"])
    parser.add_argument("names", nargs="+", metavar="NAME", help="patch file name as series.toml lists it")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    tree = context.series_dir / SERIES_TREE
    dropped_patches, unported = drop_patches(context, args.names)
    for dropped in dropped_patches:
        context.reporter.info(f"dropped patches/{dropped.file} (feature {dropped.feature}, +{dropped.added}/"
                              f"-{dropped.removed} lines) and its series.toml entry; a copy is in {dropped.saved}")
        if dropped.tree_commit:
            context.reporter.warn(
                f"{tree} still holds its commit {dropped.tree_commit[:12]}: `forkbuild export` would add it back; "
                f"remove it there: git -C {quoted(tree)} rebase --onto {dropped.tree_commit[:12]}^ {dropped.tree_commit[:12]}")
    for note in unported:
        context.reporter.warn(note)
    return 0
