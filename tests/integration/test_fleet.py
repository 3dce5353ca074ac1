"""A simulated fleet: four private docker daemons, one per node, each with its own image store,
all on this machine's network namespace (127.0.0.1 is the head's address), driven by the real
`forkbuild launch --up/--status/--down` through each daemon's own socket.

The image is tp4's (amd64) with CPU torch added, so the preflight's rendezvous is the real one
(torch.distributed, gloo). `serve` runs a stand-in for sglang's server: there is no GPU here to
load DeepSeek-V4.1-Flash on. The stand-in answers /health and /v1/models on rank 0 (as sglang's
head does) and idles on the other ranks.

Needs FORKBUILD_DOCKER_HOST (the build daemon, as test_image_build.py) and root (dockerd).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from forkbuild.cli import main
from forkbuild.console import Reporter
from forkbuild.context import Context
from forkbuild.image import build
from forkbuild.image.base import ensure_bases
from forkbuild.image.build_context import prepare_context
from forkbuild.image.docker import Docker
from forkbuild.series.combination import of_variant

REPO = Path(__file__).resolve().parents[2]
HOST = os.environ.get("FORKBUILD_DOCKER_HOST", "")
PLATFORM = "linux/amd64"
IMAGE = "forkbuild-test/fleet:tp4"
NODES = 4

pytestmark = [
    pytest.mark.integration,
    pytest.mark.docker,
    pytest.mark.skipif(not HOST, reason="FORKBUILD_DOCKER_HOST is not set: no docker daemon configured "
                                        "(run .ci/docker-tests.sh)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the simulated nodes are docker daemons: root starts them"),
]

STANDIN = r'''#!/bin/sh
# The test image's python: sglang's server is stood in for (no GPU here); everything else is python3.
if [ "$1" = "-m" ] && [ "$2" = "sglang.launch_server" ]; then
  shift 2
  exec python3 /opt/standin/server.py "$@"
fi
exec python3 "$@"
'''
SERVER = r'''
import http.server, json, os, sys, time
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
if os.environ.get("STANDIN_EXIT"):  # a server that fails at start (a bad flag, a missing model)
    sys.exit(int(os.environ["STANDIN_EXIT"]))
if os.environ.get("NODE_RANK", "0") != "0":
    while True:  # a worker rank: sglang's workers serve no HTTP
        time.sleep(3600)
model = args.get("--served-model-name", "model")
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"" if self.path == "/health" else json.dumps({"data": [{"id": model}]}).encode()
        self.send_response(200 if self.path in ("/health", "/v1/models") else 404)
        self.end_headers()
        self.wfile.write(body)
http.server.ThreadingHTTPServer((args.get("--host", "0.0.0.0"), int(args["--port"])), Handler).serve_forever()
'''
DOCKERFILE = """FROM {base}
RUN --mount=type=bind,source=wheels,target=/tmp/wheels \\
    python3 -m pip install --no-index --no-cache-dir --find-links /tmp/wheels torch
COPY standin-python /usr/local/bin/standin-python
COPY server.py /opt/standin/server.py
ENV FORKBUILD_PYTHON=/usr/local/bin/standin-python
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def dockerd(action: str, state: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / ".ci" / "dockerd.sh"), action], capture_output=True, text=True,
                          env={**os.environ, "FORKBUILD_DOCKERD_DIR": str(state)})


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> str:
    """tp4's wheel-mode image on the local stock base, plus CPU torch and the stand-in server."""
    context = Context.create(series_dir=REPO, cache_dir=None, reporter=Reporter())
    docker = Docker.connect(reporter=context.reporter, host=HOST)
    stock = ensure_bases(context=context, docker=docker, stock=True, platform=PLATFORM)[-1]
    tp4 = prepare_context(context, variant=of_variant(context.series, "tp4"), platform=PLATFORM, python_tags=["cp311"])
    base = build.default_tag("tp4", "wheel", PLATFORM, repository="forkbuild-test/sglang")
    build.build_image(docker=docker, context=tp4, mode="wheel", base=stock, tag=base)
    work = tmp_path_factory.mktemp("fleet-image")
    download = subprocess.run([os.environ.get("PYTHON", "python3"), "-m", "pip", "download", "--quiet",
                               "--only-binary", ":all:", "--python-version", "3.11", "--platform",
                               "manylinux_2_28_x86_64", "-d", str(work / "wheels"), "torch==2.13.0"],
                              capture_output=True, text=True)
    if download.returncode != 0:
        pytest.skip(f"no torch 2.13.0 wheel to put in the test image: {download.stderr.strip()[-300:]}")
    (work / "standin-python").write_text(STANDIN)
    (work / "standin-python").chmod(0o755)
    (work / "server.py").write_text(SERVER)
    (work / "Dockerfile").write_text(DOCKERFILE.format(base=base))
    docker.build(context=work, tag=IMAGE, platform=PLATFORM)
    return IMAGE


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    """NODES private daemons: name -> unix socket URL. Stopped (and their state removed) at the end."""
    # Short (a unix socket's path is at most 108 bytes) and this run's own: two test runs on one machine
    # each start and stop their own daemons (a fixed path let one run's teardown stop the other's nodes).
    root = Path(tempfile.mkdtemp(prefix="fbfleet-", dir="/var/tmp"))
    states = [root / f"node{number}" for number in range(1, NODES + 1)]
    with ThreadPoolExecutor(NODES) as pool:
        started = list(pool.map(lambda state: dockerd("start", state), states))
    try:
        for state, done in zip(states, started, strict=True):
            assert done.returncode == 0, f"{state}: {done.stderr}"
        yield {f"n{number}": f"unix://{state}/docker.sock" for number, state in enumerate(states, start=1)}
    finally:
        with ThreadPoolExecutor(NODES) as pool:
            list(pool.map(lambda state: dockerd("stop", state), states))
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def ssh_nodes(nodes, tmp_path_factory):
    """The same daemons as a real fleet names them (`--nodes ssh-n1,...`: docker's SSH transport,
    ssh://ssh-n1): an sshd of its own per node on 127.0.0.1, its DOCKER_HOST set to the node's
    daemon there. This run's ssh config reaches docker's `ssh` through a wrapper first on PATH
    (never the user's ~/.ssh). Yields host name -> the daemon's unix URL, and the wrapper's folder."""
    sshd = Path("/usr/sbin/sshd")
    if not sshd.is_file():
        pytest.skip("openssh-server is not installed (.ci/dockerd.sh start installs it)")
    work = tmp_path_factory.mktemp("ssh")
    for key in ("host", "id"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(work / key)], check=True)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    servers, config, ports = [], [], []
    try:
        for name, url in nodes.items():
            ports.append(port := free_port())
            conf = work / f"sshd-{name}.conf"
            conf.write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {work / 'host'}\nPidFile {work / name}.pid\n"
                            f"PermitRootLogin prohibit-password\nPasswordAuthentication no\nUsePAM no\nStrictModes no\n"
                            f"AuthorizedKeysFile {work / 'id.pub'}\nSetEnv DOCKER_HOST={url}\n")
            servers.append(subprocess.Popen([str(sshd), "-D", "-f", str(conf), "-E", str(work / f"{name}.log")]))
            config.append(f"Host ssh-{name}\n  HostName 127.0.0.1\n  Port {port}\n  User root\n"
                          f"  IdentityFile {work / 'id'}\n  IdentitiesOnly yes\n  StrictHostKeyChecking no\n"
                          "  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n")
        (work / "ssh_config").write_text("".join(config))
        (work / "bin").mkdir()
        (work / "bin" / "ssh").write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {work / "ssh_config"} "$@"\n')
        (work / "bin" / "ssh").chmod(0o755)
        for port in ports:  # each sshd listens
            deadline = time.monotonic() + 30
            while not listening(port):
                assert time.monotonic() < deadline, f"sshd on port {port} did not start"
                time.sleep(0.1)
        yield {f"ssh-{name}": url for name, url in nodes.items()}, work / "bin"
    finally:
        for server in servers:
            server.terminate()
            server.wait()


def containers(url: str) -> list[str]:
    done = subprocess.run(["/usr/bin/docker", "-H", url, "ps", "-a", "--format", "{{.Names}}"], capture_output=True,
                          text=True, check=True)
    return done.stdout.split()


def env_file(tmp_path: Path, *, dist_port: int, port: int, tp: int) -> Path:
    (tmp_path / "model").mkdir(exist_ok=True)
    path = tmp_path / f"tp{tp}.env"
    path.write_text(f"MODEL_PATH={tmp_path / 'model'}\nDIST_INIT_ADDR=127.0.0.1:{dist_port}\nPORT={port}\n"
                    "HOST=127.0.0.1\nFORKBUILD_RDMA=0\nFORKBUILD_GPUS=0\nGLOO_SOCKET_IFNAME=lo\n"
                    "HF_TOKEN=hf_not_a_real_token\n")
    return path


def launch(variant: str, env: Path | None, names: dict[str, str], *action: str, out: Path) -> list[str]:
    nodes = ",".join(f"{name}={url}" for name, url in names.items())
    return ["-C", str(REPO), "launch", "--variant", variant, "--nodes", nodes, "--image", IMAGE,
            "--platform", PLATFORM, "--out", str(out), *(["--env", str(env)] if env else []), *action]


@pytest.mark.parametrize("size", [4, 3])
def test_ship_preflight_up_status_down(image, nodes, tmp_path, capsys, size):
    variant = {4: "tp4", 3: "tp3"}[size]
    names = dict(list(nodes.items())[:size])
    port = free_port()
    env = env_file(tmp_path, dist_port=free_port(), port=port, tp=size)
    out = tmp_path / "out"
    assert main(launch(variant, env, names, "--up", "--health-timeout", "120", out=out)) == 0
    printed = capsys.readouterr().out
    for rank, name in enumerate(names):
        assert f"{name}: shipped {IMAGE}" in printed or f"{name}: has {IMAGE}" in printed
        assert f"rank {rank}  joined 127.0.0.1:" in printed and f"(world {size}, gloo sum {size * (size + 1) // 2}" \
            in printed
        assert f"{name}: started forkbuild-{variant} (rank {rank})" in printed
    assert "head n1: /health answers" in printed
    assert main(launch(variant, env, names, "--status", out=out)) == 0
    status = capsys.readouterr().out
    for rank, name in enumerate(names):
        assert f"{name:<16} rank {rank}  running  image matches" in status
    assert "head n1: healthy, serving deepseek-v4.1-flash" in status
    assert main(launch(variant, None, names, "--logs", "--node", "n1", out=out)) == 0
    assert "== n1 (rank 0) ==" in capsys.readouterr().out
    if size == 3:  # a running cluster: a preflight beside it is refused, an --up again replaces it
        assert main(launch(variant, env, names, "--preflight", out=out)) == 16
        assert f"forkbuild-{variant} exists on n1, n2, n3" in capsys.readouterr().err
        assert main(launch(variant, env, names, "--up", "--health-timeout", "120", out=out)) == 0
        again = capsys.readouterr().out
        assert "replaced:" in again and f"n1: removed forkbuild-{variant}" in again and "head n1: /health" in again
    for _ in range(2):  # safe to re-run
        assert main(launch(variant, None, names, "--down", out=out)) == 0
        assert all(containers(url) == [] for url in names.values())


def test_a_wrong_dist_init_port_fails_the_preflight_naming_the_nodes_and_starts_nothing(image, nodes, tmp_path,
                                                                                         capsys):
    names = dict(list(nodes.items())[:3])
    with socket.socket() as squatter:  # DIST_INIT_ADDR names a port another program holds
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        env = env_file(tmp_path, dist_port=squatter.getsockname()[1], port=free_port(), tp=3)
        start = time.monotonic()
        code = main(launch("tp3", env, names, "--up", "--preflight-timeout", "5", out=tmp_path / "out"))
        took = time.monotonic() - start
    err = capsys.readouterr().err
    assert code == 16 and took < 60
    assert "preflight: not every rank joined" in err and "n1" in err and "rank 0  FAILED" in err
    assert all(containers(url) == [] for url in names.values())


def test_a_server_that_stops_at_start_ends_the_wait_at_once_naming_the_nodes(image, nodes, tmp_path, capsys):
    """Not the whole --health-timeout (30 min by default) before a crashed head is said."""
    names = dict(list(nodes.items())[:3])
    env = env_file(tmp_path, dist_port=free_port(), port=free_port(), tp=3)
    env.write_text(env.read_text() + "STANDIN_EXIT=3\n")
    assert main(launch("tp3", env, names, "--preflight", out=tmp_path / "out")) == 0  # shipped: not timed below
    start = time.monotonic()
    code = main(launch("tp3", env, names, "--up", "--health-timeout", "300", out=tmp_path / "out"))
    took = time.monotonic() - start
    err = capsys.readouterr().err
    assert code == 16 and took < 120, took
    # every rank's server exits: those seen stopped first are named (which, is a race)
    assert "a node's container stopped before the head answered: n" in err and ": exited (exit 3)" in err
    assert all(containers(url) == [] for url in names.values())


def test_a_node_whose_daemon_is_stopped_fails_naming_it_and_starts_nothing(image, nodes, tmp_path, capsys):
    names = dict(nodes)
    state = Path(nodes["n4"].removeprefix("unix://")).parent
    assert dockerd("stop", state).returncode == 0
    try:
        env = env_file(tmp_path, dist_port=free_port(), port=free_port(), tp=4)
        start = time.monotonic()
        code = main(launch("tp4", env, names, "--up", out=tmp_path / "out"))
        took = time.monotonic() - start
        err = capsys.readouterr().err
        assert code == 16 and took < 60
        assert "not every node answers" in err and f"n4 (rank 3, {nodes['n4']})" in err
        # docker's own lines stand indented under the node they are about.
        said = err.split(f"n4 (rank 3, {nodes['n4']}): ", 1)[1].split("\nhint:", 1)[0].splitlines()
        assert said[0].startswith("the docker daemon does not answer") and len(said) > 1
        assert all(line.startswith("      ") for line in said[1:]), said
        assert all(containers(nodes[name]) == [] for name in ("n1", "n2", "n3"))
    finally:
        assert dockerd("start", state).returncode == 0


def test_nodes_named_by_host_are_reached_over_ssh_by_the_docker_client_alone(image, ssh_nodes, tmp_path, capsys,
                                                                             monkeypatch):
    """The fleet's own form, `--nodes spark1,spark2,spark3`: ship, preflight, up, status, logs and down
    over ssh:// (up ran docker-compose, which reaches no ssh:// node without paramiko)."""
    hosts, wrapper = ssh_nodes
    monkeypatch.setenv("PATH", f"{wrapper}{os.pathsep}{os.environ['PATH']}")
    names = list(hosts)[:3]
    port = free_port()
    env = env_file(tmp_path, dist_port=free_port(), port=port, tp=3)

    def launch_over_ssh(*action: str) -> int:
        return main(["-C", str(REPO), "launch", "--variant", "tp3", "--nodes", ",".join(names), "--image", IMAGE,
                     "--platform", PLATFORM, "--out", str(tmp_path / "out"), "--env", str(env), *action])

    assert launch_over_ssh("--up", "--health-timeout", "120") == 0
    printed = capsys.readouterr().out
    for rank, name in enumerate(names):
        assert f"rank {rank}  joined 127.0.0.1:" in printed and f"{name}: started forkbuild-tp3 (rank {rank})" in printed
    assert f"head {names[0]}: /health answers" in printed
    assert launch_over_ssh("--status") == 0
    status = capsys.readouterr().out
    assert all(f"{name:<16} rank {rank}  running  image matches" in status for rank, name in enumerate(names))
    assert launch_over_ssh("--logs", "--node", names[1]) == 0
    assert f"== {names[1]} (rank 1) ==" in capsys.readouterr().out
    assert launch_over_ssh("--down") == 0
    assert all(containers(hosts[name]) == [] for name in names)
