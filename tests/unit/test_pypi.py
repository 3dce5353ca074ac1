"""The package index client, with urlopen replaced by a canned PEP 691 page (no network)."""

from __future__ import annotations

import io
import json

import pytest

from forkbuild.errors import UpstreamError
from forkbuild.upstream import pypi

PAGE = {"files": [
    {"filename": "demo-1.0-py3-none-any.whl", "url": "https://files.invalid/demo.whl", "hashes": {"sha256": "ab" * 32}},
    {"filename": "demo-0.9-py3-none-any.whl", "url": "https://files.invalid/old.whl", "yanked": True}]}


def test_the_index_url_is_read_when_called_not_when_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = []

    def urlopen(request, timeout):
        asked.append((request.full_url, request.get_header("Accept")))
        return io.BytesIO(json.dumps(PAGE).encode())

    monkeypatch.setattr(pypi.urllib.request, "urlopen", urlopen)
    monkeypatch.setenv("FORKBUILD_INDEX_URL", "https://mirror.invalid/simple/")
    assert pypi.find_file("Demo", "demo-1.0-py3-none-any.whl").sha256 == "ab" * 32
    assert asked == [("https://mirror.invalid/simple/demo/", pypi.SIMPLE_JSON)]
    with pytest.raises(UpstreamError, match="not among the files https://mirror.invalid/simple lists"):
        pypi.find_file("demo", "demo-0.9-py3-none-any.whl")  # yanked: not offered
    monkeypatch.delenv("FORKBUILD_INDEX_URL")
    pypi.project_files("demo")
    assert asked[-1][0] == "https://pypi.org/simple/demo/"
