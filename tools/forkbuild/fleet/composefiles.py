"""`forkbuild launch`: a variant, a deployed .env and the nodes (head first) become one compose
file per node (what the recipe's start.sh started): the same environment everywhere, head-only
settings on rank 0. The files are JSON, which is YAML with every value quoted exactly."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from forkbuild.errors import ConfigError
from forkbuild.fleet.envcheck import EnvReport, doctor_env, hazard_line
from forkbuild.image.build import default_tag
from forkbuild.series.combination import Combination
from forkbuild.series.config import Series, image_platforms
from forkbuild.series.guards import parse_switch

HEAD_ONLY = ("HEAD_MEM_FRACTION_STATIC",)  # start.sh gave it to rank 0 only
# Multi-node serving over the GB10's ConnectX-7 (RoCE): the RDMA devices, pinned memory. On unless
# the .env says FORKBUILD_RDMA=0 (hosts without RoCE; the simulated fleet); read here, not passed on.
# FORKBUILD_GPUS=0 likewise leaves out the GPU request (a node without GPUs: the simulated fleet).
RDMA = "FORKBUILD_RDMA"
GPUS = "FORKBUILD_GPUS"
GPU_SERVICE = {"deploy": {"resources": {"reservations": {"devices": [
    {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]}}}}
RDMA_SERVICE = {"devices": ["/dev/infiniband:/dev/infiniband"], "cap_add": ["IPC_LOCK"],
                "ulimits": {"memlock": {"soft": -1, "hard": -1}}}
DIST_PORT = 20000
SERVE_PORT = "30000"  # serve's default PORT (docker/entrypoint.sh)
HOST = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}[A-Za-z0-9])?$")  # a host name or IPv4 address
SERVICE = "sglang"


@dataclass(frozen=True, kw_only=True)
class NodeFile:
    rank: int
    host: str
    name: str  # file name in the output directory
    compose: dict

    def render(self) -> str:
        return (f"# forkbuild launch: node rank {self.rank} ({self.host}). On that box:\n"
                f"#   docker-compose -f {self.name} up -d\n" + json.dumps(self.compose, indent=2) + "\n")


def container_name(variant: str) -> str:
    """Every node's container: status, logs and down find it by this name."""
    return f"forkbuild-{variant}"


def plan(series: Series, *, variant: Combination, env_file: Path, hosts: list[str], image: str | None = None,
         platform: str | None = None, allow_unknown: bool = False,
         accepted: tuple[str, ...] = ()) -> tuple[EnvReport, list[NodeFile]]:
    """Every node's compose file; ConfigError for a bad node list, a .env doctor stops on, an unknown
    DSV41_* name (unless `allow_unknown`) or a hazard not `accepted`."""
    chosen = variant
    report = doctor_env(series, variant=variant, env_file=env_file)
    unknown = () if allow_unknown else tuple(f"{line} (--allow-unknown to pass it on)" for line in report.unknown)
    hazards = tuple(f"{hazard_line(hazard)} (--accept-hazard {hazard.name} to launch it anyway)"
                    for hazard in report.hazards if hazard.name not in accepted)
    values = report.values
    tp_size = values.get("TP_SIZE") or chosen.env.get("TP_SIZE")
    problems = [*report.refused, *report.changed, *unknown, *hazards]
    problems += [f"--nodes: {host!r} is not a host name or IPv4 address" for host in hosts if not HOST.match(host)]
    if len({host.lower() for host in hosts}) != len(hosts):  # host names are not case-sensitive
        problems.append(f"--nodes: a host is named twice: {','.join(hosts)}")
    if tp_size is None or not tp_size.isdigit() or int(tp_size) != len(hosts):
        problems.append(f"--nodes names {len(hosts)} node(s), but TP_SIZE is {tp_size!r} (variant {variant.name}"
                        f"{', ' + str(env_file) if 'TP_SIZE' in values else ''}): one node per tensor-parallel rank")
    if problems:  # every one at once, and the near misses that would only warn (a typo'd setting)
        raise ConfigError([*problems, *(f"(a warning) {line}" for line in report.suspect)], source=str(env_file))
    knobs = {guard.env: values.get(guard.env, chosen.env.get(guard.env, guard.default))
             for guard in series.guards_for(chosen.features)}
    try:
        rdma, gpus = (parse_switch(values.get(name, "1")) for name in (RDMA, GPUS))
    except ValueError as error:
        raise ConfigError([f"{RDMA}/{GPUS}: {error}"], source=str(env_file)) from None
    shared = {key: value for key, value in values.items() if key not in (*HEAD_ONLY, RDMA, GPUS)}
    dist = values.get("DIST_INIT_ADDR") or f"{hosts[0]}:{DIST_PORT}"
    model = values.get("MODEL_PATH") or series.runtime_env.get("MODEL_PATH")
    nodes = []
    for rank, host in enumerate(hosts):
        environment = {**shared, **knobs, "TP_SIZE": str(len(hosts)), "NNODES": str(len(hosts)),
                       "NODE_RANK": str(rank), "DIST_INIT_ADDR": dist}
        if rank == 0:
            environment.update({key: values[key] for key in HEAD_ONLY if key in values})
        # compose interpolates $NAME in values: $$ is a literal $.
        environment = {key: value.replace("$", "$$") for key, value in environment.items()}
        # The fleet's platform: the variant's first (tp3/tp4: linux/arm64, the GB10's).
        platform = platform or image_platforms(chosen.platforms or ("linux/arm64",))[0]
        service = {"image": image or default_tag(variant.name, "wheel", platform), "platform": platform,
                   "container_name": container_name(variant.name), "command": ["serve"], "network_mode": "host",
                   "ipc": "host", "environment": environment, **(GPU_SERVICE if gpus else {})}
        if model:
            service["volumes"] = [f"{model}:{model}:ro"]
        if rdma:
            service.update(RDMA_SERVICE)
        nodes.append(NodeFile(rank=rank, host=host, name=f"node{rank}-{host}.compose.yaml",
                              compose={"services": {SERVICE: service}}))
    return report, nodes
