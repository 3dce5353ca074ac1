"""`import --quilt`: a quilt series (Debian `debian/patches`, quilt's `patches/`) becomes new
entries at the end of the series: every patch checked first, applied by the engine as a bare
diff (its -p level), committed with one fast-import, written by one `format-patch`; the series'
work tree is checked out once. A file a patch leaves empty is removed, as GNU patch -E does."""

from __future__ import annotations

import datetime
import email.utils
import hashlib
import json
import tempfile
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from forkbuild.applier import file_hashes, prepare_worktree, record_series_tree, scratch_tree
from forkbuild.context import Context
from forkbuild.errors import ApplyError, ConfigError, DirtyTreeError, ForkbuildError
from forkbuild.importer import check_incoming, guard_trailers, with_trailers, write_imported
from forkbuild.io.fsutil import write_atomic
from forkbuild.io.git import IDENTITY, Author, Git, GitFailed
from forkbuild.series.combination import whole_series
from forkbuild.series.config import Series
from forkbuild.series.dep3 import Description, parse_dep3, split_patch, stripspace
from forkbuild.series.layout import SERIES_TREE, WORK_DIR
from forkbuild.series.patchfile import check_safe
from forkbuild.series.quiltdiff import GitReadyDiff, git_ready
from forkbuild.worktree.emptydirs import find_empty_dirs, recreate_empty_dirs
from forkbuild.worktree.engine import Bare, Engine, Outcome, PatchJob
from forkbuild.worktree.guard import recover_killed_change, tree_guard


@dataclass(frozen=True, kw_only=True)
class QuiltPatch:
    name: str  # its file in patches/
    source: str  # the file in the quilt directory, for messages
    path: Path
    strip: int
    feature: str
    description: Description
    diff: bytes
    upstream: str  # its upstream status in series.toml, from the description


@dataclass(frozen=True, kw_only=True)
class PatchOutcome:
    source: str  # as the quilt series names it
    file: str  # in patches/; "" when nothing was imported
    notes: tuple[str, ...]  # normalised or skipped, in words


@dataclass(frozen=True, kw_only=True)
class QuiltImport:
    patches: tuple[PatchOutcome, ...]
    empty_dirs: tuple[str, ...]  # recorded in series.toml [upstream] empty_dirs
    tree: Path | None  # the series work tree, checked out at the new series; None: left as it was
    tree_note: str  # why it was left alone


def read_quilt_dir(directory: Path, *, feature: str) -> list[QuiltPatch]:
    """Every patch its `series` file lists, parsed; all problems at once as one ConfigError."""
    series_file = directory / "series"
    if not series_file.is_file():
        raise ForkbuildError(f"{directory} has no quilt `series` file", hint="point --quilt at the directory holding `series`")
    listed, problems = read_quilt_series(series_file)
    stems = [Path(name).stem for name, _ in listed]
    patches = []
    for (name, strip), stem in zip(listed, stems, strict=True):
        # patches/ names: the stem; where stems collide (a/x, b/x), the directories join the name.
        file_name = (stem if stems.count(stem) == 1 else Path(name).with_suffix("").as_posix().replace("/", "-"))
        path = directory / name
        if not path.is_file():
            problems.append(f"{series_file}: lists {name}, which does not exist")
            continue
        check_safe(path)
        data = path.read_bytes()
        try:
            description = parse_dep3(data, fallback_subject=f"import {Path(name).stem}")
        except ValueError as error:
            problems.append(f"{path}: {error}")
            continue
        patches.append(QuiltPatch(name=f"{file_name}.patch", source=name, path=path, strip=strip, feature=feature,
                                  description=description, diff=split_patch(data)[1], upstream=description.upstream))
    if problems:
        raise ConfigError(problems, source=f"import from {directory}")
    return patches


def read_quilt_series(path: Path) -> tuple[list[tuple[str, int]], list[str]]:
    """(patch file, strip level) per line of a quilt series file (comments and blanks
    skipped), and the lines forkbuild cannot import as quilt would apply them."""
    entries, problems = [], []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        strip = 1
        for option in words[1:]:
            if option.startswith("-p") and option[2:].isdigit():
                strip = int(option[2:])
            elif option == "-R":
                problems.append(f"{path}:{number}: {words[0]} -R: quilt applies it reversed; forkbuild imports "
                                "patches forward only (reverse the file, e.g. `interdiff -q FILE /dev/null`, "
                                "and drop the -R)")
            else:
                problems.append(f"{path}:{number}: {words[0]}: unknown quilt patch option {option!r} (known: -pN, -R)")
        entries.append((words[0], strip))
    return entries, problems


def _journal(context: Context) -> Path:
    """What an import wrote, kept until its series tree is checked out: a re-run after a kill in
    between finishes the checkout instead of refusing the patches it wrote as "exists already"."""
    return context.series_dir / WORK_DIR / "import-quilt.json"


def _sources(patches: list[QuiltPatch]) -> list[list[str]]:
    return [[patch.source, hashlib.sha256(patch.path.read_bytes()).hexdigest()] for patch in patches]


def _finish_interrupted(context: Context, patches: list[QuiltPatch]) -> QuiltImport | None:
    """The import of these very patches, written by a run killed before its tree checkout, finished."""
    journal = _journal(context)
    if not journal.is_file():
        return None
    try:
        record = json.loads(journal.read_text())
        written = record["written"]
        ok = record["sources"] == _sources(patches) and all(
            (context.series.patches_dir / name).is_file()
            and hashlib.sha256((context.series.patches_dir / name).read_bytes()).hexdigest() == digest
            for name, digest in written.items()) and set(written) <= {entry.file for entry in context.series.patches}
    except (OSError, ValueError, KeyError, TypeError):
        ok = False
    if not ok:  # another import's, or the series write never happened: not this run's to finish
        journal.unlink(missing_ok=True)
        return None
    cache_git = context.upstream.git()
    with tree_guard(context.series_dir / SERIES_TREE, "apply") as guard:
        recover_killed_change(guard, cache_git)
        tree, note = (_check_out_series(context, cache_git, base=record["base"], head=record["head"],
                                        files=record["files"], empty_dirs=tuple(record["empty_dirs"]))
                      if cache_git.has_object(record["head"]) else
                      (None, "its commits are gone from the cache: `forkbuild apply --all` rebuilds the tree"))
    journal.unlink(missing_ok=True)
    outcomes = tuple(PatchOutcome(source=source, file=file, notes=tuple(notes))
                     for source, file, notes in record["outcomes"])
    return QuiltImport(patches=outcomes, empty_dirs=tuple(record["new_empty_dirs"]), tree=tree,
                       tree_note=note or "an interrupted run had written the series; its tree is checked out now")


def import_quilt(*, context: Context, directory: Path, feature: str, source_tree: Path | None = None) -> QuiltImport:
    series = context.series
    patches = read_quilt_dir(directory, feature=feature)
    finished = _finish_interrupted(context, patches)
    if finished is not None:
        return finished
    check_incoming(series, patches)
    resolved = directory.resolve()
    if source_tree is None and resolved.parts[-2:] == ("debian", "patches") and (resolved.parent / "control").is_file():
        source_tree = resolved.parent.parent  # the tree a Debian series applies to (elsewhere: not known)
    cache = context.upstream
    base = cache.ensure(series.upstream)
    cache_git = cache.git()
    dest = context.series_dir / SERIES_TREE
    # A second run waits; one killed while creating the tree (nothing of the user's yet) is cleared.
    with tree_guard(dest, "apply") as guard:
        recover_killed_change(guard, cache_git)
        if not dest.exists():
            guard.changing()
        # The commit the import builds on: upstream, or the whole series applied (in a scratch tree).
        whole = scratch_tree(context=context, variant=whole_series(series), strict=True)
        with whole if series.patches else nullcontext(None) as applied:
            start = applied.head_commit if applied else base
            with context.reporter.step(f"Committing {len(patches)} quilt patch(es) on top of the series"):
                outcomes, head = _commit_all(cache_git, series, patches, start=start)
            imported = [patch for patch, outcome in zip(patches, outcomes, strict=True) if outcome.file]
            texts = dict(zip((patch.name for patch in imported), cache_git.format_patches(start, head), strict=True))
            # The unpatched tree's empty directories (not the patches' own) not recorded yet.
            empty_dirs = () if source_tree is None else tuple(
                name for name in find_empty_dirs(source_tree) if name not in series.upstream.empty_dirs
                and not (source_tree / name).resolve().is_relative_to(resolved))
            all_files = [entry.file for entry in series.patches] + [patch.name for patch in imported]
            journal = _journal(context)
            journal.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(journal, json.dumps({
                "sources": _sources(patches), "base": base, "head": head, "files": all_files,
                "empty_dirs": [*series.upstream.empty_dirs, *empty_dirs], "new_empty_dirs": list(empty_dirs),
                "written": {name: hashlib.sha256(text).hexdigest() for name, text in texts.items()},
                "outcomes": [[outcome.source, outcome.file, list(outcome.notes)] for outcome in outcomes]}))
            write_imported(series, imported, texts, reporter=context.reporter, empty_dirs=empty_dirs)
            tree, note = _check_out_series(context, cache_git, base=base, head=head, files=all_files,
                                           empty_dirs=(*series.upstream.empty_dirs, *empty_dirs))
            journal.unlink(missing_ok=True)
    return QuiltImport(patches=tuple(outcomes), empty_dirs=empty_dirs, tree=tree, tree_note=note)


def _commit_all(git: Git, series: Series, patches: list[QuiltPatch], *, start: str) -> tuple[list[PatchOutcome], str]:
    """Each patch made git-ready (quiltdiff) and applied by the engine as GNU patch -E would,
    every commit made with one `git fast-import`."""
    existing = set(git.tree_entries(start))
    readies: list[GitReadyDiff] = []
    jobs = []
    with tempfile.TemporaryDirectory(prefix="forkbuild-quilt-") as scratch:
        for number, patch in enumerate(patches):
            ready = git_ready(patch.diff, strip=patch.strip, existing=existing)
            existing = (existing - ready.removed) | ready.added  # only names a diff adds or removes decide the next's
            readies.append(ready)
            if not ready.empty:
                path = Path(scratch, f"{number}.patch")
                path.write_bytes(ready.data)
                jobs.append(PatchJob(name=str(patch.path), path=path, strip=patch.strip,
                                     unidiff_zero=ready.unidiff_zero, bare=_commit_of(series, patch, ready.paths)))
        engine = Engine(git, head=start, shown=start, checked_out=False, gnu_emptied=True)
        try:
            results = iter(engine.run(jobs, stop=False))
        finally:
            engine.close()
    outcomes: list[PatchOutcome] = []
    for patch, ready in zip(patches, readies, strict=True):
        result = None if ready.empty else next(results)
        if result and result.outcome is Outcome.CONFLICT:
            raise ApplyError(f"{patch.path} does not apply on top of the series: {result.detail}",
                             hint="refresh it against the series first (quilt push/refresh), "
                                  "or fix its -p level in `series`")
        notes = (*patch.description.notes, *ready.notes, *(f"leaves {path} empty: removed, as GNU patch -E does for "
                                                            "dpkg-source -x" for path in (result.emptied if result else ())))
        # format-patch of an empty commit is a patch git am refuses: nothing to keep.
        changed = bool(result and result.commit)
        outcomes.append(PatchOutcome(source=patch.source, file=patch.name if changed else "",
                                     notes=notes if changed else (*notes, "changes nothing: not imported")))
    return outcomes, engine.head


def _commit_of(series: Series, patch: QuiltPatch, paths: frozenset[str] | None) -> Bare:
    """The commit a quilt patch makes: its DEP-3 header's author, date and message, trailers added."""
    header = patch.description
    name, address = email.utils.parseaddr(header.author)  # forkbuild's own identity where it names none
    seconds, zone = (header.date or f"{int(patch.path.stat().st_mtime)} +0000").split()
    offset = datetime.timedelta(hours=int(zone[1:3]), minutes=int(zone[3:5])) * (-1 if zone[0] == "-" else 1)
    author = Author(name=name.strip() or address or IDENTITY["user.name"],
                    email=address if "@" in address else IDENTITY["user.email"],
                    date=email.utils.format_datetime(datetime.datetime.fromtimestamp(int(seconds),
                                                                                     datetime.timezone(offset))))
    forwarded = [] if any(key.lower() == "forwarded" for key, _ in header.trailers) else [("Forwarded", "no")]
    trailers = [*header.trailers, *forwarded, ("Feature", patch.feature),
                *guard_trailers(series, patch.feature, patch.diff.decode("latin-1"))]
    message = stripspace(with_trailers(f"{header.subject}\n\n{header.body}" if header.body else header.subject,
                                       trailers))
    return Bare(author=author, message=message, paths=paths)


def _check_out_series(context: Context, cache_git: Git, *, base: str, head: str, files: list[str],
                      empty_dirs: tuple[str, ...]) -> tuple[Path | None, str]:
    """Check the series work tree out at `head`, unless it holds work of its own."""
    dest = context.series_dir / SERIES_TREE
    try:
        worktree, _ = prepare_worktree(cache_git, dest=dest, base=head)  # refuses a tree with work of its own
        worktree.checkout_detached(head)  # an existing tree: only the files the imported patches change
    except DirtyTreeError as error:
        return None, f"{dest} was left as it is: {error}"
    except GitFailed as error:
        return None, f"{dest} could not be checked out: {error}"
    recreate_empty_dirs(dest, empty_dirs)
    record_series_tree(worktree, base=base, head=head, patches=files,
                       hashes=file_hashes(context.series.patches_dir, files))
    return dest, ""
