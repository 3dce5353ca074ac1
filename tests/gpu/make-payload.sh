#!/usr/bin/env bash
# Prepares, on CPU, what tests/gpu/device-run.sh expects beside the repository
# copy on the lent GPU machine (PAYLOAD, default .gpu-payload, git-ignored; pass
# it in the device call's carry):
#   sglang-<variant>.tar.gz   the variant wheel's files without its Rust .so
#   whl/*.whl                 the pins of constraints/test-patch.txt the
#                             machine's image lacks (cp312, manylinux x86_64)
# The image's package names are read from the device notes' KINDS.md
# ("Packages: ..."); a pin whose name is there is not carried.
#   bash tests/gpu/make-payload.sh [KINDS.md]
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
KINDS=${1:-/work/.library/device/KINDS.md}
VARIANT=${VARIANT:-tp4}
PAYLOAD=${PAYLOAD:-$REPO/.gpu-payload}
PY=${PY:-$REPO/.venv/bin/python}
cd "$REPO"
# A folder this script did not make is never replaced; the new payload is built beside it and moved in whole.
if [ -e "$PAYLOAD" ] && [ ! -e "$PAYLOAD/.made-by-make-payload" ]; then
    echo "make-payload: $PAYLOAD exists and was not made by this script; move it away or set PAYLOAD" >&2
    exit 2
fi
built=$("$PY" -m forkbuild build-wheel --variant "$VARIANT" 2>&1) || { echo "$built" >&2; exit 1; }
echo "$built"
# the cp312 wheel build-wheel named (built now or found up to date), not whatever else dist/ holds
wheel=dist/$(echo "$built" | grep -o "sglang-[^ :/]*+$VARIANT\.[^ :/]*-cp312-[^ :/]*\.whl" | tail -1)
[ -f "$wheel" ] || { echo "make-payload: no cp312 wheel in build-wheel's report" >&2; exit 1; }
NEW=$(mktemp -d "$PAYLOAD.new.XXXXXX")
unpacked=$(mktemp -d)
trap 'rm -rf "$unpacked" "$NEW"' EXIT
mkdir -p "$NEW/whl"
"$PY" -m zipfile -e "$wheel" "$unpacked"
tar -czf "$NEW/sglang-$VARIANT.tar.gz" -C "$unpacked" --exclude='*.so' sglang $(cd "$unpacked" && ls -d sglang-*.dist-info)
missing=$("$PY" - "$KINDS" constraints/test-patch.txt <<'PY'
import re, sys
from packaging.utils import canonicalize_name
kinds = open(sys.argv[1]).read()
there = {canonicalize_name(n) for n in re.search(r"Packages: (.*?)\.\s*$", kinds, re.M).group(1).split(", ")}
pins = [line.split(";")[0].strip() for line in open(sys.argv[2]) if "==" in line and not line.startswith("#")]
keep = [p for p in pins if canonicalize_name(p.split("==")[0]) not in there and not p.startswith(("torch==", "triton=="))]
# sglang 0.5.23 needs a newer transformers than the image's
print(" ".join(keep + ["transformers==5.19.0", "unidiff", "tomlkit", "installer"]))
PY
)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d "$NEW/whl" $missing
touch "$NEW/.made-by-make-payload"
if [ -e "$PAYLOAD" ]; then mv "$PAYLOAD" "$NEW.old"; fi
mv "$NEW" "$PAYLOAD"
rm -rf "$NEW.old"
echo "payload: $PAYLOAD ($(du -sh "$PAYLOAD" | cut -f1), $(ls "$PAYLOAD/whl" | wc -l) wheels, from $wheel)"
