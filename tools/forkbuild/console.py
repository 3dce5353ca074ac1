"""All terminal output: steps with durations, warnings, errors, tables. Uses rich."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from forkbuild.errors import ForkbuildError


class Reporter:
    def __init__(self, *, verbose: bool = False, console: Console | None = None) -> None:
        self.verbose = verbose
        self.console = console or Console(stderr=True, highlight=False, soft_wrap=True)

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
        return Progress(TextColumn("  {task.description}"), BarColumn(), DownloadColumn(),
                        TransferSpeedColumn(), console=self.console, transient=True)
