"""The reporter's console is made on a thread (rich loads beside forkbuild's git commands):
lines printed before it is there wait, and come out first, in order."""

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
    reporter.load_beside()  # as forkbuild's next git command would
    with pytest.raises(ImportError, match="rich"):
        reporter.close()
    assert calls == ["forkbuild-console", threading.main_thread().name]


def test_a_held_line_is_printed_without_a_command_to_wait_for(capsys: pytest.CaptureFixture[str]) -> None:
    reporter = Reporter()
    reporter.info("alone")
    deadline = time.monotonic() + 5
    while "alone" not in capsys.readouterr().err:  # the HOLD_S deadline starts the console
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_an_apply_prints_its_step_table_and_head_in_order(series_fx: SeriesFixture, tmp_path) -> None:
    done = subprocess.run([sys.executable, "-m", "forkbuild", "-C", str(series_fx.root), "--cache", str(series_fx.cache),
                           "apply", "--all", "--dir", str(tmp_path / "tree")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    marks = ["> Applying 3 patches", "  Applying 3 patches", "series ->", "guards.patch", "beta-limit.patch", "  HEAD "]
    found = [next(index for index, line in enumerate(lines) if mark in line) for mark in marks]
    assert found == sorted(found), done.stderr


def test_the_console_starts_loading_when_forkbuild_next_waits_for_a_command(
        series_fx: SeriesFixture, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from forkbuild.process import call_around_waiting, run_captured, start_captured

    calls: list[str] = []
    call_around_waiting(lambda: calls.append("before"), lambda: calls.append("after"))
    try:
        run_captured(["git", "--version"], cwd=tmp_path)
        start_captured(["git", "--version"], cwd=tmp_path).wait()
    finally:
        call_around_waiting(None)
    assert calls == ["before", "after", "before", "after"]
    # main() hands its reporter's load_beside to the process runner, for as long as it runs.
    loads: list[Reporter] = []

    def record(self: Reporter) -> None:
        if threading.current_thread() is threading.main_thread():  # not the HOLD_S deadline's timer
            loads.append(self)

    monkeypatch.setattr(Reporter, "load_beside", record)
    assert series_fx.cli("apply", "--all", "--dir", str(tmp_path / "tree")) == 0
    assert loads and all(reporter is loads[0] for reporter in loads)
    count = len(loads)
    run_captured(["git", "--version"], cwd=tmp_path)
    assert len(loads) == count  # main() took it back


def test_asking_for_the_console_while_another_thread_starts_its_loader_waits_for_it(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The deadline's timer thread starts the loader while the main thread prints a table: it
    must find no loader yet, or a started one (joining one not started yet raises)."""
    reporter = Reporter()
    reporter.info("held")
    errors: list[BaseException] = []
    askers: list[threading.Thread] = []
    real_start = threading.Thread.start

    def ask() -> None:
        try:
            reporter.console.print("asked")
        except BaseException as error:  # noqa: BLE001 (what the test looks for)
            errors.append(error)

    def start(thread: threading.Thread) -> None:
        if thread.name == "forkbuild-console" and not askers:
            askers.append(threading.Thread(target=ask))
            real_start(askers[0])
            askers[0].join(0.3)  # it asks between the loader's creation and its start
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    starter = threading.Thread(target=reporter.load_beside)  # as the deadline's timer does
    real_start(starter)
    starter.join(5)
    askers[0].join(5)
    reporter.close()
    assert errors == []
    assert capsys.readouterr().err.splitlines() == ["  held", "asked"]


def test_the_loader_takes_its_steps_only_while_forkbuild_waits_for_a_command(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Python runs one thread at a time: a step of rich's import while forkbuild works is time
    taken from it. So each step waits for a command to wait for, until the console is asked for."""
    from forkbuild import console
    from forkbuild.process import call_around_waiting, run_captured

    waiting = threading.Event()  # what the test knows: the main thread is in a command's wait
    steps: list[tuple[str, bool]] = []
    real_import = console.importlib.import_module

    def record(name: str):
        steps.append((name, waiting.is_set()))
        time.sleep(0.2)  # a step of a few ms, slowed down: two of them outlast a command's wait
        return real_import(name)

    monkeypatch.setattr(console.importlib, "import_module", record)
    monkeypatch.setattr(console, "LOAD_STEPS", ("json", "colorsys", "csv"))
    monkeypatch.setattr(console, "HOLD_S", 5.0)  # no step goes on for lack of a command
    reporter = Reporter()
    reporter.info("held")

    def before() -> None:
        waiting.set()
        reporter.load_beside()

    def after() -> None:
        reporter.main_runs()
        waiting.clear()

    call_around_waiting(before, after)
    try:
        run_captured([sys.executable, "-c", "import time; time.sleep(0.3)"], cwd=tmp_path)
        time.sleep(0.3)  # forkbuild working: no step
        taken = list(steps)
        run_captured([sys.executable, "-c", "import time; time.sleep(0.3)"], cwd=tmp_path)
    finally:
        call_around_waiting(None)
    assert taken and all(during_wait for _, during_wait in taken)
    assert all(during_wait for _, during_wait in steps)
    reporter.close()  # asked for: the rest goes on without a command
    assert [name for name, _ in steps] == ["json", "colorsys", "csv"]


def test_once_no_command_comes_for_hold_s_the_loader_loads_the_rest_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """forkbuild works for a while without a command to wait for (its lines wait for the
    console): one step waits HOLD_S for a command, the others go on at once."""
    from forkbuild import console

    class CountingEvent(threading.Event):
        def __init__(self) -> None:
            super().__init__()
            self.timeouts = 0

        def wait(self, timeout: float | None = None) -> bool:
            done = super().wait(timeout)
            self.timeouts += not done
            return done

    first_step = threading.Event()
    real_import = console.importlib.import_module

    def slow(name: str):
        first_step.set()
        time.sleep(0.1)
        return real_import(name)

    monkeypatch.setattr(console.threading, "Event", CountingEvent)
    monkeypatch.setattr(console.importlib, "import_module", slow)
    monkeypatch.setattr(console, "LOAD_STEPS", ("json", "colorsys", "csv", "email"))
    reporter = Reporter()
    reporter.info("held")
    reporter.load_beside()  # a command starts: the loader starts
    assert first_step.wait(5)
    reporter.main_runs()  # it ended; forkbuild works on, and no other command comes
    while reporter._loader is not None and reporter._loader.is_alive() and reporter._step_now.timeouts < 3:
        time.sleep(0.01)
    assert reporter._step_now.timeouts == 1
    reporter.close()
