"""Python's cyclic garbage collector paused while the `forkbuild` process starts.

Start-up makes tens of thousands of objects the collector tracks (modules, functions,
classes, the series' dataclasses) and none of them is garbage, yet a collection starts
every 700 new ones: most of a re-apply's collections ran during start-up. Paused there, a
re-apply took 0.98x the time (bench_ab.py against the same code without the pause:
bench/results/apply.txt). So the process entry
(forkbuild.entry) pauses it before the first import, and main() resumes it once the
command's code is loaded: `gc.freeze()` first moves everything start-up made into the
permanent generation, where no later collection looks, and from then on the collector runs
as usual, for commands that run for minutes (test-patch, mutate, rebase) as for the rest.

Only a process that entered through forkbuild.entry is paused: main() called by a test or
a program of its own leaves that interpreter's collector as it found it.

The same start-up cost decides which records are classes of which kind. Making a frozen
dataclass's class compiles five or six methods from source, ~1.3 ms on these machines; a
named tuple's class takes ~0.15 ms. An apply imported 29 dataclasses (~40 ms of a 0.35 s
run). So the records an apply makes and passes along (a git run's output, a patch's facts
and result, the engine's jobs, a lock's owner) are NamedTuples; the parsed series.toml
(config.py) and the states forkbuild writes and reads back (worktree/state.py, stop.py,
rebase/state.py) stay frozen dataclasses, where the class's own checks and
dataclasses.replace/fields are worth the time."""

from __future__ import annotations

import gc

_paused = False


def pause() -> None:
    """The collector off until resume(); nothing if it is off already (someone else's)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """What start-up made frozen, the collector on again; nothing unless pause() turned it off."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
