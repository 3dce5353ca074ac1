#!/usr/bin/env bash
# A private docker daemon for CI and local image builds.
#
#   .ci/dockerd.sh start   install docker.io/mmdebstrap/qemu-user-static if missing, register the
#                          arm64 emulator with binfmt_misc (the fleet's images build under it), start
#                          dockerd, wait for it;
#                          prints `started` on stdout when it launched the daemon (nothing when
#                          one was already running), so a caller knows whether to stop it
#   .ci/dockerd.sh stop    stop the daemon this script started (by its pid file)
#   .ci/dockerd.sh env     print the exports that point clients at it (eval "$(.ci/dockerd.sh env)")
#   .ci/dockerd.sh status  exit 0 when it answers
#   .ci/dockerd.sh binfmt  register qemu-aarch64 with binfmt_misc; exit 1 (saying why) where the kernel refuses
#
# The daemon has its own socket, data root, exec root and pid file under
# $FORKBUILD_DOCKERD_DIR (default /var/tmp/forkbuild-dockerd) so it never
# touches another daemon on the machine. --bridge=none/--iptables=false: it
# creates no network and no firewall rules; builds run with --network none.
#
# Debian's /usr/bin/docker (20.10) is the client: BuildKit is built into its
# dockerd, while /usr/local/bin/docker (28.x) has no buildx plugin and fails
# with DOCKER_BUILDKIT=1.
#
# Use from .ci/run:
#   .ci/dockerd.sh start && trap '.ci/dockerd.sh stop' EXIT
#   eval "$(.ci/dockerd.sh env)"
set -euo pipefail

STATE="${FORKBUILD_DOCKERD_DIR:-/var/tmp/forkbuild-dockerd}"
# The exec root holds containerd's and the daemon's unix sockets: keep it
# short (sun_path is 108 bytes), hence /run and a hash of the state dir.
EXEC_ROOT="/run/fbd-$(printf '%s' "$STATE" | sha256sum | cut -c1-12)"
SOCKET="$STATE/docker.sock"
PIDFILE="$STATE/dockerd.pid"
LOG="$STATE/dockerd.log"
DOCKER=/usr/bin/docker
DOCKERD=/usr/sbin/dockerd
START_TIMEOUT="${FORKBUILD_DOCKERD_TIMEOUT:-60}"
LOCK_TIMEOUT=$((START_TIMEOUT + 900))

log() { printf 'dockerd.sh: %s\n' "$*" >&2; }

ensure_packages() {
  local missing=()
  [[ -x "$DOCKERD" && -x "$DOCKER" ]] || missing+=(docker.io)
  command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
  command -v docker-compose >/dev/null || missing+=(docker-compose)
  [[ -x /usr/bin/qemu-aarch64-static ]] || missing+=(qemu-user-static)
  command -v update-binfmts >/dev/null || missing+=(binfmt-support)
  command -v arch-test >/dev/null || missing+=(arch-test)  # mmdebstrap --arch of a foreign architecture
  [[ -x /usr/sbin/sshd ]] || missing+=(openssh-server)  # the simulated fleet's ssh:// nodes (test_fleet.py)
  ((${#missing[@]} == 0)) && return 0
  log "installing ${missing[*]}"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >"$STATE/apt.log" 2>&1; then
    # A fresh machine may have no package lists yet.
    apt-get update >>"$STATE/apt.log" 2>&1
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >>"$STATE/apt.log" 2>&1 \
      || { log "apt-get install ${missing[*]} failed; see $STATE/apt.log"; tail -20 "$STATE/apt.log" >&2; return 1; }
  fi
  [[ -x "$DOCKER" ]] || { log "$DOCKER missing after installing docker.io"; return 1; }
}

running_pid() {
  [[ -f "$PIDFILE" ]] || return 1
  local pid
  pid="$(cat "$PIDFILE")"
  # comm: a stale pid file's number may belong to another process by now.
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == dockerd ]] \
    && printf '%s\n' "$pid"
}

# timeout: a daemon that accepts on its socket but is hung (or still busy
# starting) would keep the client waiting forever.
answers() { timeout 5 "$DOCKER" -H "unix://$SOCKET" version >/dev/null 2>&1; }

# One start at a time per state dir, and stop waits for a start in progress.
# Reentrant: cmd_start calls cmd_stop on a timeout while holding it.
take_lock() {
  [[ -n "${LOCKED:-}" ]] && return 0
  exec 9>"$STATE/start.lock"
  # The holder may be installing docker.io first: allow for apt, not just startup.
  if ! flock -w "$LOCK_TIMEOUT" 9; then
    log "another dockerd.sh has held $STATE/start.lock for over ${LOCK_TIMEOUT}s"
    return 1
  fi
  LOCKED=1
}

# A daemon that is running but not answering yet is starting up (or stopping):
# wait for it rather than start a second dockerd on the same data root.
wait_for_pid() {
  local pid=$1 deadline=$((SECONDS + START_TIMEOUT))
  until answers; do
    kill -0 "$pid" 2>/dev/null || return 1
    if ((SECONDS >= deadline)); then
      log "dockerd (pid $pid) runs on $STATE/data but does not answer on $SOCKET after ${START_TIMEOUT}s;" \
        "not starting a second one: see $LOG, or stop it (.ci/dockerd.sh stop)"
      exit 1
    fi
    sleep 0.5
  done
}

# arm64 under emulation: qemu-user-static's aarch64 entry, with the F flag (the kernel opens the
# interpreter at registration, so it works inside containers too). Where the kernel refuses
# (no binfmt_misc, no permission), say so: the arm64 tests skip naming this reason.
BINFMT=/proc/sys/fs/binfmt_misc
cmd_binfmt() {
  if [[ ! -e $BINFMT/register ]]; then
    mount -t binfmt_misc binfmt_misc "$BINFMT" 2>/dev/null \
      || { log "binfmt: the kernel refuses to mount binfmt_misc at $BINFMT: arm64 cannot run here"; return 1; }
  fi
  if ! grep -q '^enabled' "$BINFMT/qemu-aarch64" 2>/dev/null; then
    update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 \
      || update-binfmts --import qemu-aarch64 >/dev/null 2>&1 || true
  fi
  grep -q '^enabled' "$BINFMT/qemu-aarch64" 2>/dev/null \
    || { log "binfmt: qemu-aarch64 is not registered ($BINFMT refused it): arm64 cannot run here"; return 1; }
  grep -q '^flags: .*F' "$BINFMT/qemu-aarch64" \
    || { log "binfmt: qemu-aarch64 is registered without the F flag: containers cannot use it"; return 1; }
}

cmd_start() {
  mkdir -p "$STATE"
  take_lock
  ensure_packages
  cmd_binfmt || true  # the arm64 tests skip, naming the reason
  local pid
  if pid="$(running_pid)" && wait_for_pid "$pid"; then
    log "already running (pid $pid), socket $SOCKET"
    return 0
  fi
  rm -f "$PIDFILE" "$SOCKET"
  mkdir -p "$STATE/data" "$EXEC_ROOT"
  # setsid: the daemon leaves the caller's process group, so a Ctrl-C in the
  # caller's terminal does not kill it mid-build; `stop` ends it explicitly.
  # 9>&-: the daemon must not inherit (and so hold forever) the start lock.
  setsid "$DOCKERD" \
    --host "unix://$SOCKET" \
    --data-root "$STATE/data" \
    --exec-root "$EXEC_ROOT" \
    --pidfile "$PIDFILE" \
    --bridge=none --iptables=false --ip-masq=false \
    >"$LOG" 2>&1 </dev/null 9>&- &
  local launcher=$! deadline=$((SECONDS + START_TIMEOUT))
  until answers; do
    if ! kill -0 "$launcher" 2>/dev/null && ! running_pid >/dev/null; then
      log "dockerd exited during startup; last log lines:"
      tail -30 "$LOG" >&2
      return 1
    fi
    if ((SECONDS >= deadline)); then
      log "dockerd did not answer on $SOCKET within ${START_TIMEOUT}s; last log lines:"
      tail -30 "$LOG" >&2
      cmd_stop || true
      return 1
    fi
    sleep 0.5
  done
  log "running (pid $(running_pid)), socket $SOCKET, data $STATE/data"
  echo started
}

cmd_stop() {
  [[ -d "$STATE" ]] || { log "not running"; return 0; }
  take_lock
  local pid
  if ! pid="$(running_pid)"; then
    log "not running"
    rm -f "$PIDFILE"
    return 0
  fi
  kill -TERM "$pid"
  # dockerd stops its containers (10 s grace) and its containerd first.
  for _ in $(seq 1 60); do
    kill -0 "$pid" 2>/dev/null || { log "stopped (pid $pid)"; rm -f "$PIDFILE"; return 0; }
    sleep 0.5
  done
  log "dockerd (pid $pid) ignored SIGTERM for 30 s; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$PIDFILE"
}

cmd_env() {
  cat <<EOF
export DOCKER_HOST=unix://$SOCKET
export FORKBUILD_DOCKER_HOST=unix://$SOCKET
export FORKBUILD_DOCKER=$DOCKER
export DOCKER_BUILDKIT=1
export COMPOSE_DOCKER_CLI_BUILD=1
EOF
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  env) cmd_env ;;
  status) answers ;;
  binfmt) mkdir -p "$STATE"; ensure_packages && cmd_binfmt ;;
  *) echo "usage: $0 start|stop|env|status|binfmt" >&2; exit 2 ;;
esac
