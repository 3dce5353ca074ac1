"""The reporter's output: steps, the table and the head, in order on stderr."""

from __future__ import annotations

import os
import subprocess
import sys

from fixtures import SeriesFixture


def test_an_apply_prints_its_step_table_and_head_in_order(series_fx: SeriesFixture, tmp_path) -> None:
    done = subprocess.run([sys.executable, "-m", "forkbuild", "-C", str(series_fx.root), "--cache", str(series_fx.cache),
                           "apply", "--all", "--dir", str(tmp_path / "tree")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    marks = ["> Applying 3 patches", "  Applying 3 patches", "series ->", "guards.patch", "beta-limit.patch", "  HEAD "]
    found = [next(index for index, line in enumerate(lines) if mark in line) for mark in marks]
    assert found == sorted(found), done.stderr



# What a line may carry from untrusted input: markup and emoji look-alikes, tabs, control characters.
LINES = ["[bold]not markup[/] :smile: 1.5", "tab\tstop\tx", "ca\rrriage b\x08ell\x07 ff\x0c vt\x0b", "wide 中文\tz", "",
         "title \x1b]0;owned\x07 clear \x1b[2J csi \x9b2J del \x7f"]  # a terminal's escapes, from a patch's name
SCRIPT = """
import sys
from forkbuild.console import Reporter
from forkbuild.errors import ForkbuildError
reporter = Reporter(verbose=True)
reporter.plain = reporter.plain and sys.argv[1] != "rich"  # "rich": rich writes even off a terminal
for line in sys.argv[2:]:
    reporter.info(line)
    reporter.warn(line)
    reporter.detail(line)
    reporter.line(("mark", "red"), " " + line)
with reporter.step("a step"):
    pass
reporter.error(ForkbuildError("it failed", hint="do this"))
print("rich" in sys.modules)
"""


def _report(how: str, lines: list[str] = LINES, **env: str) -> tuple[str, bool]:
    """What every kind of line writes to stderr (a step's duration cut), and whether rich was imported."""
    done = subprocess.run([sys.executable, "-c", SCRIPT, how, *lines], capture_output=True, text=True, check=True,
                          env={key: value for key, value in os.environ.items() if key not in RICH_ENV} | env)
    text = "\n".join(line.rsplit(": ", 1)[0] if line.startswith("  a step:") else line
                     for line in done.stderr.split("\n"))
    return text, done.stdout == "True\n"


RICH_ENV = ("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR", "COLUMNS")


def test_lines_off_a_terminal_are_what_rich_writes_there_without_importing_rich() -> None:
    plain, _ = _report("plain")
    assert _report("rich") == (plain, True)  # rich off a terminal writes the same bytes
    untabbed = [line for line in LINES if "\t" not in line]
    assert _report("plain", untabbed) == (_report("rich", untabbed)[0], False)  # rich's ~70 ms import spared
    assert "\x1b" not in plain and "\r" not in plain and "\x9b" not in plain and "[bold]not markup[/] :smile: 1.5" in plain
    assert "title \\x1b]0;owned clear \\x1b[2J csi \\x9b2J del \\x7f" in plain  # shown, not obeyed (BEL dropped)
    assert "carriage bell ff vt" in plain  # as rich drops them
    colored, imported = _report("plain", FORCE_COLOR="1")
    assert imported and "\x1b[" in colored  # a terminal (FORCE_COLOR stands for one): rich styles it
    assert "\x1b]0;owned" not in colored and "\x1b[2J" not in colored and "\\x1b[2J" in colored
    assert _report("plain", untabbed, FORCE_COLOR="1", TTY_COMPATIBLE="0")[1] is False
