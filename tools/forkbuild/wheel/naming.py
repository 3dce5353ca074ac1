"""Versions and names of a patched wheel: local version, file name, .dist-info, and the two
places that spell the version out (METADATA's `Version:` line and `_version.py`)."""

from __future__ import annotations

import re

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from forkbuild.errors import BuildError

HASH_DIGITS = 10


def local_version(*, upstream_version: str, variant: str, content_hash: str) -> str:
    """`<upstream>+<variant>.<hash>` in PEP 440 normal form, as installers report it."""
    try:
        base = Version(upstream_version)
        version = Version(f"{upstream_version}+{variant}.{content_hash[:HASH_DIGITS]}")
    except InvalidVersion as error:
        raise BuildError(f"cannot make a local version from {upstream_version!r} and variant {variant!r}: {error}",
                         hint="variant names become part of a PEP 440 local label: letters and digits, one '.', '_' or '-' "
                              "between two of them") from error
    if base.local is not None:
        raise BuildError(f"upstream version {upstream_version} already has a local label; it cannot take the variant's")
    return str(version)


def distribution_part(name: str) -> str:
    return canonicalize_name(name).replace("-", "_")


def dist_info_dir(name: str, version: str) -> str:
    return f"{distribution_part(name)}-{version}.dist-info"


def wheel_tags(filename: str) -> str:
    """`<python>-<abi>-<platform>` of a wheel file name."""
    try:
        parse_wheel_filename(filename)
    except InvalidWheelFilename as error:
        raise BuildError(f"{filename}: not a wheel file name: {error}") from error
    return "-".join(filename[: -len(".whl")].rsplit("-", 3)[1:])


def wheel_filename(*, name: str, version: str, tags: str) -> str:
    return f"{distribution_part(name)}-{version}-{tags}.whl"


def set_metadata_version(metadata: bytes, version: str, *, source: str) -> bytes:
    """METADATA with only its `Version:` line changed (email.message would refold long fields)."""
    header_end = metadata.find(b"\n\n")
    header = metadata if header_end < 0 else metadata[:header_end + 1]
    matches = list(re.finditer(rb"^Version:[ \t]*([^\r\n]*)", header, flags=re.MULTILINE))
    if len(matches) != 1:
        raise BuildError(f"{source}: expected exactly one 'Version:' header line, found {len(matches)}")
    start, end = matches[0].span()
    return metadata[:start] + b"Version: " + version.encode("ascii") + metadata[end:]


_VERSION_LINE = re.compile(r"^(__version__ = version = )(['\"])([^'\"]*)\2[ \t]*$", re.MULTILINE)
_TUPLE_LINE = re.compile(r"^(__version_tuple__ = version_tuple = )\(.*\)[ \t]*$", re.MULTILINE)


def set_version_module(content: bytes, version: str, *, source: str) -> bytes:
    """`_version.py` (as setuptools-scm/vcs-versioning write it) with the new version."""
    text = content.decode("utf-8")
    for pattern in (_VERSION_LINE, _TUPLE_LINE):
        if len(pattern.findall(text)) != 1:
            raise BuildError(f"{source}: expected exactly one line like {pattern.pattern!r}",
                             hint="the version module changed shape upstream; update forkbuild.wheel.naming")
    text = _VERSION_LINE.sub(lambda m: f"{m.group(1)}{m.group(2)}{version}{m.group(2)}", text)
    parsed = Version(version)
    parts = [*map(str, parsed.release), *([repr(parsed.local)] if parsed.local is not None else [])]
    text = _TUPLE_LINE.sub(lambda m: f"{m.group(1)}({', '.join(parts)})", text)
    return text.encode("utf-8")
