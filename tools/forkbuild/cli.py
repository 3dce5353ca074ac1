"""The `forkbuild` command line. Subcommands live in forkbuild.commands, one module each."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from pathlib import Path

from forkbuild import __version__, commands
from forkbuild.console import Reporter, configure_logging
from forkbuild.context import Context
from forkbuild.errors import ForkbuildError


def _global_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-C", "--series-dir", type=Path, default=None,
                        help="directory holding series.toml (default: search upward from the cwd)")
    parser.add_argument("--cache", type=Path, default=None,
                        help="upstream cache directory (default: $FORKBUILD_CACHE or <series-dir>/.cache/forkbuild)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show git's and other tools' own output")


def command_name(module_name: str) -> str:
    """The subcommand a module of forkbuild.commands adds: build_wheel -> build-wheel, import_ -> import."""
    return module_name.rstrip("_").replace("_", "-")


def _requested_command(argv: list[str] | None) -> str | None:
    pre = argparse.ArgumentParser(add_help=False)
    _global_options(pre)
    _, rest = pre.parse_known_args(argv)
    return rest[0] if rest and not rest[0].startswith("-") else None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="forkbuild", description=__doc__)
    parser.add_argument("--version", action="version", version=f"forkbuild {__version__}")
    _global_options(parser)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # Each module in forkbuild.commands adds its own subcommand: adding a
    # command never touches this file. Only the requested command's module is
    # imported (the others pull in wheel, image and rebase code: ~0.3 s of
    # startup); --help or an unknown command imports them all.
    modules = sorted(info.name for info in pkgutil.iter_modules(commands.__path__))
    requested = _requested_command(argv)
    if any(command_name(name) == requested for name in modules):
        modules = [name for name in modules if command_name(name) == requested]
    for name in modules:
        importlib.import_module(f"forkbuild.commands.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser(argv).parse_args(argv)
    reporter = Reporter(verbose=args.verbose)
    configure_logging(reporter)
    try:
        context = Context.create(series_dir=args.series_dir, cache_dir=args.cache, reporter=reporter)
        result = args.run(args, context)
    except ForkbuildError as error:
        reporter.error(error)
        return error.return_code
    except KeyboardInterrupt:
        reporter.console.print("[red]interrupted[/red]")
        return 130
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
