"""One module per subcommand. Each defines add_parser(subparsers), which sets
`run=<function(args, context) -> int | None>` as the parser's default, and
adds its parser with add_command: a description and examples for its --help."""

from __future__ import annotations

import argparse
import textwrap


def add_command(subparsers, name: str, *, help: str, description: str,
                examples: list[str]) -> argparse.ArgumentParser:
    """The subcommand's parser; --help shows `description` and the `examples`."""
    epilog = "examples:\n" + "\n".join(f"  {example}" for example in examples)
    # Raw formatting keeps the examples' lines; the description is wrapped here.
    return subparsers.add_parser(name, help=help, description=textwrap.fill(description, width=78), epilog=epilog,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
