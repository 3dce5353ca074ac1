"""The stock proof: every guard_on test must fail where its patch's behaviour is missing (on
stock sglang plus only the guard declarations; a feature without guards of its own on plain
stock), and for an accepted reason: an assertion, a name the feature's patches add, or another
exception (counted apart); a missing DSV41_* name is a harness error. guard_off tests must pass there.
"""

from __future__ import annotations

import re
import tempfile
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Executor
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from forkbuild.context import Context
from forkbuild.errors import ApplyError
from forkbuild.series.config import GUARD_PREFIX, Series
from forkbuild.series.patchfile import only_files, parse_diff, read_text, split_mail
from forkbuild.testpatch import behaviour
from forkbuild.testpatch.behaviour import TestPython
from forkbuild.testpatch.records import (
    FAIL,
    GUARD_OFF,
    GUARD_OFF_UNPATCHED,
    GUARD_ON,
    GUARD_ON_UNPATCHED,
    PASS,
    SKIP,
    Record,
)
from forkbuild.testpatch.structure import environ_path
from forkbuild.worktree.engine import Engine, Outcome, PatchJob
from forkbuild.worktree.guard import temporary_worktree
from forkbuild.worktree.guards_module import write_module

ASSERTION = "assertion"
MISSING_NAME = "missing_name"
OTHER = "other_exception"
HARNESS_ERROR = "harness_error"
PASSES = "passes_without_patch"
KINDS = (ASSERTION, MISSING_NAME, OTHER, HARNESS_ERROR, PASSES)
ACCEPTED = (ASSERTION, MISSING_NAME, OTHER)
ASSERTION_TYPES = ("AssertionError", "Failed")  # Failed: pytest.fail() and pytest.raises' "DID NOT RAISE"

_DEFINED = re.compile(r"^\s*(?:async\s+def|def|class)\s+(?P<name>\w+)"
                      r"|^\s*(?:self\.)?(?P<target>\w+)\s*(?::[^=]*)?=(?!=)")
_IMPORTED = re.compile(r"^\s*(?:from\s+\S+\s+)?import\s+(?P<names>[\w., ]+)$")


@contextmanager
def declarations_tree(*, context: Context) -> Iterator[Path]:
    """Stock sglang plus the environ.py part of every patch (series order) and the generated
    guards module of every feature; yields the directory to put on PYTHONPATH."""
    series = context.series
    cache = context.upstream
    base = cache.ensure(series.upstream)
    environ = environ_path(series)
    with temporary_worktree(cache, purpose="declarations") as dest, \
            tempfile.TemporaryDirectory(prefix="forkbuild-environ-") as parts:
        engine = Engine(cache.git().add_worktree(dest, base))
        for entry in series.patches:
            part = only_files(read_text(entry.path), {environ})  # only the environ part
            if part is None:
                continue
            job = PatchJob(name=entry.file, path=Path(parts) / entry.file)
            job.path.write_text(part, encoding="utf-8", errors="surrogateescape")
            result = engine.run([job], stop=False)[0]
            if result.outcome not in (Outcome.EXACT, Outcome.OFFSET):  # as it is, never merged
                raise ApplyError(f"patches/{entry.file}: its {environ} part does not apply on upstream plus "
                                 f"the declarations of the patches before it: {result.detail}",
                                 hint="run `forkbuild check`; the feature patches must apply on the guards "
                                      "patch and each other in series order")
        engine.finish()
        write_module(dest, series=series, features=series.features)
        yield dest / series.upstream.package_root


def run_proof(*, context: Context, stock: TestPython, pool: Executor, shards: int = 1) -> list[Record]:
    """The *_unpatched records: `stock` runs the tests on plain stock sglang; both runs go to
    `pool`, the long one on the declarations as `shards` pytest processes."""
    series = context.series
    # Features without guards of their own make the guard machinery: proven on plain stock.
    plain = [name for name, feature in series.features.items() if not feature.guards]
    added = {name: added_names(series, name) for name in series.features}
    # The other features' tests skip on plain stock (not claimed): they are proven on the declarations.
    on_stock = pool.submit(behaviour.run_tests, context=context, python=stock, features=",".join(plain),
                           markers="guard_on") if plain else None
    try:
        with declarations_tree(context=context) as declared:
            python = TestPython(executable=stock.executable, env={"PYTHONPATH": str(declared)})
            raw = pool.submit(behaviour.run_tests, context=context, python=python, features=",".join(series.features),
                              markers="guard_on or guard_off", shards=shards).result()
        guarded = [item for item in raw if not (item["check"] == GUARD_ON and item["feature"] in plain)]
        declared_records = proof_records(guarded, added=added, on="stock sglang + guard declarations")
    except ApplyError as error:
        reason = f"not run: {error.message.splitlines()[0]}"
        declared_records = [Record(feature=name, check=check, outcome=FAIL, reason=reason)
                            for name in series.features for check in (GUARD_OFF_UNPATCHED, GUARD_ON_UNPATCHED)]
    plain_records = proof_records([item for item in on_stock.result() if item["feature"] in plain], added=added,
                                  on="stock sglang") if on_stock else []
    return plain_records + declared_records


def added_names(series: Series, feature: str) -> set[str]:
    """Names `feature`'s patches define (functions, classes, assignments,
    imports) and the modules they add (dotted, and the last part alone)."""
    names: set[str] = set()
    for entry in series.patches:
        if entry.feature != feature:
            continue
        _, payload = split_mail(entry.path.read_text(encoding="utf-8", errors="surrogateescape"))
        for patched in parse_diff(payload):
            if patched.is_added_file and patched.path.endswith(".py"):
                names |= _module_names(patched.path, package_root=series.upstream.package_root)
            for hunk in patched:
                for line in hunk:
                    if line.is_added:
                        names |= _defined(line.value)
    return names


def _module_names(path: str, *, package_root: str) -> set[str]:
    parts = PurePosixPath(path).relative_to(package_root).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return {".".join(parts), parts[-1]}


def _defined(line: str) -> set[str]:
    match = _DEFINED.match(line)
    if match:
        return {match["name"] or match["target"]}
    imported = _IMPORTED.match(line)
    if imported:
        # "a as b, c": the names bound are the last word of each part.
        return {part.split()[-1] for part in imported["names"].split(",") if part.strip()}
    return set()


def judge(item: dict, *, added: set[str]) -> tuple[str, str]:
    """(kind, why) of a guard_on test that ran without its patch."""
    if item["outcome"] == PASS:
        return PASSES, "passes without the patch: it does not detect a missing patch"
    exception = item.get("exception") or {}
    if not exception:
        return HARNESS_ERROR, f"harness error: no exception recorded for the failure ({item['reason']})"
    raised = f"{exception['type']}: {exception['message']}"
    missing = exception.get("missing") or ""
    if missing.startswith(GUARD_PREFIX):
        return HARNESS_ERROR, (f"harness/test error: fails on the undeclared guard {missing} ({raised}), "
                               "before reaching any behaviour")
    if exception["type"] in ASSERTION_TYPES:
        return ASSERTION, f"fails on an assertion: {raised}"
    # ModuleNotFoundError may name a new package above the new module.
    if missing and (missing in added or any(name.startswith(f"{missing}.") for name in added)):
        return MISSING_NAME, f"fails on {missing}, which the patch adds: {raised}"
    return OTHER, f"fails on {exception['type']} (not an assertion, not a name the patch adds): {raised}"


def proof_records(raw: list[dict], *, added: dict[str, set[str]], on: str) -> list[Record]:
    records = []
    for item in raw:
        exception = behaviour.exception_text(item)
        if item["check"] == GUARD_ON and item["outcome"] != SKIP:
            kind, why = judge(item, added=added.get(item["feature"], set()))
            outcome = PASS if kind in ACCEPTED else FAIL
            records.append(Record(feature=item["feature"], check=GUARD_ON_UNPATCHED, outcome=outcome,
                                  reason=f"{why} (on {on})", test=item["test"], exception=exception, proof=kind))
        elif item["check"] in (GUARD_ON, GUARD_OFF):
            check = GUARD_ON_UNPATCHED if item["check"] == GUARD_ON else GUARD_OFF_UNPATCHED
            records.append(Record(feature=item["feature"], check=check, outcome=item["outcome"],
                                  reason=f"{item['reason']} (on {on})" if item["reason"] else f"on {on}",
                                  test=item["test"], exception=exception))
    return records


def counts(records: list[Record]) -> dict:
    """How the guard_on tests fared without their patches, overall and per feature."""
    proven = [record for record in records if record.check == GUARD_ON_UNPATCHED]
    total = Counter(record.proof or record.outcome for record in proven)
    by_feature: dict[str, Counter] = {}
    for record in proven:
        by_feature.setdefault(record.feature, Counter())[record.proof or record.outcome] += 1
    return {"guard_on_tests": len(proven), **{kind: total[kind] for kind in (*KINDS, SKIP, FAIL)},
            "by_feature": {feature: dict(counter) for feature, counter in by_feature.items()}}


def sentence(numbers: dict) -> str:
    """One line for the console and the JSON: '139 guard_on tests without their patches: ...'."""
    parts = [f"{numbers[ASSERTION]} fail on assertions", f"{numbers[MISSING_NAME]} on missing patch-added names",
             f"{numbers[OTHER]} on other exceptions", f"{numbers[HARNESS_ERROR]} harness/test errors",
             f"{numbers[PASSES]} pass without the patch"]
    if numbers[SKIP]:
        parts.append(f"{numbers[SKIP]} skipped")
    if numbers[FAIL]:
        parts.append(f"{numbers[FAIL]} not run")
    return f"{numbers['guard_on_tests']} guard_on tests without their patches: " + ", ".join(parts)


def summary_row(numbers: dict) -> dict:
    """The counts as one more record of the variant's JSON report."""
    outcome = FAIL if numbers[HARNESS_ERROR] or numbers[PASSES] or numbers[FAIL] else PASS
    return {"feature": "", "check": "proof", "outcome": outcome, "reason": sentence(numbers), "counts": numbers,
            "details": []}
