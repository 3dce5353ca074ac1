"""The `forkbuild` command line. Subcommands live in forkbuild.commands, one module each."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
from pathlib import Path

from forkbuild import __version__, commands
from forkbuild.console import OutputError, Reporter, configure_logging, guard_standard_streams
from forkbuild.context import Context, directory_argument
from forkbuild.errors import ForkbuildError, disk_error
from forkbuild.io.chaos import chaos_point
from forkbuild.io.childgroup import Terminated, handle_termination

chaos_point("start")  # the chaos test's Ctrl-C while forkbuild starts

DESCRIPTION = """Keep a fork of sglang as a patch series (series.toml + patches/) against a pinned
release; apply, check, export, build wheels and images per variant, test, rebase.

  forkbuild apply --all          # the series work tree, .forkbuild-work/series
  forkbuild status               # patches, guards, variants (fits 80 columns; --wide)
  forkbuild COMMAND --help       # what a command does, with examples"""


def _global_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, default: object = None) -> None:
    """-C, --cache, -v (a subcommand's default is SUPPRESS: it keeps one given before the command)."""
    parser.add_argument("-C", "--series-dir", type=directory_argument, default=default,
                        help="directory holding series.toml (default: search upward from the cwd)")
    parser.add_argument("--cache", type=directory_argument, default=default,
                        help="upstream cache directory (default: $FORKBUILD_CACHE or <series-dir>/.cache/forkbuild)")
    parser.add_argument("-v", "--verbose", action="store_true", default=False if default is None else default,
                        help="show git's and other tools' own output")


def exit_codes() -> list[tuple[int, str, str]]:
    """(code, name, meaning) of every exit status, from the error classes."""
    def subclasses(cls: type[ForkbuildError]) -> list[type[ForkbuildError]]:
        return [cls] + [sub for child in cls.__subclasses__() for sub in subclasses(child)]

    errors = [(cls.return_code, cls.__name__, (cls.__doc__ or "").strip().split(". ")[0].rstrip("."))
              for cls in subclasses(ForkbuildError)[1:]]
    return sorted([(0, "ok", "done"), *errors,
                   (ForkbuildError.return_code, "error", "any other failure (the message says what, the hint what "
                                                         "to do); test-patch: a check failed"),
                   (2, "usage", "the command line itself is wrong (argparse)"), (130, "interrupted", "Ctrl-C"),
                   (141, "broken pipe", "whatever read stdout stopped reading (e.g. piped into `head`)")],
                  key=lambda code: code[0])


def command_name(module_name: str) -> str:
    """The subcommand a module of forkbuild.commands adds: build_wheel -> build-wheel, import_ -> import."""
    return module_name.rstrip("_").replace("_", "-")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    epilog = "exit codes:\n" + "\n".join(f"  {code:>3}  {name}: {meaning}" for code, name, meaning in exit_codes())
    parser = argparse.ArgumentParser(prog="forkbuild", description=DESCRIPTION, epilog=epilog,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"forkbuild {__version__}")
    _global_options(parser)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                       parser_class=argparse.ArgumentParser)
    # Each module in forkbuild.commands adds its subcommand. Only the requested one is imported
    # (the others pull in wheel, image and rebase code: ~0.3 s); --help imports them all.
    modules = sorted(path.stem for path in Path(commands.__file__).parent.glob("*.py") if path.stem != "__init__")
    pre = argparse.ArgumentParser(add_help=False)
    _global_options(pre)
    rest = pre.parse_known_args(argv)[1]
    requested = rest[0] if rest and not rest[0].startswith("-") else None
    if any(command_name(name) == requested for name in modules):
        modules = [name for name in modules if command_name(name) == requested]
    for name in modules:
        importlib.import_module(f"forkbuild.commands.{name}").add_parser(subparsers)
    for command in subparsers.choices.values():
        _global_options(command.add_argument_group("global options (also before the command)"),
                        default=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser(argv).parse_args(argv)
    except KeyboardInterrupt as interrupt:  # Ctrl-C (SIGTERM, SIGHUP) before the command began: nothing to recover
        print("interrupted", file=sys.stderr)
        return 128 + (interrupt.signum if isinstance(interrupt, Terminated) else signal.SIGINT)
    except (OutputError, BrokenPipeError) as error:  # --help into a closed pipe or a full device
        return _output_failed(error, Reporter())
    except SystemExit:  # --help or a usage error: what argparse wrote is flushed here, not at exit
        try:
            sys.stdout.flush()
        except (OutputError, BrokenPipeError) as error:
            return _output_failed(error, Reporter())
        raise
    reporter = Reporter(verbose=args.verbose)
    configure_logging(reporter)
    context = None
    try:
        context = Context.create(series_dir=args.series_dir, cache_dir=args.cache, reporter=reporter)
        result = int(args.run(args, context) or 0)
        sys.stdout.flush()  # an output error is reported here, not by the interpreter at exit
        return result
    except ForkbuildError as error:
        error = (context.upstream.explain(error) if context else None) or error  # a removed or damaged cache
        reporter.error(error)
        return error.return_code
    except KeyboardInterrupt as interrupt:
        # A second Ctrl-C (or SIGTERM, SIGHUP) from here on ends the process at once.
        for caught in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(caught, signal.SIG_DFL)
        signum = interrupt.signum if isinstance(interrupt, Terminated) else int(signal.SIGINT)
        reporter.line(("interrupted" if signum == signal.SIGINT else f"terminated ({signal.Signals(signum).name})",
                       "red"))
        return 128 + signum
    except (OutputError, BrokenPipeError) as error:
        return _output_failed(error, reporter)
    except MemoryError:
        reporter.error(ForkbuildError("out of memory: the command needed more than this machine (or `ulimit -v`) "
                                      "allows; what it writes is written atomically, so nothing was left half-written",
                                      hint="free memory or raise the limit, and run the command again"))
        return ForkbuildError.return_code
    except OSError as error:
        friendly = disk_error(error) or (context.upstream.explain(error) if context else None)
        if friendly is None:
            raise
        reporter.error(friendly)
        return friendly.return_code


def _output_failed(error: OutputError | BrokenPipeError, reporter: Reporter) -> int:
    """stdout could not be written: 141 for a reader that went away, else the error on stderr."""
    # stdout to /dev/null: the interpreter's last flush must not fail again.
    with contextlib.suppress(OSError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    cause = error.error if isinstance(error, OutputError) else error
    if isinstance(cause, BrokenPipeError):
        return 141  # a reader that went away (`status | head`): silently
    reporter.error(ForkbuildError(f"cannot write the output to stdout: {cause.strerror or cause}",
                                  hint="give stdout somewhere to go (a file, a pipe, /dev/null)"))
    return ForkbuildError.return_code


def run() -> None:
    """The `forkbuild` command (`python -m forkbuild` too)."""
    guard_standard_streams()
    handle_termination()
    sys.exit(main())
