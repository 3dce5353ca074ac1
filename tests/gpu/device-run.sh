#!/usr/bin/env bash
# The GPU run of `forkbuild test-patch --device cuda`, on a machine that has a
# CUDA GPU, torch and triton but neither the upstream cache nor network (the
# lent H200). Expects, beside this repository copy (PAYLOAD, default ../):
#   sglang-<variant>.tar.*   the variant wheel's files without its Rust .so
#                            (what `forkbuild test-patch` installs on CPU)
#   whl/*.whl                the test venv's pins that machine lacks (cp312)
# sgl_kernel (373 MB) does not travel: tests/gpu/stubs puts a stand-in that
# raises when called on the path, and the report names it.
#   bash tests/gpu/device-run.sh    -> $OUT/test-patch-cuda-$VARIANT.json, $OUT/test-patch.log
# Preparing the payload (here, on CPU; it is ~48 MB, under a call's 64 MiB): bash tests/gpu/make-payload.sh
# writes .gpu-payload/ (carry it, and run with PAYLOAD=$PWD/.gpu-payload). By hand that is:
#   forkbuild build-wheel --variant tp4; unzip the cp312 wheel into a folder and
#   tar -czf sglang-tp4.tar.gz --exclude='*.so' sglang sglang-*.dist-info
#   pip download --no-deps --only-binary=:all: --python-version 3.12 -d whl \
#     <each pin of constraints/test-patch.txt the machine's image lacks> unidiff tomlkit installer
#   (the image's package list: /work/.library/device/KINDS.md; 43 pins on 2026-12-01, plus transformers
#   5.19.0, whose older copy there sglang 0.5.23 does not pin)
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
PAYLOAD=${PAYLOAD:-$REPO/..}
VARIANT=${VARIANT:-tp4}
SITE=/tmp/forkbuild-site
OUT=${OUT:-/tmp/forkbuild-out}
mkdir -p "$SITE" "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$PAYLOAD"/whl/*.whl || exit 3
tar -xf "$(ls "$PAYLOAD"/sglang-"$VARIANT".tar.* | head -1)" -C "$SITE" || exit 3
if [ -d "$PAYLOAD/overlay" ]; then cp -r "$PAYLOAD/overlay/." "$SITE/"; fi
export PYTHONPATH="$SITE:$REPO/tools:$REPO/tests/gpu/stubs" GIT_PYTHON_REFRESH=quiet PYTHONUNBUFFERED=1
cd "$REPO"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -m forkbuild -v test-patch --installed --device cuda --variant "$VARIANT" --python "$(command -v python3)" 2>&1 | tee "$OUT/test-patch.log"
status=${PIPESTATUS[0]}
cp "build/test-patch/$VARIANT-cuda.json" "$OUT/test-patch-cuda-$VARIANT.json" || { [ "$status" = 0 ] && status=1; }
exit $status
