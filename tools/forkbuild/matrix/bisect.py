"""Delta debugging (ddmin) over a combination's features to a minimal set for
which a command fails while stock passes.

The search is picire's ddmin (picire.DD: Zeller's subsets-then-complements
reduction, 1-minimal result). What forkbuild adds around it:
- preconditions checked first (stock passes, the full set fails), as errors
  instead of picire's `assert`;
- a probe log (one JSON file, rewritten atomically after every probe, with the
  result at the end): a re-run answers every probe already made from it (ddmin
  is deterministic: it asks the same questions again in the same order), so a
  finished bisect run again prints the same result, and a killed one resumes
  where it stopped with --continue; --restart starts over;
- retries: a probe fails only if the command fails on every try.
How a probe runs (build a wheel/image, or toggle guards) is probe.py's job.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from forkbuild.errors import BisectError
from forkbuild.fsutil import write_atomic


def _import_picire() -> types.ModuleType:
    """picire 21.8 (the newest) reads its own version through `pkg_resources` at import,
    which setuptools 81 removed (a fresh venv has no pkg_resources). A stand-in answering
    only that question is in sys.modules for the import alone, so no other code sees it.
    Called by bisect() (picire's import takes 0.1 s: not at every command's start)."""
    try:
        import pkg_resources  # noqa: F401  (present: picire imports as it is)
    except ModuleNotFoundError:
        stand_in = types.ModuleType("pkg_resources")
        stand_in.get_distribution = lambda name: types.SimpleNamespace(  # type: ignore[attr-defined]
            version=importlib.metadata.version(name))
        sys.modules["pkg_resources"] = stand_in
        try:
            import picire
        finally:
            sys.modules.pop("pkg_resources", None)
        return picire
    import picire
    return picire


PASS, FAIL = "pass", "fail"
LOG_SCHEMA = 1


@dataclass(frozen=True, kw_only=True)
class Probe:
    features: tuple[str, ...]  # the features the probe turned on (in series order)
    outcome: str  # pass | fail: fail only if every try failed
    exit_codes: tuple[int, ...]  # one per try
    seconds: float
    detail: str = ""  # what was built or set, and the command's last output on failure


@dataclass(frozen=True, kw_only=True)
class BisectResult:
    minimal: tuple[str, ...]
    probes: tuple[Probe, ...]  # in the order ddmin asked them, each once
    replayed: int  # answered from the probe log

    def as_json(self) -> dict[str, Any]:
        return {"minimal": list(self.minimal), "probes": [_probe_json(probe) for probe in self.probes],
                "replayed": self.replayed}


def _probe_json(probe: Probe) -> dict[str, Any]:
    data = asdict(probe)
    data["features"], data["exit_codes"] = list(probe.features), list(probe.exit_codes)
    return data


class ProbeLog:
    """The probes made so far for one bisect (identified by `key`), in a JSON file, and its
    result once it finished. A finished bisect run again is answered from it (the same
    result, no probe run); a stopped one goes on with `resume`; `restart` starts over."""

    def __init__(self, path: Path, *, key: dict[str, Any], resume: bool, restart: bool = False) -> None:
        self.path, self.key = path, key
        self.probes: dict[tuple[str, ...], Probe] = {}
        self.minimal: list[str] | None = None  # the result of a finished bisect
        if restart:
            path.unlink(missing_ok=True)
        elif path.exists():
            self._load()
            if self.minimal is None and not resume:
                raise BisectError(f"{path}: this bisect stopped before it finished",
                                  hint="resume it with --continue, or start over with --restart")

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text())
            if data.get("schema") != LOG_SCHEMA or data.get("key") != self.key:
                raise BisectError(f"{self.path}: a probe log of another bisect (command, features or mode differ)",
                                  hint="start this one over with --restart (the log is replaced)")
            for item in data["probes"]:
                probe = Probe(features=tuple(item["features"]), outcome=item["outcome"],
                              exit_codes=tuple(item["exit_codes"]), seconds=item["seconds"], detail=item["detail"])
                self.probes[probe.features] = probe
            self.minimal = data.get("minimal")
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise BisectError(f"{self.path}: unreadable probe log ({error})",
                              hint="start over with --restart (the log is replaced)") from error

    def lookup(self, features: tuple[str, ...]) -> Probe | None:
        return self.probes.get(features)

    def record(self, probe: Probe | None = None, *, minimal: Sequence[str] | None = None) -> None:
        """Add `probe`, or the bisect's result, and rewrite the log."""
        if probe is not None:
            self.probes[probe.features] = probe
        if minimal is not None:
            self.minimal = list(minimal)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"schema": LOG_SCHEMA, "key": self.key, "probes": [_probe_json(item) for item in self.probes.values()]}
        write_atomic(self.path, json.dumps(data if self.minimal is None else {**data, "minimal": self.minimal},
                                           indent=2) + "\n")


RunProbe = Callable[[tuple[str, ...]], tuple[int, str]]  # features -> (exit code, detail) of one try


def probe(features: tuple[str, ...], *, run: RunProbe, tries: int) -> Probe:
    """Run the command up to `tries` times: it passes as soon as one try passes."""
    started, codes, detail = time.monotonic(), [], ""
    for _ in range(max(tries, 1)):
        code, detail = run(features)
        codes.append(code)
        if code == 0:
            break
    outcome = PASS if codes[-1] == 0 else FAIL
    return Probe(features=features, outcome=outcome, exit_codes=tuple(codes),
                 seconds=round(time.monotonic() - started, 3), detail=detail)


def bisect(candidates: Sequence[str], *, run: RunProbe, log: ProbeLog, tries: int = 1,
           report: Callable[[Probe, bool], None] = lambda probe, replayed: None) -> BisectResult:
    """The 1-minimal subset of `candidates` (kept in their order) for which the command fails."""
    order = {name: index for index, name in enumerate(candidates)}
    asked: list[Probe] = []
    replayed = 0

    def outcome_of(features: Sequence[str]) -> str:
        nonlocal replayed
        key = tuple(sorted(features, key=order.__getitem__))
        known = next((item for item in asked if item.features == key), None)
        if known is None:
            known = log.lookup(key)
            if known is not None:
                replayed += 1
                report(known, True)
            else:
                known = probe(key, run=run, tries=tries)
                log.record(known)
                report(known, False)
            asked.append(known)
        return known.outcome

    if outcome_of(()) != PASS:
        raise BisectError("the command fails on stock (no feature): the features are not what breaks it",
                          hint="check the command itself; the probe log shows its exit codes")
    if outcome_of(tuple(candidates)) != FAIL:
        raise BisectError(f"the command passes with every feature ({len(candidates)}): nothing to bisect",
                          hint="check that the command fails where you expect it to (--retries for a flaky one)")

    picire = _import_picire()

    def test(config: list[str], config_id: tuple) -> Any:  # a picire.Outcome
        return picire.Outcome.FAIL if outcome_of(config) == FAIL else picire.Outcome.PASS

    minimal = tuple(sorted(picire.DD(test)(list(candidates)), key=order.__getitem__))
    log.record(minimal=minimal)
    return BisectResult(minimal=minimal, probes=tuple(asked),
                        replayed=replayed)
