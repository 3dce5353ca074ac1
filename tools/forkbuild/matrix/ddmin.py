"""Delta debugging (picire's ddmin) of a combination's features to a 1-minimal set for which a
command fails while stock passes. A probe log, rewritten after each probe, answers a re-run's
probes (ddmin asks the same questions in order): a killed bisect resumes, a finished one reprints."""

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
from forkbuild.io.fsutil import write_atomic


def _import_picire() -> types.ModuleType:
    """picire 21.8 reads its version through pkg_resources, which setuptools 81 removed: a
    stand-in answering that is in sys.modules for the import alone (0.1 s: only bisect pays it)."""
    stand_in = types.ModuleType("pkg_resources")
    stand_in.get_distribution = lambda name: types.SimpleNamespace(  # type: ignore[attr-defined]
        version=importlib.metadata.version(name))
    own = sys.modules.setdefault("pkg_resources", stand_in) is stand_in
    try:
        import picire
    finally:
        if own:
            del sys.modules["pkg_resources"]
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


class ProbeLog:
    """The probes of one bisect (identified by `key`) in a JSON file, and its result once it
    finished; a stopped one goes on only with `resume`, `restart` starts over."""

    def __init__(self, path: Path, *, key: dict[str, Any], resume: bool, restart: bool = False) -> None:
        self.path, self.key = path, key
        self.probes: dict[tuple[str, ...], Probe] = {}
        self.minimal: list[str] | None = None  # the result of a finished bisect
        if restart:
            path.unlink(missing_ok=True)
        if not path.exists():
            return
        try:
            data = json.loads(path.read_text())
            if data.get("schema") != LOG_SCHEMA or data.get("key") != key:
                raise BisectError(f"{path}: a probe log of another bisect (command, features or mode differ)",
                                  hint="start this one over with --restart (the log is replaced)")
            for item in data["probes"]:
                probe = Probe(**{**item, "features": tuple(item["features"]), "exit_codes": tuple(item["exit_codes"])})
                self.probes[probe.features] = probe
            self.minimal = data.get("minimal")
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise BisectError(f"{path}: unreadable probe log ({error})",
                              hint="start over with --restart (the log is replaced)") from error
        if self.minimal is None and not resume:
            raise BisectError(f"{path}: this bisect did not finish (it was stopped, or its first two probes "
                              "left nothing to bisect)", hint="resume it with --continue (its probes are replayed), "
                              "or start over with --restart (after changing the command: a probe is asked once)")

    def record(self, probe: Probe | None = None, *, minimal: Sequence[str] | None = None) -> None:
        """Add `probe`, or the bisect's result, and rewrite the log."""
        if probe is not None:
            self.probes[probe.features] = probe
        if minimal is not None:
            self.minimal = list(minimal)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"schema": LOG_SCHEMA, "key": self.key, "probes": [asdict(item) for item in self.probes.values()]}
        write_atomic(self.path, json.dumps(data if self.minimal is None else {**data, "minimal": self.minimal},
                                           indent=2) + "\n")


RunProbe = Callable[[tuple[str, ...]], tuple[int, str]]  # features -> (exit code, detail) of one try


def bisect(candidates: Sequence[str], *, run: RunProbe, log: ProbeLog, tries: int,
           report: Callable[[Probe, bool], None]) -> dict[str, Any]:
    """The 1-minimal subset of `candidates` (in their order) for which the command fails (all `tries` of
    a probe fail), the probes in the order asked, and how many were replayed from the log."""
    order = {name: index for index, name in enumerate(candidates)}
    asked: dict[tuple[str, ...], Probe] = {}  # in the order ddmin asked them
    replayed = 0

    def outcome_of(features: Sequence[str]) -> str:
        nonlocal replayed
        key = tuple(sorted(features, key=order.__getitem__))
        if key in asked:
            return asked[key].outcome
        if key in log.probes:
            replayed += 1
            report(log.probes[key], True)
        else:
            started, codes, detail = time.monotonic(), [], ""
            for _ in range(tries):
                code, detail = run(key)
                codes.append(code)
                if code == 0:
                    break
            log.record(Probe(features=key, outcome=FAIL if codes[-1] else PASS, exit_codes=tuple(codes),
                             seconds=round(time.monotonic() - started, 3), detail=detail))
            report(log.probes[key], False)
        asked[key] = log.probes[key]
        return asked[key].outcome

    if outcome_of(()) != PASS:
        raise BisectError("the command fails on stock (no feature): the features are not what breaks it",
                          hint=f"check the command itself (its exit codes: {log.path}), then run it with --restart")
    if outcome_of(tuple(candidates)) != FAIL:
        raise BisectError(f"the command passes with every feature ({len(candidates)}): nothing to bisect",
                          hint="check that the command fails where you expect it to (--retries for a flaky one), "
                               "then run it with --restart")
    picire = _import_picire()

    def test(config: list[str], config_id: tuple) -> Any:  # a picire.Outcome
        return picire.Outcome.FAIL if outcome_of(config) == FAIL else picire.Outcome.PASS

    minimal = tuple(sorted(picire.DD(test)(list(candidates)), key=order.__getitem__))
    log.record(minimal=minimal)
    return {"minimal": minimal, "probes": [asdict(probe) for probe in asked.values()], "replayed": replayed}
