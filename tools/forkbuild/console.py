"""All terminal output: steps with durations, warnings, errors, on stderr. rich draws tables and
styles lines on a terminal (imported then: it costs ~70 ms, a fifth of an apply); where stderr is
no terminal, a line is its text, as rich would write it there. A line's control characters are
written out (`printable`), never sent. Markup is off: messages quote TOML, git and patch subjects
("[[patches]]", "[fix] ..."), which rich would swallow or choke on; styles are (text, style) parts."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from forkbuild.errors import ForkbuildError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress
    from rich.text import Text


class OutputError(Exception):
    """stdout refused forkbuild's output (its reader gone, a full disk, closed); cli.main reports it."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error.strerror or str(error))
        self.error = error


# Control characters in a message (a patch's name, git's output: untrusted) are shown, never sent to
# the terminal: ESC and CSI sequences retitle, hide or rewrite what it shows. Tab and newline stay;
# BEL, BS, VT, FF and CR go, as rich drops them (git's progress lines end in CR).
_ESCAPED: dict[int, str | None] = {code: f"\\x{code:02x}" for code in (*range(32), *range(127, 160))
                                   if code not in (9, 10)} | dict.fromkeys((7, 8, 11, 12, 13))


def printable(text: str) -> str:
    """`text` with its control characters written out (\\x1b) or, as rich does, dropped (CR)."""
    return text.translate(_ESCAPED)


def cells(*values: str | Text) -> list[str | Text]:
    """A table row's cells, each string made printable (a Text is: `styled` made it)."""
    return [printable(value) if isinstance(value, str) else value for value in values]


def styled(*parts: str | Text | tuple[str, str], style: str = "") -> Text:
    """Text from plain parts and (text, style) pairs: styled output that no message can restyle."""
    from rich.text import Text

    def shown(part: str | Text | tuple[str, str]) -> str | Text | tuple[str, str]:
        if isinstance(part, tuple):
            return printable(part[0]), part[1]
        return printable(part) if isinstance(part, str) else part

    return Text.assemble(*map(shown, parts), style=style)


class _Stdout:
    """sys.stdout, whose write errors are OutputError (not taken for a file's)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as error:
            raise OutputError(error) from error

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as error:
            raise OutputError(error) from error

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard_standard_streams() -> None:
    """A closed stdin, stdout or stderr (`>&-`) is held by /dev/null (stdout read-only: writes
    fail as if closed) so that no file forkbuild opens takes its number."""
    for number, mode in ((0, os.O_RDONLY), (1, os.O_RDONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(number)
        except OSError:
            os.open(os.devnull, mode)  # the lowest free number: this one
    if sys.stdout is None:
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115 (the process's own stdout)
    if sys.stderr is None:
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = _Stdout(sys.stdout)  # type: ignore[assignment]


def _terminal() -> bool:
    """Whether rich styles stderr (its Console.is_terminal: TTY_COMPATIBLE, FORCE_COLOR, isatty)."""
    compatible = os.environ.get("TTY_COMPATIBLE", "")
    if compatible in ("0", "1"):
        return compatible == "1"
    if (force := os.environ.get("FORCE_COLOR")) is not None:
        return force != ""
    try:
        return sys.stderr.isatty()
    except ValueError:  # closed
        return False


class Reporter:
    def __init__(self, *, verbose: bool = False) -> None:
        self.verbose = verbose
        self._console: Console | None = None
        self.plain = not _terminal()  # lines without rich

    def line(self, *parts: str | tuple[str, str], style: str = "") -> None:
        """One line (or lines) from plain parts and (text, style) pairs."""
        text = printable("".join(part if isinstance(part, str) else part[0] for part in parts))
        if not self.plain or "\t" in text:  # a tab's stop depends on the cells before it: rich counts them
            self.console.print(styled(*parts, style=style))
            return
        sys.stderr.write(text + "\n")
        sys.stderr.flush()

    @property
    def console(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False, markup=False)
        return self._console

    @contextmanager
    def step(self, title: str) -> Iterator[None]:
        """A named step; its duration is printed when it ends."""
        start = time.monotonic()
        self.line((">", "bold"), f" {title}")
        yield
        self.line(f"  {title}: {time.monotonic() - start:.2f}s", style="dim")

    def info(self, message: str) -> None:
        self.line(f"  {message}")

    def detail(self, message: str) -> None:
        """Tool output and other noise: shown with -v only."""
        if self.verbose:
            self.line(message, style="dim")

    def warn(self, message: str) -> None:
        self.line(("warning:", "yellow"), f" {message}")

    def error(self, error: ForkbuildError) -> None:
        color = "red" if error.label == "error" else "yellow"
        self.line((f"{error.label}:", f"bold {color}"), f" {error.message}")
        if error.hint:
            self.line(("hint:", "cyan"), f" {error.hint}")

    def download_progress(self) -> Progress:
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

        return Progress(TextColumn("  {task.description}", markup=False), BarColumn(), DownloadColumn(),
                        TransferSpeedColumn(), console=self.console, transient=True)


class _PrintableFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))


def configure_logging(reporter: Reporter) -> None:
    """-v: forkbuild's debug log (git's commands and output) through rich on the reporter's console."""
    logger = logging.getLogger("forkbuild")
    for handler in [handler for handler in logger.handlers if handler.name == "forkbuild"]:
        logger.removeHandler(handler)  # main() may run more than once in a process (tests)
    logger.setLevel(logging.DEBUG if reporter.verbose else logging.WARNING)
    if reporter.verbose:
        from rich.logging import RichHandler

        handler = RichHandler(console=reporter.console, show_time=False, show_path=False, markup=False,
                              highlighter=None, rich_tracebacks=False)
        handler.name = "forkbuild"
        handler.setFormatter(_PrintableFormatter("%(message)s"))  # git's output, shown, never sent
        logger.addHandler(handler)
