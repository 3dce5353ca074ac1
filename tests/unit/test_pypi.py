"""The package index client, with urlopen replaced by a canned PEP 691 page (no network)."""

from __future__ import annotations

import io
import json

import pytest

from fixtures import http_server
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


@pytest.fixture
def mirror(monkeypatch: pytest.MonkeyPatch):
    """A mirror on a local port: its pages as the test sets them, its one file at /packages/."""
    pages: dict[str, bytes] = {"/packages/demo-1.0-py3-none-any.whl": b"wheel bytes"}
    with http_server(lambda path: (200, {}, pages[path]) if path in pages else (404, {}, b"")) as base:
        monkeypatch.setenv("FORKBUILD_INDEX_URL", f"{base}/simple")
        yield base, pages


def test_a_mirrors_relative_file_url_is_resolved_against_its_page(mirror) -> None:
    """PEP 691 lets a file's url be relative to the project page (static mirrors write them so)."""
    import urllib.request

    base, pages = mirror
    pages["/simple/demo/"] = json.dumps({"files": [
        {"filename": "demo-1.0-py3-none-any.whl", "url": "../../packages/demo-1.0-py3-none-any.whl",
         "hashes": {"sha256": "cd" * 32}}]}).encode()
    found = pypi.find_file("demo", "demo-1.0-py3-none-any.whl")
    assert found.url == f"{base}/packages/demo-1.0-py3-none-any.whl"
    with urllib.request.urlopen(found.url) as response:  # what the cache's download then reads
        assert response.read() == b"wheel bytes"


@pytest.mark.parametrize("page", ['["demo-1.0-py3-none-any.whl"]', '{"files": [{"url": "x"}]}',
                                  '{"files": [{"filename": "demo-1.0-py3-none-any.whl", "url": "x", "hashes": ["x"]}]}',
                                  '{"meta": {}}'])
def test_a_page_of_another_shape_is_an_upstream_error_naming_it(mirror, page: str) -> None:
    base, pages = mirror
    pages["/simple/demo/"] = page.encode()
    with pytest.raises(UpstreamError, match=f"{base}/simple/demo/ is not a PEP 691 project page") as caught:
        pypi.release_wheels("demo", "1.0")
    assert "FORKBUILD_INDEX_URL" in (caught.value.hint or "")
