"""mutation/results.json and mutation/reasons.toml (why a survivor may stay). A patch's results are
current while its key (patch, its feature's tests, shared test files, upstream pin) holds. A reason
follows its statement when an edit renumbers it: a run records the moves ("reasons_moved"), then
applies them to reasons.toml; one a kill left recorded is named by --check and applied next run."""

from __future__ import annotations

import ast
import hashlib
import json
import tomllib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from forkbuild.errors import MutationError, quoted
from forkbuild.io.fsutil import write_atomic
from forkbuild.series.config import PatchEntry, Series

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
    return next((node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 and any(isinstance(target, ast.Name) and target.id == "FEATURE" for target in node.targets)
                 and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)), None)


def feature_tests(root: Path, feature: str) -> list[Path]:
    return sorted(path for path in (root / TESTS_DIR).glob("test_*.py") if feature_of_test(path) == feature)


def patch_key(series: Series, entry: PatchEntry) -> str:
    root = series.root
    digest = hashlib.sha256()
    # The release wheels of the platform upstream is imported from (the first pin's): the mutants
    # run on those .py files, which every platform's wheel shares (another platform's pin added
    # or moved leaves the results current; a new release, or a moved pin of that platform, does not).
    imported = series.upstream.wheels[0].platform if series.upstream.wheels else ""
    pin = [series.upstream.name, series.upstream.version,
           *(wheel.sha256 for wheel in series.upstream.wheels if wheel.platform == imported)]
    digest.update(("\0".join(pin) + "\n").encode())
    # What every feature's tests load: conftest.py and the other modules that are not test files.
    shared = sorted(path for path in (root / TESTS_DIR).glob("*.py") if not path.name.startswith("test_"))
    # The patch's diff, not its message: mutants are made of the diff, and a header line (provenance,
    # wording) changes nothing a test sees.
    patch = entry.path.read_bytes()
    start = patch.find(b"\ndiff --git ")
    digest.update(f"{entry.path.relative_to(root)}\n".encode())
    digest.update(hashlib.sha256(patch[start + 1:] if start >= 0 else patch).digest())
    for path in [*feature_tests(root, entry.feature), *shared]:
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
    except ValueError as error:  # not JSON, or not UTF-8 text
        raise MutationError(f"{RESULTS_FILE}: not valid JSON: {error}", hint=hint) from error
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("variants"), dict):
        raise MutationError(f"{RESULTS_FILE}: not a format-{FORMAT} results file", hint=hint)
    return data


def write(root: Path, data: dict) -> None:
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
    except ValueError as error:  # not TOML, or not UTF-8 text
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


MOVED = "reasons_moved"


def _identity(mutant: dict) -> tuple[str, str, str]:
    return mutant["path"], mutant["kind"], mutant["summary"]


def _survivors(mutants: list[dict], keep) -> dict[tuple, list[str]]:
    """The ids of the survivors `keep` accepts, by identity, in order."""
    grouped: dict[tuple, list[str]] = {}
    for mutant in mutants:
        if mutant["status"] == SURVIVED and keep(mutant):
            grouped.setdefault(_identity(mutant), []).append(mutant["id"])
    return grouped


def follow(previous: list[dict], current: list[dict], reasons: dict[str, str]) -> dict[str, str]:
    """old id -> new id for each reason (one patch's table) of `previous`'s survivors whose
    statement (same path, kind and text) survives in `current` under another id."""
    staying = {(mutant["id"], _identity(mutant)) for mutant in current if mutant["status"] == SURVIVED}
    olds = _survivors(previous, lambda mutant: mutant["id"] in reasons
                      and (mutant["id"], _identity(mutant)) not in staying)
    leaving = {old for ids in olds.values() for old in ids}
    # A survivor is open to a moved reason when it has none, or its own is moving away.
    news = _survivors(current, lambda mutant: mutant["id"] not in reasons or mutant["id"] in leaving)
    # Only a one-to-one pairing is sure (three `try:` that became two: which went?).
    return {old: new for identity, old_ids in olds.items() if len(news.get(identity, [])) == len(old_ids)
            for old, new in zip(old_ids, news[identity], strict=True) if old != new}


def pending(recorded_moves: dict[str, dict[str, str]], table: dict[str, str]) -> dict[str, str]:
    """old id -> new id of the recorded moves not yet applied to one patch's reasons `table`:
    the old id still holds the reason moved, and the new id none, or one moving away itself."""
    result = {old: move["id"] for old, move in recorded_moves.items() if table.get(old) == move["reason"]}
    while blocked := {old for old, new in result.items() if new in table and new not in result}:
        for old in blocked:
            del result[old]
    return result


def apply_moves(root: Path, recorded: dict) -> list[tuple[str, str, str]]:
    """The pending moves of one variant's records applied to reasons.toml in one atomic write."""
    import tomlkit

    # Read as --check reads it first: a broken file stops here, named, before any edit.
    by_patch = load_reasons(root).by_patch
    found = {file: moves for file, record in recorded.items()
             if (moves := pending(record.get(MOVED, {}), by_patch.get(file, {})))}
    if not found:
        return []
    path = root / REASONS_FILE
    document = tomlkit.parse(path.read_text(encoding="utf-8"))
    applied = []
    for file, moves in found.items():
        table = document[file]
        texts = {old: table.pop(old) for old in moves}
        for old, new in moves.items():
            table[new] = texts[old]
            applied.append((file, old, new))
    write_atomic(path, tomlkit.dumps(document))
    return applied


def problems(series: Series, results: dict, reasons: Reasons) -> list[str]:
    found: list[str] = []
    variants = results["variants"]
    if series.default_variant not in variants:
        found.append(f"{RESULTS_FILE}: no results for the default variant {series.default_variant}: "
                     f"run `nox -s mutate`")
    known_ids: defaultdict[str, set[str]] = defaultdict(set)
    survived_ids: defaultdict[str, set[str]] = defaultdict(set)
    moving: defaultdict[str, dict[str, str]] = defaultdict(dict)  # per patch: reasons moved, not written yet
    for variant, recorded in sorted(variants.items()):
        if variant not in series.variants:
            found.append(f"{RESULTS_FILE}: variant {variant} is not in series.toml")
            continue
        patches = recorded.get("patches", {})
        entries = {entry.file: entry for entry in series.patches_for(variant)}
        for file in sorted(set(patches) - set(entries)):
            found.append(f"{RESULTS_FILE}: {variant}: {file} is not a patch of the variant any more: "
                         f"run `nox -s mutate -- --variant {variant}` to drop it")
        for file, entry in entries.items():
            rerun = f"`nox -s mutate -- --variant {variant} --patch {quoted(file)}`"
            if file not in patches:
                if not reasons.of(file, NOT_RUN):  # a recorded reason why it has none (the report prints it)
                    found.append(f"{variant}: patches/{file} has no mutation results: run {rerun}")
                continue
            record = patches[file]
            moved = pending(record.get(MOVED, {}), reasons.by_patch.get(file, {}))
            moving[file].update(moved)
            summaries = {mutant["id"]: mutant["summary"] for mutant in record.get("mutants", [])}
            for old, new in sorted(moved.items()):
                found.append(f"{REASONS_FILE}: [\"{file}\"] {old}: its statement ({summaries.get(new, '?')}) is "
                             f"mutant {new} now: {rerun} moves the reason (no mutant runs while the results are "
                             f"current)")
            if record.get("key") != patch_key(series, entry):
                found.append(f"{variant}: patches/{file}: results are stale (the patch, its feature's tests or "
                             f"the upstream pin changed): run {rerun}")
            for mutant in record.get("mutants", []):
                known_ids[file].add(mutant["id"])
                if mutant["status"] != SURVIVED:
                    continue
                survived_ids[file].add(mutant["id"])
                if not reasons.of(file, mutant["id"]) and mutant["id"] not in moving[file].values():
                    found.append(f"{variant}: patches/{file}: mutant {mutant['id']} ({mutant['summary']}) survived "
                                 f"and {REASONS_FILE} records no reason: kill it with a test through the real "
                                 f"call site, or add [\"{file}\"] \"{mutant['id']}\" = \"why\"")
    recorded_files = {file for variant in variants.values() for file in variant.get("patches", {})}
    for file, table in sorted(reasons.by_patch.items()):
        if file not in recorded_files:
            continue  # no results yet: reported above; its reasons are judged once it has them
        for mutant_id in sorted(set(table) - set(moving[file])):  # a move is named above
            if mutant_id == NOT_RUN:
                found.append(f"{REASONS_FILE}: [\"{file}\"] \"{NOT_RUN}\": the patch has results now; remove it")
            elif mutant_id not in known_ids[file]:
                found.append(f"{REASONS_FILE}: [\"{file}\"] {mutant_id}: no such mutant in {RESULTS_FILE}")
            elif mutant_id not in survived_ids[file]:
                found.append(f"{REASONS_FILE}: [\"{file}\"] {mutant_id}: is killed now; remove its reason")
    return found
