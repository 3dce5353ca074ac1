"""Runs mutants: each one is its feature's tests under pytest in the test venv,
with the overlay (mutate/overlay/sitecustomize.py) first on PYTHONPATH making
the one mutated module load from the mutant's own file. Nothing is rebuilt and
the installed sglang is never written, so workers run side by side."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from forkbuild.errors import MutationError
from forkbuild.mutate.mutants import Mutant
from forkbuild.mutate.results import KILLED, SURVIVED

OVERLAY = Path(__file__).parent / "overlay"
RESULTS_ENV = "FORKBUILD_TEST_RESULTS"  # tests/patches/conftest.py records each test's outcome there
PYTEST_RAN = (0, 1)  # 0 all passed, 1 some failed; anything else: collection broke, nothing ran, interrupted
# Each worker runs one pytest at a time: torch's own thread pools on top would
# only fight over the cores.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TORCH_NUM_THREADS": "1"}


@dataclass(frozen=True)
class Outcome:
    status: str  # KILLED | SURVIVED
    killed_by: str  # the first failing test's node id, "collection: …" or "timeout after Ns"; "" when survived
    seconds: float


@dataclass(frozen=True)
class FeatureTests:
    python: Path
    root: Path  # the series directory: pytest's rootdir
    tests: tuple[Path, ...]
    timeout: float


def baseline(run: FeatureTests) -> float:
    """The feature's tests on the unmutated build must pass; returns their duration."""
    with tempfile.TemporaryDirectory(prefix="forkbuild-mutate-") as scratch:
        outcome = _pytest(run, Path(scratch), module="", source="", timeout=max(run.timeout, 600.0))
    if outcome.status != SURVIVED:
        names = ", ".join(str(path.relative_to(run.root)) for path in run.tests)
        raise MutationError(f"{names}: fail(s) on the unmutated build ({outcome.killed_by}): every mutant would "
                            "count as killed", hint=f"fix them first: `pytest {names}` in the test venv")
    return outcome.seconds


def run_all(jobs: Iterable[tuple[Mutant, FeatureTests]], *, workers: int,
            done: Callable[[Mutant, Outcome], None]) -> dict[str, Outcome]:
    """Every (mutant, its tests) on `workers` parallel pytest processes; `done`
    is called as each finishes (from a worker thread)."""
    outcomes: dict[str, Outcome] = {}
    with tempfile.TemporaryDirectory(prefix="forkbuild-mutate-") as scratch:
        def one(index: int, mutant: Mutant, run: FeatureTests) -> None:
            outcome = run_mutant(mutant, run, Path(scratch) / f"m{index}")
            outcomes[mutant.id] = outcome
            done(mutant, outcome)

        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            futures = [pool.submit(one, index, mutant, run) for index, (mutant, run) in enumerate(jobs)]
            for future in futures:
                future.result()
    return outcomes


def run_mutant(mutant: Mutant, run: FeatureTests, scratch: Path) -> Outcome:
    scratch.mkdir(parents=True)
    source = ""
    if mutant.source is not None:
        # Its own directory and the module's own file name: tracebacks and
        # inspect.getsource (Triton reads kernels' source) see the mutant.
        mutated = scratch / "src" / PurePosixPath(mutant.path).name
        mutated.parent.mkdir()
        mutated.write_text(mutant.source, encoding="utf-8")
        source = str(mutated)
    return _pytest(run, scratch, module=mutant.module, source=source, timeout=run.timeout)


def _pytest(run: FeatureTests, scratch: Path, *, module: str, source: str, timeout: float) -> Outcome:
    results = scratch / "results.json"
    env = {**os.environ, **ONE_THREAD, RESULTS_ENV: str(results),
           "FORKBUILD_MUTANT_MODULE": module, "FORKBUILD_MUTANT_SOURCE": source,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(OVERLAY), os.environ.get("PYTHONPATH", "")]))}
    command = [str(run.python), "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--rootdir", str(run.root),
               *map(str, run.tests)]
    start = time.monotonic()
    try:
        done = subprocess.run(command, cwd=run.root, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Outcome(KILLED, f"timeout after {timeout:.0f}s", time.monotonic() - start)
    seconds = time.monotonic() - start
    records = json.loads(results.read_text()) if results.is_file() else []
    failed = [record for record in records if record.get("outcome") == "fail"]
    if done.returncode == 0 and not failed:
        return Outcome(SURVIVED, "", seconds)
    if failed:
        return Outcome(KILLED, failed[0]["test"], seconds)
    if done.returncode in PYTEST_RAN:
        return Outcome(KILLED, "pytest failed without a recorded test failure", seconds)
    tail = next((line for line in reversed((done.stdout + done.stderr).splitlines()) if line.strip()), "")
    return Outcome(KILLED, f"collection: exit {done.returncode}: {tail.strip()[:160]}", seconds)
