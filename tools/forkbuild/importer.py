"""`import`: patches from a git commit range (`git am` in a scratch tree) or a quilt
series (quiltimport.py) become new entries at the end of the series, each written as
its commit's `git format-patch` output with `Feature:`/`Guard:` trailers."""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from forkbuild.applier import scratch_tree
from forkbuild.console import Reporter
from forkbuild.context import Context
from forkbuild.errors import ApplyError, ConfigError, ForkbuildError, UnsafePatchError, quoted
from forkbuild.exporter import forget_joins, new_joins, patch_name
from forkbuild.io.git import Git
from forkbuild.series.combination import whole_series
from forkbuild.series.config import Series, near_miss
from forkbuild.series.edit import EntrySpec, quilt_series_text, unported, updated_series_toml, with_empty_dirs
from forkbuild.series.patchfile import parse_patch, parse_trailers, safety_problems
from forkbuild.series.writer import SeriesChange, write_series
from forkbuild.worktree.engine import Engine, Outcome, PatchJob
from forkbuild.worktree.guards_module import is_generated, module_path


@dataclass(frozen=True, kw_only=True)
class Incoming:
    """One commit of a git range to import, as `git format-patch` wrote it."""

    name: str  # in patches/
    source: str  # names the origin in messages
    feature: str
    text: str
    has_feature: bool  # its message has a Feature: trailer already
    upstream: str = "local"


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


def _no_commit(repo: Path, revisions: str, name: str) -> NoReturn:
    raise ForkbuildError(f"{revisions!r}: {name!r} is no commit of {repo}",
                         hint=f"`git -C {quoted(repo)} log --oneline` lists its commits")


def git_range_incoming(repo: Path, revisions: str, *, feature: str | None) -> list[Incoming]:
    source = Git(repo)
    if ".." not in revisions:
        raise ForkbuildError(f"{revisions!r} is not a range", hint="give A..B: the commits after A up to B")
    start, end = revisions.split("..", 1)
    if end.startswith("."):
        raise ForkbuildError(f"{revisions!r}: A...B (the commits of either side) is no series",
                             hint="give A..B: the commits after A up to B")
    # Resolved here, each end named when it is no commit (git's own word is "ambiguous argument").
    start, end = ((source.rev(name) or _no_commit(repo, revisions, name)) for name in (start, end or "HEAD"))
    if source.merge_commits(start, end):
        raise ForkbuildError(f"{repo} {revisions} holds merge commits, which cannot become patches")
    commits = source.commits(start, end)
    if not commits:
        raise ForkbuildError(f"{repo} {revisions} holds no commits")
    incoming = []
    for sha in commits:
        text = source.format_patch(sha)
        message = source.log1("%B", sha)
        own = [value for key, value in parse_trailers(message) if key.lower() == "feature"]
        if own and feature and own != [feature]:
            raise ConfigError([f"commit {sha[:12]} of {repo} says Feature: {own[0]}, but --feature is {feature}"],
                              source="import")
        chosen = own[0] if own else feature
        if not chosen:
            raise ConfigError([f"commit {sha[:12]} of {repo} has no `Feature:` trailer; pass --feature NAME"],
                              source="import")
        incoming.append(Incoming(name=patch_name(chosen, source.log1("%s", sha)), source=f"{repo}@{sha[:12]}",
                                 feature=chosen, text=text, has_feature=bool(own)))
    return incoming


def _commit(engine: Engine, series: Series, item: Incoming, scratch: Path) -> str:
    """`item` committed on the engine's head (as it is or at an offset: never merged), its
    Feature:/Guard:/Forwarded: trailers added; the commit."""
    patch = scratch / item.name
    patch.write_text(item.text)
    result = engine.run([PatchJob(name=item.name, path=patch)], stop=False)[0]
    if result.outcome not in (Outcome.EXACT, Outcome.OFFSET):
        raise ApplyError(f"{item.source} does not apply on top of the series: {result.detail}")
    tree = engine.worktree
    message = tree.log1("%B", result.commit)
    present = {value for key, value in parse_trailers(message) if key.lower() == "guard"}
    extra = [] if item.has_feature else [("Feature", item.feature)]
    extra += [trailer for trailer in guard_trailers(series, item.feature, item.text) if trailer[1] not in present]
    if not any(key.lower() == "forwarded" for key, _ in parse_trailers(message)):
        extra.append(("Forwarded", "no"))  # DEP-3's default: not sent upstream (`forkbuild check` needs it said)
    return engine.reword(with_trailers(message, extra)) if extra else result.commit


def check_incoming(series: Series, incoming: list) -> None:
    """Known features, no name that exists already or twice (Incoming or QuiltPatch items)."""
    problems = []
    taken = {entry.file for entry in series.patches} | {path.name for path in series.patches_dir.glob("*")}
    seen: set[str] = set()
    for item in incoming:
        if item.feature not in series.features:
            problems.append(f"{item.source}: feature {item.feature!r} is not in series.toml"
                            + (near_miss(item.feature, series.features) or " (add a [features.NAME] table first)"))
        if not item.name.isprintable():
            problems.append(f"{item.source}: its name {item.name!r} has control characters: rename the file")
        elif item.name in taken:
            problems.append(f"{item.source}: patches/{item.name} exists already; import never overwrites (rename one of them)")
        elif item.name in seen:
            problems.append(f"{item.source}: two incoming patches are both named {item.name}")
        seen.add(item.name)
    if problems:
        raise ConfigError(problems, source="import")


def import_patches(*, context: Context, incoming: list[Incoming]) -> list[tuple[Incoming, str]]:
    """Commit every incoming patch on top of the series, then write them all (or nothing);
    each with the subject of its commit."""
    series = context.series
    check_incoming(series, incoming)
    unsafe = [f"{item.source}: {problem}" for item in incoming for problem in safety_problems(item.text)]
    generated = module_path(series)
    for item in incoming:  # a range taken from a series work tree may hold the generated commit or a change to it
        info = parse_patch(item.text, path=Path(item.name))
        if is_generated(info) or generated in {change.path for change in info.files}:
            unsafe.append(f"{item.source}: changes {generated}, which forkbuild generates from series.toml (declare "
                          "guards under their feature there)")
    if unsafe:  # the same rule as every patch of the series (patchfile.check_patches), before anything is written
        lines = "\n".join(f"  - {problem}" for problem in unsafe)
        raise UnsafePatchError(f"import: {len(unsafe)} problem(s):\n{lines}",
                               hint="patches may only change regular files inside the upstream tree: leave these "
                                    "commits out of the range, or change them in their repository")
    with scratch_tree(context=context, variant=whole_series(series), strict=True) as applied, \
            tempfile.TemporaryDirectory(prefix="forkbuild-import-") as scratch:
        tree = Git(applied.dest)
        engine = Engine(tree)
        with context.reporter.step(f"Committing {len(incoming)} incoming patch(es) on top of the series"):
            made = [(item, _commit(engine, series, item, Path(scratch))) for item in incoming]
        engine.close()
        texts = {item.name: tree.format_patch(sha).encode("utf-8", errors="surrogateescape") for item, sha in made}
        subjects = [(item, tree.log1("%s", sha)) for item, sha in made]
    write_imported(series, incoming, texts, reporter=context.reporter)
    return subjects


def write_imported(series: Series, incoming: list, texts: dict[str, bytes], *, reporter: Reporter,
                   empty_dirs: tuple[str, ...] = ()) -> None:
    """The patch files, series.toml and patches/series, as one series_writer transaction; a feature
    `forkbuild new` left waiting (`ported = false`) gets its patch as with export (edit.unported)."""
    entries = [EntrySpec(file=entry.file, feature=entry.feature, upstream=entry.upstream_status) for entry in series.patches]
    entries += [EntrySpec(file=item.name, feature=item.feature, upstream=item.upstream) for item in incoming]
    for item in incoming:
        if (series.patches_dir / item.name).exists():  # appeared while we were applying: still never overwrite
            raise ForkbuildError(f"patches/{item.name} appeared during the import; nothing was written")
    toml, notes, joined = unported(updated_series_toml(series.path.read_text(), entries), series, entries,
                                   joins=new_joins(series))
    write_series(series.path.parent, SeriesChange(
        series_toml=with_empty_dirs(toml, empty_dirs) if empty_dirs else toml,
        quilt_series=quilt_series_text(entry.file for entry in entries),
        patches={item.name: texts[item.name] for item in incoming}))
    forget_joins(series, {item.feature for item in incoming})
    for note in joined:
        reporter.info(note)
    for note in notes:
        reporter.warn(note)
