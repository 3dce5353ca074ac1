"""The reporter's console is made on a thread at the first line printed (rich loads beside
forkbuild's first git commands): lines printed meanwhile wait, and come out first, in order."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from fixtures import SeriesFixture

from forkbuild.console import Reporter


def test_lines_printed_while_the_console_loads_come_out_first_and_in_order(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    loading = threading.Event()
    make = Reporter._make_console

    def slow_make(self: Reporter) -> None:
        loading.set()
        time.sleep(0.2)  # rich still loading while the main thread prints on
        make(self)

    monkeypatch.setattr(Reporter, "_make_console", slow_make)
    reporter = Reporter()
    reporter.info("one")
    assert loading.wait(5)
    reporter.warn("two")
    with reporter.step("three"):
        reporter.info("four")
    assert capsys.readouterr().err == ""  # all of it waits for the console
    reporter.console.print("five")  # waits for the console, after the lines before it
    reporter.info("six")
    reporter.close()
    lines = capsys.readouterr().err.splitlines()
    assert [line.split()[-1] for line in lines if line.strip()][:4] == ["one", "two", "three", "four"]
    assert lines[-2:] == ["five", "  six"]
    assert lines[4].strip().startswith("three: ")  # the step's duration line, before five


def test_a_console_that_cannot_be_made_on_the_thread_raises_where_it_is_asked_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def broken(self: Reporter) -> None:
        calls.append(threading.current_thread().name)
        raise ImportError("No module named 'rich'")

    monkeypatch.setattr(Reporter, "_make_console", broken)
    reporter = Reporter()
    reporter.info("held")
    with pytest.raises(ImportError, match="rich"):
        reporter.close()
    assert calls == ["forkbuild-console", threading.main_thread().name]


def test_an_apply_prints_its_step_table_and_head_in_order(series_fx: SeriesFixture, tmp_path) -> None:
    done = subprocess.run([sys.executable, "-m", "forkbuild", "-C", str(series_fx.root), "--cache", str(series_fx.cache),
                           "apply", "--all", "--dir", str(tmp_path / "tree")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    marks = ["> Applying 3 patches", "  Applying 3 patches", "series ->", "guards.patch", "beta-limit.patch", "  HEAD "]
    found = [next(index for index, line in enumerate(lines) if mark in line) for mark in marks]
    assert found == sorted(found), done.stderr
