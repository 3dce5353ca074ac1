"""mutation/results.json and mutation/reasons.toml (why a survivor may stay), reviewed like code.
A patch's results are current while its key holds: the hash of the patch, its feature's tests,
the shared test files and the upstream pin."""

from __future__ import annotations

import ast
import hashlib
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path

from forkbuild.config import PatchEntry, Series
from forkbuild.errors import MutationError
from forkbuild.fsutil import write_atomic

RESULTS_FILE = Path("mutation") / "results.json"
REASONS_FILE = Path("mutation") / "reasons.toml"
TESTS_DIR = Path("tests") / "patches"
FORMAT = 1

KILLED = "killed"
SURVIVED = "survived"


def feature_of_test(path: Path) -> str | None:
    """The FEATURE = "..." constant of a test module, read without importing it."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except SyntaxError as error:
        raise MutationError(f"{path}: does not parse: {error}") from error
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "FEATURE" for t in node.targets) \
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return node.value.value
    return None


def feature_tests(root: Path, feature: str) -> list[Path]:
    return sorted(path for path in (root / TESTS_DIR).glob("test_*.py") if feature_of_test(path) == feature)


def patch_key(series: Series, entry: PatchEntry) -> str:
    root = series.root
    digest = hashlib.sha256()
    pin = [series.upstream.name, series.upstream.version, *(wheel.sha256 for wheel in series.upstream.wheels)]
    digest.update(("\0".join(pin) + "\n").encode())
    # What every feature's tests load: conftest.py and the other modules that are not test files.
    shared = sorted(path for path in (root / TESTS_DIR).glob("*.py") if not path.name.startswith("test_"))
    for path in [entry.path, *feature_tests(root, entry.feature), *shared]:
        digest.update(f"{path.relative_to(root)}\n".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def load(root: Path) -> dict:
    path = root / RESULTS_FILE
    if not path.is_file():
        return {"format": FORMAT, "variants": {}}
    hint = "restore it from git, or delete it and run `nox -s mutate`"
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise MutationError(f"{RESULTS_FILE}: not valid JSON: {error}", hint=hint) from error
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("variants"), dict):
        raise MutationError(f"{RESULTS_FILE}: not a format-{FORMAT} results file", hint=hint)
    return data


def write(root: Path, data: dict) -> None:
    """Atomically: a killed run leaves the old file or the new one."""
    (root / RESULTS_FILE).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(root / RESULTS_FILE, json.dumps(data, indent=1, sort_keys=True) + "\n")


# The id of a reason why a patch has no results at all: --check accepts the gap only with it.
NOT_RUN = "*"


@dataclass(frozen=True)
class Reasons:
    by_patch: dict[str, dict[str, str]]  # patch file -> mutant id -> one-line reason

    def of(self, patch: str, mutant_id: str) -> str:
        return self.by_patch.get(patch, {}).get(mutant_id, "")


def load_reasons(root: Path) -> Reasons:
    """mutation/reasons.toml: one table per patch file, mutant id = "reason"."""
    path = root / REASONS_FILE
    if not path.is_file():
        return Reasons({})
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise MutationError(f"{REASONS_FILE}: {error}") from error
    problems = []
    by_patch: dict[str, dict[str, str]] = {}
    for patch, table in raw.items():
        if not isinstance(table, dict):
            problems.append(f"{patch}: expected a table [\"{patch}\"] of mutant id = \"reason\"")
            continue
        for mutant_id, reason in table.items():
            if not isinstance(reason, str) or not reason.strip() or "\n" in reason.strip():
                problems.append(f"[\"{patch}\"] {mutant_id}: the reason must be one non-empty line")
            else:
                by_patch.setdefault(patch, {})[mutant_id] = reason.strip()
    if problems:
        raise MutationError(f"{REASONS_FILE}: " + "; ".join(problems))
    return Reasons(by_patch)
