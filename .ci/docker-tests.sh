#!/usr/bin/env bash
# The docker part of CI: a private dockerd, the local base images, every
# variant's image in both modes built and checked (tests/integration/test_image_build.py),
# tp4's linux/arm64 image (the GB10 fleet's) built and run under emulation
# (tests/integration/test_image_arm64.py; dockerd.sh registers qemu-aarch64 with binfmt_misc),
# a simulated fleet of 3 and 4 private daemons driven by `forkbuild launch` (tests/integration/test_fleet.py),
# and the daemon stopped again, also when something fails.
#
#   .ci/docker-tests.sh [pytest args...]
#
# PYTHON: the interpreter that has forkbuild and pytest (default: python3).
# FORKBUILD_DOCKERD_DIR: where the daemon keeps its state (see .ci/dockerd.sh);
# keeping it between runs keeps the base images (they are tagged by recipe hash).
# Run by `nox -s image-tests`, and by `nox` beside test-patch (the `variants` session).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"

# `start` says `started` only when it launched the daemon (under its lock, so
# two runs starting at once agree on which one owns it).
started=0
start_output="$(.ci/dockerd.sh start)"
if [[ $start_output == started ]]; then started=1; fi
eval "$(.ci/dockerd.sh env)"

finish() {
  # Only on a daemon this script started: a developer's running one keeps its
  # images, build cache and uptime. Rebuilt test images leave their
  # predecessors untagged; the tagged bases (content-addressed) stay in the
  # data root for the next run.
  if [[ $started == 1 ]]; then
    /usr/bin/docker image prune --force >/dev/null || true
    /usr/bin/docker builder prune --force >/dev/null || true
    .ci/dockerd.sh stop
  fi
}
trap finish EXIT

SECONDS=0
"$PYTHON" -m forkbuild build-base --stock
echo "docker-tests: bases ready after ${SECONDS}s"
"$PYTHON" -m pytest -m docker -p no:cacheprovider tests/integration/test_image_build.py \
  tests/integration/test_image_arm64.py tests/integration/test_fleet.py "$@"
echo "docker-tests: done after ${SECONDS}s"
