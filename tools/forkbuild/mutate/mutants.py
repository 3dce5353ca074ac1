"""The mutants of a patch: per hunk that changes code (its revert changes the module's syntax
tree, docstrings left out), that hunk reverted in the installed module, and for a hunk adding
several statements one per statement, replaced with `pass`. A hunk's post-image is found in the
installed file by content (later patches may have moved it), nearest to where the hunk says."""

from __future__ import annotations

import ast
import difflib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath

import unidiff

from forkbuild.errors import MutationError
from forkbuild.series.config import PatchEntry
from forkbuild.series.patchfile import parse_diff, split_mail

HUNK = "hunk"
STATEMENT = "statement"

# Why a hunk yields no mutant (listed in the report, not counted).
NO_CODE = "changes no code (comments, docstrings or layout only)"
NOT_PYTHON = "not a Python module"
DELETED_FILE = "deletes a file: nothing installed to mutate"


@dataclass(frozen=True)
class Mutant:
    id: str  # "<module path>:h<hunk>" or "…:h<hunk>.s<statement>"; stable while the patch is unchanged
    patch: str
    feature: str
    path: str  # in site-packages: sglang/srt/…/x.py
    kind: str  # HUNK | STATEMENT
    lines: tuple[int, int]  # first and last line of the installed file it touches
    summary: str  # the first changed line, for people reading the report
    source: str | None  # the mutated module's text; None: the module is removed

    @property
    def module(self) -> str:
        parts = PurePosixPath(self.path).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@dataclass(frozen=True)
class Skipped:  # a hunk that yields no mutant, and why
    id: str
    summary: str
    why: str


def mutants_of(entry: PatchEntry, *, package_root: str,
               installed: Callable[[str], str | None]) -> tuple[list[Mutant], list[Skipped]]:
    """`installed(path)`: the text of site-packages/<path>, None when it is not installed."""
    _, payload = split_mail(entry.path.read_text(encoding="utf-8", errors="surrogateescape"))
    try:
        patch = parse_diff(payload)
    except unidiff.UnidiffParseError as error:
        raise MutationError(f"patches/{entry.file}: unidiff cannot read it: {error}") from error
    mutants: list[Mutant] = []
    skipped: list[Skipped] = []
    for patched in patch:
        path = str(PurePosixPath(patched.path).relative_to(package_root))
        for number, hunk in enumerate(patched, start=1):
            hunk_id = f"{path}:h{number}"
            if why := NOT_PYTHON if not path.endswith(".py") else DELETED_FILE if patched.is_removed_file else "":
                skipped.append(Skipped(hunk_id, _first_change(hunk), why))
                continue
            text = installed(path)
            if text is None:
                raise MutationError(f"patches/{entry.file}: {path} is not installed in the test venv",
                                    hint="install the variant's wheel: `nox -s \"test-patch(<variant>)\"`")
            found = list(_hunk_mutants(entry, hunk, hunk_id=hunk_id, path=path, text=text,
                                       new_file=patched.is_added_file))
            if not found:
                skipped.append(Skipped(hunk_id, _first_change(hunk), NO_CODE))
            mutants += found
    return mutants, skipped


def _hunk_mutants(entry: PatchEntry, hunk: unidiff.Hunk, *, hunk_id: str, path: str, text: str,
                  new_file: bool) -> Iterator[Mutant]:
    lines = text.splitlines(keepends=True)
    found = _revert(hunk, lines, new_file=new_file)
    if found is None:
        raise MutationError(f"patches/{entry.file}: hunk {hunk_id} ({hunk.section_header or 'no header'}) "
                            "is not found in the installed file",
                            hint="the installed sglang is not this series' build: re-run "
                                 "`nox -s \"test-patch(<variant>)\"`")
    try:
        patched_tree = ast.parse(text)
    except SyntaxError as error:
        raise MutationError(f"patches/{entry.file}: the installed {path} does not parse: {error}") from error
    added, span, reverted = found
    if _code_of(reverted or "") == _code_of(text):  # (a new module of) comments, docstrings, layout only
        return
    yield Mutant(hunk_id, entry.file, entry.feature, path, HUNK, span, _first_change(hunk), reverted)
    statements = list(_added_statements(patched_tree.body, set(added)))
    if len(statements) < 2:
        return
    for number, statement in enumerate(statements, start=1):
        first, last = statement.lineno - 1, (statement.end_lineno or statement.lineno) - 1
        head = lines[first][:statement.col_offset]
        tail = lines[last][statement.end_col_offset:] if statement.end_col_offset is not None else "\n"
        source = "".join(lines[:first] + [f"{head}pass{tail}"] + lines[last + 1:])  # the statement replaced
        if source != reverted:
            yield Mutant(f"{hunk_id}.s{number}", entry.file, entry.feature, path, STATEMENT, (first + 1, last + 1),
                         lines[first].strip()[:120], source)


def _revert(hunk: unidiff.Hunk, lines: list[str], *,
            new_file: bool) -> tuple[frozenset[int], tuple[int, int], str | None] | None:
    """The hunk undone in the installed file: its added lines' numbers there, the first and last
    line it covers, the text reverted (None: the module removed); None when it is not found."""
    if new_file:
        return frozenset(range(1, len(lines) + 1)), (1, max(len(lines), 1)), None
    where = _locate(hunk, lines)
    if where is None:
        return None
    deleted = {index for line, index in where if line.is_added and index is not None}
    inserted: dict[int, list[str]] = {}
    pending: list[str] = []  # removed lines waiting for the next located post-image line
    last = None
    for line, index in where:
        if line.is_removed:
            pending.append(line.value)
        elif index is not None:
            inserted.setdefault(index, []).extend(pending)
            pending, last = [], index
    if pending:
        inserted.setdefault((last + 1) if last is not None else 0, []).extend(pending)
    out: list[str] = []
    for index in range(len(lines) + 1):
        out += inserted.get(index, [])
        if index < len(lines) and index not in deleted:
            out.append(lines[index])
    located = [index for _, index in where if index is not None]
    return frozenset(index + 1 for index in deleted), (min(located) + 1, max(located) + 1), "".join(out)


def _locate(hunk: unidiff.Hunk, lines: list[str]) -> list[tuple[unidiff.patch.Line, int | None]] | None:
    """Each line of the hunk with its index in the installed file (None for a removed line, or a
    context line a later patch changed). Later patches may have moved the hunk or added lines
    inside it (a section it opens that others fill): every added line must be found, in order."""
    post = [line for line in hunk if not line.is_removed]
    values = [line.value for line in post]
    hits = [index for index in range(len(lines) - len(values) + 1) if lines[index:index + len(values)] == values]
    if hits:
        exact = min(hits, key=lambda index: abs(index - (hunk.target_start - 1)))  # nearest to where it says
        mapping = {position: exact + position for position in range(len(post))}
    else:
        matcher = difflib.SequenceMatcher(None, values, lines, autojunk=False)
        mapping = {a + k: b + k for a, b, size in matcher.get_matching_blocks() for k in range(size)}
        wanted = [position for position, line in enumerate(post) if line.is_added] or list(range(len(post)))
        if not mapping or not all(position in mapping for position in wanted):
            return None
        found = sorted(mapping.values())
        if found[-1] - found[0] > 4 * len(post) + 200:  # scattered matches: not this hunk
            return None
    positions = iter(range(len(post)))
    return [(line, None if line.is_removed else mapping.get(next(positions))) for line in hunk]


def _code_of(text: str) -> str:
    """The syntax tree without docstrings, as text: equal for sources differing only in comments and layout."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return "<syntax error>"
    for node in ast.walk(tree):
        if isinstance(node, _DOCUMENTED) and node.body and _is_docstring(node.body[0]):
            node.body = node.body[1:] or ([] if isinstance(node, ast.Module) else [ast.Pass()])
    return ast.dump(tree)


_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _bodies(statement: ast.stmt) -> Iterator[list[ast.stmt]]:
    """The statement lists inside a compound statement (if, for, try, with, match ...)."""
    for name in ("body", "orelse", "finalbody"):
        yield getattr(statement, name, None) or []
    for inner in (*getattr(statement, "handlers", ()), *getattr(statement, "cases", ())):
        yield inner.body


def _added_statements(body: list[ast.stmt], added: set[int]) -> Iterator[ast.stmt]:
    """The outermost statements made of added lines only, in order. An added def or class gives
    its body's: removing a whole new function only proves that something calls it."""
    for statement in body:
        if not set(range(statement.lineno, (statement.end_lineno or statement.lineno) + 1)) <= added:
            for inner in _bodies(statement):
                yield from _added_statements(inner, added)
        elif isinstance(statement, _DOCUMENTED):
            yield from _added_statements(statement.body[_is_docstring(statement.body[0]):], added)
        elif not _is_docstring(statement) and not isinstance(statement, ast.Pass):
            yield statement


def _first_change(hunk: unidiff.Hunk) -> str:
    return next((f"{'+' if line.is_added else '-'} {line.value.strip()}"[:120] for line in hunk
                 if (line.is_added or line.is_removed) and line.value.strip()), "")
