"""All terminal output: steps with durations, warnings, errors, tables. Uses rich.

rich takes ~30 ms to import, a tenth of a re-apply. So the console is made on a thread,
and the lines printed before it is there wait for it (they come out first, in order). The
thread starts when forkbuild next waits for a command (`load_beside`, which main() hands to
process.py), so that the import runs beside git rather than taking turns with forkbuild's
own work for the processor; at the latest HOLD_S after the first line. It imports rich in
steps (LOAD_STEPS), each only while forkbuild waits for a command (`main_runs` marks the
end of a wait): Python runs one thread at a time, and a step that runs while forkbuild
works is time taken from it. Whatever asks for `Reporter.console` itself (a table, a
progress bar) waits for it, and from then on the steps go on without waiting; `close()`
prints what is still waiting, and main() calls it last.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from forkbuild.errors import ForkbuildError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

# While the console loads beside git, how soon the thread hands Python back to the main
# thread when a git command it waits for ends (Python's default is 5 ms, per command).
LOADING_SWITCH_INTERVAL_S = 0.0005
# The longest a line printed waits for a command to load the console beside; and the longest
# a step of the loader waits for one (then the rest load at once: no command is coming).
HOLD_S = 0.05
# rich's modules (and the standard ones it needs that forkbuild does not) in the order they
# load, in steps of a few ms: each imports what it holds that the steps before did not. A
# step another rich version lacks is left out (the last two load the rest in any case).
LOAD_STEPS = ("datetime", "pickle", "rich.color", "rich.style", "rich.segment", "rich.text", "fractions",
              "rich.console", "rich.table")


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


class Reporter:
    def __init__(self, *, verbose: bool = False, console: Console | None = None) -> None:
        self.verbose = verbose
        self._console = console
        self._waiting: list[tuple[str, dict[str, Any]]] = []  # printed before the console was made
        self._lock = threading.Lock()
        self._loader: threading.Thread | None = None
        self._deadline: threading.Timer | None = None
        # Set while forkbuild waits for a command, and for good once the console is asked for:
        # the loader's steps go on only then.
        self._step_now = threading.Event()
        self._wanted = False

    @property
    def console(self) -> Console:
        """rich's console (made now, or waited for if it is being made)."""
        self._wanted = True
        self._step_now.set()  # whoever asks waits for it: the loader goes on at full speed
        with self._lock:  # a loader is set only once it has started (_start_loading)
            loader = self._loader
        if loader is not None:
            loader.join()
        if self._console is None:
            self._make_console()  # not started, or it failed there: here, where a failure is raised
        assert self._console is not None
        return self._console

    def close(self) -> None:
        """Print what is still waiting for the console."""
        if self._deadline is not None:
            self._deadline.cancel()
        if self._waiting or self._loader is not None:
            self.console  # noqa: B018 (waits, and prints the lines held)

    def load_beside(self) -> None:
        """Start making the console on its thread, if lines wait for it, or let its next step go
        (process.py calls this before each wait for a command)."""
        self._step_now.set()
        with self._lock:
            if self._waiting and self._console is None and self._loader is None:
                if self._deadline is not None:
                    self._deadline.cancel()  # loading: the deadline has nothing left to start
                self._start_loading()

    def main_runs(self) -> None:
        """A wait for a command ended (process.py): the loader's next step waits for the next one."""
        if not self._wanted:
            self._step_now.clear()

    def _print(self, text: str, **options: Any) -> None:
        with self._lock:
            console = self._console
            if console is None:
                self._waiting.append((text, options))
                if self._deadline is None:
                    self._deadline = threading.Timer(HOLD_S, self.load_beside)
                    self._deadline.daemon = True
                    self._deadline.start()
                return
        console.print(text, **options)

    def _start_loading(self) -> None:
        previous = sys.getswitchinterval()

        def load() -> None:
            try:
                gated = True
                for step in LOAD_STEPS:
                    if gated and not self._step_now.wait(HOLD_S):
                        gated = False  # forkbuild has been working all that while: the rest at once
                    with contextlib.suppress(ImportError):
                        importlib.import_module(step)
                self._make_console()
            except BaseException:  # noqa: BLE001 (the console property makes it again and raises)
                pass
            finally:
                sys.setswitchinterval(previous)

        sys.setswitchinterval(min(previous, LOADING_SWITCH_INTERVAL_S))
        loader = threading.Thread(target=load, name="forkbuild-console", daemon=True)
        loader.start()
        # Only now: the deadline's timer thread can start the loader while the main thread asks
        # for the console, and joining a thread that has not started yet raises.
        self._loader = loader

    def _make_console(self) -> None:
        import rich.table  # noqa: F401 (most commands end with a table: loaded here too)
        from rich.console import Console

        console = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
        with self._lock:
            if self._console is None:
                for text, options in self._waiting:
                    console.print(text, **options)
                self._waiting.clear()
                self._console = console

    @contextmanager
    def step(self, title: str) -> Iterator[None]:
        """A named step; its duration is printed when it ends."""
        start = time.monotonic()
        self._print(f"[bold]>[/bold] {title}")
        yield
        self._print(f"  [dim]{title}: {time.monotonic() - start:.2f}s[/dim]")

    def info(self, message: str) -> None:
        self._print(f"  {message}", markup=False)

    def detail(self, message: str) -> None:
        """Tool output and other noise: shown with -v only."""
        if self.verbose:
            self._print(message, markup=False, style="dim")

    def warn(self, message: str) -> None:
        self._print(f"[yellow]warning:[/yellow] {message}")

    def error(self, error: ForkbuildError) -> None:
        # escape(): messages quote TOML ("[[patches]]") that rich would read as markup.
        color = "red" if error.label == "error" else "yellow"
        self._print(f"[bold {color}]{error.label}:[/bold {color}] {_escape(error.message)}", markup=True, highlight=False)
        if error.hint:
            self._print(f"[cyan]hint:[/cyan] {_escape(error.hint)}")

    def download_progress(self) -> Progress:
        # rich.progress is imported only when something is downloaded.
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

        return Progress(TextColumn("  {task.description}"), BarColumn(), DownloadColumn(),
                        TransferSpeedColumn(), console=self.console, transient=True)


class _ReporterHandler(logging.Handler):
    """forkbuild's log records, through rich's handler on the reporter's console (made at the
    first record: most runs log nothing, and rich's handler needs the console)."""

    def __init__(self, reporter: Reporter) -> None:
        super().__init__()
        self.reporter = reporter
        self._rich: logging.Handler | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self._rich is None:
            from rich.logging import RichHandler

            self._rich = RichHandler(console=self.reporter.console, show_time=False, show_path=False, markup=False,
                                     highlighter=None, rich_tracebacks=False)
            self._rich.setFormatter(logging.Formatter("%(message)s"))
        self._rich.emit(record)


def configure_logging(reporter: Reporter) -> None:
    """forkbuild's loggers (git's commands and output: "forkbuild.git") to the reporter's
    console: everything with -v, warnings and errors otherwise."""
    logger = logging.getLogger("forkbuild")
    for handler in [handler for handler in logger.handlers if isinstance(handler, _ReporterHandler)]:
        logger.removeHandler(handler)  # main() may run more than once in a process (tests)
    logger.addHandler(_ReporterHandler(reporter))
    logger.setLevel(logging.DEBUG if reporter.verbose else logging.WARNING)
