"""One module per subcommand: add_parser(subparsers) adds its parser (add_command) with
`run=<function(args, context) -> int | None>` as its default."""

from __future__ import annotations

import argparse
import textwrap


def add_command(subparsers, name: str, *, help: str, description: str,
                examples: list[str]) -> argparse.ArgumentParser:
    """The subcommand's parser; --help shows `description` (wrapped here) and the `examples`."""
    epilog = "examples:\n" + "\n".join(f"  {example}" for example in examples)
    return subparsers.add_parser(name, help=help, description=textwrap.fill(description, width=78), epilog=epilog,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
