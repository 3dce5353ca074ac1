"""`forkbuild launch`: the compose file of every node of a cluster (docs/cluster.md)."""

from __future__ import annotations

from pathlib import Path

from forkbuild import launch
from forkbuild.commands import add_command
from forkbuild.doctor import hazard_line
from forkbuild.fsutil import write_atomic_many


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "launch", help="one compose file per node for a variant, a .env and the node list (head first)",
        description="Reads the .env with doctor (a refused or changed value stops it before anything is written), "
                    "then writes node<RANK>-<HOST>.compose.yaml per node: the variant's image running `serve`, "
                    "the same DSV41_* knobs and settings on every node, NNODES/NODE_RANK/DIST_INIT_ADDR set, "
                    "head-only settings on rank 0. Copy each file to its node and run `docker-compose -f FILE up -d` "
                    "there, workers first or all at once.",
        examples=["forkbuild launch --variant tp4 --env .env --nodes spark1,spark2,spark3,spark4",
                  "forkbuild launch --variant tp3 --env .env --nodes 10.0.0.1,10.0.0.2,10.0.0.3 --dry-run"])
    parser.add_argument("--variant", help="the variant whose image runs (default: series.default_variant)")
    parser.add_argument("--env", type=Path, required=True, metavar="FILE", help="the deployed .env file")
    parser.add_argument("--nodes", required=True, metavar="H1,H2,...",
                        help="host names or addresses, head (rank 0) first: one per TP rank")
    parser.add_argument("--image", help="the image to run (default: forkbuild/sglang:<variant>-wheel-<arch> of the variant's first platform)")
    parser.add_argument("--out", type=Path, help="directory for the files (default: build/launch/<variant>)")
    parser.add_argument("--dry-run", action="store_true", help="print the files instead of writing them")
    parser.add_argument("--allow-unknown", action="store_true",
                        help="pass on a DSV41_* name that is no guard of the series (refused by default: a typo)")
    parser.add_argument("--accept-hazard", action="append", default=[], metavar="NAME",
                        help="launch a combination series.toml declares hazardous ([[hazards]]) anyway (repeatable)")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    variant = args.variant or context.series.default_variant
    hosts = [host.strip() for host in args.nodes.split(",")]
    report, nodes = launch.plan(context.series, variant=variant, env_file=args.env, hosts=hosts, image=args.image,
                                allow_unknown=args.allow_unknown, accepted=tuple(args.accept_hazard))
    for line in report.unused + report.notes + report.suspect + (report.unknown if args.allow_unknown else ()):
        context.reporter.warn(line)
    for hazard in report.hazards:
        context.reporter.warn(f"accepted: {hazard_line(hazard)}")
    files = {node.name: node.render() for node in nodes}
    if args.dry_run:
        for name, text in files.items():
            print(f"--- {name}\n{text}", end="")
        return 0
    out = args.out or context.build_dir / "launch" / variant
    out.mkdir(parents=True, exist_ok=True)
    # 0600: the files hold every .env value (HF_TOKEN and the like).
    write_atomic_many({out / name: text.encode() for name, text in files.items()}, mode=0o600)
    for stale in sorted(set(out.glob("node*-*.compose.yaml")) - {out / name for name in files}):
        stale.unlink()  # a node of an earlier run that is not in this cluster
        context.reporter.info(f"removed {stale.name} (not a node of this cluster)")
    for node in nodes:
        context.reporter.info(f"rank {node.rank} {node.host}: {out / node.name}")
    return 0
