"""`forkbuild launch`: a TP4 .env and four nodes become four compose files that
docker-compose accepts, each node with the knobs every other node has and the
command the recipe's start.sh would have run there; a bad .env or node list
writes nothing."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from forkbuild.cli import main
from forkbuild.console import Reporter
from forkbuild.errors import FleetError
from forkbuild.fleet.composefiles import NodeFile
from forkbuild.fleet.nodes import _run_service
from forkbuild.image.docker import Docker, tail

REPO = Path(__file__).resolve().parents[2]
HOSTS = ["spark1", "spark2", "spark3", "10.0.0.4"]
RECIPE_ENV = """# the recipe's .env (TP4)
MODEL_PATH=/models/DeepSeek-V4.1-Flash
CONTEXT_LENGTH=262144
MEM_FRACTION_STATIC=0.95
HEAD_MEM_FRACTION_STATIC=0.93
MAX_RUNNING_REQUESTS=4
EXTRA_SGLANG_ARGS="--fp8-gemm-backend flashinfer_cutlass --watchdog-timeout 1800"
DSV41_MXFP8_BACKEND=b12x
DSV41_WO_A_W8=1
DSV41_DRAFT_TAU=0.8
"""


def _launch(tmp_path: Path, env_text: str = RECIPE_ENV, hosts=HOSTS, *extra: str) -> tuple[int, Path]:
    env = tmp_path / "tp4.env"
    env.write_text(env_text)
    out = tmp_path / "out"
    code = main(["-C", str(REPO), "launch", "--variant", "tp4", "--env", str(env), "--nodes", ",".join(hosts),
                 "--out", str(out), *extra])
    return code, out


def _compose(path: Path) -> dict:
    return json.loads("".join(line for line in path.read_text().splitlines(keepends=True)
                              if not line.startswith("#")))


def _services(out: Path) -> list[dict]:
    return [_compose(out / f"node{rank}-{host}.compose.yaml")["services"]["sglang"]
            for rank, host in enumerate(HOSTS)]


def _serve_command(environment: dict[str, str], tmp_path: Path) -> list[str]:
    """What the image's serve runs with this environment (docker/entrypoint.sh; the
    in-image doctor stood in by a python that exits 0)."""
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\nexit 0\n")
    python.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "FORKBUILD_PYTHON": str(python),
           **{key: value.replace("$$", "$") for key, value in environment.items()}}
    done = subprocess.run(["bash", str(REPO / "docker" / "entrypoint.sh"), "serve", "--dry-run"], env=env,
                          capture_output=True, text=True, check=True)
    return shlex.split(done.stdout.strip().splitlines()[-1])[3:]


def test_every_node_gets_the_same_knobs_and_the_recipes_command(tmp_path):
    code, out = _launch(tmp_path)
    assert code == 0
    services = _services(out)
    assert sorted(path.name for path in out.iterdir()) == sorted(f"node{r}-{h}.compose.yaml" for r, h in enumerate(HOSTS))
    knobs = [{k: v for k, v in s["environment"].items() if k.startswith("DSV41_")} for s in services]
    assert all(node == knobs[0] for node in knobs)
    # The .env's values, and every other guard of tp4 at the variant's default, as start.sh passed them.
    assert knobs[0]["DSV41_WO_A_W8"] == "1" and knobs[0]["DSV41_DRAFT_TAU"] == "0.8"
    assert knobs[0]["DSV41_SERIAL_WEIGHT_LOAD"] == "1" and knobs[0]["DSV41_VERIFY_CAP"] == "0"
    for rank, service in enumerate(services):
        # the fleet's platform: tp4's first (the GB10 is arm64)
        assert service["image"] == "forkbuild/sglang:tp4-wheel-arm64" and service["command"] == ["serve"]
        assert service["platform"] == "linux/arm64"
        environment = service["environment"]
        assert (environment["NNODES"], environment["NODE_RANK"], environment["DIST_INIT_ADDR"]) == (
            "4", str(rank), "spark1:20000")
        assert ("HEAD_MEM_FRACTION_STATIC" in environment) == (rank == 0)
        argv = _serve_command(environment, tmp_path)
        flags = dict(zip(argv[::2], argv[1::2]))
        # start.sh's launch on this node: its defaults, the head's memory fraction on rank 0.
        assert flags["--mem-fraction-static"] == ("0.93" if rank == 0 else "0.95")
        assert (flags["--node-rank"], flags["--nnodes"], flags["--tp-size"]) == (str(rank), "4", "4")
        assert flags["--dist-init-addr"] == "spark1:20000"
        assert (flags["--speculative-algorithm"], flags["--speculative-dspark-block-size"]) == ("DSPARK", "3")
        assert (flags["--cuda-graph-max-bs-decode"], flags["--max-running-requests"]) == ("4", "4")
        assert (flags["--chunked-prefill-size"], flags["--max-total-tokens"]) == ("2048", "320000")
        assert flags["--served-model-name"] == "deepseek-v4.1-flash"
        assert flags["--watchdog-timeout"] == "1800" and flags["--context-length"] == "262144"
        assert service["volumes"] == ["/models/DeepSeek-V4.1-Flash:/models/DeepSeek-V4.1-Flash:ro"]


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose is not installed "
                    "(Debian: apt-get install -y docker-compose)")
def test_the_files_pass_docker_compose_config(tmp_path):
    code, out = _launch(tmp_path, RECIPE_ENV + "EXTRA_ARGS_NOTE='costs $5 ${HOME}'\n")
    assert code == 0
    for path in sorted(out.iterdir()):
        done = subprocess.run(["docker-compose", "-f", str(path), "config"], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        # RDMA over the GB10's ConnectX-7, as compose reads it
        assert "/dev/infiniband:/dev/infiniband" in done.stdout and "IPC_LOCK" in done.stdout
        assert "memlock:" in done.stdout and "hard: -1" in done.stdout
        # compose interpolates $NAME: the file escapes it ($$, which config shows as it is
        # valid there), so the container gets the value as written, not $HOME's.
        assert "costs $$5 $${HOME}" in done.stdout and os.environ.get("HOME", "$") not in done.stdout
        assert "is not set" not in done.stderr


@pytest.mark.parametrize(("line", "message"), [
    ("DSV41_VERIFY_CAP=Off", "DSV41_VERIFY_CAP='Off': REFUSED"),
    ("DSV41_WO_A_W8_DROP=1\nDSV41_WO_A_W8=0", "DSV41_WO_A_W8_DROP='1': REFUSED"),
    ("DSV41_BLOCK_VERIFY=no", "DSV41_BLOCK_VERIFY='no' meant on"),
])
def test_a_value_doctor_stops_on_writes_nothing(tmp_path, capsys, line, message):
    code, out = _launch(tmp_path, RECIPE_ENV + line + "\n")
    assert code == 2 and not out.exists()
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("hosts", "message"), [
    (HOSTS[:3], "--nodes names 3 node(s), but TP_SIZE is '4'"),
    ([*HOSTS[:3], "spark1"], "a host is named twice"),
    ([*HOSTS[:3], "SPARK1"], "spark1 and SPARK1 are one docker daemon"),
    # Two names of one daemon: two ranks' containers on one node, the second replacing the first.
    ([*HOSTS[:2], "n3=ssh://ops@Spark9", "n4=ssh://root@spark9"], "n3 and n4 are one docker daemon"),
    ([*HOSTS[:3], "-oProxyCommand=x"], "is not a host name"),
    ([*HOSTS[:3], "n4=ssh://-Fconfig"], "is not a docker host URL"),
    ([*HOSTS[:3], "n4=ssh://-oX@spark4"], "is not a docker host URL"),
])
def test_a_bad_node_list_writes_nothing(tmp_path, capsys, hosts, message):
    code, out = _launch(tmp_path, RECIPE_ENV, hosts)
    assert code == 2 and not out.exists()
    assert message in capsys.readouterr().err


def test_dry_run_prints_the_files_and_writes_nothing(tmp_path, capsys):
    code, out = _launch(tmp_path, RECIPE_ENV, HOSTS, "--dry-run")
    assert code == 0 and not out.exists()
    printed = capsys.readouterr().out
    assert all(f"--- node{rank}-{host}.compose.yaml" in printed for rank, host in enumerate(HOSTS))


def test_a_launch_into_another_clusters_folder_refuses_and_keeps_its_files(tmp_path, capsys):
    _launch(tmp_path, RECIPE_ENV, ["old1", "old2", "old3", "old4"])
    out = tmp_path / "out"
    edited = out / "node0-old1.compose.yaml"
    edited.write_text(edited.read_text() + "# edited by hand\n")
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    code, _ = _launch(tmp_path)
    assert code == 2 and "holds another cluster's node files: node0-old1.compose.yaml" in capsys.readouterr().err
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before
    code, _ = _launch(tmp_path, RECIPE_ENV, ["old1", "old2", "old3", "old4"])  # the same cluster again: fine
    assert code == 0


FABRIC = "NCCL_SOCKET_IFNAME=enp1s0f1np1\nGLOO_SOCKET_IFNAME=enp1s0f1np1\nNCCL_IB_HCA=rocep1s0f1\n"


def test_rdma_and_fabric_settings_reach_every_node_and_one_setting_turns_rdma_off(tmp_path):
    code, out = _launch(tmp_path, RECIPE_ENV + FABRIC)
    assert code == 0
    for path, service in zip(sorted(out.iterdir()), _services(out), strict=True):
        assert (path.stat().st_mode & 0o777) == 0o600  # the files hold the .env's values (tokens too)
        assert service["devices"] == ["/dev/infiniband:/dev/infiniband"] and service["cap_add"] == ["IPC_LOCK"]
        assert service["ulimits"] == {"memlock": {"soft": -1, "hard": -1}}
        assert {key: service["environment"][key] for key in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME",
                                                               "NCCL_IB_HCA")} == {
            "NCCL_SOCKET_IFNAME": "enp1s0f1np1", "GLOO_SOCKET_IFNAME": "enp1s0f1np1", "NCCL_IB_HCA": "rocep1s0f1"}
    code, out = _launch(tmp_path, RECIPE_ENV + FABRIC + "FORKBUILD_RDMA=0\n")
    assert code == 0
    for service in _services(out):
        assert not {"devices", "cap_add", "ulimits"} & set(service) and "FORKBUILD_RDMA" not in service["environment"]


def test_a_mistyped_knob_is_refused_naming_the_closest_and_writes_nothing(tmp_path, capsys):
    code, out = _launch(tmp_path, RECIPE_ENV + "DSV41_WO_A_W8_DORP=1\n")
    assert code == 2 and not out.exists()
    assert "DSV41_WO_A_W8_DORP='1': not a guard of series dsv41 (perhaps you meant DSV41_WO_A_W8_DROP?)" in \
        capsys.readouterr().err
    code, out = _launch(tmp_path, RECIPE_ENV + "DSV41_FOO=1\n", HOSTS, "--allow-unknown")
    assert code == 0 and "DSV41_FOO='1': not a guard" in capsys.readouterr().err
    assert all(service["environment"]["DSV41_FOO"] == "1" for service in _services(out))


def test_every_problem_of_a_launch_is_said_at_once_with_the_near_misses(tmp_path, capsys):
    code, out = _launch(tmp_path, RECIPE_ENV + "DSV41_WO_A_W8_DORP=1\nMAX_RUNING_REQUESTS=8\n", [*HOSTS, HOSTS[0]])
    assert code == 2 and not out.exists()
    err = capsys.readouterr().err
    # The .env's knob, the node list and (a warning only, but said now) the mistyped setting: one run shows them.
    assert "not a guard of series dsv41 (perhaps you meant DSV41_WO_A_W8_DROP?)" in err
    assert "--nodes: a host is named twice" in err
    assert "(a warning) " in err and "MAX_RUNING_REQUESTS='8': not a setting serve reads" in err


def test_doctor_refuses_a_mistyped_knob_and_warns_of_a_mistyped_setting(tmp_path, capsys):
    env = tmp_path / "tp4.env"
    env.write_text(RECIPE_ENV + "DSV41_WO_A_W8_DORP=1\nMAX_RUNING_REQUESTS=8\nHF_TOKEN=hf_x\n")
    assert main(["-C", str(REPO), "doctor", "--env", str(env)]) == 1
    err = capsys.readouterr().err
    assert "perhaps you meant DSV41_WO_A_W8_DROP?" in err
    assert "MAX_RUNING_REQUESTS='8': not a setting serve reads (perhaps you meant MAX_RUNNING_REQUESTS?)" in err
    assert "HF_TOKEN" not in err  # far from every setting: passed on without a word
    assert main(["-C", str(REPO), "doctor", "--env", str(env), "--allow-unknown"]) == 0


TP3_HAZARD = "DSV41_WO_A_W8=1\nDSV41_WO_A_W8_DROP=1\nDSV41_ENGRAM_PREFETCH=1\n"


def test_the_recipes_tp3_hazard_is_reported_by_doctor_and_refused_by_launch(tmp_path, capsys):
    env = tmp_path / "tp3.env"
    env.write_text(TP3_HAZARD)
    assert main(["-C", str(REPO), "doctor", "--env", str(env), "--variant", "tp3"]) == 0
    assert "hazard tp3-autotune-unload (DSV41_WO_A_W8_DROP=1, DSV41_ENGRAM_PREFETCH=1)" in capsys.readouterr().err
    out = tmp_path / "out"
    launch = ["-C", str(REPO), "launch", "--variant", "tp3", "--env", str(env), "--nodes", "a,b,c", "--out", str(out)]
    assert main(launch) == 2 and not out.exists()
    assert "--accept-hazard tp3-autotune-unload" in capsys.readouterr().err
    assert main([*launch, "--accept-hazard", "tp3-autotune-unload"]) == 0 and len(list(out.iterdir())) == 3
    # tp4 (no padded shard) and tp3 with one adapter on at a time: no hazard
    env.write_text("DSV41_WO_A_W8=1\nDSV41_WO_A_W8_DROP=1\n")
    assert main(launch[:-2] + ["--out", str(tmp_path / "one")]) == 0
    env.write_text(TP3_HAZARD)
    assert main(["-C", str(REPO), "launch", "--variant", "tp4", "--env", str(env), "--nodes", "a,b,c,d",
                 "--out", str(tmp_path / "tp4")]) == 0


def _node_client(tmp_path: Path, port: str, *, python3: bool = True) -> Path:
    """A docker client standing for a node's daemon: its container runs (HOST=0.0.0.0, PORT=port) and
    `exec ... python3 -c PROBE URL` runs the real probe here (exit 126 without python3); each call is
    logged to docker.calls."""
    client = tmp_path / "docker"
    client.write_text(f"""#!{sys.executable}
import json, subprocess, sys
with open(sys.argv[0] + ".calls", "a") as log:
    log.write(" ".join(sys.argv[1:3]) + "\\n")
verb, *rest = sys.argv[1:]
if verb == "inspect" or verb == "container":
    print(json.dumps([{{"Config": {{"Env": ["HOST=0.0.0.0", "PORT={port}", "NODE_RANK=0"]}}, "Image": "sha256:1",
                       "State": {{"Status": "running", "ExitCode": 0}}}}]))
elif verb == "exec":  # exec CONTAINER python3 -c PROBE URL
    if not {python3}:
        sys.stderr.write('OCI runtime exec failed: exec: "python3": executable file not found in $PATH')
        sys.exit(126)
    sys.exit(subprocess.run([sys.executable, *rest[2:]]).returncode)
""")
    client.chmod(0o755)
    return client


@pytest.mark.parametrize(("models", "said"), [
    ('{"object": "list", "data": [{"id": "DeepSeek-V4.1-Flash"}]}', "healthy, serving DeepSeek-V4.1-Flash"),
    # What a proxy or another server may answer on the head's port: no traceback, no model named.
    ("<html>502 Bad Gateway</html>", "healthy"),
    ("[1, 2]", "healthy"),
    ('{"data": ["DeepSeek"]}', "healthy"),
    ('{"data": 7}', "healthy"),
])
def test_status_asks_the_heads_server_from_inside_its_container_and_reads_any_answer(tmp_path, monkeypatch, models,
                                                                                     said):
    """The head's HOST and PORT are its container's; the GET runs there (`docker exec ... python3`):
    DIST_INIT_ADDR's fabric address need not be reachable from the machine that launches."""
    from fixtures import http_server
    from forkbuild.fleet.nodes import Fleet, Node

    with http_server(lambda path: (200, {}, (models if path == "/v1/models" else "").encode())) as server:
        port = server.rsplit(":", 1)[1]
        client = _node_client(tmp_path, port)
        monkeypatch.setenv("FORKBUILD_DOCKER", str(client))
        fleet = Fleet(nodes=(Node(name="spark1", url="ssh://spark1", rank=0),), variant="tp4", reporter=Reporter())
        lines = fleet.status(image="x", local=None)
    assert lines[-1] == f"head spark1: {said}"
    assert fleet.status(image="x", local=None)[-1] == "head spark1: not answering"  # the server is gone


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-5", "soon"])
def test_a_timeout_that_would_never_run_out_is_a_usage_error(tmp_path, capsys, value):
    with pytest.raises(SystemExit) as exited:
        _launch(tmp_path, RECIPE_ENV, HOSTS, "--up", "--health-timeout", value)
    assert exited.value.code == 2 and f"{value!r} is not a number of seconds above 0" in capsys.readouterr().err


def test_up_and_preflight_run_each_nodes_file_through_the_docker_client_alone(tmp_path):
    """`up` starts what the node file says with `docker run` (docker-compose could not reach an
    ssh:// node without paramiko), as the preflight does: every key of the service is an option,
    values travel in the client's environment (`$$` read back as `$`), none on the command line."""
    from forkbuild.console import Reporter

    code, out = _launch(tmp_path, RECIPE_ENV + "HF_TOKEN='hf_a$b'\n", HOSTS, "--platform", "linux/arm64")
    assert code == 0
    client = tmp_path / "docker"
    client.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$0.argv"\nprintf "%s" "$HF_TOKEN" > "$0.token"\n')
    client.chmod(0o755)
    docker = Docker(executable=str(client), env={"DOCKER_HOST": "ssh://spark2"}, reporter=Reporter())
    path = out / "node1-spark2.compose.yaml"
    file = NodeFile(rank=1, host="spark2", name=path.name, compose=_compose(path))
    service = file.compose["services"]["sglang"]
    assert {"devices", "cap_add", "ulimits", "deploy", "volumes", "platform"} <= set(service)
    done = _run_service(docker, file, name="forkbuild-tp4", options=["--detach"], command=["serve"],
                        reporter=Reporter(), timeout=30)
    assert done.status == 0
    argv = (tmp_path / "docker.argv").read_text().splitlines()
    assert argv[:4] == ["run", "--detach", "--name", "forkbuild-tp4"] and argv[-2:] == [service["image"], "serve"]
    for option in ("--platform linux/arm64", "--network host", "--ipc host", "--gpus=all", "--cap-add=IPC_LOCK",
                   "--device=/dev/infiniband:/dev/infiniband", "--ulimit=memlock=-1:-1",
                   "--volume=/models/DeepSeek-V4.1-Flash:/models/DeepSeek-V4.1-Flash:ro"):
        assert option in " ".join(argv), option
    assert {f"--env={key}" for key in service["environment"]} <= set(argv)
    assert (tmp_path / "docker.token").read_text() == "hf_a$b" and not any("hf_a" in item for item in argv)
    file.compose["services"]["sglang"]["shm_size"] = "16g"  # a key the files may gain: never dropped silently
    with pytest.raises(FleetError, match="no docker run option for shm_size"):
        _run_service(docker, file, name="x", options=[], command=[], reporter=Reporter(), timeout=30)


def test_what_docker_says_over_ssh_is_shown_without_its_transports_own_warnings():
    said = ('docker: Error response from daemon: exec: "preflight": executable file not found in $PATH: unknown.\n'
            'time="2026-12-07T23:49:55Z" level=warning msg="commandConn.CloseWrite: commandconn: failed to wait: '
            'signal: killed"\n')
    assert tail(said).splitlines()[-1].startswith("docker: Error response from daemon: exec: \"preflight\"")


def test_up_removes_every_container_when_the_head_cannot_be_asked(tmp_path, monkeypatch):
    from forkbuild.fleet.nodes import Fleet, Node

    code, out = _launch(tmp_path)
    assert code == 0
    files = [NodeFile(rank=rank, host=host, name=f"node{rank}-{host}.compose.yaml",
                      compose=_compose(out / f"node{rank}-{host}.compose.yaml")) for rank, host in enumerate(HOSTS)]
    monkeypatch.setenv("FORKBUILD_DOCKER", str(_node_client(tmp_path, "1", python3=False)))
    fleet = Fleet(nodes=tuple(Node(name=host, url=f"ssh://{host}", rank=rank) for rank, host in enumerate(HOSTS)),
                  variant="tp4", reporter=Reporter())
    with pytest.raises(FleetError, match="the head's container has no python3 to ask http://127.0.0.1:1/health") as \
            raised:
        fleet.up(files, timeout=60)
    assert "every node's container was removed again" in raised.value.message
    assert (tmp_path / "docker.calls").read_text().splitlines().count("rm --force") == len(HOSTS)
