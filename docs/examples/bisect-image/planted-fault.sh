#!/bin/sh
# A planted fault for `forkbuild bisect --image`: exit 1 when the probe's image
# holds both wo_a_w8 and engram_prefetch (the pair the recipe's start.sh warns
# about), 0 otherwise. Judged inside the image, from the sglang installed there
# (the files the two patches add), never from FORKBUILD_FEATURES: so the
# bisect's answer shows that each probe's image really holds its features.
#
#   forkbuild bisect --variant tp4 --image --local-base -- sh docs/examples/bisect-image/planted-fault.sh
set -eu
: "${FORKBUILD_IMAGE:?run by forkbuild bisect --image}"
exec /usr/bin/docker run --rm --network none --entrypoint python3 "$FORKBUILD_IMAGE" -c '
import importlib.util, pathlib, sys
root = pathlib.Path(importlib.util.find_spec("sglang").submodule_search_locations[0])
wo_a_w8 = (root / "kernels/ops/gemm/dsv4_wo_a_w8.py").is_file()
prefetch = "def prefetch_rows(" in (root / "srt/layers/engram.py").read_text()
print(f"{root}: wo_a_w8 kernel {wo_a_w8}, engram prefetch_rows {prefetch}")
sys.exit(1 if wo_a_w8 and prefetch else 0)
'
