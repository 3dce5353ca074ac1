#!/usr/bin/env bash
# The image's entry point.
#   serve [--dry-run]   run doctor, then launch the sglang server from the
#                       environment, like the recipe's .env/start.sh (default)
#   doctor [--strict]   variant, features, every guard's value; warnings
#   check [...]         verify the installed patched sglang (the build-time check)
#   preflight [--timeout S]  the cluster's rendezvous on DIST_INIT_ADDR, no model (forkbuild launch --preflight)
#   anything else       run it (e.g. `bash`, `pip show sglang`)
set -euo pipefail

PY="${FORKBUILD_PYTHON:-python3}"

runtime() {
  PYTHONPATH="/opt/forkbuild${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m forkbuild_runtime "$@"
}

# Each setting becomes its server flag only when set and not empty, so
# sglang's own default applies otherwise. EXTRA_SGLANG_ARGS is split on
# whitespace, as in the recipe's .env (EXTRA_SGLANG_ARGS="--fp8-gemm-backend
# ... --watchdog-timeout 1800").
SETTINGS=(
  SERVED_MODEL_NAME:--served-model-name TP_SIZE:--tp-size EP_SIZE:--ep-size NNODES:--nnodes
  NODE_RANK:--node-rank DIST_INIT_ADDR:--dist-init-addr CONTEXT_LENGTH:--context-length
  MEM_FRACTION_STATIC:--mem-fraction-static MAX_RUNNING_REQUESTS:--max-running-requests
  CUDA_GRAPH_MAX_BS_DECODE:--cuda-graph-max-bs-decode CHUNKED_PREFILL_SIZE:--chunked-prefill-size
  MAX_TOTAL_TOKENS:--max-total-tokens SPEC_ALGO:--speculative-algorithm
  DSPARK_BLOCK_SIZE:--speculative-dspark-block-size
)

serve() {
  local dry_run=0 setting name extra
  [[ "${1:-}" == "--dry-run" ]] && dry_run=1
  : "${MODEL_PATH:?MODEL_PATH is not set: the model directory to serve}"
  # The recipe's start.sh launch defaults (docs/images.md); a variable set to
  # empty leaves its flag out.
  : "${SPEC_ALGO=DSPARK}" "${DSPARK_BLOCK_SIZE=3}" "${CHUNKED_PREFILL_SIZE=2048}" \
    "${MAX_TOTAL_TOKENS=320000}" "${SERVED_MODEL_NAME=deepseek-v4.1-flash}" \
    "${CUDA_GRAPH_MAX_BS_DECODE=${MAX_RUNNING_REQUESTS:-}}"
  [[ "$SPEC_ALGO" == DSPARK ]] || DSPARK_BLOCK_SIZE=
  # Rank 0 (the head) runs with its own memory fraction, as start.sh did.
  if [[ "${NODE_RANK:-0}" == 0 && -n "${HEAD_MEM_FRACTION_STATIC:-}" ]]; then
    MEM_FRACTION_STATIC=$HEAD_MEM_FRACTION_STATIC
  fi
  local args=(-m sglang.launch_server --model-path "$MODEL_PATH" --host "${HOST:-0.0.0.0}" --port "${PORT:-30000}")
  for setting in "${SETTINGS[@]}"; do
    name="${setting%%:*}"
    if [[ -n "${!name:-}" ]]; then
      args+=("${setting#*:}" "${!name}")
    fi
  done
  read -r -a extra <<<"${EXTRA_SGLANG_ARGS:-}"
  args+=("${extra[@]}")
  runtime doctor
  if ((dry_run)); then
    # Shell-quoted, so the line can be pasted back into a shell.
    local quoted
    printf -v quoted '%q ' "$PY" "${args[@]}"
    echo "${quoted% }"
    return 0
  fi
  exec "$PY" "${args[@]}"
}

command="${1:-serve}"
(($#)) && shift
case "$command" in
  serve) serve "$@" ;;
  doctor) runtime doctor "$@" ;;
  check) runtime check "$@" ;;
  preflight) runtime preflight "$@" ;;
  *) exec "$command" "$@" ;;
esac
