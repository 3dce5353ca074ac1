"""A variant's build context and the doctor's findings, without docker."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from forkbuild.errors import BuildError
from forkbuild.image import build_context as image_context
from forkbuild.series.config import PackagePin
from forkbuild.wheel.manifest import DIST_INFO_FILE
from forkbuild_runtime import doctor, migration
from test_image_dockerfile import manifest

DOCKER_DIR = Path(__file__).parents[2] / "docker"


def fake_wheel(directory: Path, *, variant: str = "tp4", tag: str = "cp311", arch: str = "x86_64", **overrides) -> Path:
    data = manifest(variant, **overrides)
    name = f"sglang-{data['version']}-{tag}-{tag}-manylinux_2_34_{arch}.whl"
    path = directory / name
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"sglang-{data['version']}.dist-info/{DIST_INFO_FILE}", json.dumps(data))
        archive.writestr(f"sglang-{data['version']}.dist-info/RECORD", "")
    return path


def fake_stock(directory: Path, tag: str) -> Path:
    path = directory / f"sglang-0.5.23-{tag}-{tag}-manylinux_2_34_x86_64.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("sglang/__init__.py", "")
        archive.writestr("sglang-0.5.23.dist-info/RECORD", f"sglang/__init__.py,sha256=x,0\n# {tag}\n")
    return path


def test_prepare_lays_out_everything_the_build_reads(tmp_path):
    wheels = [fake_wheel(tmp_path, tag="cp311"), fake_wheel(tmp_path, tag="cp312")]
    stock = {tag: fake_stock(tmp_path, tag) for tag in ("cp311", "cp312")}
    dest = tmp_path / "build" / "image" / "tp4"
    package = tmp_path / "b12x-1.5.1-py3-none-any.whl"
    with zipfile.ZipFile(package, "w") as archive:
        archive.writestr("b12x/__init__.py", "")
        archive.writestr("b12x-1.5.1.dist-info/RECORD", "")
    pin = PackagePin(filename=package.name, sha256="ab" * 32)
    result = image_context.prepare(docker_dir=DOCKER_DIR, variant="tp4", platform="linux/amd64", wheels=wheels,
                                   upstream_wheels=stock, packages={pin: package}, dest=dest)
    assert result.manifest.version == "0.5.23+tp4.0123456789" and result.manifest.upstream.version == "0.5.23"
    assert sorted(p.name for p in (dest / "wheels").iterdir()) == sorted(w.name for w in wheels)
    assert (dest / "upstream" / "cp312.RECORD").read_text().endswith("# cp312\n")
    assert (dest / "forkbuild_runtime" / "__main__.py").is_file()
    assert not list((dest / "forkbuild_runtime").rglob("__pycache__"))
    assert (dest / "entrypoint.sh").read_bytes() == (DOCKER_DIR / "entrypoint.sh").read_bytes()
    dockerfile = (dest / "Dockerfile").read_text()
    assert dockerfile.startswith((DOCKER_DIR / "Dockerfile").read_text().rstrip("\n") + "\n\n# -- variant tp4")
    assert "--variant tp4 --version 0.5.23+tp4.0123456789" in dockerfile
    # the MXFP8 backend's pinned wheel, and what it provides, for the image's `packages --pick`
    assert json.loads((dest / "packages" / "pins.json").read_text()) == [
        {"filename": package.name, "sha256": "ab" * 32, "provides": ["b12x"]}]
    assert (dest / "packages" / package.name).read_bytes() == package.read_bytes()
    assert dockerfile.index("forkbuild_runtime packages --pick") < dockerfile.index("forkbuild_runtime check")
    assert [p.name for p in dest.parent.iterdir()] == ["tp4"]  # no temporary directory left behind


def test_prepare_replaces_an_old_context(tmp_path):
    dest = tmp_path / "ctx"
    (dest / "wheels").mkdir(parents=True)
    (dest / "wheels" / "stale.whl").write_bytes(b"")
    image_context.prepare(docker_dir=DOCKER_DIR, variant="tp4", platform="linux/amd64", wheels=[fake_wheel(tmp_path)],
                          upstream_wheels={"cp311": fake_stock(tmp_path, "cp311")}, packages={}, dest=dest)
    assert [p.name for p in (dest / "wheels").iterdir()] == [fake_wheel(tmp_path).name]


def test_wheel_of_another_variant_is_refused(tmp_path):
    with pytest.raises(BuildError, match="built for variant 'tp3', not 'tp4'"):
        image_context.wheels_manifest([fake_wheel(tmp_path, variant="tp3")], variant="tp4", platform="linux/amd64")


def test_a_wheel_of_another_platform_is_refused(tmp_path):
    with pytest.raises(BuildError, match="not linux/arm64 wheels: sglang-.*x86_64.whl"):
        image_context.wheels_manifest([fake_wheel(tmp_path)], variant="tp4", platform="linux/arm64")
    arm = fake_wheel(tmp_path, arch="aarch64")
    assert image_context.wheels_manifest([arm], variant="tp4", platform="linux/arm64").variant == "tp4"


def test_wheels_that_disagree_are_refused(tmp_path):
    (tmp_path / "a").mkdir()
    first = fake_wheel(tmp_path / "a", tag="cp311")
    second = fake_wheel(tmp_path, tag="cp312", features=["guards"])
    with pytest.raises(BuildError, match="do not share one manifest"):
        image_context.wheels_manifest([first, second], variant="tp4", platform="linux/amd64")


def test_wheel_without_manifest_is_refused(tmp_path):
    path = tmp_path / "sglang-0.5.23-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("sglang-0.5.23.dist-info/RECORD", "")
    with pytest.raises(BuildError, match="no forkbuild manifest"):
        image_context.wheels_manifest([path], variant="tp4", platform="linux/amd64")


STOCK = manifest("stock", features=[], guards=[], series_guards=[
    {"env": "DSV41_DRAFT_TAU", "feature": "draft_tau", "type": "float", "default": "1.0"}])


def test_doctor_warns_about_a_guard_of_a_feature_not_built_in():
    warnings, errors = doctor._problems(STOCK, {"DSV41_DRAFT_TAU": "0.5", "PATH": "/bin"})
    assert errors == []
    assert warnings == ["DSV41_DRAFT_TAU='0.5' is set, but feature 'draft_tau' is NOT built into this image "
                        "(variant stock): it has no effect"]


def test_doctor_reports_invalid_values_and_unknown_guards():
    warnings, errors = doctor._problems(manifest(), {"DSV41_DRAFT_TAU": "fast", "DSV41_TYPO": "1", "TP_SIZE": "4"})
    assert errors == ["DSV41_DRAFT_TAU='fast' is not a valid float: sglang will refuse to start"]
    assert warnings == ["DSV41_TYPO='1' is not a guard of series dsv41: it has no effect"]


def test_doctor_is_quiet_for_valid_built_in_guards():
    assert doctor._problems(manifest(), {"DSV41_DRAFT_TAU": "0.7", "MODEL_PATH": "/m"}) == ([], [])


@pytest.mark.parametrize(("kind", "value", "valid"), [
    ("switch", "on", True), ("switch", "", True), ("switch", "N", True), ("switch", "2", False),
    ("int", "16", True), ("int", "1.5", False), ("float", "1e-3", True), ("float", "x", False), ("str", "b12x", True)])
def test_guard_values_follow_the_guard_types(kind, value, valid):
    assert (migration.problem(kind, value) is None) == valid


def test_a_series_without_the_image_recipe_is_a_build_error_naming_it(tmp_path):
    with pytest.raises(BuildError, match=r"docker/Dockerfile: cannot read the image recipe"):
        image_context.prepare(docker_dir=tmp_path / "docker", variant="tp4", platform="linux/amd64",
                              wheels=[fake_wheel(tmp_path)], upstream_wheels={}, packages={}, dest=tmp_path / "ctx")
    assert not (tmp_path / "ctx").exists()
