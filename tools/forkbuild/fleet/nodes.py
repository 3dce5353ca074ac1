"""A cluster's nodes through each node's own Docker, nothing of ours on them but the image.
`--nodes spark1,...` are docker's SSH transport (ssh://spark1); `NAME=URL` is any DOCKER_HOST
(ssh://ops@10.0.0.2, unix:///run/n1.sock, tcp://...). ship: `docker save` into each node's
`docker load` where its image store lacks the image ID; preflight: the image's rendezvous with
the real DIST_INIT_ADDR, world size and ranks, before any model; up: preflight, every node's
service started as its file says (`docker run -d`), the head's /health, and every node stopped
again if any part fails; status, logs, down. The head's server is asked from inside its
container (its fabric address need not be reachable from here). Nodes are worked on in
parallel, one thread each."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from forkbuild.console import Reporter
from forkbuild.errors import ConfigError, FleetError, ForkbuildError
from forkbuild.fleet.composefiles import HOST, SERVE_PORT, SERVICE, NodeFile, container_name
from forkbuild.image.docker import Docker, find_client, run_program, tail
from forkbuild.io import process

# ssh's user and host never start with '-' (ssh would read `ssh://-Fconfig` as an option).
URL = re.compile(r"^(?:ssh://(?:(?!-)[A-Za-z0-9._-]+@)?(?!-)[A-Za-z0-9.:_-]+|unix:///[^\s]+|tcp://[A-Za-z0-9.:\[\]-]+"
                 r"|fd://\S*)$")
# The keys of a node file's service that _run_service turns into `docker run` options.
RUN_KEYS = {"image", "platform", "container_name", "command", "network_mode", "ipc", "environment", "volumes",
            "devices", "cap_add", "ulimits", "deploy"}
# Run by the head container's python3: the body of a GET, exit 1 for no answer.
PROBE = """import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=5) as answer:
        sys.stdout.write(answer.read().decode("utf-8", "replace"))
except Exception:
    sys.exit(1)
"""
ANSWER_SECONDS = 20  # a node's daemon must answer `docker version` within this
T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Node:
    name: str  # in its file's name; the head's name is DIST_INIT_ADDR's default host
    url: str  # its DOCKER_HOST
    rank: int


def parse_nodes(text: str) -> list[Node]:
    """`spark1,spark2=ssh://ops@10.0.0.2,n1=unix:///run/n1.sock`, head first."""
    nodes, problems = [], []
    for rank, item in enumerate(part.strip() for part in text.split(",")):
        name, _, url = item.partition("=")
        url = url or f"ssh://{name}"
        if not HOST.match(name):
            problems.append(f"--nodes: {name!r} is not a host name or IPv4 address")
        elif not URL.match(url):
            problems.append(f"--nodes: {name}={url!r} is not a docker host URL (ssh://[user@]host, unix:///path, "
                            "tcp://host:port)")
        nodes.append(Node(name=name, url=url, rank=rank))
    # Two ranks on one daemon: the second node's `up` would replace the first's container.
    daemons: dict[str, str] = {}
    for node in nodes:
        if (first := daemons.setdefault(_daemon(node.url), node.name)) != node.name:
            problems.append(f"--nodes: {first} and {node.name} are one docker daemon ({node.url}): one node per rank")
    if problems:
        raise ConfigError(problems, source="--nodes")
    return nodes


def _daemon(url: str) -> str:
    """The daemon a URL reaches: an ssh or tcp host (any user, any case), a socket's path as written."""
    scheme, _, rest = url.partition("://")
    return f"{scheme.lower()}://{rest.rsplit('@', 1)[-1].lower()}" if scheme.lower() in ("ssh", "tcp") else url


def in_parallel(nodes: Sequence[Node], action: Callable[[Node], T]) -> list[tuple[Node, T | ForkbuildError]]:
    """`action` on every node at once; a node's ForkbuildError is its result, not the end."""
    def guarded(node: Node) -> T | ForkbuildError:
        try:
            return action(node)
        except ForkbuildError as error:
            return error

    with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
        return list(zip(nodes, pool.map(guarded, nodes), strict=True))


def _failed(results: Sequence[tuple[Node, object]]) -> list[str]:
    """One line per node that failed (its message's further lines indented under it)."""
    return [f"{node.name} (rank {node.rank}, {node.url}): " + result.message.replace("\n", "\n      ")
            for node, result in results if isinstance(result, ForkbuildError)]


@dataclass(frozen=True, kw_only=True)
class Fleet:
    nodes: tuple[Node, ...]
    variant: str
    reporter: Reporter

    @property
    def container(self) -> str:
        return container_name(self.variant)

    @property
    def preflight_container(self) -> str:
        return f"{self.container}-preflight"

    def docker(self, node: Node) -> Docker:
        """The node's daemon, once it answers; FleetError naming the node when it does not."""
        try:
            return Docker.connect(reporter=self.reporter, host=node.url, timeout=ANSWER_SECONDS)
        except ForkbuildError as error:
            raise FleetError(error.message) from None

    def reachable(self) -> dict[str, Docker]:
        results = in_parallel(self.nodes, self.docker)
        if failed := _failed(results):
            raise FleetError("not every node answers:\n" + "\n".join(f"  - {line}" for line in failed),
                             hint="check the node's docker daemon and, for ssh://, `ssh NODE docker version`")
        return {node.name: result for node, result in results if isinstance(result, Docker)}

    # -- ship --
    def ship(self, image: str, *, local: Docker) -> list[str]:
        """The image on every node (same ID): loaded where missing; a line per node."""
        image_id = local.image_id(image)
        if not image_id:
            raise FleetError(f"{image} is not in this machine's image store ({local.env.get('DOCKER_HOST', 'default')})",
                             hint="build it first (forkbuild build-image), or name another with --image")
        dockers = self.reachable()

        def ship_one(node: Node) -> str:
            docker = dockers[node.name]
            if self._image_id(docker, image) == image_id:
                return f"{node.name}: has {image} ({image_id[7:19]})"
            start = time.monotonic()
            client = find_client()
            done = process.pipe([client, "save", image], [client, "load"], first_env=dict(local.env),
                                second_env=dict(docker.env))
            if done.status != 0 or self._image_id(docker, image) != image_id:
                raise FleetError(f"docker save | docker load of {image} failed (exit {done.status}): "
                                 f"{tail(done.stderr) if done.stderr else 'the node lacks the image ID after it'}")
            return f"{node.name}: shipped {image} ({image_id[7:19]}) in {time.monotonic() - start:.1f} s"

        results = in_parallel(self.nodes, ship_one)
        if failed := _failed(results):
            raise FleetError("shipping the image failed:\n" + "\n".join(f"  - {line}" for line in failed))
        return [str(result) for _, result in results]

    @staticmethod
    def _image_id(docker: Docker, image: str) -> str:
        return docker.image_id(image)

    # -- preflight --
    def preflight(self, files: Sequence[NodeFile], *, timeout: float) -> list[str]:
        """Every rank's rendezvous (the image's `preflight`) with its node's own environment; a
        line per node; FleetError naming each node that did not join and what it saw."""
        dockers = self.reachable()
        by_rank = {file.rank: file for file in files}
        self._remove(dockers, self.preflight_container)  # what a killed run left (its name is ours)

        def join(node: Node) -> dict:
            done = _run_service(dockers[node.name], by_rank[node.rank], name=self.preflight_container, options=["--rm"],
                                command=["preflight", "--timeout", str(timeout)], reporter=self.reporter,
                                timeout=timeout + 30)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            try:
                return json.loads(lines[-1])
            except (IndexError, ValueError):
                return {"ok": False, "error": "no report", "detail": tail(done.stderr or done.stdout).splitlines()[-1]}

        try:
            results = in_parallel(self.nodes, join)
        finally:
            self._remove(dockers, self.preflight_container)
        lines, failed = [], []
        for node, result in results:
            if isinstance(result, ForkbuildError):
                result = {"ok": False, "error": "docker", "detail": result.message}
            if result.get("ok"):
                extra = f", nccl sum {result['nccl_sum']:g}" if "nccl_sum" in result else ""
                lines.append(f"{node.name:<16} rank {node.rank}  joined {result['addr']} (world {result['world']}, "
                             f"gloo sum {result['gloo_sum']:g}{extra}, {result.get('seconds', 0):.1f} s)")
            else:
                line = f"{node.name:<16} rank {node.rank}  FAILED: {result.get('error')}: {result.get('detail')}"
                lines.append(line)
                failed.append(line)
        if failed:
            raise FleetError("preflight: not every rank joined\n" + "\n".join(f"  {line}" for line in lines),
                             hint="check DIST_INIT_ADDR (the head's address and a free port) and that every node "
                                  "reaches it; nothing was started")
        return lines

    def running(self) -> list[str]:
        """The nodes where this cluster's container exists (a started or half-started cluster)."""
        dockers = self.reachable()
        found = in_parallel(self.nodes, lambda node: dockers[node.name].container_exists(self.container))
        return [node.name for node, there in found if there is True]

    # -- up / down --
    def up(self, files: Sequence[NodeFile], *, timeout: float) -> list[str]:
        """Every node's service started as its file says (`docker run -d`, as the preflight ran); then
        the head's /health, until it answers, a node's container stops or `timeout` runs out. Any
        failure: every node's container is removed again and FleetError names the node and why."""
        dockers = self.reachable()
        by_rank = {file.rank: file for file in files}

        def start(node: Node) -> str:
            file = by_rank[node.rank]
            done = _run_service(dockers[node.name], file, name=self.container, options=["--detach"],
                                command=file.compose["services"][SERVICE]["command"], reporter=self.reporter,
                                timeout=600)
            if done.status != 0:
                raise FleetError(f"docker run of {file.name} failed (exit {done.status}): "
                                 f"{tail(done.stderr or done.stdout)}")
            return f"{node.name}: started {self.container} (rank {node.rank})"

        results = in_parallel(self.nodes, start)
        if failed := _failed(results):
            self._remove(dockers, self.container)
            raise FleetError("starting the cluster failed; every node's container was removed again:\n"
                             + "\n".join(f"  - {line}" for line in failed))
        lines = [str(result) for _, result in results]
        head, deadline = self.nodes[0], time.monotonic() + timeout
        while True:
            infos = self.containers(dockers)
            try:
                if (answer := self.ask_head(dockers[head.name], infos[0][1], "/health")) is not None:
                    return [*lines, f"head {head.name}: /health answers ({answer.strip() or 'ok'})"]
                stopped = [f"{node.name} (rank {node.rank}): {state}" for node, info in infos
                           if (state := _state(info)) != "running"]
                why = ("a node's container stopped before the head answered: " + ", ".join(stopped) if stopped else
                       f"the head's /health did not answer within {timeout:g} s" if time.monotonic() > deadline else "")
            except FleetError as error:
                why = error.message
            if why:
                logs = self.logs(lines=20)
                self._remove(dockers, self.container)
                raise FleetError(f"{why}; every node's container was removed again. The last lines of each node's "
                                 "log:\n" + "\n".join(logs))
            time.sleep(1)

    def containers(self, dockers: dict[str, Docker]) -> list[tuple[Node, dict | None | ForkbuildError]]:
        """`docker inspect` of this cluster's container on every node (None: none there)."""
        return in_parallel(self.nodes, lambda node: dockers[node.name].inspect_container(self.container))

    def ask_head(self, docker: Docker, info: dict | None | ForkbuildError, path: str) -> str | None:
        """GET `path` of the head's server from inside its container (`info`: its inspect; its HOST and
        PORT, on the head's own network: DIST_INIT_ADDR's fabric address need not be reachable from
        this machine); None: no container running there, or no answer."""
        if not isinstance(info, dict) or _state(info) != "running":
            return None
        env = _environment(info)
        host = env.get("HOST", "")
        host = "127.0.0.1" if host in ("", "0.0.0.0", "::") else f"[{host}]" if ":" in host else host
        url = f"http://{host}:{env.get('PORT', SERVE_PORT)}{path}"
        done = docker.exec_in(self.container, "python3", "-c", PROBE, url, timeout=30)
        if done.status in (126, 127):  # docker exec: not runnable, not found
            raise FleetError(f"the head's container has no python3 to ask {url} with: {tail(done.stderr)}")
        return done.stdout if done.status == 0 else None

    def down(self) -> list[str]:
        dockers = self.reachable()
        return [f"{name}: {line}" for name, line in self._remove(dockers, self.container).items()]

    def _remove(self, dockers: dict[str, Docker], name: str) -> dict[str, str]:
        def remove(node: Node) -> str:
            if node.name not in dockers:
                return "not reachable"
            return dockers[node.name].remove_container(name)
        return {node.name: str(result) for node, result in in_parallel(self.nodes, remove)}

    # -- status / logs --
    def status(self, *, image: str, local: Docker | None) -> list[str]:
        dockers = self.reachable()
        wanted = local.image_id(image) if local else ""

        def look(node: Node, info: dict | None | ForkbuildError) -> str:
            if isinstance(info, ForkbuildError):
                return f"{node.name}: {info.message}"
            if info is None:
                return f"{node.name:<16} rank {node.rank}  no container"
            same = "image matches" if info["Image"] == wanted else \
                f"image {info['Image'][7:19]} (this machine's {image}: {wanted[7:19] or 'absent'})"
            return f"{node.name:<16} rank {_environment(info).get('NODE_RANK', '?')}  {_state(info)}  {same}"

        infos = self.containers(dockers)
        lines = [look(node, info) for node, info in infos]
        head = dockers[self.nodes[0].name]
        try:
            healthy = self.ask_head(head, infos[0][1], "/health") is not None
            served = _served(self.ask_head(head, infos[0][1], "/v1/models")) if healthy else ""
        except FleetError as error:
            return [*lines, f"head {self.nodes[0].name}: {error.message}"]
        return [*lines, f"head {self.nodes[0].name}: " + ("healthy" if healthy else "not answering")
                + (f", serving {served}" if served else "")]

    def logs(self, *, lines: int, node_name: str | None = None) -> list[str]:
        dockers = self.reachable()
        chosen = [node for node in self.nodes if node_name in (None, node.name)]
        if not chosen:
            raise ConfigError([f"--node {node_name!r} is not one of {', '.join(n.name for n in self.nodes)}"],
                              source="command line")

        def read(node: Node) -> str:
            text = dockers[node.name].logs(self.container, lines=lines) or "(no output)"
            return f"== {node.name} (rank {node.rank}) ==\n{text}"
        return [str(result) for _, result in in_parallel(chosen, read)]


def _run_service(docker: Docker, file: NodeFile, *, name: str, options: Sequence[str], command: Sequence[str],
                 reporter: Reporter, timeout: float) -> process.Completed:
    """`docker run` of a node file's service as container `name`: what `docker-compose up` of the
    file starts, through nothing but the docker client (ssh:// nodes need no compose there)."""
    service = file.compose["services"][SERVICE]
    if unknown := set(service) - RUN_KEYS:  # a key composefiles writes must not be left out here
        raise FleetError(f"{file.name}: no docker run option for {', '.join(sorted(unknown))}")
    environment = {key: value.replace("$$", "$") for key, value in service["environment"].items()}
    arguments = ["run", *options, "--name", name, "--platform", service["platform"], "--network",
                 service["network_mode"], "--ipc", service["ipc"],
                 # --env KEY: docker takes the value from its own environment (no secret on a command line)
                 *(f"--env={key}" for key in environment),
                 *(f"--volume={volume}" for volume in service.get("volumes", [])),
                 *(f"--device={device}" for device in service.get("devices", [])),
                 *(f"--cap-add={cap}" for cap in service.get("cap_add", [])),
                 *(f"--ulimit={key}={limit['soft']}:{limit['hard']}" for key, limit in service.get("ulimits", {}).items()),
                 *(["--gpus=all"] if "deploy" in service else []), service["image"], *command]
    return run_program([docker.executable, *arguments], reporter=reporter, missing_hint="",
                       env={**docker.env, **environment}, check=False, timeout=timeout)


def _state(info: dict | None | ForkbuildError) -> str:
    """A node's container by its `docker inspect`: running, exited (exit N), ... or gone."""
    if not isinstance(info, dict):
        return "gone"
    state = info["State"]
    return state["Status"] + (f" (exit {state['ExitCode']})" if state["Status"] == "exited" else "")


def _environment(info: dict) -> dict[str, str]:
    """A container's environment by its `docker inspect`."""
    return dict(item.split("=", 1) for item in info["Config"]["Env"] if "=" in item)


def _served(models: str | None) -> str:
    """The model ids of an OpenAI `/v1/models` answer; '' for no answer or one of another shape."""
    try:
        return ", ".join(str(model["id"]) for model in json.loads(models or "{}").get("data", []))
    except (ValueError, TypeError, KeyError, AttributeError):
        return ""
