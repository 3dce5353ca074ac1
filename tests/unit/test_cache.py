"""The upstream cache on fixture wheels and a fixture git remote made in tmp_path."""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from fixtures import http_server
from forkbuild.errors import UpstreamError
from forkbuild.io.fsutil import flocked
from forkbuild.io.git import Git
from forkbuild.series.config import GitPin, Upstream, WheelPin
from forkbuild.upstream import cache as cache_module
from forkbuild.upstream.cache import UpstreamCache


def make_wheel(directory: Path, version: str, files: dict[str, str]) -> WheelPin:
    path = directory / f"demo-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            member = zipfile.ZipInfo(f"demo/{name}")
            member.external_attr = (0o755 if name.endswith(".sh") else 0o644) << 16
            archive.writestr(member, text)
        archive.writestr(f"demo-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: demo\nVersion: {version}\n")
        archive.writestr(f"demo-{version}.dist-info/RECORD", "")
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    return WheelPin(python_tag="py3", filename=path.name, sha256=sha, url=path.as_uri())


def wheel_upstream(pin: WheelPin, version: str) -> Upstream:
    return Upstream(name="demo", version=version, package_root="python", source="wheel", git=None, wheels=(pin,))


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                          capture_output=True, text=True, check=True).stdout.strip()


def refs(cache: UpstreamCache) -> str:
    return git("for-each-ref", cwd=cache.repo_path) if cache.repo_path.exists() else ""


def test_wheel_import_lays_packages_under_the_root_and_tags(tmp_path):
    pin = make_wheel(tmp_path, "1.0", {"__init__.py": "VERSION = '1.0'\n", "core.py": "def f():\n    return 1\n"})
    cache = UpstreamCache(tmp_path / "cache")
    commit = cache.ensure(wheel_upstream(pin, "1.0"))
    files = git("ls-tree", "-r", "--name-only", commit, cwd=cache.repo_path).split()
    assert files == ["python/demo/__init__.py", "python/demo/core.py"]
    assert git("rev-parse", f"{wheel_upstream(pin, '1.0').tag}^{{commit}}", cwd=cache.repo_path) == commit
    assert (cache.wheels_dir / pin.filename).is_file()


def test_a_changed_package_root_is_imported_anew_never_the_old_tree(tmp_path):
    # With the old tree, patches of python/... applied and the overlay wheel left them all out (exit 0).
    pin = make_wheel(tmp_path, "1.0", {"__init__.py": "x = 1\n"})
    cache = UpstreamCache(tmp_path / "cache")
    cache.ensure(wheel_upstream(pin, "1.0"))
    moved = dataclasses.replace(wheel_upstream(pin, "1.0"), package_root="src")
    commit = cache.ensure(moved)
    assert git("ls-tree", "-r", "--name-only", commit, cwd=cache.repo_path).split() == ["src/demo/__init__.py"]


def test_wheel_import_keeps_the_executable_bit(tmp_path):
    pin = make_wheel(tmp_path, "1.0", {"__init__.py": "x = 1\n", "run.sh": "#!/bin/sh\n"})
    cache = UpstreamCache(tmp_path / "cache")
    listing = git("ls-tree", "-r", cache.ensure(wheel_upstream(pin, "1.0")), cwd=cache.repo_path).splitlines()
    modes = {line.split()[-1]: line.split()[0] for line in listing}
    assert modes == {"python/demo/__init__.py": "100644", "python/demo/run.sh": "100755"}


def test_same_wheel_gives_the_same_commit_on_any_machine(tmp_path):
    pin = make_wheel(tmp_path, "1.0", {"__init__.py": "x = 1\n"})
    first = UpstreamCache(tmp_path / "a").ensure(wheel_upstream(pin, "1.0"))
    second = UpstreamCache(tmp_path / "b").ensure(wheel_upstream(pin, "1.0"))
    assert first == second


def test_second_run_needs_no_network(tmp_path, monkeypatch):
    pin = make_wheel(tmp_path, "1.0", {"__init__.py": "x = 1\n"})
    cache = UpstreamCache(tmp_path / "cache")
    commit = cache.ensure(wheel_upstream(pin, "1.0"))
    monkeypatch.setattr("urllib.request.urlopen", lambda *a, **k: pytest.fail("network used"))
    assert cache.ensure(wheel_upstream(pin, "1.0")) == commit
    assert cache.wheel(pin) == cache.wheels_dir / pin.filename


def test_sha256_mismatch_refuses_and_deletes_nothing(tmp_path):
    good = make_wheel(tmp_path, "1.0", {"__init__.py": "x = 1\n"})
    cache = UpstreamCache(tmp_path / "cache")
    cache.ensure(wheel_upstream(good, "1.0"))
    before = (refs(cache), sorted(p.name for p in cache.wheels_dir.iterdir()))
    newer = make_wheel(tmp_path, "1.1", {"__init__.py": "x = 2\n"})
    tampered = WheelPin(python_tag="py3", filename=newer.filename, sha256="f" * 64, url=newer.url)
    with pytest.raises(UpstreamError, match="sha256 mismatch"):
        cache.ensure(wheel_upstream(tampered, "1.1"))
    assert (refs(cache), sorted(p.name for p in cache.wheels_dir.iterdir())) == before


def test_earlier_versions_stay_in_the_cache(tmp_path):
    cache = UpstreamCache(tmp_path / "cache")
    old = cache.ensure(wheel_upstream(make_wheel(tmp_path, "1.0", {"__init__.py": "x = 1\n"}), "1.0"))
    new = cache.ensure(wheel_upstream(make_wheel(tmp_path, "1.1", {"__init__.py": "x = 2\n"}), "1.1"))
    assert old != new
    tags = {line.split()[-1] for line in refs(cache).splitlines()}
    assert {tag.split("+")[0] for tag in tags} >= {"refs/tags/upstream/1.0", "refs/tags/upstream/1.1"}


def test_git_mode_fetches_the_pinned_commit_from_a_remote(tmp_path):
    work = tmp_path / "upstream-work"
    (work / "python" / "demo").mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=work)
    (work / "python" / "demo" / "__init__.py").write_text("x = 1\n")
    git("add", "-A", cwd=work)
    git("commit", "-qm", "v1", cwd=work)
    pinned = git("rev-parse", "HEAD", cwd=work)
    (work / "python" / "demo" / "__init__.py").write_text("x = 2\n")
    git("commit", "-qam", "after the pin", cwd=work)
    remote = tmp_path / "remote.git"
    git("clone", "-q", "--bare", str(work), str(remote), cwd=tmp_path)
    upstream = Upstream(name="demo", version="1.0", package_root="python", source="git",
                        git=GitPin(url=str(remote), commit=pinned), wheels=())
    cache = UpstreamCache(tmp_path / "cache")
    assert cache.ensure(upstream) == pinned
    assert git("show", f"{pinned}:python/demo/__init__.py", cwd=cache.repo_path) == "x = 1"


def test_git_mode_unknown_commit_is_an_upstream_error(tmp_path):
    remote = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(remote), cwd=tmp_path)
    upstream = Upstream(name="demo", version="1.0", package_root="python", source="git",
                        git=GitPin(url=str(remote), commit="1" * 40), wheels=())
    with pytest.raises(UpstreamError, match="cannot fetch"):
        UpstreamCache(tmp_path / "cache").ensure(upstream)


@pytest.mark.parametrize("round_", range(4))  # the race on a new cache is narrow: several rounds find it
def test_two_processes_share_the_cache_through_the_lock(tmp_path, round_):
    # Both start on an empty cache: one creates the repository while the other looks for it
    # without the lock (`git init` writes HEAD before objects/: it must never be seen half made).
    pin = make_wheel(tmp_path, "1.0", {f"m{i}.py": f"x = {i}\n" for i in range(200)})
    script = textwrap.dedent(f"""
        from pathlib import Path
        from forkbuild.upstream.cache import UpstreamCache
        from forkbuild.series.config import Upstream, WheelPin
        pin = WheelPin(python_tag="py3", filename={pin.filename!r}, sha256={pin.sha256!r}, url={pin.url!r})
        upstream = Upstream(name="demo", version="1.0", package_root="python", source="wheel", git=None, wheels=(pin,))
        print(UpstreamCache(Path({str(tmp_path / 'cache')!r})).ensure(upstream))
    """)
    processes = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
    outputs = [process.communicate(timeout=120) for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs
    assert outputs[0][0] == outputs[1][0]
    assert len(refs(UpstreamCache(tmp_path / "cache")).splitlines()) == 1


def test_a_repository_a_kill_left_half_made_is_made_again(tmp_path):
    # What a `git init` killed between HEAD and objects/ left (before it was made aside): no object
    # in it, so nothing to keep; the next import makes the repository again instead of refusing it.
    pin = make_wheel(tmp_path, "1.0", {"m.py": "x = 1\n"})
    upstream = Upstream(name="demo", version="1.0", package_root="python", source="wheel", git=None, wheels=(pin,))
    half = tmp_path / "cache" / "upstream.git"
    half.mkdir(parents=True)
    (half / "HEAD").write_text("ref: refs/heads/main\n")
    commit = UpstreamCache(tmp_path / "cache").ensure(upstream)
    assert Git(half).rev(f"refs/tags/{upstream.tag}") == commit
    assert [path.name for path in (tmp_path / "cache").iterdir() if path.name.startswith(".upstream.git-")] == []


def test_a_held_lock_becomes_lock_timeout_with_a_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from forkbuild.errors import LockTimeout
    from forkbuild.upstream import cache as cache_module

    (tmp_path / "dist").mkdir()
    pin = make_wheel(tmp_path / "dist", "1.0", {"__init__.py": ""})
    cache = UpstreamCache(tmp_path / "cache")
    monkeypatch.setattr(cache_module, "LOCK_TIMEOUT_SECONDS", 0.1)
    cache.path.mkdir(parents=True)
    with flocked(cache.path / "lock"):  # another process importing
        with pytest.raises(LockTimeout, match="held by another process") as caught:
            cache.wheel(pin)
        with pytest.raises(LockTimeout):
            with cache.locked():
                pass
    assert "stale" in caught.value.hint
    with cache.locked():  # free again: taken and released
        pass
    assert cache.wheel(pin).is_file()


# -- verified on use ---------------------------------------------------------------

def test_a_cached_wheel_changed_afterwards_is_fetched_again_never_used(tmp_path, monkeypatch, capsys):
    pin = make_wheel(tmp_path, "1.0", {"__init__.py": "x = 1\n"})
    cache = UpstreamCache(tmp_path / "cache")
    cached = cache.wheel(pin)
    good = cached.read_bytes()
    cached.write_bytes(good[:-10])  # truncated (or edited: any change)
    capsys.readouterr()
    assert cache.wheel(pin).read_bytes() == good  # fetched again from the pin's url
    assert " ".join(capsys.readouterr().err.split()).count("does not match its sha256 pin") == 1  # said once
    # Offline, a damaged wheel is a clear error, and is not handed out.
    cached.write_bytes(b"edited")
    monkeypatch.setattr("urllib.request.urlopen", lambda *a, **k: (_ for _ in ()).throw(OSError("offline")))
    with pytest.raises(UpstreamError, match="does not match its pin") as raised:
        cache.wheel(pin)
    assert "fetch --verify" in raised.value.hint
    assert cached.read_bytes() == b"edited"


def test_a_cached_wheel_is_hashed_on_every_use(tmp_path, monkeypatch):
    """Nothing in the cache vouches for a wheel (a stamp saved no command 20 %: docs/DESIGN.md)."""
    pin = make_wheel(tmp_path, "1.0", {"__init__.py": "x = 1\n"})
    cache = UpstreamCache(tmp_path / "cache")
    cache.wheel(pin)
    hashed = []
    real = cache_module.sha256_of
    monkeypatch.setattr(cache_module, "sha256_of", lambda path: hashed.append(path) or real(path))
    cache.wheel(pin)
    assert hashed == [cache.wheels_dir / pin.filename]
    cache.ensure(wheel_upstream(pin, "1.0"))
    before = len(hashed)
    checked = cache.verify(wheel_upstream(pin, "1.0"))
    assert any(line.endswith("git fsck clean") for line in checked)
    assert any("imports as it" in line for line in checked)  # --verify imports the pinned wheel again
    assert len(hashed) > before

def test_moving_the_pin_without_renaming_the_version_imports_anew(tmp_path):
    cache = UpstreamCache(tmp_path / "cache")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = cache.ensure(wheel_upstream(make_wheel(tmp_path / "a", "1.0", {"__init__.py": "x = 1\n"}), "1.0"))
    second = cache.ensure(wheel_upstream(make_wheel(tmp_path / "b", "1.0", {"__init__.py": "x = 2\n"}), "1.0"))
    assert first != second


@pytest.mark.parametrize("length", ["abc", "-1", ""])
def test_a_download_whose_server_misstates_its_length_is_still_verified_and_kept(tmp_path, length):
    """A mirror's Content-Length is its word, not a number forkbuild trusts: the sha256 is the check."""
    pin = make_wheel(tmp_path, "1.0", {"__init__.py": "VERSION = '1.0'\n"})
    data = Path(pin.url.removeprefix("file://")).read_bytes()
    with http_server(lambda path: (200, {"Content-Length": length} if length else {}, data)) as base:
        cache = UpstreamCache(tmp_path / "cache")
        cache.ensure(wheel_upstream(dataclasses.replace(pin, url=f"{base}/{pin.filename}"), "1.0"))
    assert (cache.wheels_dir / pin.filename).read_bytes() == data
