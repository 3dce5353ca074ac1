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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="forkbuild", description=__doc__)
    parser.add_argument("--version", action="version", version=f"forkbuild {__version__}")
    parser.add_argument("-C", "--series-dir", type=Path, default=None,
                        help="directory holding series.toml (default: search upward from the cwd)")
    parser.add_argument("--cache", type=Path, default=None,
                        help="upstream cache directory (default: $FORKBUILD_CACHE or <series-dir>/.cache/forkbuild)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show git's and other tools' own output")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # Each module in forkbuild.commands adds its own subcommand: adding a
    # command never touches this file.
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"forkbuild.commands.{info.name}")
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
