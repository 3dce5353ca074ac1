"""Runs mutants: each is its feature's tests under pytest in the test venv, the overlay making
the mutated module load from the mutant's own file (the installed sglang is never written)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from forkbuild.errors import MutationError
from forkbuild.io import process
from forkbuild.mutate.mutants import Mutant
from forkbuild.mutate.results import KILLED, SURVIVED

OVERLAY = Path(__file__).parent / "overlay"
RESULTS_ENV = "FORKBUILD_TEST_RESULTS"  # tests/patches/conftest.py records each test's outcome there
# Each worker runs one pytest at a time: torch's own thread pools on top would only fight over the cores.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TORCH_NUM_THREADS": "1"}
BASELINE_TIMEOUT = 900.0


@dataclass(frozen=True)
class Outcome:
    status: str  # KILLED | SURVIVED
    killed_by: str  # the first failing test's node id, "collection: …" or "timeout after Ns"; "" when survived
    seconds: float


class Worker:
    """One fork server (overlay/forkserver.py) in the test venv."""

    def __init__(self, python: Path, preload: Iterable[str], log: Path) -> None:
        self.log = log
        with open(log, "w") as output:  # the preload's warnings; the runs log on their own
            self._process = process.popen([str(python), str(OVERLAY / "forkserver.py"), *preload],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=output,
                                          env=ONE_THREAD, text=True)
        assert self._process.stdin and self._process.stdout  # both pipes
        self._stdin, self._stdout = self._process.stdin, self._process.stdout
        if not self._stdout.readline().strip():
            raise MutationError(f"the mutate worker did not start in {python} (exit {self._process.wait()}): "
                                f"{_tail(log)}")

    def run(self, request: dict) -> dict:
        self._stdin.write(json.dumps(request) + "\n")
        self._stdin.flush()
        reply = self._stdout.readline()
        if not reply.strip():
            raise MutationError(f"the mutate worker stopped (exit {self._process.wait()}) while running "
                                f"{request['tests']}: {_tail(Path(request['log']))} {_tail(self.log)}")
        return json.loads(reply)

    def close(self) -> None:
        if self._process.poll() is None:
            self._stdin.close()
            self._process.wait()


def run_all(runs: dict[str, tuple[Path, ...]], mutants: list[Mutant], *, root: Path, site_packages: Path,
            python: Path, preload: list[str], workers: int, scratch: Path, done: Callable[[Mutant, Outcome], None],
            killers: dict[tuple[str, str], str] | None = None) -> dict[str, Outcome]:
    """Per feature (-> its test files, run in `root`) its baseline, then (if it passed) its mutants, each
    passed to `done` from a worker thread; returns the baselines. `scratch`: this run's own folder (the
    caller holds the lock). `killers`: (patch, mutant id) -> the test that killed it last time: run first."""
    queue: list[tuple[str, Mutant | None]] = [(feature, None) for feature in runs]
    queue += [(mutant.feature, mutant) for mutant in mutants]
    baselines: dict[str, Outcome] = {}
    ready = {feature: threading.Event() for feature in runs}
    lock = threading.Lock()

    def work(number: int) -> None:
        worker = Worker(python, preload, scratch / f"worker{number}.log")
        try:
            while True:
                with lock:
                    if not queue:
                        return
                    feature, mutant = queue.pop(0)
                    index = len(queue)
                if mutant is None:  # every module its mutants touch re-imported from an unchanged copy
                    try:
                        touched = {item.module: item.path for item in mutants if item.feature == feature}
                        sources = {module: _write(scratch / f"b{index}" / "src" / str(number), path,
                                                  (site_packages / path).read_text(encoding="utf-8"))
                                   for number, (module, path) in enumerate(touched.items())}
                        baselines[feature] = _pytest(runs[feature], root, scratch / f"b{index}", worker,
                                                     sources=sources, timeout=BASELINE_TIMEOUT)
                    finally:
                        ready[feature].set()
                    continue
                ready[feature].wait()
                if feature not in baselines or baselines[feature].status != SURVIVED:
                    continue
                folder = scratch / f"m{index}"
                source = "" if mutant.source is None else _write(folder / "src", mutant.path, mutant.source)
                # `first` (its killer last time), then the files naming its module (the last dotted part):
                # with -x a mutant their tests kill stops there; a survivor still runs them all.
                name = re.escape(mutant.module.rsplit(".", 1)[-1])
                tests = runs[feature]
                naming = [path for path in tests if re.search(rf"\b{name}\b", path.read_text(errors="replace"))]
                # A mutant may make a test loop: killed at 4x the clean run (at least a minute).
                done(mutant, _pytest((*naming, *(path for path in tests if path not in naming)), root, folder,
                                     worker, sources={mutant.module: source},
                                     timeout=max(60.0, 4 * baselines[feature].seconds),
                                     first=(killers or {}).get((mutant.patch, mutant.id))))
        finally:
            worker.close()

    count = max(1, min(workers, len(queue)))
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        with ThreadPoolExecutor(max_workers=count) as pool:
            list(pool.map(work, range(count)))  # a worker's error raised here
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return baselines


def _write(directory: Path, path: str, text: str) -> str:
    # The module's own file name: tracebacks and inspect.getsource see the file imported.
    target = directory / PurePosixPath(path).name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return str(target)


def _pytest(tests: tuple[Path, ...], root: Path, scratch: Path, worker: Worker, *, sources: dict[str, str],
            timeout: float, first: str | None = None) -> Outcome:
    scratch.mkdir(parents=True, exist_ok=True)
    results, log = scratch / "results.json", scratch / "pytest.log"
    env = {**ONE_THREAD, RESULTS_ENV: str(results), "FORKBUILD_MUTANT": json.dumps(sources),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(OVERLAY), os.environ.get("PYTHONPATH", "")]))}
    reply = worker.run({"tests": [str(path) for path in tests], "rootdir": str(root), "env": env,
                        "log": str(log), "timeout": timeout, "first": [first] if first else []})
    if reply["timeout"]:
        return Outcome(KILLED, f"timeout after {timeout:.0f}s", reply["seconds"])
    records = json.loads(results.read_text()) if results.is_file() else []
    if failed := [record for record in records if record.get("outcome") == "fail"]:
        return Outcome(KILLED, failed[0]["test"], reply["seconds"])
    if reply["rc"] == 0:  # 0: all passed; anything else (collection broke, nothing ran) kills it too
        return Outcome(SURVIVED, "", reply["seconds"])
    return Outcome(KILLED, f"collection: exit {reply['rc']}: {_tail(log)}", reply["seconds"])


def _tail(log: Path) -> str:  # the last non-empty line of a log, shortened
    output = log.read_text(errors="replace") if log.is_file() else ""
    return next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "")[:160]
