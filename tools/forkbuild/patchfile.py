"""Reading patch files: headers and trailers (email), files and hunks (unidiff),
and the path-safety rules every patch must pass before git sees it."""

from __future__ import annotations

import email
import email.policy
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import unidiff

from forkbuild.errors import UnsafePatchError

TRAILER = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9-]*):\s*(?P<value>.+?)\s*$")
SYMLINK_MODE = "120000"
MAIL_HEADER = re.compile(r"^[!-9;-~]+:")  # RFC 5322 field name: printable ASCII but ":"


@dataclass(frozen=True, kw_only=True)
class FileChange:
    path: str
    added: int
    removed: int
    status: str  # "A", "M" or "D"
    hunk_starts: tuple[int, ...]  # source line of each hunk: offsets show up here


@dataclass(frozen=True, kw_only=True)
class PatchInfo:
    path: Path
    subject: str
    author: str
    date: str
    message: str
    trailers: tuple[tuple[str, str], ...]
    files: tuple[FileChange, ...]

    def trailer(self, key: str) -> list[str]:
        return [value for name, value in self.trailers if name.lower() == key.lower()]

    @property
    def added(self) -> int:
        return sum(change.added for change in self.files)

    @property
    def removed(self) -> int:
        return sum(change.removed for change in self.files)


def split_mail(text: str) -> tuple[email.message.Message, str]:
    """The mail headers of a format-patch file and everything after them."""
    # Drop the mbox "From <sha> <date>" separator; email.parser wants headers first.
    body = text.split("\n", 1)[1] if text.startswith("From ") else text
    # Only the headers go through email: get_payload() raises on a diff that holds both
    # non-ASCII text and bytes that are not UTF-8 (surrogates), as real files do.
    lines = body.split("\n")
    end = 0  # where the headers stop, as email's parser decides: a blank line or a non-header line
    while end < len(lines) and (MAIL_HEADER.match(lines[end]) or (end and lines[end][:1] in (" ", "\t"))):
        end += 1
    payload_start = end + 1 if end < len(lines) and lines[end] == "" else end
    message = email.message_from_string("\n".join(lines[:end]) + "\n\n", policy=email.policy.compat32)
    return message, "\n".join(lines[payload_start:])


def parse_trailers(message: str) -> tuple[tuple[str, str], ...]:
    """Trailers: the `Key: value` lines of the message's last paragraph."""
    paragraphs = [block for block in message.strip().split("\n\n") if block.strip()]
    if not paragraphs:
        return ()
    found = [TRAILER.match(line) for line in paragraphs[-1].splitlines()]
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


def _diff_start(payload: str) -> int:
    match = re.search(r"^diff --git ", payload, flags=re.MULTILINE)
    return match.start() if match else len(payload)


def read_patch(path: Path) -> PatchInfo:
    # Bytes, not read_text(): universal newlines would split a line at a lone "\r" (mksh's patches).
    return parse_patch(path.read_bytes().decode("utf-8", errors="surrogateescape"), path=path)


def parse_patch(text: str, *, path: Path) -> PatchInfo:
    """A patch's text (e.g. fresh `git format-patch` output); `path` names it in errors."""
    headers, payload = split_mail(text)
    start = _diff_start(payload)
    message_body = payload[:start].split("\n---\n", 1)[0].strip("\n")
    subject = _decode_header(headers.get("Subject"))
    try:
        diff = unidiff.PatchSet(payload[start:])
    except unidiff.UnidiffParseError as error:
        raise UnsafePatchError(f"patches/{path.name}: cannot parse the diff: {error}") from error
    files = tuple(_file_change(patched) for patched in diff)
    return PatchInfo(path=path, subject=subject, author=_decode_header(headers.get("From")),
                     date=headers.get("Date", ""), message=message_body,
                     trailers=parse_trailers(message_body), files=files)


def strip_prefix(name: str) -> str:
    """A diff's file name without git's a/ or b/ prefix."""
    return name[2:] if name[:2] in ("a/", "b/") else name


def hunk_offsets(patch_text: str, applied_diff: str) -> list[str]:
    """Where the hunks of a patch file landed elsewhere than the file says, one line each
    ("<path> hunk <n>: +3 lines"); `applied_diff` is the diff of the commit git made from it."""
    _, payload = split_mail(patch_text)
    expected = unidiff.PatchSet(payload[_diff_start(payload):])
    # unidiff's .path is already without the a/ b/ prefix.
    applied = {patched.path: [hunk.source_start for hunk in patched] for patched in unidiff.PatchSet(applied_diff)}
    moved = []
    for patched in expected:
        for number, (hunk, actual) in enumerate(zip(patched, applied.get(patched.path, []), strict=False), start=1):
            if hunk.source_start != actual:
                moved.append(f"{patched.path} hunk {number}: {actual - hunk.source_start:+d} lines")
    return moved


def _file_change(patched: unidiff.PatchedFile) -> FileChange:
    status = "A" if patched.is_added_file else "D" if patched.is_removed_file else "M"
    path = strip_prefix(patched.target_file if status != "D" else patched.source_file)
    return FileChange(path=path, added=patched.added, removed=patched.removed, status=status,
                      hunk_starts=tuple(hunk.source_start for hunk in patched))


def check_safe(path: Path, *, tree: Path | None = None) -> None:
    """Refuse a patch that writes outside the tree, uses absolute paths, touches .git/,
    creates a symlink or goes through one in `tree`."""
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    problems = []
    for header in re.finditer(r"^diff --git (\S+) (\S+)$", text, flags=re.MULTILINE):
        for raw in header.groups():
            problems.extend(_path_problems(raw, tree=tree))
    for mode in re.finditer(r"^(?:new file|new|old|deleted file) mode (\d+)$", text, flags=re.MULTILINE):
        if mode.group(1) == SYMLINK_MODE:
            problems.append("creates or changes a symbolic link")
    for name in re.finditer(r"^(?:---|\+\+\+) (\S+)", text, flags=re.MULTILINE):
        if name.group(1) != "/dev/null":
            problems.extend(_path_problems(name.group(1), tree=tree))
    if problems:
        unique = sorted(set(problems))
        raise UnsafePatchError(f"patches/{path.name} is unsafe:\n" + "\n".join(f"  - {problem}" for problem in unique),
                               hint="patches may only change regular files inside the upstream tree")


def _path_problems(raw: str, *, tree: Path | None) -> list[str]:
    stripped = strip_prefix(raw)
    if raw.startswith("/") or stripped.startswith("/"):
        return [f"{stripped}: absolute path"]
    name = PurePosixPath(stripped)
    if ".." in name.parts:
        return [f"{name}: leaves the tree (..)"]
    if ".git" in name.parts:
        return [f"{name}: touches .git/"]
    if tree is not None:
        current = tree
        for part in name.parts[:-1]:
            current = current / part
            if current.is_symlink():
                return [f"{name}: goes through the symbolic link {current.relative_to(tree)}"]
    return []
