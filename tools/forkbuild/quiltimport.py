"""`import --quilt`: a real-world quilt series (Debian `debian/patches`, quilt's
`patches/`) becomes new entries at the end of the series. Every patch is read and
checked before anything is touched; then each is committed with plumbing on top of
the series (quiltcommit.py, one fast-import), one `format-patch` writes them all, and
the series' work tree is checked out once. What was normalised or skipped is reported.
"""

from __future__ import annotations

import email.utils
import tempfile
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from forkbuild.apply import file_hashes, prepare_worktree, record_series_tree, scratch_tree
from forkbuild.combination import whole_series
from forkbuild.config import Series
from forkbuild.context import Context
from forkbuild.dep3 import Description, parse_dep3, split_patch, stripspace
from forkbuild.emptydirs import find_empty_dirs, recreate_empty_dirs
from forkbuild.errors import ConfigError, DirtyTreeError, ForkbuildError
from forkbuild.export import DEFAULT_TREE
from forkbuild.git import IDENTITY, Author, FileCommit, Git, GitFailed, PathChange
from forkbuild.importer import check_incoming, guard_trailers, with_trailers, write_imported
from forkbuild.patchfile import check_safe
from forkbuild.quiltcommit import Applicable, Applied, Applier
from forkbuild.quiltdiff import GitReadyDiff, git_ready
from forkbuild.worktrees import recover_killed_change, tree_guard


@dataclass(frozen=True, kw_only=True)
class QuiltPatch:
    """One patch of the quilt series, read and ready to commit."""

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


def source_tree_of(directory: Path) -> Path | None:
    """The tree a Debian `debian/patches` series applies to (its empty directories are
    upstream's); None for another layout, where the tree is not known."""
    resolved = directory.resolve()
    if resolved.parts[-2:] == ("debian", "patches") and (resolved.parent / "control").is_file():
        return resolved.parent.parent
    return None


def import_quilt(*, context: Context, directory: Path, feature: str, source_tree: Path | None = None) -> QuiltImport:
    series = context.series
    patches = read_quilt_dir(directory, feature=feature)
    check_incoming(series, patches)
    source_tree = source_tree or source_tree_of(directory)
    cache = context.upstream
    base = cache.ensure(series.upstream)
    cache_git = cache.git()
    dest = context.series_dir / DEFAULT_TREE
    # The series tree this import may create: a second run waits its turn, and one killed while
    # creating it (nothing of the user's there yet) is cleared by the next apply or import.
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
            empty_dirs = _empty_dirs(source_tree, directory, known=series.upstream.empty_dirs)
            write_imported(series, imported, texts, empty_dirs=empty_dirs)
            all_files = [entry.file for entry in series.patches] + [patch.name for patch in imported]
            tree, note = _check_out_series(context, cache_git, base=base, head=head, files=all_files,
                                           empty_dirs=(*series.upstream.empty_dirs, *empty_dirs))
    return QuiltImport(patches=tuple(outcomes), empty_dirs=empty_dirs, tree=tree, tree_note=note)


def _commit_all(git: Git, series: Series, patches: list[QuiltPatch], *, start: str) -> tuple[list[PatchOutcome], str]:
    """Each patch made git-ready (quiltdiff), what it changes found (quiltcommit), every
    commit made with one `git fast-import`."""
    items = git.tree_entries(start)
    existing = set(items)
    readies: list[GitReadyDiff] = []
    applicable = []
    with tempfile.TemporaryDirectory(prefix="forkbuild-quilt-") as scratch_name:
        scratch = Path(scratch_name)
        for number, patch in enumerate(patches):
            ready = git_ready(patch.diff, strip=patch.strip, existing=existing)
            existing = (existing - ready.removed) | ready.added  # only names a diff adds or removes decide the next's
            readies.append(ready)
            if not ready.empty:
                (scratch / f"{number}.patch").write_bytes(ready.data)
                applicable.append(Applicable(source=patch.path, patch=scratch / f"{number}.patch", strip=patch.strip,
                                             unidiff_zero=ready.unidiff_zero, paths=ready.paths))
        found = iter(Applier(git, start=start, items=items, scratch=scratch).run(applicable))
    outcomes: list[PatchOutcome] = []
    commits: list[FileCommit] = []
    for patch, ready in zip(patches, readies, strict=True):
        applied = Applied(changes={}) if ready.empty else next(found)
        changes = applied.changes
        notes = (*patch.description.notes, *ready.notes,
                 *(f"leaves {path} empty: removed, as GNU patch -E does for dpkg-source -x" for path in applied.emptied))
        # format-patch of an empty commit is a patch git am refuses: nothing to keep.
        outcomes.append(PatchOutcome(source=patch.source, file=patch.name if changes else "",
                                     notes=notes if changes else (*notes, "changes nothing: not imported")))
        if not changes:
            continue
        header = patch.description
        name, address = email.utils.parseaddr(header.author)  # forkbuild's own identity where it names none
        author = Author(name=name.strip() or address or IDENTITY["user.name"],
                        email=address if "@" in address else IDENTITY["user.email"],
                        date=header.date or f"{int(patch.path.stat().st_mtime)} +0000")
        trailers = [*header.trailers, ("Feature", patch.feature),
                    *guard_trailers(series, patch.feature, patch.diff.decode("latin-1"))]
        message = stripspace(with_trailers(f"{header.subject}\n\n{header.body}" if header.body else header.subject,
                                           trailers))
        commits.append(FileCommit(parent=start if not commits else "", author=author, message=message,
                                  changes=tuple(PathChange(path=path, mode=entry.mode, blob=entry.blob) if entry
                                                else PathChange(path=path, mode=0) for path, entry in changes.items())))
    made = git.commit_changes(commits, date_format="raw")  # dep3 and the file's mtime give raw dates
    return outcomes, made[-1] if made else start


def _empty_dirs(source_tree: Path | None, directory: Path, *, known: tuple[str, ...]) -> tuple[str, ...]:
    """The unpatched tree's empty directories (not the patches' own) not recorded yet."""
    if source_tree is None:
        return ()
    return tuple(name for name in find_empty_dirs(source_tree) if name not in known
                 and not (source_tree / name).resolve().is_relative_to(directory.resolve()))


def _check_out_series(context: Context, cache_git: Git, *, base: str, head: str, files: list[str],
                      empty_dirs: tuple[str, ...]) -> tuple[Path | None, str]:
    """Check the series work tree out at `head`, unless it holds work of its own."""
    dest = context.series_dir / DEFAULT_TREE
    try:
        worktree = prepare_worktree(cache_git, dest=dest, base=head)  # refuses a tree with work of its own
        worktree.checkout_detached(head)  # an existing tree: only the files the imported patches change
    except DirtyTreeError as error:
        return None, f"{dest} was left as it is: {error}"
    except GitFailed as error:
        return None, f"{dest} could not be checked out: {error}"
    recreate_empty_dirs(dest, empty_dirs)
    record_series_tree(worktree, base=base, head=head, patches=files,
                       hashes=file_hashes(context.series.patches_dir, files))
    return dest, ""
