"""Reading patch files: headers and trailers (email), files and hunks (unidiff),
and the path-safety rules every patch must pass before git sees it."""

from __future__ import annotations

import email
import email.header
import email.message
import re
from collections.abc import Set as AbstractSet
from pathlib import Path, PurePosixPath
from typing import NamedTuple

import unidiff

from forkbuild.errors import UnsafePatchError

TRAILER = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9-]*):\s*(?P<value>.+?)\s*$")
# A line of the diffstat `git format-patch` writes between the `---` line and the diff.
DIFFSTAT = re.compile(r"^(?:\s*| .+ \| .*| \d+ files? changed.*| (?:create|delete) mode .*| mode change .*| rename .*)$")
MAIL_HEADER = re.compile(r"^[!-9;-~]+:")  # RFC 5322 field name: printable ASCII but ":"


class FileChange(NamedTuple):
    path: str
    added: int
    removed: int


class PatchInfo(NamedTuple):
    path: Path
    subject: str
    author: str  # the From: header, decoded ("Name <address>")
    date: str
    message: str
    trailers: tuple[tuple[str, str], ...]
    files: tuple[FileChange, ...]
    dirs: frozenset[str]  # every directory above a path its headers name: where an upstream symlink matters

    def trailer(self, key: str) -> list[str]:
        return [value for name, value in self.trailers if name.lower() == key.lower()]

    def trailer_map(self) -> dict[str, list[str]]:
        """Every trailer's values by lower-case key."""
        found: dict[str, list[str]] = {}
        for name, value in self.trailers:
            found.setdefault(name.lower(), []).append(value)
        return found

    @property
    def added(self) -> int:
        return sum(change.added for change in self.files)

    @property
    def removed(self) -> int:
        return sum(change.removed for change in self.files)


def split_mail(text: str) -> tuple[email.message.Message, str]:
    """The mail headers of a format-patch file and everything after them."""
    body = text.split("\n", 1)[1] if text.startswith("From ") else text  # less the mbox separator
    # Only the headers go through email: get_payload() raises on non-UTF-8 bytes in a diff.
    lines = body.split("\n")
    end = 0  # where the headers stop, as email's parser decides: a blank line or a non-header line
    while end < len(lines) and (MAIL_HEADER.match(lines[end]) or (end and lines[end][:1] in (" ", "\t"))):
        end += 1
    payload_start = end + 1 if end < len(lines) and lines[end] == "" else end
    message = email.message_from_string("\n".join(lines[:end]) + "\n\n")
    return message, "\n".join(lines[payload_start:])


def git_am_subject(subject: str) -> str:
    """The subject `git am --keep-non-patch` makes of `subject` (mailinfo's cleanup_subject
    with -b): leading "Re:", ":" and blanks, and bracketed groups that hold "PATCH", go."""
    at = 0
    while at < len(subject):
        char = subject[at]
        if char in "rR" and len(subject) > at + 3 and subject[at + 1] in "eE" and subject[at + 2] == ":":
            subject = subject[:at] + subject[at + 3:]
        elif char in " \t:":
            subject = subject[:at] + subject[at + 1:]
        elif char == "[" and "]" in subject[at:]:
            end = subject.index("]", at) + 1
            if end - at >= 7 and "PATCH" in subject[at:end]:
                subject = subject[:at] + subject[end:]
            else:
                at = end + (1 if end < len(subject) and subject[end].isspace() else 0)
        else:
            break
    return subject.strip()


def parse_trailers(message: str) -> tuple[tuple[str, str], ...]:
    """Trailers: the `Key: value` lines of the message's last paragraph (after its last `---` line)."""
    paragraphs = [block for block in message.strip().split("\n\n") if block.strip()]
    if not paragraphs:
        return ()
    lines = paragraphs[-1].splitlines()
    found = [TRAILER.match(line) for line in lines[len(lines) - lines[::-1].index("---"):]] if "---" in lines \
        else [TRAILER.match(line) for line in lines]
    matches = [match for match in found if match is not None]
    if len(matches) != len(found):
        return ()
    return tuple((match["key"], match["value"]) for match in matches)


def _decode_header(value: str | None) -> str:
    if value is None:
        return ""
    # Unfold (RFC 5322): a line break followed by whitespace is just the whitespace.
    unfolded = re.sub(r"\r?\n(?=[ \t])", "", value)
    return str(email.header.make_header(email.header.decode_header(unfolded))).strip()


def _message(before_diff: str) -> str:
    """All before the diff, less a `---` line and the diffstat after it (a `---` of the message stays)."""
    head, separator, tail = ("\n" + before_diff).rpartition("\n---\n")
    if separator and all(DIFFSTAT.match(line) for line in tail.splitlines()):
        before_diff = head
    return before_diff.strip("\n")


def read_patch(path: Path) -> PatchInfo:
    return parse_patch(read_text(path), path=path)


def parse_patch(text: str, *, path: Path) -> PatchInfo:
    """A patch's text (e.g. fresh `git format-patch` output); `path` names it in errors."""
    headers, payload = split_mail(text)
    match = re.search(r"^diff --git ", payload, flags=re.MULTILINE)
    start = match.start() if match else len(payload)
    message_body = _message(payload[:start])
    subject = _decode_header(headers.get("Subject"))
    try:
        diff = unidiff.PatchSet(payload[start:])
    except unidiff.UnidiffParseError as error:
        raise UnsafePatchError(f"patches/{path.name}: cannot parse the diff: {error}") from error
    files = tuple(FileChange(path=strip_prefix(patched.source_file if patched.is_removed_file else patched.target_file),
                             added=patched.added, removed=patched.removed) for patched in diff)
    return PatchInfo(path=path, subject=subject, author=_decode_header(headers.get("From")),
                     date=headers.get("Date", ""), message=message_body,
                     trailers=parse_trailers(message_body), files=files,
                     dirs=frozenset(folder for raw, prefixed in _names(text) for folder in _dirs_above(raw, prefixed)))


def strip_prefix(name: str) -> str:
    return name[2:] if name[:2] in ("a/", "b/") else name


# Header lines whose value git parses as a mode (apply.c: parse_mode_line, gitdiff_index).
MODE_LINE = re.compile(r"^(?:old mode|new mode|deleted file mode|new file mode) (?P<mode>.*)$", re.MULTILINE)
INDEX_MODE = re.compile(r"^index [0-9a-fA-F]+\.\.[0-9a-fA-F]+ (?P<mode>.*)$", re.MULTILINE)
# Header lines that name a path (C-quoted or the rest of the line; rename/copy lines without a/ b/).
PATH_LINE = re.compile(r"^(?:(?P<side>---|\+\+\+) |(?:rename|copy) (?:from|to) )(?P<name>.*)$", re.MULTILINE)
GIT_HEADER = re.compile(r"^diff --git (?P<names>.*)$", re.MULTILINE)
S_IFMT, S_IFREG, S_IFLNK, S_IFDIR, S_IFGITLINK = 0o170000, 0o100000, 0o120000, 0o040000, 0o160000
C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def git_mode(value: str) -> int | None:
    """A mode as git reads it (strtoul, then canon_mode); None: git rejects the line."""
    match = re.match(r"[ \t]*[+]?([0-7]+)(?:[ \t\r].*)?$", value)
    if not match:
        return None
    mode = int(match.group(1), 8) & 0xFFFFFFFF
    kind = mode & S_IFMT
    if kind == S_IFREG:
        return S_IFREG | (0o755 if mode & 0o100 else 0o644)
    if kind in (S_IFLNK, S_IFDIR):
        return kind
    return S_IFGITLINK


def c_unquote(name: str) -> str:
    """A name as git writes it: "C-quoted" (with \\ooo octal bytes) or plain."""
    if not name.startswith('"'):
        return name
    out, index = bytearray(), 1
    while index < len(name) and name[index] != '"':
        char = name[index]
        if char == "\\" and index + 1 < len(name):
            nxt = name[index + 1]
            if nxt in "0123" and re.match(r"[0-7]{3}", name[index + 1:index + 4]):
                out.append(int(name[index + 1:index + 4], 8))
                index += 4
                continue
            out.append(C_ESCAPES.get(nxt, ord(nxt)))
            index += 2
            continue
        out.extend(char.encode("utf-8", errors="surrogateescape"))
        index += 1
    return out.decode("utf-8", errors="surrogateescape")


def _names(text: str) -> list[tuple[str, bool]]:
    """Every path the headers name, unquoted, and whether it has git's a/ b/ prefix."""
    names = []
    for match in PATH_LINE.finditer(text):
        raw = match["name"]
        name = c_unquote(raw) if raw.startswith('"') else raw.split("\t", 1)[0]
        names.append((name, bool(match["side"])))
    for match in GIT_HEADER.finditer(text):
        value = match["names"]
        names += [(c_unquote(part), True) for part in re.findall(r'"(?:[^"\\]|\\.)*"', value)]
        names += [(part, True) for part in re.sub(r'"(?:[^"\\]|\\.)*"', " ", value).split()]
    return [(name, prefixed) for name, prefixed in names if name.strip() != "/dev/null"]


def safety_problems(text: str, *, tree: Path | None = None, symlinks: frozenset[str] = frozenset()) -> list[str]:
    """Every reason a patch is unsafe: a path outside the tree, absolute or into .git/; a symlink,
    directory or gitlink mode (as git reads it); a path through a symbolic link."""
    problems = []
    for match in [*MODE_LINE.finditer(text), *INDEX_MODE.finditer(text)]:
        mode = git_mode(match["mode"])
        if mode is None:
            problems.append(f"unreadable mode {match['mode']!r} (git refuses the patch)")
        elif mode == S_IFLNK:
            problems.append("creates or changes a symbolic link")
        elif mode == S_IFGITLINK:
            problems.append("creates or changes a submodule (gitlink)")
        elif mode == S_IFDIR:
            problems.append("has a directory mode")
    for raw, prefixed in dict.fromkeys(_names(text)):  # a path is named 2-4 times: judged once
        problems.extend(_path_problems(raw, prefixed=prefixed, tree=tree, symlinks=symlinks))
    return sorted(set(problems))


def check_safe(path: Path, *, tree: Path | None = None, symlinks: frozenset[str] = frozenset()) -> None:
    problems = safety_problems(read_text(path), tree=tree, symlinks=symlinks)
    if problems:
        raise UnsafePatchError(f"patches/{path.name} is unsafe:\n" + "\n".join(f"  - {problem}" for problem in problems),
                               hint="patches may only change regular files inside the upstream tree")


MAX_PATCH_BYTES = 64 << 20  # parsed, a patch takes about 11 times its size in memory


def read_text(path: Path) -> str:
    """A patch file's text, line endings as they are (bytes, not read_text(): universal newlines
    would split a line at a lone "\r"); one larger than MAX_PATCH_BYTES is refused, naming it."""
    size = path.stat().st_size
    if size > MAX_PATCH_BYTES:
        raise UnsafePatchError(f"patches/{path.name}: is {size >> 20} MiB; forkbuild reads patches of up to "
                               f"{MAX_PATCH_BYTES >> 20} MiB (a patch that large is a data file or a generated tree)",
                               hint="split it, or ship the data another way (a package pin, a download at build time)")
    return path.read_bytes().decode("utf-8", errors="surrogateescape")


def _text_problems(text: str, path: Path, symlinks: frozenset[str]) -> tuple[list[str], PatchInfo | None]:
    """Everything wrong with a patch before git sees it, and the patch parsed (None: it does not parse)."""
    label = f"patches/{path.name}"
    if not text.strip():
        return [f"{label}: is empty"], None
    problems = []
    marked = text.startswith("\ufeff")  # an editor's mark: the first header is no header to git am
    if marked:
        problems.append(f"{label}: starts with a byte-order mark (save it as UTF-8 without one)")
    if re.search(r"^diff --git [^\n]*\r$", text, flags=re.MULTILINE):
        # A converted file (headers end in CR too, unlike a patch to a CRLF file): git refuses it.
        problems.append(f"{label}: has CRLF line endings (convert it to LF: dos2unix)")
    info = None
    try:
        info = parse_patch(text, path=path)
    except UnsafePatchError as error:
        problems.append(error.message)
    else:
        if not info.files and "GIT binary patch" not in text and not MODE_LINE.search(text):
            problems.append(f"{label}: holds no diff (not a patch, or cut off before its first `diff --git`)")
        if not info.author and not marked:
            problems.append(f"{label}: has no `From:` header (git am needs an author)")
    problems += [f"{label}: {problem}" for problem in safety_problems(text, symlinks=symlinks)]
    return problems, info


def check_patches(paths, *, symlinks: frozenset[str] = frozenset()) -> dict[Path, PatchInfo]:
    """Every patch parsed (each file read once); raise one UnsafePatchError naming every problem
    of every patch (not just the first)."""
    problems: list[str] = []
    infos = {}
    for path in paths:
        try:
            found, info = _text_problems(read_text(path), path, symlinks)
        except OSError as error:
            problems.append(f"patches/{path.name}: cannot be read: {error.strerror or error}")
            continue
        problems += found
        if info is not None:
            infos[path] = info
    if problems:
        raise UnsafePatchError(f"{len(problems)} problem(s) in the series' patches:\n"
                               + "\n".join(f"  - {problem}" for problem in problems),
                               hint="fix or replace the patches named; patches may only change regular files "
                                    "inside the upstream tree")
    return infos


def _path_problems(raw: str, *, prefixed: bool, tree: Path | None, symlinks: frozenset[str] = frozenset()) -> list[str]:
    if raw.startswith("/"):
        return [f"{raw}: absolute path"]
    stripped = _stripped(raw, prefixed)
    if stripped.startswith("/"):
        return [f"{stripped}: absolute path"]
    name = PurePosixPath(stripped)
    if ".." in PurePosixPath(raw).parts or ".." in name.parts:
        return [f"{stripped}: leaves the tree (..)"]
    if any(part.lower().rstrip(". ") == ".git" for part in name.parts):
        return [f"{name}: touches .git/"]
    for prefix in _dirs_above(raw, prefixed):
        if prefix in symlinks or (tree is not None and (tree / prefix).is_symlink()):
            return [f"{name}: goes through the symbolic link {prefix}"]
    return []


def _stripped(raw: str, prefixed: bool) -> str:
    """The path git am applies: one leading component stripped (-p1), whatever it is."""
    return raw.split("/", 1)[1] if prefixed and "/" in raw else raw


def _dirs_above(raw: str, prefixed: bool) -> list[str]:
    """The directories above the path a header names ("a/b/c" -> "a", "a/b"): what the symlink rule judges."""
    parts = PurePosixPath(_stripped(raw, prefixed)).parts
    return ["/".join(parts[:depth]) for depth in range(1, len(parts))]


def parse_diff(diff: str) -> unidiff.PatchSet:
    """A unified diff as unidiff reads it: the one place a PatchSet is made."""
    return unidiff.PatchSet(diff)


def added_lines(diff: str) -> dict[str, list[str]]:
    """Per target path (prefix stripped), the lines a unified diff adds, in order."""
    found: dict[str, list[str]] = {}
    for patched in parse_diff(diff):
        lines = found.setdefault(strip_prefix(patched.target_file), [])
        lines.extend(line.value.rstrip("\n") for hunk in patched for line in hunk if line.is_added)
    return found


class Hunk(NamedTuple):
    """One hunk of a file's diff: its text (with the `@@` line), where it starts on each side, and
    the lines it keeps (" "), removes ("-") and adds ("+"), each as (kind, line)."""

    text: str
    source_start: int
    target_start: int
    lines: tuple[tuple[str, str], ...]

    def added_at(self) -> list[int]:
        """The 1-based line numbers of the added lines in the file after the change."""
        number, found = self.target_start, []
        for kind, _ in self.lines:
            if kind == "+":
                found.append(number)
            if kind != "-":
                number += 1
        return found


class FileDiff(NamedTuple):
    path: str
    header: str  # `diff --git` up to the first hunk
    created: bool
    deleted: bool
    hunks: tuple[Hunk, ...]


def only_files(text: str, paths: AbstractSet[str]) -> str | None:
    """A patch file's text with its mail part and the diffs of `paths` only; None where it changes none of them."""
    head, *chunks = re.split(r"(?m)^(?=diff --git )", text)
    kept = [chunk for chunk in chunks if any(diff.path in paths for diff in file_diffs(chunk))]
    return head + "".join(kept) if kept else None


def file_diffs(diff: str) -> list[FileDiff]:
    """A unified diff (git's) per file, hunk by hunk."""
    found = []
    for patched in parse_diff(diff):
        text = str(patched)
        first = text.find("\n@@") + 1
        hunks = tuple(Hunk(text=str(hunk), source_start=hunk.source_start, target_start=hunk.target_start,
                           lines=tuple((line.line_type, line.value) for line in hunk if line.line_type in " +-"))
                      for hunk in patched)
        found.append(FileDiff(path=strip_prefix(patched.target_file if not patched.is_removed_file else patched.source_file),
                              header=text[:first] if first else text, created=patched.is_added_file,
                              deleted=patched.is_removed_file, hunks=hunks))
    return found
