"""`forkbuild apply`: a work tree of upstream + a variant's patches."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from forkbuild.apply import apply_variant


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("apply", help="apply a variant's patches onto the pinned upstream in a work tree")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--variant", help="variant to apply (default: series.default_variant)")
    which.add_argument("--all", action="store_true", help="apply every patch of the series (the tree `export` reads)")
    parser.add_argument("--dir", type=Path, default=None,
                        help="work tree to create or refresh (default: .forkbuild-work/<variant or series>)")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    variant = None if args.all else (args.variant or context.series.default_variant)
    dest = (args.dir or context.series_dir / ".forkbuild-work" / (variant or "series")).resolve()
    result = apply_variant(context=context, variant=variant, dest=dest)
    table = Table("patch", "feature", "outcome", "detail", title=f"{variant or 'series'} -> {dest}")
    for record in result.records:
        table.add_row(record.entry.file, record.entry.feature, record.outcome, record.detail)
    context.reporter.console.print(table)
    context.reporter.info(f"HEAD {result.head_commit[:12]} on upstream {result.base_commit[:12]}")
    return 0
