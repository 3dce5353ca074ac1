"""The patched sglang wheels from the real pinned 0.5.23 release wheels (downloaded
once into the repository's forkbuild cache), for every platform tp4 declares
(linux/arm64, the GB10 fleet's, and linux/amd64): built, validated, installed with
--no-deps into a fresh venv (and for aarch64 with pip's --platform), reproducible."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from forkbuild.wheel import manifest as manifest_module
from forkbuild.applier import scratch_tree
from forkbuild.console import Reporter
from forkbuild.context import Context
from forkbuild.errors import BuildError
from forkbuild.io.git import Git
from forkbuild.series.combination import of_variant
from forkbuild.wheel.builder import WheelRequest, build_wheels, variant_version
from forkbuild.wheel.validate import validate_wheel
from forkbuild.wheel.zipraw import ZipSource, ZipWriter

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
VARIANT = "tp4"


@pytest.fixture(scope="module")
def context() -> Context:
    return Context.create(series_dir=REPO, cache_dir=None, reporter=Reporter())


@pytest.fixture(scope="module")
def built(context, tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    return out, build_wheels(context=context, request=WheelRequest(variant=of_variant(context.series, VARIANT), out_dir=out))


@pytest.fixture(scope="module")
def cp311(built):
    (path,) = [wheel.path for wheel in built[1] if "-cp311-" in wheel.path.name and "x86_64" in wheel.path.name]
    return path


def by_arch(built, tag: str) -> dict[str, Path]:
    return {arch: wheel.path for wheel in built[1] for arch in ("x86_64", "aarch64")
            if f"-{tag}-" in wheel.path.name and wheel.path.name.endswith(f"_{arch}.whl")}


@pytest.fixture(scope="module")
def installed(cp311, tmp_path_factory):
    """A fresh venv with the cp311 wheel installed --no-deps; returns its python."""
    if sys.version_info[:2] != (3, 11):
        pytest.skip("the cp311 wheel installs into a Python 3.11 venv")
    root = tmp_path_factory.mktemp("venv")
    venv.create(root, with_pip=True)
    python = root / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--no-compile", str(cp311)],
                   check=True)
    return python


def run_python(python: Path, code: str) -> str:
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout


def test_one_validated_wheel_per_platform_and_pinned_tag(context, built):
    out, wheels = built
    version = variant_version(context.series, of_variant(context.series, VARIANT))
    assert context.series.variants[VARIANT].platforms == ("linux/arm64", "linux/amd64")
    assert sorted(wheel.path.name for wheel in wheels) == sorted(
        f"sglang-{version}-{tag}-{tag}-manylinux_2_34_{arch}.whl" for tag in ("cp311", "cp312")
        for arch in ("x86_64", "aarch64"))
    for wheel in wheels:
        validate_wheel(wheel.path)


@pytest.mark.parametrize("tag", ["cp311", "cp312"])
def test_every_platform_gets_the_same_patched_files_and_keeps_its_own_tags_and_record(built, tag):
    wheels = by_arch(built, tag)
    archives = {arch: zipfile.ZipFile(path) for arch, path in wheels.items()}
    patched = {arch: manifest_module.read_wheel(path) for arch, path in wheels.items()}
    assert patched["aarch64"].without_upstream() == patched["x86_64"].without_upstream()  # one build
    python = {arch: {name: archive.read(name) for name in archive.namelist() if name.endswith(".py")}
              for arch, archive in archives.items()}
    assert python["aarch64"] == python["x86_64"]  # every .py byte-identical, the 27 patched ones included
    for arch, archive in archives.items():
        dist_info = next(name.split("/")[0] for name in archive.namelist() if name.endswith(".dist-info/WHEEL"))
        assert f"Tag: {tag}-{tag}-manylinux_2_34_{arch}" in archive.read(f"{dist_info}/WHEEL").decode()
        record = archive.read(f"{dist_info}/RECORD").decode()
        extensions = [line.split(",")[0] for line in record.splitlines() if ".so," in line]
        other = "x86_64" if arch == "aarch64" else "aarch64"
        assert extensions and all(f"-{arch}-linux-gnu.so" in name for name in extensions)
        assert other not in record
        assert manifest_module.read_wheel(wheels[arch]).upstream.wheel.endswith(f"_{arch}.whl")


def test_the_aarch64_wheel_installs_for_aarch64_with_the_patched_files(context, built, tmp_path):
    wheels = by_arch(built, "cp312")
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    "--platform", "manylinux_2_34_aarch64", "--python-version", "3.12", "--only-binary=:all:",
                    "--no-compile", "--disable-pip-version-check", str(wheels["aarch64"])], check=True)
    with zipfile.ZipFile(wheels["x86_64"]) as x86:
        patched = [record.file for record in manifest_module.read_wheel(wheels["x86_64"]).patches]
        assert len(patched) == 16
        changed = [name for name in x86.namelist() if name.endswith(".py") and name.startswith("sglang/")
                   and (target / name).read_bytes() != x86.read(name)]
    assert changed == []
    assert (target / "sglang" / "srt" / "dsv41_guards.py").is_file()
    assert any("-aarch64-linux-gnu.so" in path.name for path in (target / "sglang").rglob("*.so"))


def test_manifest_matches_series_toml(context, cp311):
    raw = tomllib.loads((REPO / "series.toml").read_text())
    manifest = manifest_module.read_wheel(cp311)
    variant = raw["variants"][VARIANT]
    assert list(manifest.features) == variant["features"]
    assert manifest.env_defaults == {**raw.get("runtime", {}).get("env", {}), **variant.get("env", {})}
    wanted = [entry for entry in raw["patches"] if entry["feature"] in variant["features"]]
    assert [(p.file, p.feature) for p in manifest.patches] == [(e["file"], e["feature"]) for e in wanted]
    for patch in manifest.patches:
        assert patch.sha256 == hashlib.sha256((REPO / "patches" / patch.file).read_bytes()).hexdigest()
    pin = next(pin for pin in raw["upstream"]["wheels"] if pin["python_tag"] == "cp311")
    assert (manifest.upstream.wheel, manifest.upstream.sha256) == (pin["filename"], pin["sha256"])
    guards = {(guard["env"], guard["default"]) for name in variant["features"]
              for guard in raw["features"][name].get("guards", [])}
    assert {(guard.env, guard.default) for guard in manifest.guards} == guards


def test_installed_version_is_the_local_version(context, installed):
    version = run_python(installed, "import importlib.metadata as m; print(m.version('sglang'))").strip()
    assert version == variant_version(context.series, of_variant(context.series, VARIANT))


def test_installed_files_are_the_patched_tree(context, installed):
    """Every file the patches change is installed with the patched content; the guard types exist."""
    site = Path(run_python(installed, "import sysconfig; print(sysconfig.get_paths()['platlib'])").strip())
    with scratch_tree(context=context, variant=of_variant(context.series, VARIANT), strict=True) as result:
        changed = Git(result.dest).changed_files(result.base_commit, result.head_commit)
        assert changed, "the variant changes no file"
        root = context.series.upstream.package_root
        for status, path in changed:
            installed_file = site / path.removeprefix(f"{root}/")
            if status == "D":
                assert not installed_file.exists(), path
            else:
                assert installed_file.read_bytes() == (result.dest / path).read_bytes(), path
    # environ.py is stdlib-only: load it by path (importing sglang needs its dependencies).
    code = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('environ', sys.argv[1]); "
            "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module); "
            "print(hasattr(module, 'EnvSwitch'))")
    environ = site / "sglang" / "srt" / "environ.py"
    out = subprocess.run([installed, "-c", code, str(environ)], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"


def test_installed_manifest_and_record(context, installed):
    code = r"""
import base64, csv, hashlib, importlib.metadata as m, json, pathlib, importlib.util
dist = m.distribution("sglang")
package = pathlib.Path(importlib.util.find_spec("sglang").submodule_search_locations[0])
bad = []
for path, digest, size in csv.reader(dist.read_text("RECORD").splitlines()):
    if not digest:
        continue
    data = dist.locate_file(path).read_bytes()
    algo, value = digest.split("=", 1)
    if base64.urlsafe_b64encode(hashlib.new(algo, data).digest()).rstrip(b"=").decode() != value:
        bad.append(path)
print(json.dumps({"bad": bad, "package": (package / "_forkbuild_manifest.json").read_text(),
                  "dist_info": dist.read_text("forkbuild_manifest.json")}))
"""
    result = json.loads(run_python(installed, code))
    assert result["bad"] == []
    assert result["package"] == result["dist_info"]
    manifest = manifest_module.parse(result["package"], source="installed")
    assert manifest.variant == VARIANT and manifest.series_hash == of_variant(context.series, VARIANT).content_hash(context.series)


def test_second_build_is_skipped(context, built):
    out, wheels = built
    again = build_wheels(context=context, request=WheelRequest(variant=of_variant(context.series, VARIANT), out_dir=out))
    assert [wheel.rebuilt for wheel in again] == [False] * len(wheels)


def test_byte_identical_under_other_tz_umask_and_epoch(context, cp311, tmp_path):
    env = {**os.environ, "TZ": "America/St_Johns", "SOURCE_DATE_EPOCH": "1234567890"}
    forkbuild = Path(sys.executable).with_name("forkbuild")
    command = f"umask 077; exec {forkbuild} -C {REPO} build-wheel --variant {VARIANT} --python-tag cp311 --platform linux/amd64 --out {tmp_path}"
    subprocess.run(["sh", "-c", command], env=env, check=True, capture_output=True)
    (again,) = tmp_path.glob("*.whl")
    assert again.name == cp311.name
    assert hashlib.sha256(again.read_bytes()).hexdigest() == hashlib.sha256(cp311.read_bytes()).hexdigest()


def _tampered_copy(wheel: Path, target: Path, member: str) -> None:
    """The wheel with one member's content changed and a correct zip CRC, RECORD untouched."""
    source = ZipSource(wheel)
    with target.open("wb") as stream:
        writer = ZipWriter(stream)
        for item in source.members:
            if item.name == member:
                writer.add(member, source.read(member) + b"\nimport os  # injected\n", date_time=item.info.date_time)
            else:
                writer.copy(source, item)
        writer.close()


def test_tampered_wheel_installs_with_pip_but_fails_validation(cp311, tmp_path):
    tampered = tmp_path / cp311.name
    _tampered_copy(cp311, tampered, "sglang/version.py")
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--no-compile",
                    "--target", str(target), str(tampered)], check=True, capture_output=True)
    assert b"# injected" in (target / "sglang" / "version.py").read_bytes()  # pip did not notice
    with pytest.raises(BuildError, match="sglang/version.py didn't match RECORD"):
        validate_wheel(tampered)
