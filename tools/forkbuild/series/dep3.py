"""The description of a quilt patch (DEP-3 fields or mail headers, plus free text) as a
commit message that survives `git format-patch` -> `git am` byte for byte. Bytes are decoded
by the declared charset, else UTF-8, else Latin-1; whatever git am would read differently is
normalised, and each change named in `Description.notes`."""

from __future__ import annotations

import datetime
import email
import email.header
import email.policy
import email.utils
import re
from dataclasses import dataclass

from forkbuild.series.patchfile import PatchInfo, git_am_subject

FIELD = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9-]*):[ \t]*(?P<value>.*)$")
SUBJECT_FIELDS = ("description", "subject")
AUTHOR_FIELDS = ("author", "from")
NOT_FORWARDED = ("", "no", "not-needed")
MAIL_HEADERS = ("from", "subject", "date", "message-id", "content-type", "content-transfer-encoding",
                "mime-version", "to", "cc", "reply-to", "in-reply-to", "references")
# git mailsplit's is_from_line(): "From " ... hh:mm:ss yyyy (year > 90).
MBOX_FROM = re.compile(rb"^From \S.*\d\d:\d\d:\d\d (?:\S+ )?(?:19[0-9][1-9]|[2-9]\d\d\d)(?: .*)?\r?$")
# git mailinfo's patchbreak(): where git am stops reading the message and starts the diff.
PATCH_BREAK = re.compile(rb"^(?:diff -|Index: |--- (?=\S)|---[ \t]*\r?$)", re.MULTILINE)
# quilt/CVS separators that start a diff too (GNU patch skips them as leading garbage).
DIFF_START = re.compile(rb"^(?:diff -|Index: |--- (?=\S)|---[ \t]*\r?$|={20,}\r?$)", re.MULTILINE)
IN_BODY_HEADER = re.compile(r"^(?:(?:From|Subject|Date):|>From\s|\[PATCH\]\s)", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class Description:
    """A patch's header, ready to commit: the message git am reads back unchanged."""

    subject: str
    body: str
    author: str  # "Name <email>", "" when the patch names none
    date: str  # git's raw date, "<seconds> <+zone>"; "" when unknown
    trailers: tuple[tuple[str, str], ...]  # the other DEP-3 fields, kept as trailers
    upstream: str  # local / submitted / upstreamed, from Forwarded/Applied-Upstream/Origin
    notes: tuple[str, ...] = ()  # what was normalised, for the import report


def split_patch(data: bytes) -> tuple[bytes, bytes]:
    """(description, diff) of a quilt patch file: the diff starts at its first header line."""
    match = DIFF_START.search(data)
    return (data[: match.start()], data[match.start():]) if match else (data, b"")


def parse_dep3(text: str | bytes, *, fallback_subject: str) -> Description:
    """The description of a patch file (its whole text or bytes; the diff is cut off here)."""
    data = text.encode("utf-8", errors="surrogateescape") if isinstance(text, str) else text
    header, _ = split_patch(data)
    notes: list[str] = []
    lines = header.replace(b"\r\n", b"\n").split(b"\n")
    if lines and MBOX_FROM.match(lines[0]):
        lines = lines[1:]  # the mbox separator of a format-patch file: no part of the message
        notes.append("read as a git format-patch mail")
    header = b"\n".join(lines)
    # A first paragraph of mail headers with a Subject: and no DEP-3 Description: a mail.
    first = header.lstrip(b"\n").split(b"\n\n", 1)[0].decode("latin-1")
    keys = [found["key"].lower() for line in first.splitlines() if (found := FIELD.match(line))]
    if "subject" in keys and "description" not in keys and all(
            key in MAIL_HEADERS or key.startswith("x-") for key in keys):
        return _from_mail(header, notes, fallback_subject=fallback_subject)
    decoded = _decode(header, None, notes)
    fields: list[tuple[str, str]] = []
    free: list[str] = []
    for paragraph in [block.strip("\n") for block in re.split(r"\n[ \t]*\n", decoded) if block.strip()]:
        plines = paragraph.splitlines()
        if not free and FIELD.match(plines[0]) and all(FIELD.match(line) or line[:1] in " \t" for line in plines):
            fields += _fields(plines)
        else:
            free.append(paragraph)
    return _described(fields, free, notes, fallback_subject=fallback_subject)


def _from_mail(header: bytes, notes: list[str], *, fallback_subject: str) -> Description:
    # The body stays bytes until its charset is known.
    head, _, raw_body = header.lstrip(b"\n").partition(b"\n\n")
    message = email.message_from_bytes(head + b"\n\n", policy=email.policy.compat32)
    if (message.get("Content-Transfer-Encoding") or "").lower() == "quoted-printable":
        import quopri
        raw_body = quopri.decodestring(raw_body)
    body = _decode(raw_body, message.get_content_charset(), notes)
    headers = {key: _header(message.get(key), notes) for key in ("Subject", "From", "Date")}
    # git am reads "From:", "Subject:", "Date:" at the top of the body as the real ones.
    body_lines = body.lstrip("\n").split("\n")
    while body_lines and (found := FIELD.match(body_lines[0])) and found["key"].capitalize() in headers:
        headers[found["key"].capitalize()] = found["value"].strip()
        body_lines.pop(0)
    fields = [(key, value) for key, value in headers.items() if value or key == "Subject"]
    return _described(fields, ["\n".join(body_lines)], notes, fallback_subject=fallback_subject)


def _header(value: str | email.header.Header | None, notes: list[str]) -> str:
    """A mail header's text: unfolded, RFC 2047 words and raw 8-bit bytes decoded."""
    if value is None:
        return ""
    # compat32 gives a Header object (not str) for a value with raw 8-bit bytes.
    unfolded = re.sub(r"\r?\n(?=[ \t])", "", value) if isinstance(value, str) else value
    return "".join(_decode(chunk, charset, notes) if isinstance(chunk, bytes) else chunk
                   for chunk, charset in email.header.decode_header(unfolded)).strip()


def _decode(data: bytes, charset: str | None, notes: list[str]) -> str:
    """Text of description bytes: the declared charset, else UTF-8, else Latin-1 (stated)."""
    if charset:
        try:
            return data.decode(charset)
        except (LookupError, UnicodeDecodeError):
            pass
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        note = "description is not UTF-8: decoded as Latin-1"
        if note not in notes:
            notes.append(note)
        return data.decode("latin-1")


def _fields(lines: list[str]) -> list[tuple[str, str]]:
    fields: list[tuple[str, str]] = []
    for line in lines:
        found = FIELD.match(line)
        if found and line[:1] not in " \t":
            fields.append((found["key"], found["value"].strip()))
        else:
            # DEP-3 continuation line; " ." stands for an empty line.
            content = line.strip()
            key, value = fields[-1]
            fields[-1] = (key, value + "\n" + ("" if content == "." else content))
    return fields


def _described(fields: list[tuple[str, str]], free: list[str], notes: list[str], *,
               fallback_subject: str) -> Description:
    lowered = [(key.lower(), key, value) for key, value in fields]
    described = next((value for low, _, value in lowered if low in SUBJECT_FIELDS), "")
    subject, _, long_description = described.partition("\n")
    if not subject.strip() and free:
        subject, _, rest = free[0].lstrip("\n").partition("\n")
        free = ([rest] if rest.strip() else []) + free[1:]
    authors = [value for low, _, value in lowered if low in AUTHOR_FIELDS and value.strip()]
    date = next((value for low, _, value in lowered if low == "date"), "")
    last_update = next((value.strip() for low, _, value in lowered if low == "last-update"), "")
    if date:  # as git's raw date
        try:
            parsed = email.utils.parsedate_to_datetime(date)
        except (TypeError, ValueError) as error:
            raise ValueError(f"Date: {date!r} is not a mail (RFC 2822) date, e.g. 'Wed, 01 May 2024 10:00:00 +0000'") from error
        date = f"{int(parsed.timestamp())} {parsed.strftime('%z') or '+0000'}"
    elif re.fullmatch(r"\d{4}-\d{2}-\d{2}", last_update):
        midnight = datetime.datetime.strptime(last_update, "%Y-%m-%d").replace(tzinfo=datetime.UTC)
        date = f"{int(midnight.timestamp())} +0000"
    trailers = [(key, " ".join(value.split())) for low, key, value in lowered
                if low not in (*SUBJECT_FIELDS, *AUTHOR_FIELDS, "date")]
    if any(not value for _, value in trailers):
        # "Key:" with no value is no trailer to git: the Feature: trailer after it would be lost.
        notes.append("dropped empty field(s): " + ", ".join(key for key, value in trailers if not value))
        trailers = [(key, value) for key, value in trailers if value]
    trailers += [("Co-authored-by", author) for author in authors[1:]]
    cleaned = git_am_subject(" ".join(subject.split()))
    if cleaned != " ".join(subject.split()):
        notes.append(f"subject prefix git am strips dropped: {' '.join(subject.split())!r} -> {cleaned!r}")
    body = "\n\n".join(part.strip("\n") for part in [long_description, *free] if part.strip())
    body, escaped = mail_safe_body(body)
    notes += escaped
    values = {low: value.strip().lower() for low, _, value in lowered}
    upstream = ("upstreamed" if "applied-upstream" in values or values.get("origin", "").startswith("upstream")
                else "submitted" if values.get("forwarded", "") not in NOT_FORWARDED else "local")
    return Description(subject=cleaned or fallback_subject, body=body,
                       author=authors[0] if authors else "", date=date,
                       trailers=tuple(trailers), upstream=upstream, notes=tuple(notes))


def mail_safe_body(body: str) -> tuple[str, list[str]]:
    """`body` as git am reads it back, and what changed: lines git would cut at (a mbox `From `
    line, a diff start) or an in-body header at the start indented by one space; stripspace."""
    notes = []
    lines = body.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    for number, line in enumerate(lines):
        raw = line.encode("utf-8", errors="surrogateescape")
        if MBOX_FROM.match(raw) or PATCH_BREAK.match(raw) or (number == 0 and IN_BODY_HEADER.match(line)):
            lines[number] = " " + line
            notes.append(f"description line {line[:40]!r} indented (git am would read it as "
                         f"{'a mail boundary' if MBOX_FROM.match(raw) else 'a header' if number == 0 and IN_BODY_HEADER.match(line) else 'the diff start'})")
    return stripspace("\n".join(lines)).rstrip("\n"), notes


def stripspace(text: str) -> str:
    """git's stripspace (without comments)."""
    out: list[str] = []
    for line in text.split("\n"):
        line = line.rstrip(" \t\r\f\v")
        if line or (out and out[-1]):
            out.append(line)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out) + "\n" if out else ""


FORWARDED_VALUES = ("no", "not-needed", "yes")  # or a URL (DEP-3; "yes" as Debian's patches write it)


# What `forkbuild new`'s commit template asks to be replaced (subject, body): a message holding one
# was never written, and export and check refuse it.
PLACEHOLDERS = ("<what the patch changes, one line>", "<why: the problem, how the guard switches it, what was measured>")
# The first of the template's '#' lines: git's editor drops them; `git commit -F`/`-m` keep them,
# and then the trailers above them are no trailers to git.
TEMPLATE_COMMENT = "# Written by `forkbuild new "


def template_comments(info: PatchInfo) -> bool:
    return any(line.startswith(TEMPLATE_COMMENT) for line in info.message.splitlines())


def placeholder_problem(info: PatchInfo) -> str | None:
    """What is wrong with a patch whose subject or body still holds a template placeholder or '#' lines."""
    found = next((text for text in PLACEHOLDERS if text in info.subject or text in info.message), None)
    if found:
        return f"its message still holds the commit template's {found!r}: say what it changes and why"
    if template_comments(info):
        return ("its message still holds the commit template's '#' lines (git's editor drops them; `git commit "
                "-F` keeps them, and the trailers above them are then no trailers): `git commit --amend --no-edit "
                "--cleanup=strip` drops them")
    return None


def provenance_problem(trailers: dict[str, list[str]]) -> str | None:
    """What is wrong with a patch's DEP-3 provenance (its message's `Forwarded:`, `Applied-Upstream:`), if anything."""
    forwarded = trailers.get("forwarded", [])
    if not forwarded:
        return ("has no `Forwarded:` line: add one beside its `Feature:` line (`Forwarded: no`, "
                "`Forwarded: not-needed`, or the URL it was sent to)")
    value = forwarded[-1].strip()
    if value.lower() not in FORWARDED_VALUES and not re.match(r"^https?://\S+$", value):
        return f"`Forwarded: {value}` is not `no`, `not-needed`, `yes` or a URL"
    return None


def applied_upstream(trailers: dict[str, list[str]]) -> str:
    """The release a patch's `Applied-Upstream:` names (its first word: "0.5.24", or a version in a URL), or ""."""
    value = (trailers.get("applied-upstream") or [""])[-1].strip()
    found = re.search(r"(?<![\w.])v?(\d+(?:\.\d+)+)(?![\w.])", value)
    return found[1] if found else ""

