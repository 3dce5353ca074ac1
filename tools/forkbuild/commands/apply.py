"""`forkbuild apply`: a work tree of upstream + a variant's patches; `--all` stops at a
patch that does not apply and resumes with --continue / --skip / --abort."""

from __future__ import annotations

from pathlib import Path

from forkbuild.applier import apply_variant, resume_apply
from forkbuild.commands import add_command
from forkbuild.errors import ConfigError
from forkbuild.matrix import arguments
from forkbuild.series.combination import whole_series
from forkbuild.series.layout import SERIES_TREE
from forkbuild.series.writer import reading_series


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "apply", help="apply a variant's patches onto the pinned upstream in a work tree",
        description='Builds a work tree: the pinned upstream plus one commit per patch of a variant (or, with --all, of the whole series: the tree export reads), by the apply engine (git apply --cached, 3-way merges of the patch commits); reports exact/offset/3-way per patch. --all stops AT a patch that does not apply, with conflict markers; then --continue, --skip or --abort. A tree holding uncommitted or unexported work is left alone.',
        examples=['forkbuild apply --all', 'forkbuild apply --variant tp3 --dir /tmp/tp3',
                  'forkbuild apply --continue', 'forkbuild apply --abort'])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--variant", help="variant to apply (default: series.default_variant)")
    which.add_argument("--all", action="store_true",
                       help="apply every patch of the series (the tree `export` reads); stops AT a patch that "
                            "does not apply, with conflict markers")
    which.add_argument("--continue", dest="resume", action="store_const", const="continue",
                       help="after resolving the stopped patch (edit, `git add`): commit it and go on")
    which.add_argument("--skip", dest="resume", action="store_const", const="skip",
                       help="leave the stopped patch out of the tree (its file stays; export stops until you "
                            "repair or drop it)")
    which.add_argument("--abort", dest="resume", action="store_const", const="abort",
                       help="stop, and put the work tree back as it was before that apply")
    arguments.add_arguments(parser, variant_option=False)
    parser.add_argument("--dir", type=Path, default=None,
                        help="work tree to create or refresh (default: .forkbuild-work/<variant or series>)")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    with reading_series(context.series_dir):  # drop, export and new wait until the tree is applied
        return _run(args, context)


def _run(args, context) -> int:
    if (args.all or args.resume) and arguments.chosen(args):
        raise ConfigError(["--all and --continue/--skip/--abort take the whole series: --features/--with/--without "
                           "choose a combination"], source="command line")
    whole = args.all or args.resume
    combination = whole_series(context.series) if whole else arguments.from_args(args, context)
    dest = context.outside_series(args.dir or (context.series_dir / SERIES_TREE if whole else context.work_dir / combination.name),
                                  "--dir")
    if args.resume:
        result = resume_apply(context=context, dest=dest, action=args.resume)
        if result is None:
            return 0
    else:
        result = apply_variant(context=context, variant=combination, dest=dest, stop=combination.whole)
    width = max((len(record.entry.file) for record in result.records), default=0)
    lines = [f"{result.combination.name} -> {dest}"]
    lines += [f"  {record.outcome!s:<10} {record.entry.file:<{width}}  {record.entry.feature}"
              + (f": {record.detail}" if record.detail else "") for record in result.records]
    context.reporter.line("\n".join(lines))
    context.reporter.info(f"HEAD {result.head_commit[:12]} on upstream {result.base_commit[:12]}")
    return 0
