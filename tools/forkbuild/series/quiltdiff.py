"""The diff of a real-world quilt patch made into one `git apply` takes and applies as
GNU patch (quilt, dpkg-source) would: binary sections are left out (GNU patch skips
them, git refuses the whole patch); hunks without context get --unidiff-zero; where
the git header or rename lines and the ---/+++ names disagree, the section becomes a
plain diff of the file GNU patch would patch. Read as Latin-1: no byte (CR included)
changes on the way."""

from __future__ import annotations

import re
from dataclasses import dataclass

import unidiff
from unidiff.errors import UnidiffParseError

from forkbuild.io.git import EMPTY_BLOB
from forkbuild.series.patchfile import parse_diff

DEV_NULL = "/dev/null"
GIT_HEADER = re.compile(r"^diff --git (?P<old>\S+) (?P<new>\S+)\s*$")
# git extended header lines that carry names or renames: dropped when GNU patch's names win.
GIT_EXTENDED = re.compile(r"^(?:index |similarity index |dissimilarity index |rename (?:from|to) |copy (?:from|to) |"
                          r"(?:old|new) mode |new file mode |deleted file mode )")
RENAME = re.compile(r"^(?P<kind>rename|copy) (?P<end>from|to) (?P<name>[^\r\n]*)")
INDEX = re.compile(r"^index (?P<old>[0-9a-f]+)\.\.(?P<new>[0-9a-f]+)")
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
    # Every path the diff names (old and new): git touches no other; None: unidiff could not read it.
    paths: frozenset[str] | None


def git_ready(diff: bytes, *, strip: int, existing: set[str] | frozenset[str]) -> GitReadyDiff:
    """Normalise `diff` (a patch's diff part); `existing`: the paths of the tree it applies to."""
    notes: list[str] = []
    # Names first, on the lines: unidiff takes a git header's names and ignores ---/+++.
    # Lines end at "\n" only: str.splitlines() would also cut at a lone "\r" (or \x85) inside one.
    lines = [line for line in re.split(r"(?<=\n)", diff.decode("latin-1")) if line]
    text = "".join(_follow_minus_plus(lines, strip=strip, existing=existing, notes=notes))
    try:
        files = parse_diff(text)
    except UnidiffParseError as error:
        # unidiff is stricter than GNU patch (a truncated last hunk): git gets it as it is and names what fails.
        return GitReadyDiff(data=text.encode("latin-1"), unidiff_zero=False,
                            notes=(*notes, f"not checked for binary or zero-context hunks (unidiff: {error})"),
                            empty=not text.strip(), added=frozenset(), removed=frozenset(), paths=None)
    sections: list[str] = []
    unidiff_zero = False
    added: set[str] = set()
    removed: set[str] = set()
    named: set[str] = set()
    for patched in files:
        old, new = (_name(patched.source_file, strip), _name(patched.target_file, strip))
        if patched.is_binary_file:
            notes.append(f"binary diff of {new if new != DEV_NULL else old} skipped (no data git can apply; "
                         "GNU patch skips it too)")
            continue
        if not len(patched) and _content_without_data(patched):
            notes.append(f"diff of {new if new != DEV_NULL else old} has an index line but no hunks (cut short): "
                         "skipped, as GNU patch does")
            continue
        if any(not any(line.is_context for line in hunk) for hunk in patched):
            unidiff_zero = True
        sections.append(str(patched))
        named |= {old, new}
        if old != new:
            added.discard(old)
            removed.add(old)
        if new != DEV_NULL:
            added.add(new)
            removed.discard(new)
    if unidiff_zero:
        notes.append("hunks without context lines: applied with --unidiff-zero")
    return GitReadyDiff(data="".join(sections).encode("latin-1"), unidiff_zero=unidiff_zero, notes=tuple(notes),
                        empty=not sections, added=frozenset(added), removed=frozenset(removed - {DEV_NULL}),
                        paths=frozenset(named - {DEV_NULL}))


def _follow_minus_plus(lines: list[str], *, strip: int, existing: set[str] | frozenset[str],
                       notes: list[str]) -> list[str]:
    """The lines with every file whose names disagree rewritten as a plain diff of the
    file GNU patch would patch: the ---/+++ name, the one that exists when they differ."""
    out: list[str] = []
    at = 0
    while at < len(lines):
        header = GIT_HEADER.match(lines[at])
        minus = at + 1 if header else at
        while header and minus < len(lines) and GIT_EXTENDED.match(lines[minus]):
            minus += 1
        # (A git header may end the diff: a new empty file has no ---/+++ lines.)
        if not (minus + 1 < len(lines) and lines[minus].startswith("--- ") and lines[minus + 1].startswith("+++ ")):
            out.append(lines[at])
            at += 1
            continue
        old, new = _name(lines[minus][4:], strip), _name(lines[minus + 1][4:], strip)
        named = (_name(header["old"], strip), _name(header["new"], strip)) if header else (old, new)
        chosen = old if old == new else next((name for name in (old, new) if name in existing), None)
        if DEV_NULL in (old, new) or (named == (old, new) and (header or old == new)) or chosen is None:
            # Consistent (a git rename included): git and GNU patch agree, but for rename/copy lines
            # naming other paths (written inside a subproject): GNU patch goes by the names above.
            # What git strips from a rename/copy line's name for -pN: a component less than from ---/+++ names.
            parts = lines[minus][4:].split("\t", 1)[0].strip().strip('"').split("/")
            lead = "".join(f"{part}/" for part in parts[1:strip])
            extended = [_renamed(line, lead, old, new) for line in lines[at + 1:minus]] if header else []
            if extended != lines[at + 1:minus]:
                notes.append(f"git rename/copy lines disagree with ---/+++ {old} -> {new}: followed ---/+++ "
                             "(as GNU patch does)")
            out += [lines[at], *extended, lines[minus], lines[minus + 1]] if header else lines[at:minus + 2]
        else:
            if header and named != (old, new):
                notes.append(f"git header names {named[0]} -> {named[1]}, ---/+++ name {old} -> {new}: "
                             f"followed ---/+++ (as GNU patch does), patched {chosen}"
                             + (", the one that exists" if old != new else ""))
            else:
                notes.append(f"---/+++ name {old} and {new}: patched {chosen}, the one that exists (as GNU patch does)")
            out += [_retarget(lines[minus], strip, chosen), _retarget(lines[minus + 1], strip, chosen)]
        at = minus + 2
    return out


def _content_without_data(patched: unidiff.PatchedFile) -> bool:
    """A git section whose index line says the content changes, with no hunk carrying it
    (a maintainer cut the hunks, kept the header): git would create an empty file or
    refuse; GNU patch leaves the file alone."""
    index = next((match for line in patched.patch_info or [] if (match := INDEX.match(line))), None)
    # An (abbreviated) id of no blob or of the empty one: nothing between two such needs data.
    return index is not None and index["old"] != index["new"] and not all(
        set(blob) == {"0"} or EMPTY_BLOB.startswith(blob) for blob in (index["old"], index["new"]))


def _name(raw: str, strip: int) -> str:
    """A ---/+++ or git-header name with `strip` leading components removed (as patch -pN)."""
    name = SPACED_TIMESTAMP.sub("", raw.split("\t", 1)[0].rstrip("\r\n").strip()).strip('"')
    if name == DEV_NULL:
        return name
    parts = name.split("/")
    return "/".join(parts[strip:]) if len(parts) > strip else parts[-1]


def _renamed(line: str, lead: str, old: str, new: str) -> str:
    """A `rename|copy from|to NAME` line naming `old` (from) or `new` (to) instead, if it names another path."""
    match = RENAME.match(line)
    wanted = match and (old if match["end"] == "from" else new)
    if match is None or _name(match["name"], strip=lead.count("/")) == wanted:
        return line
    return f"{match['kind']} {match['end']} {lead}{wanted}{line[len(line.rstrip(chr(13) + chr(10))):]}"


def _retarget(line: str, strip: int, chosen: str) -> str:
    """A ---/+++ line naming `chosen` instead, its first `strip` components and timestamp kept."""
    marker, rest = line[:4], line[4:]
    name, tab, stamp = rest.partition("\t")
    ending = "" if tab else rest[len(rest.rstrip("\r\n")):]
    name = name.rstrip("\r\n")
    spaced = SPACED_TIMESTAMP.search(name)
    suffix = spaced.group(0) if spaced else ""
    prefix = (name[: spaced.start()] if spaced else name).strip().split("/")[:strip]
    return f"{marker}{'/'.join([*prefix, chosen])}{suffix}{tab}{stamp}{ending}"
