"""Where a rebase goes: the new upstream pin, from `--onto VERSION` (the release's
wheels on the package index, one per Python tag the series pins now, each with
the index's sha256) or `--onto COMMIT` (a commit of the upstream git URL); and
series.toml's [upstream] moved to it with tomlkit (comments and layout survive)."""

from __future__ import annotations

import dataclasses
import re

import tomlkit
from packaging.utils import parse_wheel_filename
from packaging.version import InvalidVersion, Version

from forkbuild.errors import ConfigError, UpstreamError
from forkbuild.series.config import VERSION_RULE, GitPin, Upstream, WheelPin, is_version_name
from forkbuild.upstream import pypi

COMMIT = re.compile(r"[0-9a-f]{7,40}")


def looks_like_commit(onto: str) -> bool:
    """A hex string of 7+ digits is a commit; version strings have dots."""
    return bool(COMMIT.fullmatch(onto)) and "." not in onto


def release_version(text: str) -> str:
    """`text` as the index spells a version (v0.5.22 and 0.5.022 are 0.5.22); UpstreamError otherwise."""
    try:
        return str(Version(text))
    except InvalidVersion as error:
        raise UpstreamError(f"{text!r} is not a version (like 0.5.23) or a commit id") from error


def resolve(current: Upstream, *, onto: str, version: str | None = None) -> Upstream:
    if looks_like_commit(onto):
        return _git_target(current, commit=onto, version=version)
    onto = release_version(onto)
    if current.source == "git":
        raise UpstreamError(f"--onto {onto}: this series builds from git (upstream.source = 'git'); "
                            "rebase onto a commit: --onto <full commit id> --version X")
    if not current.wheels:
        raise UpstreamError("--onto VERSION needs [[upstream.wheels]] pins to follow (which Python tags)")
    files = pypi.release_wheels(current.name, onto)
    if not files:
        raise UpstreamError(f"{current.name} {onto}: the index lists no wheels for this version")
    pins = tuple(_follow(pin, files, version=onto) for pin in current.wheels)
    git = current.git and GitPin(url=current.git.url, ref=_moved_ref(current, onto), commit="")
    return dataclasses.replace(current, version=onto, wheels=pins, git=git)


def _git_target(current: Upstream, *, commit: str, version: str | None) -> Upstream:
    if not current.git or not current.git.url:
        raise UpstreamError("--onto COMMIT needs [upstream.git] url in series.toml")
    if len(commit) != 40:
        raise UpstreamError(f"--onto {commit}: give the full 40-digit commit id (git fetches commits by full id)")
    if not version:
        raise UpstreamError(f"--onto {commit}: name the version this commit is (--version X), "
                            "it becomes the cache tag upstream/X and the series' upstream.version")
    if not is_version_name(version):
        raise UpstreamError(f"--version {version!r}: {VERSION_RULE}")
    git = GitPin(url=current.git.url, ref=_moved_ref(current, version), commit=commit)
    # Wheels pinned beside a git source are the old version's: new ones only for source = "wheel".
    return dataclasses.replace(current, version=version, git=git, wheels=())


def _moved_ref(current: Upstream, version: str) -> str:
    """The git ref, renamed along with the version when it spells the version (v0.5.22 -> v0.5.23)."""
    ref = current.git.ref if current.git else ""
    return ref.replace(current.version, version) if current.version and current.version in ref else ref


def _wheel_tags(filename: str, *, arch: bool = False) -> set[tuple[str, str, str]]:
    """(interpreter, abi, platform) of a wheel; arch: the platform's architecture alone
    (manylinux_2_34_x86_64 -> x86_64: the glibc floor may move between releases)."""
    return {(tag.interpreter, tag.abi, re.sub(r"^(?:(?:many|musl)linux_\d+_\d+|linux)_", "", tag.platform)
             if arch else tag.platform) for tag in parse_wheel_filename(filename)[3]}


def _follow(pin: WheelPin, files: list[pypi.IndexFile], *, version: str) -> WheelPin:
    """The new release's wheel for the same interpreter/ABI and architecture as `pin`."""
    same = [entry for entry in files if _wheel_tags(entry.filename) & _wheel_tags(pin.filename)]
    if not same:
        same = [entry for entry in files if _wheel_tags(entry.filename, arch=True) & _wheel_tags(pin.filename, arch=True)]
    if len(same) != 1:
        listed = ", ".join(entry.filename for entry in same or files)
        raise UpstreamError(f"{version}: {'no' if not same else 'more than one'} wheel matches the {pin.python_tag} "
                            f"pin {pin.filename} (index lists: {listed})")
    chosen = same[0]
    if not re.fullmatch(r"[0-9a-f]{64}", chosen.sha256 or ""):
        raise UpstreamError(f"{chosen.filename}: the index gives no sha256 digest; refusing to pin it unverified")
    # The url is kept for the import; series.toml gets it only where the old pin had one.
    return WheelPin(python_tag=pin.python_tag, filename=chosen.filename, sha256=chosen.sha256, url=chosen.url)


def moved_pin(text: str, target: Upstream) -> str:
    """series.toml `text` with [upstream] version, git ref/commit and wheel pins of `target`."""
    document = tomlkit.parse(text)
    upstream = document["upstream"]  # the series was parsed, and checked unedited since: it has one
    upstream["version"] = target.version
    if target.git and "git" in upstream:
        for key in ("ref", "commit"):
            value = getattr(target.git, key)
            if value or key in upstream["git"]:
                upstream["git"][key] = value
    if "wheels" in upstream and not target.wheels:
        # The old version's wheels (a git-source rebase): pins of another version would lie.
        del upstream["wheels"]
    # target.wheels follow the pins one for one, in series.toml's order (cp311/cp312 x each architecture).
    for index, table in enumerate(upstream.get("wheels", [])):
        pin = target.wheels[index] if index < len(target.wheels) else None
        if pin is None or pin.python_tag != table.get("python_tag"):
            raise ConfigError([f"upstream.wheels[{index}]: no {target.version} wheel for python_tag "
                               f"{table.get('python_tag')!r}"])
        table["filename"] = pin.filename
        table["sha256"] = pin.sha256
        if "url" in table:
            # Only where the old pin spelled out its url: otherwise the index is asked by name.
            table["url"] = pin.url
    return tomlkit.dumps(document)
