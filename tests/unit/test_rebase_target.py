"""The rebase target: following the pinned wheels to a new release on the index
(sha256 required), commits for git series, and the pin moved in series.toml."""

from __future__ import annotations

import tomllib

import pytest

from forkbuild.errors import UpstreamError
from forkbuild.rebase.target import looks_like_commit, moved_pin, resolve
from forkbuild.series.config import GitPin, Upstream, WheelPin
from forkbuild.upstream import pypi

SHA_A, SHA_B = "a" * 64, "b" * 64
CURRENT = Upstream(
    name="sglang", version="0.5.22", package_root="python", source="wheel",
    git=GitPin(url="https://example.invalid/sglang.git", ref="v0.5.22", commit=""),
    wheels=(WheelPin(python_tag="cp311", filename="sglang-0.5.22-cp311-cp311-manylinux_2_34_x86_64.whl", sha256="1" * 64),
            WheelPin(python_tag="cp312", filename="sglang-0.5.22-cp312-cp312-manylinux_2_34_x86_64.whl", sha256="2" * 64)))


def index(monkeypatch: pytest.MonkeyPatch, files: list[tuple[str, str]]) -> None:
    listing = [pypi.IndexFile(filename=name, url=f"https://files.invalid/{name}", sha256=sha) for name, sha in files]
    monkeypatch.setattr(pypi, "project_files", lambda project: listing)


def test_follows_each_python_tag_and_architecture(monkeypatch: pytest.MonkeyPatch) -> None:
    index(monkeypatch, [
        ("sglang-0.5.23-cp311-cp311-manylinux_2_34_aarch64.whl", "c" * 64),
        ("sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl", SHA_A),
        # The glibc floor moved for cp312: same interpreter, ABI and architecture still match.
        ("sglang-0.5.23-cp312-cp312-manylinux_2_39_x86_64.whl", SHA_B),
        ("sglang-0.5.22-cp311-cp311-manylinux_2_34_x86_64.whl", "1" * 64),
    ])
    target = resolve(CURRENT, onto="0.5.23")
    assert target.version == "0.5.23" and target.git.ref == "v0.5.23" and target.git.commit == ""
    assert [(pin.python_tag, pin.filename, pin.sha256) for pin in target.wheels] == [
        ("cp311", "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl", SHA_A),
        ("cp312", "sglang-0.5.23-cp312-cp312-manylinux_2_39_x86_64.whl", SHA_B)]


def test_refuses_a_wheel_without_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    index(monkeypatch, [("sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl", ""),
                        ("sglang-0.5.23-cp312-cp312-manylinux_2_34_x86_64.whl", SHA_B)])
    with pytest.raises(UpstreamError, match="no sha256"):
        resolve(CURRENT, onto="0.5.23")


def test_refuses_a_missing_python_tag(monkeypatch: pytest.MonkeyPatch) -> None:
    index(monkeypatch, [("sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl", SHA_A)])
    with pytest.raises(UpstreamError, match="no wheel matches the cp312 pin"):
        resolve(CURRENT, onto="0.5.23")


def test_unknown_release_and_bad_target(monkeypatch: pytest.MonkeyPatch) -> None:
    index(monkeypatch, [])
    with pytest.raises(UpstreamError, match="lists no wheels"):
        resolve(CURRENT, onto="9.9.9")
    with pytest.raises(UpstreamError, match="is not a version"):
        resolve(CURRENT, onto="not a version!")


def test_a_version_is_looked_up_as_the_index_spells_it(monkeypatch: pytest.MonkeyPatch) -> None:
    index(monkeypatch, [("sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl", SHA_A),
                        ("sglang-0.5.23-cp312-cp312-manylinux_2_34_x86_64.whl", SHA_A)])
    # A git tag's spelling (the --onto of a user who reads GitHub's releases) is the release.
    assert resolve(CURRENT, onto="v0.5.23").version == "0.5.23"


def test_commit_targets() -> None:
    assert looks_like_commit("0123abc") and not looks_like_commit("0.5.23") and not looks_like_commit("1234")
    full = "0123456789abcdef0123456789abcdef01234567"
    with pytest.raises(UpstreamError, match="--version"):
        resolve(CURRENT, onto=full)
    target = resolve(CURRENT, onto=full, version="0.5.23")
    assert target.git.commit == full and target.wheels == ()


@pytest.mark.parametrize("name", ["a/b", "../x", " ", "-x", "x..y", "x.lock", "x.", "0.5 .1"])
def test_a_version_name_that_is_no_tag_or_file_name_is_refused(name: str) -> None:
    # Before: "a/b" put the report in a nested directory, "../x" and " " ended in a raw git error.
    with pytest.raises(UpstreamError, match="--version .*: a version name is"):
        resolve(CURRENT, onto="0123456789abcdef0123456789abcdef01234567", version=name)


def test_moved_pin_keeps_comments_and_other_tables() -> None:
    text = '''# top comment
[upstream]
name = "sglang"
version = "0.5.22"  # the pin
package_root = "python"
source = "wheel"

[upstream.git]
url = "https://example.invalid/sglang.git"
ref = "v0.5.22"
commit = ""

# cp311 first
[[upstream.wheels]]
python_tag = "cp311"
filename = "sglang-0.5.22-cp311-cp311-manylinux_2_34_x86_64.whl"
sha256 = "%s"

[[upstream.wheels]]
python_tag = "cp312"
filename = "sglang-0.5.22-cp312-cp312-manylinux_2_34_x86_64.whl"
sha256 = "%s"
url = "https://old.invalid/x.whl"

[features.guards]
description = "kept"
''' % ("1" * 64, "2" * 64)
    target = Upstream(name="sglang", version="0.5.23", package_root="python", source="wheel",
                      git=GitPin(url="https://example.invalid/sglang.git", ref="v0.5.23", commit=""),
                      wheels=(WheelPin(python_tag="cp311", filename="new311.whl", sha256=SHA_A, url="https://n/311"),
                              WheelPin(python_tag="cp312", filename="new312.whl", sha256=SHA_B, url="https://n/312")))
    moved = moved_pin(text, target)
    assert "# top comment" in moved and "# the pin" in moved and "# cp311 first" in moved
    data = tomllib.loads(moved)
    assert data["upstream"]["version"] == "0.5.23" and data["upstream"]["git"]["ref"] == "v0.5.23"
    assert data["upstream"]["wheels"] == [
        {"python_tag": "cp311", "filename": "new311.whl", "sha256": SHA_A},  # no url where there was none
        {"python_tag": "cp312", "filename": "new312.whl", "sha256": SHA_B, "url": "https://n/312"}]
    assert data["features"] == {"guards": {"description": "kept"}}
