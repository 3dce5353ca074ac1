"""The diff of a real-world quilt patch, made into one `git apply` takes and
applies to the tree GNU patch (quilt, dpkg-source) would make of it.

unidiff reads the files and hunks; each file section is written back as it
was, except where git and GNU patch part ways:

- binary sections (`Binary files a/x and b/x differ`, `GIT binary patch`):
  GNU patch skips them with a warning, git refuses the whole patch. Left out,
  named in the notes.
- hunks without context lines (`diff -U0`): applied with `--unidiff-zero`,
  at the line the hunk names, as GNU patch does.
- file names that disagree (`diff --git a/x.c b/x.c` over `--- a/x` /
  `+++ b/x.c`; rename headers over ---/+++ lines that name one file): GNU
  patch follows the ---/+++ lines and, when they differ, the one that exists;
  git refuses. The section is rewritten as a plain diff of that file.

Bytes in, bytes out: the diff is read as Latin-1, which maps every byte to one
character and back, so no content byte (CR included) changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import unidiff
from unidiff.errors import UnidiffParseError

DEV_NULL = "/dev/null"
GIT_HEADER = re.compile(r"^diff --git (?P<old>\S+) (?P<new>\S+)\s*$")
# git extended header lines that carry names or renames: dropped when GNU patch's names win.
GIT_EXTENDED = re.compile(r"^(?:index |similarity index |dissimilarity index |rename (?:from|to) |copy (?:from|to) |"
                          r"(?:old|new) mode |new file mode |deleted file mode )")
# A name followed by a timestamp without a tab ("--- a/x  2022-12-11 15:41:56 +0000").
SPACED_TIMESTAMP = re.compile(r"\s+(?:\d{4}-\d\d-\d\d \d\d:\d\d|[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d).*$")


@dataclass(frozen=True, kw_only=True)
class GitReadyDiff:
    data: bytes  # the diff to give `git apply`
    unidiff_zero: bool  # some hunk has no context lines
    notes: tuple[str, ...]  # what was normalised or skipped, for the report
    empty: bool  # nothing left to apply (an empty patch, or only binary sections)
    added: frozenset[str]  # paths the diff creates
    removed: frozenset[str]  # paths the diff deletes


def git_ready(diff: bytes, *, strip: int, existing: set[str] | frozenset[str]) -> GitReadyDiff:
    """Normalise `diff` (a patch's diff part); `existing`: the paths of the tree it applies to."""
    text = diff.decode("latin-1")
    try:
        files = unidiff.PatchSet(text)
    except UnidiffParseError as error:
        # unidiff is stricter than GNU patch (e.g. a truncated last hunk): give git the
        # diff as it is; git names what it cannot apply.
        return GitReadyDiff(data=diff, unidiff_zero=False, notes=(f"not normalised (unidiff: {error})",),
                            empty=not text.strip(), added=frozenset(), removed=frozenset())
    notes: list[str] = []
    sections: list[str] = []
    unidiff_zero = False
    added: set[str] = set()
    removed: set[str] = set()
    for patched in files:
        old, new = (_name(patched.source_file, strip), _name(patched.target_file, strip))
        if patched.is_binary_file:
            notes.append(f"binary diff of {new if new != DEV_NULL else old} skipped (no data git can apply; "
                         "GNU patch skips it too)")
            continue
        if any(not any(line.is_context for line in hunk) for hunk in patched):
            unidiff_zero = True
        section = _section(patched, old, new, strip=strip, existing=existing | added, notes=notes)
        sections.append(section)
        if patched.is_added_file or old == DEV_NULL:
            added.add(new)
        elif patched.is_removed_file or new == DEV_NULL:
            removed.add(old)
        elif patched.is_rename and section == str(patched):
            added.add(new)
            removed.add(old)
    if unidiff_zero:
        notes.append("hunks without context lines: applied with --unidiff-zero")
    return GitReadyDiff(data="".join(sections).encode("latin-1"), unidiff_zero=unidiff_zero, notes=tuple(notes),
                        empty=not sections, added=frozenset(added), removed=frozenset(removed))


def _section(patched: unidiff.PatchedFile, old: str, new: str, *, strip: int, existing: set[str],
             notes: list[str]) -> str:
    info = list(patched.patch_info or [])
    header = next((GIT_HEADER.match(line) for line in info if line.startswith("diff --git ")), None)
    if not len(patched) or DEV_NULL in (old, new):
        return str(patched)
    if old == new:
        if header is None or (_name(header["old"], strip), _name(header["new"], strip)) == (old, new):
            return str(patched)
        notes.append(f"git header names {_name(header['old'], strip)} -> {_name(header['new'], strip)}, "
                     f"---/+++ name {old}: followed ---/+++ (as GNU patch does)")
        chosen = old
    else:
        chosen = next((name for name in (old, new) if name in existing), None)
        if chosen is None:
            return str(patched)  # neither exists: nothing to choose, git's error will name both
        notes.append(f"---/+++ name {old} and {new}: patched {chosen}, the one that exists (as GNU patch does)")
    kept = [line for line in info if not line.startswith("diff --git ") and not GIT_EXTENDED.match(line)]
    plain = unidiff.PatchedFile(patch_info=unidiff.patch.PatchInfo(kept),
                                source=_renamed(patched.source_file, strip, chosen), source_timestamp=patched.source_timestamp,
                                target=_renamed(patched.target_file, strip, chosen), target_timestamp=patched.target_timestamp)
    plain.extend(patched)
    return str(plain)


def _name(raw: str, strip: int) -> str:
    """A ---/+++ or git-header name with `strip` leading components removed (as patch -pN)."""
    name = SPACED_TIMESTAMP.sub("", raw.strip()).strip('"')
    if name == DEV_NULL:
        return name
    parts = [part for part in name.split("/")]
    return "/".join(parts[strip:]) if len(parts) > strip else parts[-1]


def _renamed(raw: str, strip: int, chosen: str) -> str:
    """`raw` with the name after its first `strip` components replaced by `chosen`."""
    name = SPACED_TIMESTAMP.sub("", raw.strip()).strip('"')
    prefix = name.split("/")[:strip]
    return "/".join([*prefix, chosen])
