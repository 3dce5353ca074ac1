"""The Python-aware porter: what git's rungs stop on, hunk by hunk, accepted only where the code's
structure says the hunk landed where it belongs.

Each hunk of a failing `.py` file is tried alone on the new release's file (as far as the hunks
before it were ported), rung by rung: git apply with its full context (at any offset), a 3-way
merge of that hunk alone (`git merge-file`), git apply with 2 and then 1 line of context, and for a
hunk that only adds imports, insertion after the import of the same package. A candidate is
accepted only if all hold:

- placement: its added (or removed) lines sit in the same class/function, by qualified name
  (`ast`), as on the old release;
- the module compiles;
- no undefined name it did not have before (pyflakes);
- every attribute its added lines name (`envs.X`, an enum member, a server-args option) exists in
  the new release, or is one the patch itself adds.

A hunk whose distinctive context and removed lines are nowhere in the new release's file (or
whose file is gone) is "moot": proposed for dropping with that evidence, never dropped silently.
"""

from __future__ import annotations

import ast
import builtins
import copy
import difflib
import functools
import gc
import re
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from pyflakes import checker, messages

from forkbuild.io.git import Git
from forkbuild.series.patchfile import FileDiff, Hunk, file_diffs

IMPORT_LINE = re.compile(r"^(?:from\s+(?P<from>[\w.]+)\s+import\b|import\s+(?P<import>[\w.]+))")
DISTINCTIVE = re.compile(r"\w{3}")  # a line worth anchoring on: some word, not just brackets
DEFINED = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+(\w+)", re.MULTILINE)
ASSIGNED = re.compile(r"^\s*(?:self\.)?(\w+)\s*(?::[^=\n]*)?=(?!=)", re.MULTILINE)
OPTION = re.compile(r"[\"']--([\w-]+)[\"']")
STATEMENT_LISTS = ("body", "orelse", "finalbody", "handlers", "cases")  # the fields of a node that hold statements
BINDS = re.compile(r"^\s*(?:import\s|from\s|def\s|async\s+def\s|class\s|global\s|nonlocal\s|[\w.,\s*()\[\]]+=(?!=)|for\s|with\s)")


@dataclass(frozen=True, kw_only=True)
class HunkPort:
    """What the porter did with one hunk."""

    file: str
    hunk: int  # 1-based within its file
    status: str  # "ported", "moot", "failed" or "not tried" (after one that failed)
    rung: str = ""  # the rung that placed it (Porter._rungs' names; "+ import" where one was brought along)
    place: str = ""  # its class/function by qualified name, "<module>" at the top level
    checks: str = ""  # what was verified, or why every rung was refused

    def describe(self) -> str:
        where = f"{self.file} hunk {self.hunk}"
        if self.status == "ported":
            return f"{where}: ported ({self.rung}) in {self.place}; {self.checks}"
        return f"{where}: {self.status}: {self.checks}"


@dataclass(frozen=True, kw_only=True)
class Port:
    """The porter's result for one patch: the new content of each file it changes (None: deleted)."""

    files: dict[str, str | None]
    hunks: tuple[HunkPort, ...]

    @property
    def moot(self) -> tuple[HunkPort, ...]:
        return tuple(hunk for hunk in self.hunks if hunk.status == "moot")

    @property
    def failed(self) -> tuple[HunkPort, ...]:
        return tuple(hunk for hunk in self.hunks if hunk.status == "failed")


@functools.lru_cache(maxsize=16)
def _tree(text: str) -> ast.Module | None:
    """`text` parsed once (every check of a candidate reads the same tree); None: a syntax error."""
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


@functools.lru_cache(maxsize=64)
def _spans(text: str) -> tuple[tuple[int, int, str], ...] | None:
    """(first line, last line, qualified name) of every class and function of `text`; None: no parse.
    Only statements are walked: a def is one (expressions, most of a module, are skipped)."""
    tree = _tree(text)
    if tree is None:
        return None
    spans: list[tuple[int, int, str]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for field in STATEMENT_LISTS:  # statements hold statements only in these (an expression holds none)
            for child in getattr(node, field, ()):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    start = min([decorator.lineno for decorator in child.decorator_list] + [child.lineno])
                    spans.append((start, child.end_lineno or child.lineno, prefix + child.name))
                    walk(child, f"{prefix}{child.name}.")
                else:
                    walk(child, prefix)

    walk(tree, "")
    return tuple(spans)


def places(text: str, lines: Iterable[int]) -> set[str] | None:
    """The qualified names of the innermost class/function holding each of `lines`; None: no parse."""
    spans = _spans(text)
    if spans is None:
        return None
    found = set()
    for line in lines:
        holding = [span for span in spans if span[0] <= line <= span[1]]
        found.add(max(holding)[2] if holding else "<module>")
    return found


def qualified_names(text: str) -> set[str]:
    """Every class and function of `text` by qualified name (empty when it does not parse)."""
    return {name for _, _, name in _spans(text) or ()}


@functools.lru_cache(maxsize=64)
def undefined_names(text: str, path: str, keep: frozenset[str] | None = None) -> frozenset[str]:
    """The undefined names pyflakes finds in `text` (a module that parses); with `keep` (qualified
    names), in its statements with every function and class not in `keep` reduced to a stub that
    keeps its name bound (a quarter second becomes a few milliseconds on a large module)."""
    tree = _tree(text) or ast.parse(text)
    if keep is not None:
        tree = ast.Module(body=[_stubbed(node, keep, "") for node in tree.body], type_ignores=[])
    found = checker.Checker(tree, filename=path).messages
    return frozenset(message.message_args[0] for message in found
                     if isinstance(message, (messages.UndefinedName, messages.UndefinedLocal)))


def _stubbed(node: ast.stmt, keep: frozenset[str], prefix: str) -> ast.stmt:
    """`node` with each function and class not in `keep` a stub; a kept class's members likewise (a
    method's names are its own: the class's scope is not theirs)."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node
    name = prefix + node.name
    if name in keep and not isinstance(node, ast.ClassDef):
        return node
    node = copy.copy(node)
    node.body = [_stubbed(child, keep, name + ".") for child in node.body] if name in keep \
        else [ast.copy_location(ast.Pass(), node)]
    return node


def new_undefined(before: str | None, after: str, path: str) -> frozenset[str]:
    """Names `after` leaves undefined that `before` did not: both checked on the functions and methods
    the change touches (and every other statement outside a function), or whole where it removes a
    line at the module's top level that may bind a name others use."""
    after_tree = _tree(after)
    if after_tree is None:
        return frozenset()
    if before is None or _tree(before) is None:
        return undefined_names(after, path)
    added, removed = _changed_lines(before, after)
    old_lines = before.splitlines()
    keep: frozenset[str] | None = None
    if not any(BINDS.search(old_lines[number - 1]) and not old_lines[number - 1][:1].isspace() for number in removed):
        keep = frozenset(_holding(after_tree.body, added, "") | _holding(_tree(before).body, removed, ""))  # type: ignore[union-attr]
    return undefined_names(after, path, keep) - undefined_names(before, path, keep)


def _holding(nodes: list[ast.stmt], lines: Sequence[int], prefix: str) -> set[str]:
    """The qualified names of the functions and classes among `nodes` (and the members of such a
    class) that hold any of `lines`."""
    found = set()
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and \
                any(node.lineno <= line <= (node.end_lineno or node.lineno) for line in lines):
            found.add(prefix + node.name)
            if isinstance(node, ast.ClassDef):
                found |= _holding(node.body, lines, f"{prefix}{node.name}.")
    return found


@functools.lru_cache(maxsize=16)
def _changed_lines(before: str, after: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """1-based lines `after` adds and lines of `before` it removes (non-blank ones)."""
    old, new = before.splitlines(), after.splitlines()
    head = 0  # a hunk changes one region: diff only what lies between the common head and tail
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    middle_old, middle_new = old[head:len(old) - tail], new[head:len(new) - tail]
    added, removed = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, middle_old, middle_new, autojunk=False).get_opcodes():
        if tag in ("insert", "replace"):
            added += [head + number + 1 for number in range(j1, j2) if middle_new[number].strip()]
        if tag in ("delete", "replace"):
            removed += [head + number + 1 for number in range(i1, i2) if middle_old[number].strip()]
    return tuple(added), tuple(removed)


class Porter:
    """Ports one patch's hunks onto `new_head` (the new release plus the patches ported so far)."""

    def __init__(self, repo: Git, *, old_commit: str, new_head: str, known: frozenset[str] = frozenset(),
                 renamed: Callable[[], Mapping[str, str]] = dict) -> None:
        """`known`: names that exist without being in the release's files (the series' guards: the
        generated guards module defines them); `renamed`: upstream's renames (old path -> new path),
        asked for only when a file the patch changes is not in the new release."""
        self.repo, self.old_commit, self.new_head, self.known = repo, old_commit, new_head, known
        self.renamed = renamed
        self.diff = repo.diff_tree_patch(old_commit)
        # Names the patch defines anywhere (an attribute its hunks reach for may be one of them): a def or
        # class, an assignment's target (an env setting, an enum member, `self.x = ...`), a `--an-option`.
        added = "\n".join(line[1:] for line in self.diff.splitlines() if line.startswith("+") and not line.startswith("+++"))
        self.own_words = {*DEFINED.findall(added), *ASSIGNED.findall(added),
                          *(option.replace("-", "_") for option in OPTION.findall(added))}
        self._modules: dict[str, set[str]] = {}  # the words of a module file of the new release, read once

    def port(self) -> Port:
        """Every hunk ported, or up to the first that cannot be (the patch then stops for a person:
        the hunks after it are "not tried")."""
        files: dict[str, str | None] = {}
        hunks: list[HunkPort] = []
        with _scratch() as scratch, _no_cycle_collection():
            for diff in file_diffs(self.diff):
                if any(hunk.status == "failed" for hunk in hunks):
                    hunks += [HunkPort(file=diff.path, hunk=number, status="not tried",
                                       checks="an earlier hunk of the patch cannot be placed")
                              for number in range(1, len(diff.hunks) + 1)]
                    continue
                target, content, ported = self._port_file(scratch, diff)
                files[target] = content
                hunks += ported
        return Port(files=files, hunks=tuple(hunks))

    def _port_file(self, scratch: Git, diff: FileDiff) -> tuple[str, str | None, list[HunkPort]]:
        """Where the file's hunks go (a file upstream renamed: its new name), its content then, each hunk's port."""
        target, current = diff.path, self.repo.file_at(self.new_head, diff.path)
        if current is None and not diff.created and diff.path in (renamed := self.renamed()):
            target, current = renamed[diff.path], self.repo.file_at(self.new_head, renamed[diff.path])
        return target, *self._port_hunks(scratch, diff, current)

    def _port_hunks(self, scratch: Git, diff: FileDiff, current: str | None) -> tuple[str | None, list[HunkPort]]:
        whole = _apply(scratch, diff, diff.hunks, current, context=3)
        if whole is not None:  # the file's hunks apply together as they are: git's own rung, for this file
            left = _new_undefined(current, whole[0], diff.path)
            return whole[0], [HunkPort(file=diff.path, hunk=number, status="failed" if left else "ported",
                                       rung="" if left else "context-3", place="(the file's diff as it is)",
                                       checks=f"applies as is, but leaves undefined: {', '.join(left)}" if left
                                       else "applies as is; no new undefined name")
                              for number in range(1, len(diff.hunks) + 1)]
        base = self.repo.file_at(f"{self.old_commit}^", diff.path)
        old = self.repo.file_at(self.old_commit, diff.path)
        if current is None or base is None or old is None or diff.deleted:
            reason = "its file is not in the new release" if current is None and not diff.created else \
                "a created or deleted file that does not apply as is"
            status = "moot" if current is None and not diff.created else "failed"
            return current, [HunkPort(file=diff.path, hunk=number, status=status, checks=reason)
                             for number in range(1, len(diff.hunks) + 1)]
        if not diff.path.endswith(".py"):
            return current, [HunkPort(file=diff.path, hunk=number, status="failed",
                                      checks="not a .py file: only Python is ported hunk by hunk")
                             for number in range(1, len(diff.hunks) + 1)]
        ported: list[HunkPort] = []
        start = current
        for number, hunk in enumerate(diff.hunks, start=1):
            if any(done.status == "failed" for done in ported):
                ported.append(HunkPort(file=diff.path, hunk=number, status="not tried",
                                       checks="an earlier hunk of the patch cannot be placed"))
                continue
            result, current = self._port_hunk(scratch, diff, number, hunk, base=base, old=old, current=current)
            ported.append(result)
        if any(done.status == "failed" for done in ported):
            return current, ported  # the patch stops for a person: no use checking the file further
        # A name one hunk uses and another defines passes hunk by hunk: the file as ported must define it,
        # and compile whole.
        left = sorted(new_undefined(start, current, diff.path))
        try:
            compile(current, diff.path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as error:
            left = [f"(it does not compile: {error})"]
        if left:
            reason = "the file as ported " + (left[0][1:-1] if left[0].startswith("(") else "leaves undefined: "
                                              + ", ".join(left))
            ported = [HunkPort(file=diff.path, hunk=hunk.hunk, status="failed", checks=reason)
                      if hunk.status == "ported" else hunk for hunk in ported]
        return current, ported

    def _port_hunk(self, scratch: Git, diff: FileDiff, number: int, hunk: Hunk, *, base: str, old: str,
                   current: str) -> tuple[HunkPort, str]:
        added_old = [line for line, (_, text) in zip(hunk.added_at(), [item for item in hunk.lines if item[0] == "+"], strict=True)
                     if text.strip()]
        removed_old = _removed_at(hunk)
        expected = places(old, added_old) if added_old else places(base, removed_old)
        anchors = [text.strip() for kind, text in hunk.lines if kind in " -" and DISTINCTIVE.search(text)]
        present = {line.strip() for line in current.splitlines()}
        # The class/function it belongs in was there before the patch and is gone from the new release
        # (one the hunk itself adds is not "gone").
        targets = (expected or set()) - {"<module>"}
        if targets and not targets & qualified_names(current) and targets <= qualified_names(base):
            return HunkPort(file=diff.path, hunk=number, status="moot",
                            checks=f"the new release's file has no {', '.join(sorted(targets))}, where it belongs"), current
        if not targets and anchors and not any(anchor in present for anchor in anchors):  # module level: by its lines
            return HunkPort(file=diff.path, hunk=number, status="moot",
                            checks="none of its context or removed lines is in the new release's file: "
                                   + "; ".join(f"`{anchor}`" for anchor in anchors[:3])), current
        refusals: dict[str, list[str]] = {}  # why a rung was refused -> the rungs
        for rung, attempt in self._rungs(scratch, diff, hunk, base=base, current=current):
            candidate = attempt()
            if candidate is None or candidate == current:
                continue
            problem = self._refuse(diff.path, hunk, current, candidate, expected=expected)
            missing = self._unimported(problem, old)
            if missing:  # the release's module lacks an import the old one had: add it to its siblings
                with_imports = insert_import_lines(missing, candidate)
                if with_imports is not None:
                    retried = self._refuse(diff.path, hunk, current, with_imports, expected=expected)
                    if retried is None:
                        rung, candidate, problem = f"{rung} + import", with_imports, None
            if problem is None:
                place = ", ".join(sorted(_landed(hunk, current, candidate) or {"?"}))
                return HunkPort(file=diff.path, hunk=number, status="ported", rung=rung, place=place,
                                checks="same place as on the old release; compiles; no new undefined name; "
                                       "every name it reaches for exists"), candidate
            refusals.setdefault(problem, []).append(rung)
        # One reason once, with every rung that gave it: "context-3, 3-way: lands in X, not in Y".
        return HunkPort(file=diff.path, hunk=number, status="failed", checks="; ".join(
            f"{', '.join(rungs)}: {problem}" for problem, rungs in refusals.items()) or "no rung places it"), current

    def _rungs(self, scratch: Git, diff: FileDiff, hunk: Hunk, *, base: str,
               current: str) -> Iterator[tuple[str, Callable[[], str | None]]]:
        def applied(context: int) -> str | None:
            found = _apply(scratch, diff, (hunk,), current, context=context)
            return found[0] if found else None

        def anchored(side: str) -> Callable[[], str | None]:  # one side's context kept, the other's let go
            return lambda: _apply_one_sided(scratch, diff, hunk, current, keep=side)

        yield "context-3", lambda: applied(3)
        yield "3-way", lambda: _merge_one(scratch, diff, hunk, base=base, current=current)
        yield "context-2", lambda: applied(2)
        yield "context-1", lambda: applied(1)
        yield "import", lambda: _insert_imports(hunk, current)
        yield "trailing anchor", anchored("trailing")
        yield "leading anchor", anchored("leading")

    def _refuse(self, path: str, hunk: Hunk, current: str, candidate: str, *, expected: set[str] | None) -> str | None:
        """Why `candidate` is not an acceptable port of `hunk`; None when it is."""
        tree = _tree(candidate)
        if tree is None:
            try:
                compile(candidate, path, "exec", dont_inherit=True)  # for git's own words about it
            except (SyntaxError, ValueError) as error:
                return f"does not compile ({error.msg if isinstance(error, SyntaxError) else error})"
            return "does not parse"
        added, removed = _changed_lines(current, candidate)
        landed = _landed(hunk, current, candidate)
        if expected is not None and landed != expected:
            return (f"lands in {', '.join(sorted(landed or {'?'}))}, "
                    f"not in {', '.join(sorted(expected))} as on the old release")
        try:  # what parsing leaves to the compiler, for the statements the hunk is in (the file: _port_file)
            compile(ast.Module(body=_touched(tree, set(added) | set(removed)), type_ignores=[]), path, "exec",
                    dont_inherit=True)
        except (SyntaxError, ValueError) as error:
            return f"does not compile ({error.msg if isinstance(error, SyntaxError) else error})"
        stray = _stray_import(candidate, added)
        if stray:
            return stray
        # pyflakes (a quarter second on a large module) only where a name on the added lines may be unbound;
        # _port_file checks the file as ported with pyflakes in any case.
        new_names: AbstractSet[str] = set()
        # (the patch's own names: checked on the file as ported, in _port_file)
        if _may_leave_undefined(candidate, hunk, set(added), bound=bound_names(current) | self.own_words):
            new_names = new_undefined(current, candidate, path) - self.own_words  # the patch's own: see _port_file
        if new_names:
            return "leaves undefined: " + ", ".join(sorted(new_names))
        missing = sorted(name for name, module in _reaches(candidate, set(added), path) if not self._exists(name, module))
        if missing:
            return "names what the new release lacks: " + ", ".join(missing)
        return None

    @staticmethod
    def _unimported(problem: str | None, old: str) -> list[str]:
        """For a refusal for undefined names only: the old release's import lines that bind all of them."""
        prefix = "leaves undefined: "
        if not problem or not problem.startswith(prefix):
            return []
        names = set(problem[len(prefix):].split(", "))
        lines = []
        for node in (_tree(old) or ast.Module(body=[], type_ignores=[])).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    bound = alias.asname or alias.name.split(".")[0]
                    if bound in names:
                        names.discard(bound)
                        name = alias.name + (f" as {alias.asname}" if alias.asname else "")
                        lines.append(f"from {'.' * node.level}{node.module or ''} import {name}"
                                     if isinstance(node, ast.ImportFrom) else f"import {name}")
        return [] if names else lines

    def _exists(self, name: str, module: str) -> bool:
        """Whether the module file `module` of the new release defines or mentions `name` (or the patch, or
        the series' guards, define it)."""
        if name in self.own_words or name in self.known:
            return True
        if module not in self._modules:  # a module, or a package's __init__
            text = self.repo.file_at(self.new_head, module) or self.repo.file_at(self.new_head, module[:-3] + "/__init__.py") or ""
            self._modules[module] = set(re.findall(r"\w+", text))
        return name in self._modules[module]


def _new_undefined(before: str | None, after: str | None, path: str) -> list[str]:
    """Names a .py file's new text leaves undefined that its old text did not."""
    if not path.endswith(".py") or after is None:
        return []
    return sorted(new_undefined(before, after, path))


def _removed_at(hunk: Hunk) -> list[int]:
    number, found = hunk.source_start, []
    for kind, text in hunk.lines:
        if kind == "-" and text.strip():
            found.append(number)
        if kind != "+":
            number += 1
    return found


def _landed(hunk: Hunk, current: str, candidate: str) -> set[str] | None:
    """Where `candidate` puts the hunk's lines: the places of what it adds (an import the porter
    added for it aside), or of what it removes."""
    added, removed = _changed_lines(current, candidate)
    if not any(kind == "+" and text.strip() for kind, text in hunk.lines):
        return places(current, removed)
    if not any(kind == "+" and IMPORT_LINE.match(text) for kind, text in hunk.lines):
        lines = candidate.splitlines()
        added = tuple(number for number in added if not IMPORT_LINE.match(lines[number - 1]))
    return places(candidate, added)


def _stray_import(text: str, added: Sequence[int]) -> str | None:
    """An added top-level import whose neighbouring imports share no package with it (the wrong list)."""
    lines = text.splitlines()
    for number in added:
        match = IMPORT_LINE.match(lines[number - 1])
        if not match:
            continue
        package = (match["from"] or match["import"]).split(".")[0]
        neighbours = [IMPORT_LINE.match(lines[at]) for at in (number - 2, number) if 0 <= at < len(lines)]
        packages = {(found["from"] or found["import"]).split(".")[0] for found in neighbours if found}
        if packages and package not in packages:
            return f"an import of {package} lands beside imports of {', '.join(sorted(packages))}, not its siblings"
    return None


class _Names(NamedTuple):
    """What one walk of some statements finds: every name they bind, the names loaded and the
    `NAME.attribute`s on each line, and each parameter annotated with a plain name."""

    bound: frozenset[str]
    loads: dict[int, set[str]]
    attributes: dict[int, set[tuple[str, str]]]
    annotated: dict[str, str]


@functools.lru_cache(maxsize=16)
def _scan(text: str, lines: frozenset[int]) -> _Names:
    """One walk of the scopes of `text` (it parses) that hold any of `lines`: the outermost function
    holding a line (a method, not its whole class), else its top-level statement."""
    tree = _tree(text)
    scopes = [scope for line in sorted(lines) if tree and (scope := _scope(tree, line))]
    nodes = list({id(scope): scope for scope in scopes}.values())
    bound: set[str] = set()
    loads: dict[int, set[str]] = defaultdict(set)
    attributes: dict[int, set[tuple[str, str]]] = defaultdict(set)
    annotated: dict[str, str] = {}
    for node in (inner for top in nodes for inner in ast.walk(top)):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                loads[node.lineno].add(node.id)
            else:
                bound.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            attributes[node.lineno].add((node.value.id, node.attr))
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
            if isinstance(node.annotation, ast.Name):
                annotated[node.arg] = node.annotation.id
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return _Names(bound=frozenset(bound), loads=dict(loads), attributes=dict(attributes), annotated=annotated)


@functools.lru_cache(maxsize=16)
def bound_names(text: str) -> frozenset[str]:
    """The names `text` binds at its top level (imports, functions, classes, assignments), and the
    builtins: what any hunk's code may use (a name bound inside another function is not)."""
    tree = _tree(text)
    found = set(dir(builtins))
    for node in tree.body if tree else ():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        else:
            found.update(target.id for target in ast.walk(node) if isinstance(target, ast.Name)
                         and not isinstance(target.ctx, ast.Load))
    return frozenset(found)


def _scope(tree: ast.Module, line: int) -> ast.stmt | None:
    """The outermost function holding `line` (into classes), else the top-level statement holding it."""
    nodes: list[ast.stmt] = tree.body
    found = None
    while True:
        holding = [node for node in nodes if node.lineno <= line <= (node.end_lineno or node.lineno)]
        if not holding:
            return found
        found = holding[0]
        if not isinstance(found, ast.ClassDef):
            return found
        nodes = found.body


def _touched(tree: ast.Module, lines: AbstractSet[int]) -> list[ast.stmt]:
    """The top-level statements that hold any of `lines`."""
    return [node for node in tree.body
            if any(node.lineno <= line <= (node.end_lineno or node.lineno) for line in lines)]


def _may_leave_undefined(text: str, hunk: Hunk, lines: set[int], *, bound: frozenset[str]) -> bool:
    """Whether a name loaded on `lines` is bound neither in `bound` (the file's names before the hunk)
    nor by the statements it sits in, or the hunk removes a line that may bind one."""
    tree = _tree(text)
    if tree is None or any(kind == "-" and BINDS.search(line) for kind, line in hunk.lines):
        return True
    names = _scan(text, frozenset(lines))
    known = bound | names.bound
    return any(not names.loads.get(line, set()) <= known for line in lines)


def _reaches(text: str, lines: set[int], path: str) -> set[tuple[str, str]]:
    """(attribute, module file) for each `NAME.attribute` on `lines` of `text` whose NAME the module
    imports from its own package (`envs.X`, an enum member, a class's option), or a parameter annotated
    with such a class (`server_args: ServerArgs` -> `server_args.x`): what the hunk reaches for upstream."""
    tree = _tree(text)
    if tree is None:
        return set()
    package = path.split("/")
    imported: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.split(".")[0] in package:
            root = "/".join(package[:package.index(node.module.split(".")[0])])
            module = f"{root}/{node.module.replace('.', '/')}.py".lstrip("/")
            imported.update((alias.asname or alias.name, module) for alias in node.names)
    names = _scan(text, frozenset(lines))
    bound = {**{arg: imported[kind] for arg, kind in names.annotated.items() if kind in imported}, **imported}
    return {(attribute, bound[base]) for line in lines for base, attribute in names.attributes.get(line, ())
            if base in bound}


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """The cycle collector paused: each parse of a large module makes a few hundred thousand nodes,
    and the collections they set off walk every tree kept (a third of the porter's time, measured by
    bench/bench_rebase.py); the trees hold no cycles, reference counting frees them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextmanager
def _scratch() -> Iterator[Git]:
    with tempfile.TemporaryDirectory(prefix="forkbuild-port-") as name:
        yield Git.init(Path(name))


def _apply_one_sided(scratch: Git, diff: FileDiff, hunk: Hunk, current: str, *, keep: str) -> str | None:
    """`hunk` with only its leading or trailing context (`keep`), applied anywhere it matches."""
    lines = list(hunk.lines)
    dropped = 0
    if keep == "trailing":
        while lines and lines[0][0] == " ":
            lines.pop(0)
            dropped += 1
    else:
        while lines and lines[-1][0] == " ":
            lines.pop()
    if len(lines) == len(hunk.lines) or not any(kind == " " for kind, _ in lines):
        return None  # nothing let go, or no context left to anchor on
    old_count = sum(kind != "+" for kind, _ in lines)
    new_count = sum(kind != "-" for kind, _ in lines)
    text = (f"@@ -{hunk.source_start + dropped},{old_count} +{hunk.target_start + dropped},{new_count} @@\n"
            + "".join(kind + (line if line.endswith("\n") else line + "\n") for kind, line in lines))
    # Something must anchor it: the lines it removes (git then may let context go), or else every
    # kept context line (-C as many): an insertion with no context left would land by line number alone.
    removes = any(kind == "-" and line.strip() for kind, line in lines)
    kept = 0 if removes else sum(kind == " " for kind, _ in lines)
    found = _apply(scratch, diff, (hunk._replace(text=text),), current, context=kept, zero=True)
    return found[0] if found else None


def _apply(scratch: Git, diff: FileDiff, hunks: tuple[Hunk, ...], current: str | None, *,
           context: int, zero: bool = False) -> tuple[str | None] | None:
    """`hunks` of `diff` applied by git to `current` with at least `context` lines of context
    (zero: a hunk need not touch the file's start or end where it lacks context on that side);
    (the new content,) or None when git refuses."""
    target = scratch.path / diff.path
    target.unlink(missing_ok=True)
    if current is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(current, encoding="utf-8", errors="surrogateescape")
    patch = scratch.path.parent / f"{scratch.path.name}.patch"
    patch.write_text(diff.header + "".join(hunk.text for hunk in hunks), encoding="utf-8", errors="surrogateescape")
    try:
        if not scratch.apply_files(patch, context=context, unidiff_zero=zero):
            return None
    finally:
        patch.unlink(missing_ok=True)
    return (target.read_text(encoding="utf-8", errors="surrogateescape") if target.exists() else None,)


def _merge_one(scratch: Git, diff: FileDiff, hunk: Hunk, *, base: str, current: str) -> str | None:
    """The hunk alone merged 3-way: base (the old release's file before the patch) -> base plus
    this hunk, onto the new file."""
    theirs = _apply(scratch, diff, (hunk,), base, context=3)
    if theirs is None or theirs[0] is None:
        return None
    paths = []
    for name, text in (("ours", current), ("base", base), ("theirs", theirs[0])):
        path = scratch.path / f".merge-{name}"
        path.write_text(text, encoding="utf-8", errors="surrogateescape")
        paths.append(path)
    return scratch.merge_file(*paths)


def _insert_imports(hunk: Hunk, current: str) -> str | None:
    """A hunk that only adds imports: each inserted into its siblings' list."""
    added = [text.rstrip("\n") for kind, text in hunk.lines if kind == "+"]
    if any(kind == "-" for kind, _ in hunk.lines) or not added or \
            not all(IMPORT_LINE.match(line) for line in added if line.strip()):
        return None
    return insert_import_lines(added, current)


def insert_import_lines(added: list[str], current: str) -> str | None:
    """Each import line inserted after the top-level import that shares the longest package
    prefix with it (its siblings' list); None where the file has no such import."""
    try:
        tree = ast.parse(current)
    except SyntaxError:
        return None
    lines = current.splitlines(keepends=True)
    for line in reversed([line for line in added if line.strip()]):
        match = IMPORT_LINE.match(line)
        module = (match["from"] or match["import"]) if match else ""
        best, end = -1, None
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                name = (node.module or "") if isinstance(node, ast.ImportFrom) else node.names[0].name
                shared = len(_common_prefix(name.split("."), module.split(".")))
                if shared and shared >= best:
                    best, end = shared, node.end_lineno
        if end is None:
            return None
        lines.insert(end, line + "\n")
        tree = ast.parse("".join(lines))
    return "".join(lines)


def _common_prefix(left: list[str], right: list[str]) -> list[str]:
    common = []
    for one, other in zip(left, right, strict=False):  # the shorter one's length
        if one != other:
            break
        common.append(one)
    return common
