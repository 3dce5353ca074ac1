"""The docker client, and how the image code runs its programs (docker, docker-compose, mmdebstrap):
echoed with -v, a missing one a ToolMissing, a failure a BuildError. /usr/bin/docker (Debian's
20.10, BuildKit built in) comes first; FORKBUILD_DOCKER names another, FORKBUILD_DOCKER_HOST the daemon."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from forkbuild.console import Reporter
from forkbuild.errors import BuildError, FleetError, ToolMissing
from forkbuild.io import process

DEBIAN_CLIENT = Path("/usr/bin/docker")
CLIENT_HINT = "run `.ci/dockerd.sh start` (installs docker.io) or set FORKBUILD_DOCKER to a docker client"


def require(program: str, *, hint: str) -> str:
    """The path of `program` (a name on PATH, or a path); ToolMissing when there is none."""
    found = shutil.which(program)
    if not found:
        raise ToolMissing(f"{program} is not " + ("an executable file" if "/" in program else
                                                  "installed (not found on PATH)"), hint=hint)
    return found


def run_program(command: Sequence[str], *, reporter: Reporter, missing_hint: str,
                env: Mapping[str, str] | None = None, stream: bool = False, check: bool = True,
                timeout: float | None = None) -> process.Completed:
    """`command`'s result; stream: with -v its output goes to the terminal (long builds' progress)."""
    argv = [require(command[0], hint=missing_hint), *command[1:]]
    reporter.detail("$ " + shlex.join(argv))
    live = stream and reporter.verbose
    try:
        done = process.run(argv, env=env, capture=not live, timeout=timeout)
    except ToolMissing as error:  # on PATH but not runnable (wrong architecture, no permission)
        raise ToolMissing(error.message, hint=missing_hint) from None
    if check and done.status != 0:
        output = "its output is above" if live else tail(done.stderr or done.stdout)
        raise BuildError(f"`{' '.join([Path(argv[0]).name, *command[1:4]])} ...` failed (exit {done.status}):\n{output}")
    return done


# docker's SSH transport (DOCKER_HOST=ssh://) adds its connection helper's warnings after a
# command's own output (`commandConn.CloseWrite: ... signal: killed`): left out of what is shown.
SSH_NOISE = re.compile(r'^time="[^"]*" level=warning msg="commandConn\.')


def tail(output: str) -> str:
    return "\n".join([line for line in output.rstrip().splitlines() if not SSH_NOISE.match(line)][-40:]) \
        or "(no output)"


def find_client() -> str:
    configured = os.environ.get("FORKBUILD_DOCKER")
    if not configured and DEBIAN_CLIENT.is_file():
        return str(DEBIAN_CLIENT)
    found = shutil.which(configured or "docker")
    if not found:
        raise ToolMissing(f"FORKBUILD_DOCKER={configured}: no such executable (not a file, not executable, or not "
                          "on PATH)" if configured else "no docker client found", hint=CLIENT_HINT)
    return found


@dataclass(frozen=True, kw_only=True)
class Docker:
    executable: str
    env: Mapping[str, str]
    reporter: Reporter

    @classmethod
    def connect(cls, *, reporter: Reporter, host: str | None = None, timeout: float | None = None) -> Docker:
        """The client, with BuildKit on, once its daemon answers (within `timeout` seconds)."""
        host = host or os.environ.get("FORKBUILD_DOCKER_HOST")
        env = {"DOCKER_BUILDKIT": "1", "COMPOSE_DOCKER_CLI_BUILD": "1", **({"DOCKER_HOST": host} if host else {})}
        docker = cls(executable=find_client(), env=env, reporter=reporter)
        answer = docker.run("version", "--format", "{{.Server.Version}}", check=False, timeout=timeout)
        if answer.status != 0:
            raise ToolMissing(f"the docker daemon does not answer ({env.get('DOCKER_HOST', 'default socket')}):\n"
                              f"{tail(answer.stderr)}",
                              hint="start one with `.ci/dockerd.sh start` and `eval \"$(.ci/dockerd.sh env)\"`")
        return docker

    def run(self, *args: str, check: bool = True, stream: bool = False,
            timeout: float | None = None) -> process.Completed:
        return run_program([self.executable, *args], reporter=self.reporter, missing_hint=CLIENT_HINT, env=self.env,
                           stream=stream, check=check, timeout=timeout)

    def compose_env(self) -> dict[str, str]:
        """The environment for docker-compose against this daemon: our client first on PATH
        (compose 1.29 runs `docker` from PATH, for builds when COMPOSE_DOCKER_CLI_BUILD=1)."""
        return {**self.env, "PATH": f"{Path(self.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}

    def image_exists(self, ref: str) -> bool:
        return self.run("image", "inspect", ref, check=False).status == 0

    def image_id(self, ref: str) -> str:
        """`sha256:...` of an image in this daemon's store, "" where it has none of that name."""
        found = self.run("image", "inspect", "--format", "{{.Id}}", ref, check=False)
        return found.stdout.strip() if found.status == 0 else ""

    def history(self, ref: str) -> list[tuple[int, str]]:
        """(size, created by) of each layer of an image, oldest first."""
        output = self.run("history", "--no-trunc", "--human=false", "--format", "{{.Size}}\t{{.CreatedBy}}", ref)
        return [(int(size), created_by) for size, _, created_by in
                reversed([line.partition("\t") for line in output.stdout.splitlines()])]

    def inspect_container(self, name: str) -> dict | None:
        """`docker inspect` of a container; None where there is none of that name."""
        found = self.run("inspect", name, check=False)
        return json.loads(found.stdout)[0] if found.status == 0 else None

    def container_exists(self, name: str) -> bool:
        return self.run("container", "inspect", name, check=False, timeout=60).status == 0

    def remove_container(self, name: str) -> str:
        """`docker rm --force` of a container: what was done ("no NAME there" where there was none)."""
        if not self.container_exists(name):
            return f"no {name} there"
        done = self.run("rm", "--force", name, check=False, timeout=120)
        if done.status != 0:
            raise FleetError(f"docker rm --force {name} failed: {tail(done.stderr)}")
        return f"removed {name}"

    def exec_in(self, container: str, *command: str, timeout: float) -> process.Completed:
        """`docker exec` of `command` in a running container (its status: 126/127 where it cannot run)."""
        return self.run("exec", container, *command, check=False, timeout=timeout)

    def logs(self, container: str, *, lines: int) -> str:
        done = self.run("logs", "--tail", str(lines), container, check=False, timeout=60)
        return (done.stdout + done.stderr).rstrip()

    def platform_of(self, ref: str) -> str:
        """`linux/arm64` of an image in this daemon's store."""
        return self.run("image", "inspect", "--format", "{{.Os}}/{{.Architecture}}", ref).stdout.strip()

    def build(self, *, context: Path, tag: str, platform: str, dockerfile: Path | None = None,
              target: str | None = None, build_args: Mapping[str, str] = {}, stream: bool = False,
              no_cache: bool = False) -> None:
        """`docker build` for `platform` without network: everything the image needs is in the context.
        A platform not this machine's runs under emulation (binfmt_misc + qemu-user-static)."""
        args = ["build", "--network", "none", "--platform", platform, "--tag", tag, "--progress", "plain",
                *(["--no-cache"] if no_cache else []),
                *(["--file", str(dockerfile)] if dockerfile else []), *(["--target", target] if target else [])]
        for key, value in build_args.items():
            args += ["--build-arg", f"{key}={value}"]
        self.run(*args, str(context), stream=stream)
        if (built := self.platform_of(tag)) != platform:
            raise BuildError(f"{tag} was built for {built}, not {platform}: its base is not a {platform} image",
                             hint=f"`docker image inspect --format '{{{{.Architecture}}}}' BASE` must say "
                                  f"{platform.split('/')[-1]}; pass a {platform} base with --base")
