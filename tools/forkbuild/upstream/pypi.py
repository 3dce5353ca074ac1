"""The package index, through the PEP 691 JSON simple API (which every PyPI mirror serves)."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from forkbuild.errors import UpstreamError

DEFAULT_INDEX_URL = "https://pypi.org/simple"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"


@dataclass(frozen=True, kw_only=True)
class IndexFile:
    filename: str
    url: str
    sha256: str


def index_url() -> str:
    """$FORKBUILD_INDEX_URL (read on every call) or PyPI."""
    return (os.environ.get("FORKBUILD_INDEX_URL") or DEFAULT_INDEX_URL).rstrip("/")


def project_files(project: str) -> list[IndexFile]:
    url = f"{index_url()}/{canonicalize_name(project)}/"
    request = urllib.request.Request(url, headers={"Accept": SIMPLE_JSON})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            listing = json.load(response)
            page = getattr(response, "url", None) or url  # where a redirect led: relative URLs start there
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise UpstreamError(f"cannot read the index page {url}: {error}",
                            hint="check the network, or set FORKBUILD_INDEX_URL to a reachable index") from error
    try:  # PEP 691: a file's url may be relative to the page (mirrors serve them so)
        return [IndexFile(filename=str(entry["filename"]), url=urllib.parse.urljoin(page, str(entry["url"])),
                          sha256=str((entry.get("hashes") or {}).get("sha256", "")))
                for entry in listing["files"] if not entry.get("yanked")]
    except (KeyError, TypeError, AttributeError) as error:
        raise UpstreamError(f"{url} is not a PEP 691 project page ({type(error).__name__}: {error})",
                            hint="FORKBUILD_INDEX_URL names a simple index that answers in JSON (PEP 691)") from error


def find_file(project: str, filename: str) -> IndexFile:
    for entry in project_files(project):
        if entry.filename == filename:
            return entry
    raise UpstreamError(f"{filename} is not among the files {index_url()} lists for {project}")


def release_wheels(project: str, version: str) -> list[IndexFile]:
    """Every wheel of one release, in the index's order."""
    found = []
    for entry in project_files(project):
        try:
            _, wheel_version, _, _ = parse_wheel_filename(entry.filename)
        except InvalidWheelFilename:
            continue
        if str(wheel_version) == version:
            found.append(entry)
    return found
