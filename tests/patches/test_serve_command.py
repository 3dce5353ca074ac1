"""The image's `serve`: the exact command `serve --dry-run` prints (docker/entrypoint.sh,
run here with the installed patched sglang and the in-image runtime) parses with
sglang 0.5.23's own server-argument parser, strictly: an unknown or misspelt flag
(or an abbreviation argparse would otherwise accept) fails it. The defaults are the
recipe's start.sh: DSpark speculative decoding with block size 3, the CUDA-graph
decode batch from MAX_RUNNING_REQUESTS, chunked prefill 2048, 320000 total tokens,
the served model name, HEAD_MEM_FRACTION_STATIC on node rank 0."""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

# The DSpark features (verify_cap among them) act only when serve launches DSpark.
FEATURE = "verify_cap"

REPO = Path(__file__).resolve().parents[2]

# serve reads the build's manifest (the image's own); stock sglang (test-patch's stock proof) has none.
pytestmark = pytest.mark.skipif(
    not Path(importlib.util.find_spec("sglang").origin).with_name("_forkbuild_manifest.json").is_file(),
    reason="stock sglang: serve needs a forkbuild build's manifest")


def _serve_dry_run(tmp_path: Path, **settings: str) -> list[str]:
    """The argv after `python -m sglang.launch_server` that serve --dry-run prints."""
    runtime = tmp_path / "forkbuild_runtime"
    if not runtime.exists():
        runtime.symlink_to(REPO / "tools" / "forkbuild_runtime")
    env = {key: value for key, value in os.environ.items()
           if key not in ("SPEC_ALGO", "DSPARK_BLOCK_SIZE", "CHUNKED_PREFILL_SIZE", "MAX_TOTAL_TOKENS",
                          "SERVED_MODEL_NAME", "CUDA_GRAPH_MAX_BS_DECODE", "MEM_FRACTION_STATIC",
                          "HEAD_MEM_FRACTION_STATIC", "NODE_RANK", "MAX_RUNNING_REQUESTS", "EXTRA_SGLANG_ARGS")}
    # The in-image runtime beside whatever finds sglang here (the GPU run puts it on PYTHONPATH).
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    env.update(FORKBUILD_PYTHON=sys.executable, PYTHONPATH=path, MODEL_PATH="/models/DeepSeek-V4.1-Flash", **settings)
    done = subprocess.run(["bash", str(REPO / "docker" / "entrypoint.sh"), "serve", "--dry-run"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    words = shlex.split(done.stdout.strip().splitlines()[-1])
    assert words[:3] == [sys.executable, "-m", "sglang.launch_server"], words
    return words[3:]


def _parse(argv: list[str]) -> argparse.Namespace:
    """sglang's own parser (ServerArgs.add_cli_args, as prepare_server_args builds it), strict."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve", allow_abbrev=False, exit_on_error=False)
    ServerArgs.add_cli_args(parser)
    return parser.parse_args(argv)


@pytest.mark.guard_off
def test_serve_applies_the_recipes_launch_defaults_in_sglangs_own_flags(tmp_path):
    argv = _serve_dry_run(tmp_path, MAX_RUNNING_REQUESTS="4", MEM_FRACTION_STATIC="0.95",
                          HEAD_MEM_FRACTION_STATIC="0.93", TP_SIZE="4", NNODES="4", NODE_RANK="0",
                          DIST_INIT_ADDR="10.0.0.1:20000", CONTEXT_LENGTH="262144",
                          EXTRA_SGLANG_ARGS="--watchdog-timeout 1800")
    args = _parse(argv)
    assert args.speculative_algorithm == "DSPARK" and args.speculative_dspark_block_size == 3
    assert args.cuda_graph_max_bs_decode == 4 and args.max_running_requests == 4
    assert args.chunked_prefill_size == 2048 and args.max_total_tokens == 320000
    assert args.served_model_name == "deepseek-v4.1-flash"
    assert args.mem_fraction_static == 0.93  # the head's
    assert (args.tp_size, args.nnodes, args.node_rank, args.dist_init_addr) == (4, 4, 0, "10.0.0.1:20000")
    assert args.context_length == 262144 and args.watchdog_timeout == 1800
    assert args.model_path == "/models/DeepSeek-V4.1-Flash"


@pytest.mark.guard_off
def test_each_default_is_overridden_by_its_variable(tmp_path):
    argv = _serve_dry_run(tmp_path, MAX_RUNNING_REQUESTS="8", CUDA_GRAPH_MAX_BS_DECODE="2", DSPARK_BLOCK_SIZE="4",
                          CHUNKED_PREFILL_SIZE="1024", MAX_TOTAL_TOKENS="100000", SERVED_MODEL_NAME="m",
                          MEM_FRACTION_STATIC="0.9", HEAD_MEM_FRACTION_STATIC="0.8", NODE_RANK="2")
    args = _parse(argv)
    assert (args.cuda_graph_max_bs_decode, args.speculative_dspark_block_size) == (2, 4)
    assert (args.chunked_prefill_size, args.max_total_tokens, args.served_model_name) == (1024, 100000, "m")
    assert args.mem_fraction_static == 0.9  # a worker: not the head's fraction
    # Empty: the flag is left out (sglang's own default); no speculative algorithm, no block size.
    argv = _serve_dry_run(tmp_path, SPEC_ALGO="", CHUNKED_PREFILL_SIZE="")
    assert "--speculative-algorithm" not in argv and "--speculative-dspark-block-size" not in argv
    assert "--chunked-prefill-size" not in argv and "--cuda-graph-max-bs-decode" not in argv
    assert _parse(argv).speculative_algorithm is None


@pytest.mark.guard_off
def test_a_misspelt_flag_fails_the_parser(tmp_path):
    argv = _serve_dry_run(tmp_path, EXTRA_SGLANG_ARGS="--chunked-prefil-size 1")
    with pytest.raises((argparse.ArgumentError, SystemExit)):
        _parse(argv)
    with pytest.raises((argparse.ArgumentError, SystemExit)):
        _parse([*_serve_dry_run(tmp_path), "--max-total-tok", "1"])  # an abbreviation: refused too
