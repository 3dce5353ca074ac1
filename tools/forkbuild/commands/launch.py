"""`forkbuild launch`: a cluster's node files, and the cluster itself through each node's own
Docker: ship, preflight, up, status, logs, down (docs/cluster.md)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from forkbuild.commands import add_command
from forkbuild.console import printable
from forkbuild.errors import ConfigError, FleetError, ForkbuildError
from forkbuild.fleet import composefiles
from forkbuild.fleet.envcheck import hazard_line
from forkbuild.fleet.nodes import Fleet, parse_nodes
from forkbuild.image.build import default_tag
from forkbuild.image.docker import Docker
from forkbuild.io.fsutil import write_atomic_many
from forkbuild.series.combination import Combination, resolve
from forkbuild.series.config import PLATFORMS


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "launch", help="a cluster of nodes for a variant: its files, and up/status/logs/down through "
                                   "each node's docker",
        description="Reads the .env with doctor (a refused or changed value, an unknown DSV41_* name or a hazard "
                    "stops it before anything is written), then writes node<RANK>-<HOST>.compose.yaml per node: the "
                    "variant's image running `serve`, the same DSV41_* knobs and settings on every node, "
                    "NNODES/NODE_RANK/DIST_INIT_ADDR set, head-only settings on rank 0, RDMA devices. Each node is "
                    "a docker endpoint (NAME means ssh://NAME, or NAME=URL any DOCKER_HOST): --preflight ships the "
                    "image and runs the rendezvous on every node, --up also starts every rank and waits for the "
                    "head's /health (any failure stops every node again), --status, --logs, --down.",
        examples=["forkbuild launch --variant tp4 --env .env --nodes spark1,spark2,spark3,spark4 --up",
                  "forkbuild launch --variant tp4 --nodes spark1,spark2,spark3,spark4 --status",
                  "forkbuild launch --variant tp3 --env .env --nodes n1=unix:///run/n1.sock,n2=ssh://ops@10.0.0.2,"
                  "n3=ssh://ops@10.0.0.3 --preflight",
                  "forkbuild launch --variant tp3 --env .env --nodes 10.0.0.1,10.0.0.2,10.0.0.3 --dry-run"])
    parser.add_argument("--variant", help="the variant whose image runs (default: series.default_variant)")
    parser.add_argument("--env", type=Path, metavar="FILE", help="the deployed .env file (to write the files, "
                                                                  "--preflight and --up)")
    parser.add_argument("--nodes", required=True, metavar="N1,N2,...",
                        help="nodes, head (rank 0) first, one per TP rank: a host name (its docker at ssh://NAME) "
                             "or NAME=DOCKER_HOST_URL")
    parser.add_argument("--image", help="the image to run (default: forkbuild/sglang:<variant>-wheel-<arch>)")
    parser.add_argument("--platform", choices=tuple(PLATFORMS),
                        help="the nodes' platform (default: the variant's first: linux/arm64 for the GB10)")
    parser.add_argument("--out", type=Path, help="directory for the files (default: build/launch/<variant>)")
    parser.add_argument("--dry-run", action="store_true", help="print the files instead of writing them")
    parser.add_argument("--allow-unknown", action="store_true",
                        help="pass on a DSV41_* name that is no guard of the series (refused by default: a typo)")
    parser.add_argument("--accept-hazard", action="append", default=[], metavar="NAME",
                        help="launch a combination series.toml declares hazardous ([[hazards]]) anyway (repeatable)")
    actions = parser.add_mutually_exclusive_group()
    for action, text in (("preflight", "write the files, ship the image, run the rendezvous on every node"),
                         ("up", "preflight, then start every rank and wait for the head's /health"),
                         ("status", "each node's container, image and rank; the head's health and model"),
                         ("logs", "the last lines of each node's log (--node for one)"),
                         ("down", "stop and remove every node's container (safe to re-run)")):
        actions.add_argument(f"--{action}", dest="action", action="store_const", const=action, help=text)
    parser.add_argument("--node", help="--logs: only this node")
    parser.add_argument("--lines", type=int, default=50, help="--logs: lines per node (default 50)")
    parser.add_argument("--preflight-timeout", type=_seconds, default=60.0, metavar="S",
                        help="seconds every rank waits for the others (default 60)")
    parser.add_argument("--health-timeout", type=_seconds, default=1800.0, metavar="S",
                        help="--up: seconds to wait for the head's /health (default 1800: the model loads)")
    parser.set_defaults(run=run)


def _seconds(text: str) -> float:
    """A timeout: a finite number above 0 (`nan` would never run out: --up would wait for ever)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def run(args, context) -> int:
    variant = resolve(context.series, variant=args.variant)
    nodes = parse_nodes(args.nodes)
    fleet = Fleet(nodes=tuple(nodes), variant=variant.name, reporter=context.reporter)
    if args.action in ("status", "logs", "down"):
        return _look(args, context, fleet, variant)
    if args.env is None:
        raise ConfigError(["--env FILE is needed to write the node files (and for --preflight / --up)"],
                          source="command line")
    report, files = composefiles.plan(context.series, variant=variant, env_file=args.env,
                                hosts=[node.name for node in nodes], image=args.image, platform=args.platform,
                                allow_unknown=args.allow_unknown, accepted=tuple(args.accept_hazard))
    for line in report.unused + report.notes + report.suspect + (report.unknown if args.allow_unknown else ()):
        context.reporter.warn(line)
    for hazard in report.hazards:
        context.reporter.warn(f"accepted: {hazard_line(hazard)}")
    texts = {file.name: file.render() for file in files}
    if args.dry_run:
        for name, text in texts.items():
            print(f"--- {name}\n{text}", end="")
        return 0
    out = context.outside_series(args.out or context.build_dir / "launch" / variant.name, "--out")
    out.mkdir(parents=True, exist_ok=True)
    if others := sorted(path.name for path in out.glob("node*-*.compose.yaml") if path.name not in texts):
        # Another cluster's files (perhaps edited by hand): never removed or mixed with this one's.
        raise ConfigError([f"{out} holds another cluster's node files: {', '.join(others)}"], source="--out",
                          hint="give this cluster its own folder (--out DIR), or remove those files yourself once "
                               "that cluster is down")
    # 0600: the files hold every .env value (HF_TOKEN and the like).
    write_atomic_many({out / name: text.encode() for name, text in texts.items()}, mode=0o600)
    for file in files:
        context.reporter.info(f"rank {file.rank} {file.host}: {out / file.name}")
    if args.action is None:
        return 0
    image = files[0].compose["services"]["sglang"]["image"]
    if there := fleet.running():
        # Its ranks would hold DIST_INIT_ADDR: a preflight cannot run beside them.
        if args.action != "up":
            raise FleetError(f"{fleet.container} exists on {', '.join(there)}: the cluster (or part of it) runs",
                             hint=f"`forkbuild launch --variant {variant.name} --nodes ... --down` first, or --up to "
                                  "replace it")
        _show("replaced", fleet.down())  # an earlier (or killed) --up of this cluster
    with context.reporter.step(f"ship {image} to {len(nodes)} node(s)"):
        shipped = fleet.ship(image, local=Docker.connect(reporter=context.reporter))
    _show("shipped", shipped)
    with context.reporter.step(f"preflight: rendezvous of {len(nodes)} rank(s)"):
        _show("preflight", fleet.preflight(files, timeout=args.preflight_timeout))
    if args.action == "up":
        with context.reporter.step(f"up: {len(nodes)} node(s), then the head's /health"):
            _show("up", fleet.up(files, timeout=args.health_timeout))
    return 0


def _look(args, context, fleet: Fleet, variant: Combination) -> int:
    if args.action == "down":
        _show("down", fleet.down())
        return 0
    if args.action == "logs":
        print("\n".join(fleet.logs(lines=args.lines, node_name=args.node)))
        return 0
    image = args.image or default_tag(variant.name, "wheel", args.platform or variant.platforms[0])
    try:
        local: Docker | None = Docker.connect(reporter=context.reporter)
    except ForkbuildError:  # no daemon here: the nodes' image IDs are not compared with this machine's
        local = None
    _show("status", fleet.status(image=image, local=local))
    return 0


def _show(what: str, lines: list[str]) -> None:
    print(f"{what}:")
    for line in lines:
        print(f"  {printable(line)}")
