"""`import`: patches from a quilt series directory (DEP-3 headers kept) or a git
commit range become new entries at the end of the series.

Each incoming patch is committed on top of the whole series in a scratch work
tree (quilt: `git apply --index`, strict, no fuzz; git: `git am`), the commit
carries the `Feature:`/`Guard:` trailers, and the file written to patches/ is
that commit's `git format-patch` output — the same bytes `export` would write.
"""

from __future__ import annotations

import email.utils
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from forkbuild.apply import apply_variant
from forkbuild.cache import UpstreamCache
from forkbuild.config import Series, near_miss
from forkbuild.context import Context
from forkbuild.errors import ApplyError, ConfigError, ForkbuildError
from forkbuild.export import patch_name
from forkbuild.fsutil import write_atomic
from forkbuild.git import IDENTITY, Git, GitFailed
from forkbuild.patchfile import check_safe, parse_trailers
from forkbuild.series_edit import EntrySpec, quilt_series_text, read_quilt_series, updated_series_toml

FIELD = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9-]*):[ \t]*(?P<value>.*)$")
# Where a patch's header ends: the diff, quilt's Index:/=== lines, or format-patch's "---".
DIFF_START = re.compile(r"^(?:diff |Index: |--- \S|---$|===+$)", re.MULTILINE)
SUBJECT_FIELDS = ("description", "subject")
AUTHOR_FIELDS = ("author", "from")
NOT_FORWARDED = ("", "no", "not-needed")


@dataclass(frozen=True, kw_only=True)
class Dep3:
    """The header of a quilt patch (DEP-3 fields, or mail headers, plus free text)."""

    subject: str
    body: str
    author: str  # "Name <email>", "" when the patch names none
    date: str  # for GIT_AUTHOR_DATE, "" when unknown
    trailers: tuple[tuple[str, str], ...]  # the other fields, kept as trailers
    upstream: str  # local / submitted / upstreamed, from Forwarded/Applied-Upstream/Origin


@dataclass(frozen=True, kw_only=True)
class Incoming:
    """One patch to import: its target name and how to commit it in the scratch tree."""

    name: str
    source: str  # names the origin in messages
    feature: str
    upstream: str = "local"
    commit: Callable[[Git], str] = field(repr=False)


@dataclass(frozen=True, kw_only=True)
class Imported:
    file: str
    feature: str
    subject: str
    source: str


# -- DEP-3 -------------------------------------------------------------------------

def parse_dep3(text: str, *, fallback_subject: str) -> Dep3:
    match = DIFF_START.search(text)
    header = text[: match.start()] if match else text
    fields: list[tuple[str, str]] = []
    free: list[str] = []
    for paragraph in [block.strip("\n") for block in re.split(r"\n[ \t]*\n", header) if block.strip()]:
        lines = paragraph.splitlines()
        if not free and FIELD.match(lines[0]) and all(FIELD.match(line) or line[:1] in " \t" for line in lines):
            fields += _fields(lines)
        else:
            free.append(paragraph)
    return _dep3_from(fields, free, fallback_subject=fallback_subject)


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


def _dep3_from(fields: list[tuple[str, str]], free: list[str], *, fallback_subject: str) -> Dep3:
    lowered = [(key.lower(), key, value) for key, value in fields]
    described = next((value for low, _, value in lowered if low in SUBJECT_FIELDS), "")
    subject, _, long_description = described.partition("\n")
    if not subject and free:
        subject, _, rest = free[0].partition("\n")
        free = ([rest] if rest.strip() else []) + free[1:]
    authors = [value for low, _, value in lowered if low in AUTHOR_FIELDS]
    date = next((value for low, _, value in lowered if low == "date"), "")
    last_update = next((value for low, _, value in lowered if low == "last-update"), "")
    trailers = [(key, " ".join(value.split())) for low, key, value in lowered
                if low not in (*SUBJECT_FIELDS, *AUTHOR_FIELDS, "date")]
    trailers += [("Co-authored-by", author) for author in authors[1:]]
    body = "\n\n".join(part.strip("\n") for part in [long_description, *free] if part.strip())
    return Dep3(subject=" ".join(subject.split()) or fallback_subject, body=body,
                author=authors[0] if authors else "", date=_git_date(date, last_update),
                trailers=tuple(trailers), upstream=_upstream_status(lowered))


def _git_date(date: str, last_update: str) -> str:
    if date:
        try:
            parsed = email.utils.parsedate_to_datetime(date)
        except (TypeError, ValueError) as error:
            raise ValueError(f"Date: {date!r} is not a mail (RFC 2822) date, e.g. 'Wed, 01 May 2024 10:00:00 +0000'") from error
        return f"{int(parsed.timestamp())} {parsed.strftime('%z') or '+0000'}"
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", last_update):
        return f"{last_update}T00:00:00+0000"
    return ""


def _upstream_status(lowered: list[tuple[str, str, str]]) -> str:
    values = {low: value.strip().lower() for low, _, value in lowered}
    if "applied-upstream" in values or values.get("origin", "").startswith("upstream"):
        return "upstreamed"
    if values.get("forwarded", "") not in NOT_FORWARDED:
        return "submitted"
    return "local"


def with_trailers(message: str, trailers: list[tuple[str, str]]) -> str:
    """`message` with `trailers` appended to its trailer block (or as a new one)."""
    message = message.rstrip("\n")
    lines = "\n".join(f"{key}: {value}" for key, value in trailers)
    if not lines:
        return message + "\n"
    separator = "\n" if parse_trailers(message) and "\n\n" in message else "\n\n"
    return f"{message}{separator}{lines}\n"


def guard_trailers(series: Series, feature: str, diff: str) -> list[tuple[str, str]]:
    """A `Guard:` trailer for each guard of `feature` that the diff's added lines read."""
    added = "\n".join(line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++"))
    return [("Guard", guard.env) for guard in series.features[feature].guards if re.search(rf"\b{guard.env}\b", added)]


# -- sources -----------------------------------------------------------------------

def quilt_incoming(series: Series, directory: Path, *, feature: str) -> list[Incoming]:
    series_file = directory / "series"
    if not series_file.is_file():
        raise ForkbuildError(f"{directory} has no quilt `series` file", hint="point --quilt at the directory holding `series`")
    incoming, problems = [], []
    for name, strip in read_quilt_series(series_file):
        path = directory / name
        if not path.is_file():
            raise ForkbuildError(f"{series_file}: lists {name}, which does not exist")
        check_safe(path)
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        try:
            header = parse_dep3(text, fallback_subject=f"import {Path(name).stem}")
        except ValueError as error:
            problems.append(f"{path}: {error}")
            continue
        incoming.append(Incoming(name=Path(name).stem + ".patch", source=str(path), feature=feature,
                                 upstream=header.upstream,
                                 commit=_quilt_committer(series, path, header, strip=strip, feature=feature, diff=text)))
    if problems:
        raise ConfigError(problems, source=f"import from {directory}")
    return incoming


def _quilt_committer(series: Series, path: Path, header: Dep3, *, strip: int, feature: str, diff: str):
    def commit(tree: Git) -> str:
        try:
            tree.apply_index(path, strip=strip)
        except GitFailed as error:
            raise ApplyError(f"{path} does not apply on top of the series: {error.stderr or error.stdout}",
                             hint="refresh it against the series first (quilt push/refresh), or fix its -p level in `series`"
                             ) from error
        trailers = [*header.trailers, ("Feature", feature), *guard_trailers(series, feature, diff)]
        message = with_trailers(f"{header.subject}\n\n{header.body}" if header.body else header.subject, trailers)
        return _commit(tree, message=message, author=header.author, date=header.date or _mtime(path))
    return commit


def _mtime(path: Path) -> str:
    return f"{int(path.stat().st_mtime)} +0000"


def _commit(tree: Git, *, message: str, author: str, date: str) -> str:
    name, address = email.utils.parseaddr(author)
    env = {"GIT_AUTHOR_NAME": name or address or IDENTITY["user.name"],
           "GIT_AUTHOR_EMAIL": address if "@" in address else IDENTITY["user.email"],
           "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    return tree.commit(message, env=env)


def git_range_incoming(series: Series, repo: Path, revisions: str, *, feature: str | None) -> list[Incoming]:
    source = Git(repo)
    if ".." not in revisions:
        raise ForkbuildError(f"{revisions!r} is not a range", hint="give A..B: the commits after A up to B")
    start, end = revisions.split("..", 1)
    if source.merge_commits(start, end or "HEAD"):
        raise ForkbuildError(f"{repo} {revisions} holds merge commits, which cannot become patches")
    commits = source.commits(start, end or "HEAD")
    if not commits:
        raise ForkbuildError(f"{repo} {revisions} holds no commits")
    incoming = []
    for sha in commits:
        text = source.format_patch(sha)
        message = source.commit_message(sha)
        own = [value for key, value in parse_trailers(message) if key.lower() == "feature"]
        if own and feature and own != [feature]:
            raise ConfigError([f"commit {sha[:12]} of {repo} says Feature: {own[0]}, but --feature is {feature}"],
                              source="import")
        chosen = own[0] if own else feature
        if not chosen:
            raise ConfigError([f"commit {sha[:12]} of {repo} has no `Feature:` trailer; pass --feature NAME"],
                              source="import")
        subject = source.subject(sha)
        incoming.append(Incoming(name=patch_name(chosen, subject), source=f"{repo}@{sha[:12]}", feature=chosen,
                                 commit=_am_committer(series, text, source=f"{repo}@{sha[:12]}", feature=chosen,
                                                      has_feature=bool(own))))
    return incoming


def _am_committer(series: Series, text: str, *, source: str, feature: str, has_feature: bool):
    def commit(tree: Git) -> str:
        patch = tree.git_dir / "FORKBUILD_IMPORT.patch"
        patch.write_text(text)
        try:
            result = tree.am([patch], three_way=False, committer_date_is_author_date=True)
        finally:
            patch.unlink(missing_ok=True)
        if result.status != 0:
            tree.am_abort()
            output = (result.stderr + result.stdout).strip().splitlines()
            raise ApplyError(f"{source} does not apply on top of the series: {output[0] if output else 'git am failed'}")
        message = tree.commit_message()
        present = {value for key, value in parse_trailers(message) if key.lower() == "guard"}
        extra = [] if has_feature else [("Feature", feature)]
        extra += [item for item in guard_trailers(series, feature, text) if item[1] not in present]
        if extra:
            # Same committer date as am gave it: re-importing gives the same commit ids.
            return tree.commit(with_trailers(message, extra), env={"GIT_COMMITTER_DATE": tree.author_date()}, amend=True)
        return tree.head()
    return commit


# -- the import ----------------------------------------------------------------------

def check_incoming(series: Series, incoming: list[Incoming]) -> None:
    """Known features; no name that exists already or twice — before anything is touched."""
    problems = []
    taken = {entry.file for entry in series.patches} | {path.name for path in series.patches_dir.glob("*")}
    seen: set[str] = set()
    for item in incoming:
        if item.feature not in series.features:
            problems.append(f"{item.source}: feature {item.feature!r} is not in series.toml"
                            + (near_miss(item.feature, series.features) or " (add a [features.NAME] table first)"))
        if item.name in taken:
            problems.append(f"{item.source}: patches/{item.name} exists already; import never overwrites (rename one of them)")
        elif item.name in seen:
            problems.append(f"{item.source}: two incoming patches are both named {item.name}")
        seen.add(item.name)
    if problems:
        raise ConfigError(problems, source="import")


def import_patches(*, context: Context, incoming: list[Incoming]) -> list[Imported]:
    """Commit every incoming patch on top of the series, then write them all (or nothing)."""
    series = context.series
    check_incoming(series, incoming)
    scratch = Path(tempfile.mkdtemp(prefix="forkbuild-import-"))
    dest = scratch / "tree"
    try:
        tree = Git(apply_variant(context=context, variant=None, dest=dest).dest)
        with context.reporter.step(f"Committing {len(incoming)} incoming patch(es) on top of the series"):
            made = [(item, item.commit(tree)) for item in incoming]
        texts = {item.name: tree.format_patch(sha) for item, sha in made}
        subjects = {item.name: tree.subject(sha) for item, sha in made}
    finally:
        if dest.exists():
            UpstreamCache(context.cache_dir, reporter=context.reporter).git().remove_worktree(dest)
        shutil.rmtree(scratch, ignore_errors=True)
    _write(series, incoming, texts)
    return [Imported(file=item.name, feature=item.feature, subject=subjects[item.name], source=item.source)
            for item in incoming]


def _write(series: Series, incoming: list[Incoming], texts: dict[str, str]) -> None:
    """The patch files, then series.toml listing them; if that fails part way, the
    patch files written are removed again (an unlisted patch would break series.toml)."""
    entries = [EntrySpec(file=entry.file, feature=entry.feature, upstream=entry.upstream_status) for entry in series.patches]
    entries += [EntrySpec(file=item.name, feature=item.feature, upstream=item.upstream) for item in incoming]
    written: list[Path] = []
    try:
        for item in incoming:
            target = series.patches_dir / item.name
            if target.exists():  # appeared while we were applying: still never overwrite
                raise ForkbuildError(f"patches/{item.name} appeared during the import; nothing was written")
            write_atomic(target, texts[item.name].encode("utf-8", errors="surrogateescape"))
            written.append(target)
        write_atomic(series.path, updated_series_toml(series.path.read_text(), entries))
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    write_atomic(series.patches_dir / "series", quilt_series_text(entry.file for entry in entries))
