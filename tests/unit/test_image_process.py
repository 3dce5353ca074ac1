"""How the image code runs docker, docker-compose and mmdebstrap
(forkbuild.image.docker.run_program): failures and missing programs become forkbuild
errors, also with -v (where the output goes straight to the terminal)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from forkbuild.commands.compose import compose_build
from forkbuild.console import Reporter
from forkbuild.errors import BuildError, ToolMissing
from forkbuild.image import base, build
from forkbuild.image.build_context import ImageContext
from forkbuild.image.docker import Docker, find_client, run_program
from test_image_dockerfile import typed

# A docker client whose `build` fails and that has no image at all: what a
# build on a base the daemon cannot pull looks like.
FAILING_DOCKER = """#!/bin/sh
echo "$@" >> "$(dirname "$0")/calls"
case "$1" in
  build) echo "pull access denied for the base" >&2; exit 1 ;;
  image) exit 1 ;;
esac
exit 0
"""


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.parametrize("verbose", [False, True])
def test_a_failing_program_is_a_build_error(verbose):
    with pytest.raises(BuildError, match=r"exit 3") as caught:
        run_program(["sh", "-c", "echo broken >&2; exit 3"], reporter=Reporter(verbose=verbose),
                    missing_hint="-", stream=True)
    # Captured without -v: the message ends with the program's last lines; with
    # -v they went to the terminal.
    assert caught.value.message.endswith("its output is above" if verbose else "\nbroken")


def test_output_is_returned_and_check_false_keeps_the_exit_code():
    result = run_program(["sh", "-c", "echo out; exit 2"], reporter=Reporter(), missing_hint="-", check=False)
    assert (result.status, result.stdout) == (2, "out\n")


def test_a_missing_program_is_tool_missing(tmp_path):
    with pytest.raises(ToolMissing, match="not installed") as caught:
        run_program(["forkbuild-no-such-program"], reporter=Reporter(), missing_hint="install it")
    assert caught.value.hint == "install it"
    not_executable = tmp_path / "docker"
    not_executable.write_text("")
    with pytest.raises(ToolMissing, match="not an executable file"):
        run_program([str(not_executable), "version"], reporter=Reporter(), missing_hint="-")


@pytest.mark.parametrize("kind", ["missing", "not executable"])
def test_a_bad_forkbuild_docker_is_tool_missing(tmp_path, monkeypatch, kind):
    client = tmp_path / "docker"
    if kind == "not executable":
        client.write_text("#!/bin/sh\n")
    monkeypatch.setenv("FORKBUILD_DOCKER", str(client))
    with pytest.raises(ToolMissing, match=f"FORKBUILD_DOCKER={client}"):
        find_client()


def test_forkbuild_docker_names_the_client(tmp_path, monkeypatch):
    client = _script(tmp_path / "docker", "#!/bin/sh\n")
    monkeypatch.setenv("FORKBUILD_DOCKER", str(client))
    assert find_client() == str(client)


@pytest.mark.parametrize("verbose", [False, True])
def test_a_failed_image_build_keeps_the_base_hint_with_and_without_v(tmp_path, verbose):
    client = _script(tmp_path / "docker", FAILING_DOCKER)
    docker = Docker(executable=str(client), env={"PATH": "/usr/bin:/bin"}, reporter=Reporter(verbose=verbose))
    context = ImageContext(path=tmp_path, manifest=typed("v", version="1.0+v"), platform="linux/amd64")
    with pytest.raises(BuildError) as caught:
        build.build_image(docker=docker, context=context, mode="wheel", base="example/base:1", tag="t:1")
    assert "could not be pulled" in caught.value.hint
    assert (tmp_path / "calls").read_text().startswith("build ")


def test_missing_mmdebstrap_is_tool_missing_with_its_install_hint(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolMissing, match="mmdebstrap is not installed") as caught:
        base._mmdebstrap_to(tmp_path / "rootfs.tar", "linux/arm64", reporter=Reporter())
    assert caught.value.hint == "apt-get install mmdebstrap"
    assert list(tmp_path.iterdir()) == []  # no partial tarball left


def test_missing_docker_compose_is_tool_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    docker = Docker(executable="/usr/bin/docker", env={}, reporter=Reporter())
    with pytest.raises(ToolMissing, match="docker-compose is not installed"):
        compose_build(docker=docker, compose_file=tmp_path / "compose.yaml", reporter=Reporter())
