"""The one place that runs the docker client.

Debian's /usr/bin/docker (20.10) is preferred: BuildKit is built into its
daemon, while /usr/local/bin/docker (28.x) on these machines has no buildx
plugin and fails with DOCKER_BUILDKIT=1. FORKBUILD_DOCKER overrides the
client, FORKBUILD_DOCKER_HOST (or DOCKER_HOST) the daemon.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from forkbuild.console import Reporter
from forkbuild.errors import ToolMissing
from forkbuild.image import process

DEBIAN_CLIENT = Path("/usr/bin/docker")
CLIENT_HINT = "run `.ci/dockerd.sh start` (installs docker.io) or set FORKBUILD_DOCKER to a docker client"


def find_client() -> str:
    configured = os.environ.get("FORKBUILD_DOCKER")
    if configured:
        found = shutil.which(configured)
        if not found:
            raise ToolMissing(f"FORKBUILD_DOCKER={configured}: no such executable (not a file, not executable, "
                              "or not on PATH)", hint=CLIENT_HINT)
        return found
    if DEBIAN_CLIENT.is_file():
        return str(DEBIAN_CLIENT)
    found = shutil.which("docker")
    if not found:
        raise ToolMissing("no docker client found", hint=CLIENT_HINT)
    return found


def client_env(host: str | None) -> dict[str, str]:
    """The environment docker and docker-compose run with: BuildKit on, our daemon."""
    env = {}  # on top of forkbuild's own (process.py)
    env["DOCKER_BUILDKIT"] = "1"
    env["COMPOSE_DOCKER_CLI_BUILD"] = "1"
    host = host or os.environ.get("FORKBUILD_DOCKER_HOST")
    if host:
        env["DOCKER_HOST"] = host
    return env


@dataclass(frozen=True, kw_only=True)
class Docker:
    executable: str
    env: Mapping[str, str]
    reporter: Reporter

    @classmethod
    def connect(cls, *, reporter: Reporter, host: str | None = None) -> Docker:
        docker = cls(executable=find_client(), env=client_env(host), reporter=reporter)
        docker.ping()
        return docker

    def run(self, *args: str, input: bytes | None = None, check: bool = True,
            stream: bool = False) -> subprocess.CompletedProcess:
        return process.run([self.executable, *args], reporter=self.reporter, missing_hint=CLIENT_HINT, env=self.env,
                           input=input, stream=stream, check=check)

    def ping(self) -> None:
        result = self.run("version", "--format", "{{.Server.Version}}", check=False)
        if result.returncode != 0:
            raise ToolMissing(f"the docker daemon does not answer ({self.env.get('DOCKER_HOST', 'default socket')}):\n"
                              f"{process.tail(result.stderr)}",
                              hint="start one with `.ci/dockerd.sh start` and `eval \"$(.ci/dockerd.sh env)\"`")

    def image_exists(self, ref: str) -> bool:
        return self.run("image", "inspect", ref, check=False).returncode == 0

    def inspect(self, ref: str) -> dict:
        return json.loads(self.run("image", "inspect", ref).stdout)[0]

    def build(self, *, context: Path, tag: str, dockerfile: Path | None = None, target: str | None = None,
              build_args: Mapping[str, str] = {}, stream: bool = False, no_cache: bool = False) -> None:
        """`docker build` without network: everything the image needs is in the context."""
        args = ["build", "--network", "none", "--tag", tag, "--progress", "plain"]
        if no_cache:
            args.append("--no-cache")
        if dockerfile:
            args += ["--file", str(dockerfile)]
        if target:
            args += ["--target", target]
        for key, value in build_args.items():
            args += ["--build-arg", f"{key}={value}"]
        args.append(str(context))
        # stream: long builds show BuildKit's own progress with -v.
        self.run(*args, stream=stream)

    def run_container(self, image: str, *command: str, env: Mapping[str, str] = {},
                      entrypoint: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        args = ["run", "--rm", "--network", "none"]
        for key, value in env.items():
            args += ["--env", f"{key}={value}"]
        if entrypoint is not None:
            args += ["--entrypoint", entrypoint]
        return self.run(*args, image, *command, check=check)

    def import_tarball(self, tarball: Path, *, tag: str, changes: Sequence[str] = ()) -> None:
        args = ["import"]
        for change in changes:
            args += ["--change", change]
        self.run(*args, str(tarball), tag)

