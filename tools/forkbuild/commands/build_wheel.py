"""`forkbuild build-wheel`: a variant's patched wheels, one per platform and pinned Python tag."""

from __future__ import annotations

from pathlib import Path

from forkbuild.commands import add_command
from forkbuild.matrix import arguments
from forkbuild.wheel.builder import MODES, WheelRequest, build_wheels


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "build-wheel", help="build a variant's patched, validated wheel(s)",
        description="Builds a variant's patched wheel per platform (linux/arm64, linux/amd64: the variant's `platforms`) and pinned Python tag into dist/ (kept when up to date), validated with installer; prints each wheel's path on stdout.",
        examples=['forkbuild build-wheel --variant tp4', 'forkbuild build-wheel --variant tp3 --python-tag cp311 --force',
                  'forkbuild build-wheel --variant tp4 --platform linux/arm64'])
    arguments.add_arguments(parser)
    parser.add_argument("--out", type=Path, default=None, help="output directory (default: <series dir>/dist)")
    parser.add_argument("--python-tag", action="append", default=[], metavar="TAG",
                        help="build only for this pinned tag, e.g. cp311 (repeatable; default: every pinned tag)")
    arguments.add_platform_argument(parser, what="build")
    parser.add_argument("--mode", choices=MODES, default="",
                        help="overlay the release wheel, or `python -m build` a git checkout "
                             "(default: from [upstream] source)")
    parser.add_argument("--force", action="store_true", help="rebuild even when the wheel is up to date")
    parser.add_argument("--no-isolation", action="store_true",
                        help="source mode: build in forkbuild's own environment (python -m build --no-isolation)")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    request = WheelRequest(variant=arguments.from_args(args, context), out_dir=context.outside_series(args.out or context.dist_dir, "--out"),
                           python_tags=tuple(args.python_tag), platforms=tuple(args.platform), mode=args.mode, force=args.force,
                           isolation=not args.no_isolation)
    for wheel in build_wheels(context=context, request=request):
        # The path goes to stdout (everything else goes to stderr) so scripts can use it.
        print(wheel.path)
    return 0
