"""`forkbuild apply`: a work tree of upstream + a variant's patches."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from forkbuild.apply import apply_variant
from forkbuild.commands import add_command
from forkbuild.errors import ConfigError
from forkbuild.matrix import arguments


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "apply", help="apply a variant's patches onto the pinned upstream in a work tree",
        description='Builds a work tree: the pinned upstream plus one commit per patch of a variant (or, with --all, of the whole series: the tree export reads), each by `git am --3way`; reports exact/offset/3-way per patch. A tree holding uncommitted or unexported work is left alone.',
        examples=['forkbuild apply --all', 'forkbuild apply --variant tp3 --dir /tmp/tp3'])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--variant", help="variant to apply (default: series.default_variant)")
    which.add_argument("--all", action="store_true", help="apply every patch of the series (the tree `export` reads)")
    arguments.add_arguments(parser, variant_option=False)
    parser.add_argument("--dir", type=Path, default=None,
                        help="work tree to create or refresh (default: .forkbuild-work/<variant or series>)")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    if args.all and arguments.chosen(args):
        raise ConfigError(["--all applies the whole series: --features/--with/--without choose a combination"],
                          source="command line")
    combination = None if args.all else arguments.from_args(args, context)
    name = combination.name if combination else "series"
    dest = (args.dir or context.series_dir / ".forkbuild-work" / name).resolve()
    result = apply_variant(context=context, variant=combination, dest=dest)
    table = Table("patch", "feature", "outcome", "detail", title=f"{name} -> {dest}")
    for record in result.records:
        table.add_row(record.entry.file, record.entry.feature, record.outcome, record.detail)
    context.reporter.console.print(table)
    context.reporter.info(f"HEAD {result.head_commit[:12]} on upstream {result.base_commit[:12]}")
    return 0
