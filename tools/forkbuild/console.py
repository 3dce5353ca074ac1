"""All terminal output: steps with durations, warnings, errors, tables. Uses rich."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape

from forkbuild.errors import ForkbuildError

if TYPE_CHECKING:
    from rich.progress import Progress


class Reporter:
    def __init__(self, *, verbose: bool = False, console: Console | None = None) -> None:
        self.verbose = verbose
        self.console = console or Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)

    @contextmanager
    def step(self, title: str) -> Iterator[None]:
        """A named step; its duration is printed when it ends."""
        start = time.monotonic()
        self.console.print(f"[bold]>[/bold] {title}")
        yield
        self.console.print(f"  [dim]{title}: {time.monotonic() - start:.2f}s[/dim]")

    def info(self, message: str) -> None:
        self.console.print(f"  {message}", markup=False)

    def detail(self, message: str) -> None:
        """Tool output and other noise: shown with -v only."""
        if self.verbose:
            self.console.print(message, markup=False, style="dim")

    def warn(self, message: str) -> None:
        self.console.print(f"[yellow]warning:[/yellow] {message}")

    def error(self, error: ForkbuildError) -> None:
        # escape(): messages quote TOML ("[[patches]]") that rich would read as markup.
        color = "red" if error.label == "error" else "yellow"
        self.console.print(f"[bold {color}]{error.label}:[/bold {color}] {escape(error.message)}", markup=True, highlight=False)
        if error.hint:
            self.console.print(f"[cyan]hint:[/cyan] {escape(error.hint)}")

    def download_progress(self) -> Progress:
        # rich.progress is imported only when something is downloaded.
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

        return Progress(TextColumn("  {task.description}"), BarColumn(), DownloadColumn(),
                        TransferSpeedColumn(), console=self.console, transient=True)


def configure_logging(reporter: Reporter) -> None:
    """forkbuild's loggers (git's commands and output: "forkbuild.git") to the reporter's
    console: everything with -v, warnings and errors otherwise."""
    logger = logging.getLogger("forkbuild")
    for handler in [handler for handler in logger.handlers if isinstance(handler, RichHandler)]:
        logger.removeHandler(handler)  # main() may run more than once in a process (tests)
    handler = RichHandler(console=reporter.console, show_time=False, show_path=False, markup=False,
                          highlighter=None, rich_tracebacks=False)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if reporter.verbose else logging.WARNING)

