#!/bin/sh
# The image's entry point.
#   serve [--dry-run]   run doctor, then launch the sglang server from the
#                       environment, like the recipe's .env/start.sh (default)
#   doctor [--strict]   variant, features, every guard's value; warnings
#   check               verify the installed patched sglang (the build-time check)
#   anything else       run it (e.g. `bash`, `pip show sglang`)
set -eu

PY="${FORKBUILD_PYTHON:-python3}"

runtime() {
  PYTHONPATH="/opt/forkbuild${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m forkbuild_runtime "$@"
}

# Each setting becomes its server flag only when set, so sglang's own default
# applies otherwise. EXTRA_SGLANG_ARGS is split on whitespace, as in the
# recipe's .env (EXTRA_SGLANG_ARGS="--fp8-gemm-backend ... --watchdog-timeout 1800").
serve() {
  dry_run=0
  [ "${1:-}" = "--dry-run" ] && dry_run=1
  : "${MODEL_PATH:?MODEL_PATH is not set: the model directory to serve}"
  set -- -m sglang.launch_server --model-path "$MODEL_PATH" \
    --host "${HOST:-0.0.0.0}" --port "${PORT:-30000}"
  flag() { if [ -n "${2:-}" ]; then extra="$extra $1 $2"; fi; }
  extra=""
  flag --served-model-name "${SERVED_MODEL_NAME:-}"
  flag --tp-size "${TP_SIZE:-}"
  flag --ep-size "${EP_SIZE:-}"
  flag --nnodes "${NNODES:-}"
  flag --node-rank "${NODE_RANK:-}"
  flag --dist-init-addr "${DIST_INIT_ADDR:-}"
  flag --context-length "${CONTEXT_LENGTH:-}"
  flag --mem-fraction-static "${MEM_FRACTION_STATIC:-}"
  flag --max-running-requests "${MAX_RUNNING_REQUESTS:-}"
  flag --chunked-prefill-size "${CHUNKED_PREFILL_SIZE:-}"
  flag --max-total-tokens "${MAX_TOTAL_TOKENS:-}"
  # shellcheck disable=SC2086 # word splitting of the settings is intended
  set -- "$@" $extra ${EXTRA_SGLANG_ARGS:-}
  runtime doctor
  if [ "$dry_run" = 1 ]; then
    printf '%s' "$PY"
    printf ' %s' "$@"
    printf '\n'
    return 0
  fi
  exec "$PY" "$@"
}

command="${1:-serve}"
[ "$#" -gt 0 ] && shift
case "$command" in
  serve) serve "$@" ;;
  doctor) runtime doctor "$@" ;;
  check) runtime check "$@" ;;
  *) exec "$command" "$@" ;;
esac
