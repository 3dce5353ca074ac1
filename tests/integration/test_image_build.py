"""Every variant's image, in both modes, built for real on a docker daemon from
the real pinned sglang wheel, then checked from inside each container.

Needs a daemon: FORKBUILD_DOCKER_HOST (`.ci/docker-tests.sh` starts one and
sets it). The images build on the local bases (`forkbuild build-base --stock`)
via the generated compose file, all in parallel.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tomllib
import zipfile
from pathlib import Path

import pytest

from forkbuild.wheel import manifest
from forkbuild.commands.compose import compose_build
from forkbuild.console import Reporter
from forkbuild.errors import BuildError
from forkbuild.image import build
from forkbuild.image.base import ensure_bases
from forkbuild.image.build_context import labels, prepare_context
from forkbuild.image.docker import Docker
from forkbuild_runtime import records
from forkbuild.series.combination import of_variant

REPO = Path(__file__).resolve().parents[2]
HOST = os.environ.get("FORKBUILD_DOCKER_HOST", "")
VARIANTS = list(tomllib.loads((REPO / "series.toml").read_text())["variants"])
IMAGES = [(variant, mode) for variant in VARIANTS for mode in build.MODES]
REPOSITORY = "forkbuild-test/sglang"
PLATFORM = "linux/amd64"  # the machine's; linux/arm64 under emulation: test_image_arm64.py

pytestmark = [
    pytest.mark.integration,
    pytest.mark.docker,
    pytest.mark.skipif(not HOST, reason="FORKBUILD_DOCKER_HOST is not set: no docker daemon configured "
                                        "(run .ci/docker-tests.sh, or `.ci/dockerd.sh start` and "
                                        "`eval \"$(.ci/dockerd.sh env)\"`)"),
]

# Runs inside a container with the image's Python: an independent RECORD check
# (it shares no code with forkbuild_runtime).
RECORD_SCRIPT = r"""
import base64, csv, hashlib, importlib.metadata, json, pathlib
dist = importlib.metadata.distribution("sglang")
site = pathlib.Path(dist.locate_file(""))
rows, bad = {}, []
for path, digest, size in csv.reader(dist.read_text("RECORD").splitlines()):
    if not digest:
        continue
    algorithm, _, expected = digest.partition("=")
    data = (site / path).read_bytes()
    actual = base64.urlsafe_b64encode(hashlib.new(algorithm, data).digest()).rstrip(b"=").decode()
    if actual != expected or int(size) != len(data):
        bad.append(path)
    rows[path] = digest
print(json.dumps({"rows": rows, "bad": bad}))
"""
MANIFEST_SCRIPT = ("import importlib.util, pathlib; spec = importlib.util.find_spec('sglang'); "
                   f"print((pathlib.Path(spec.submodule_search_locations[0]) / {manifest.PACKAGE_FILE!r}).read_text())")


@pytest.fixture(scope="module")
def bases(context, docker) -> tuple[str, str]:
    return ensure_bases(context=context, docker=docker, stock=True, platform=PLATFORM)


@pytest.fixture(scope="module")
def stock_pip_check(docker, bases) -> str:
    """`pip check` in the stock base: what every delta image must still say (asked once)."""
    return run(docker, bases[1], "pip", "check", check=False).stdout


@pytest.fixture(scope="module")
def contexts(context):
    return {variant: prepare_context(context, variant=of_variant(context.series, variant), platform=PLATFORM,
                                     python_tags=["cp311"]) for variant in VARIANTS}


@pytest.fixture(scope="module")
def images(contexts, docker, bases, tmp_path_factory):
    """Every (variant, mode) image, built in parallel from a generated compose file."""
    stock_base = bases[1]
    out = REPO / "build"
    compose_file = out / "compose-test.yaml"
    compose_file.write_text(build.compose_file(list(contexts.values()), modes=build.MODES, relative_to=out,
                                               repository=REPOSITORY,
                                               bases={(mode, PLATFORM): stock_base for mode in build.MODES},
                                               header="forkbuild integration test"))
    compose_build(docker=docker, compose_file=compose_file, reporter=Reporter())
    return {(variant, mode): build.default_tag(variant, mode, PLATFORM, repository=REPOSITORY)
            for variant, mode in IMAGES}


def run(docker: Docker, image: str, *command: str, env: dict[str, str] = {}, check: bool = True):
    return docker.run("run", "--rm", "--network", "none", *(f"--env={key}={value}" for key, value in env.items()),
                      image, *command, check=check)


def wheel_rows(context_dir: Path) -> dict[str, str]:
    (wheel,) = (context_dir / "wheels").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        dist_info = next(n.split("/")[0] for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
        rows = records.parse(archive.read(f"{dist_info}/RECORD").decode(), source=f"{wheel}: RECORD")
    return {row.path: row.hash for row in rows if row.hash and not row.path.startswith(f"{dist_info}/")}


@pytest.mark.parametrize(("variant", "mode"), IMAGES)
def test_pip_show_gives_the_local_version(images, contexts, docker, variant, mode):
    output = run(docker, images[variant, mode], "pip", "show", "sglang").stdout
    assert f"Version: {contexts[variant].manifest.version}\n" in output


@pytest.mark.parametrize(("variant", "mode"), IMAGES)
def test_every_installed_file_has_its_record_hash_and_is_the_wheels(images, contexts, docker, variant, mode):
    result = json.loads(run(docker, images[variant, mode], "python3", "-c", RECORD_SCRIPT).stdout)
    assert result["bad"] == []
    installed = {path: digest for path, digest in result["rows"].items()
                 if not path.startswith("../") and ".dist-info/" not in path}
    assert installed == wheel_rows(contexts[variant].path)


@pytest.mark.parametrize(("variant", "mode"), IMAGES)
def test_manifest_reads_back_and_labels_match(images, contexts, docker, variant, mode):
    read_back = json.loads(run(docker, images[variant, mode], "python3", "-c", MANIFEST_SCRIPT).stdout)
    assert read_back == contexts[variant].manifest.to_json()
    found = json.loads(docker.run("image", "inspect", images[variant, mode]).stdout)[0]["Config"]["Labels"]
    assert labels(contexts[variant].manifest).items() <= found.items()
    assert found["io.forkbuild.mode"] == mode


@pytest.mark.parametrize(("variant", "mode"), IMAGES)
def test_guard_defaults_are_in_the_environment(images, contexts, docker, variant, mode):
    lines = run(docker, images[variant, mode], "env").stdout.splitlines()
    environment = dict(line.split("=", 1) for line in lines if "=" in line)
    defaults = contexts[variant].manifest.env_defaults
    assert defaults and {key: environment.get(key) for key in defaults} == defaults


@pytest.mark.parametrize(("variant", "mode"), IMAGES)
def test_doctor_and_check_run(images, contexts, docker, variant, mode):
    built = contexts[variant].manifest
    # The local bases have no b12x: a variant defaulting to it got the wheel series.toml pins
    # ([[runtime.packages]]), so doctor and the full check (no test-base allowance) pass.
    b12x = built.env_defaults.get("DSV41_MXFP8_BACKEND") == "b12x"
    doctor = run(docker, images[variant, mode], "doctor", "--strict").stdout
    assert f"variant:  {variant} " in doctor
    for guard in built.guards:
        assert f"  {guard.env}=" in doctor
    check = run(docker, images[variant, mode], "check", "--env-defaults").stdout
    assert "files match their hashes" in check
    assert ("mxfp8:    b12x needs package b12x: b12x 1.5.1" in doctor) == b12x
    if b12x:  # without it (uninstalled), doctor and check name the missing package
        gone = "pip uninstall -q -y b12x && forkbuild-entrypoint "
        failed = run(docker, images[variant, mode], "sh", "-c", gone + "doctor", check=False)
        assert failed.status == 1 and "package 'b12x' is not installed" in failed.stderr
        strict = run(docker, images[variant, mode], "sh", "-c", gone + "check --env-defaults", check=False)
        assert strict.status == 1 and "package 'b12x' is not installed" in strict.stderr


def test_a_b12x_wheel_whose_sha256_differs_stops_the_build_naming_it(contexts, docker, bases, tmp_path):
    variant = next(v for v in VARIANTS if contexts[v].manifest.env_defaults.get("DSV41_MXFP8_BACKEND") == "b12x")
    tampered = tmp_path / "context"
    shutil.copytree(contexts[variant].path, tampered)
    (wheel,) = (tampered / "packages").glob("b12x-*.whl")
    with zipfile.ZipFile(wheel, "a") as archive:
        archive.writestr("b12x/payload.py", "print('not the pinned file')\n")
    context = dataclasses.replace(contexts[variant], path=tampered)
    with pytest.raises(BuildError, match=rf"{wheel.name}: sha256 [0-9a-f]{{64}} does not match its pin"):
        build.build_image(docker=docker, context=context, mode="wheel", base=bases[1], tag="forkbuild-test/tampered:1")


def _left_out(built: manifest.Manifest) -> list[manifest.GuardRecord]:
    envs = {guard.env for guard in built.guards}
    return [guard for guard in built.series_guards if guard.env not in envs]


def test_doctor_warns_about_a_guard_for_a_feature_not_built_in(images, contexts, docker):
    variant = next((v for v in VARIANTS if _left_out(contexts[v].manifest)), None)
    if variant is None:
        pytest.skip("every variant builds in every feature")
    guard = _left_out(contexts[variant].manifest)[0]
    result = run(docker, images[variant, "delta"], "doctor", env={guard.env: guard.default or "1"})
    assert f"feature '{guard.feature}' is NOT built into this image" in result.stderr
    strict = run(docker, images[variant, "delta"], "doctor", "--strict", env={guard.env: "1"}, check=False)
    assert strict.status == 1


def test_serve_builds_the_launch_command_from_the_environment(images, docker):
    variant = VARIANTS[-1]
    settings = {"CONTEXT_LENGTH": "262144", "MEM_FRACTION_STATIC": "0.95", "MAX_RUNNING_REQUESTS": "4",
                "TP_SIZE": "3", "EXTRA_SGLANG_ARGS": "--watchdog-timeout 1800 --enable-metrics"}
    # The variant's default backend (b12x) is installed from its pin: serve's startup check passes.
    output = run(docker, images[variant, "wheel"], "serve", "--dry-run", env=settings).stdout
    command = output.strip().splitlines()[-1]
    assert command.startswith("python3 -m sglang.launch_server --model-path ")
    for flag in ("--tp-size 3", "--context-length 262144", "--mem-fraction-static 0.95",
                 "--max-running-requests 4", "--watchdog-timeout 1800 --enable-metrics",
                 # the recipe's launch defaults (issue 35): DSpark on, as start.sh served
                 "--speculative-algorithm DSPARK", "--speculative-dspark-block-size 3",
                 "--chunked-prefill-size 2048", "--max-total-tokens 320000",
                 "--served-model-name deepseek-v4.1-flash", "--cuda-graph-max-bs-decode 4"):
        assert flag in command


@pytest.mark.parametrize("variant", VARIANTS)
def test_delta_layer_is_thin_and_pip_stays_consistent(images, bases, docker, contexts, stock_pip_check, variant):
    delta = build.layers_above(docker, images[variant, "delta"], bases[1])
    wheel = build.layers_above(docker, images[variant, "wheel"], bases[1])
    delta_bytes = sum(layer.size for layer in delta if "compileall" in layer.created_by)
    wheel_bytes = sum(layer.size for layer in wheel if "pip install" in layer.created_by)
    assert 0 < delta_bytes < 20e6 < 100e6 < wheel_bytes
    image = images[variant, "delta"]
    checks = run(docker, image, "pip", "check", check=False).stdout
    built = contexts[variant].manifest
    # b12x (tp3/tp4's pinned MXFP8 backend) is installed --no-deps: pip check names its requirements too
    sglang = "".join(line for line in checks.splitlines(keepends=True) if not line.startswith("b12x "))
    assert sglang.replace(built.version, built.upstream.version) == stock_pip_check
    leftover = run(docker, image, "sh", "-c", "pip uninstall -y sglang >/dev/null && "
                   "find \"$(python3 -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')\" "
                   "-maxdepth 1 -name 'sglang*'").stdout
    assert leftover == ""


def test_delta_refuses_a_base_that_is_not_the_pinned_stock_wheel(images, contexts, docker, bases):
    variant = VARIANTS[0]
    with pytest.raises(BuildError, match="made for the pinned stock"):
        build.build_image(docker=docker, context=contexts[variant], mode="delta",
                          base=images[VARIANTS[-1], "wheel"], tag="forkbuild-test/refused:1")
    with pytest.raises(BuildError, match="sglang is not installed"):
        build.build_image(docker=docker, context=contexts[variant], mode="delta", base=bases[0],
                          tag="forkbuild-test/refused:2")
