"""What bounds the persistent Hopper W8 kernel where it is slower than cuBLAS: Nsight Compute's
speed-of-light, memory and warp-stall sections for it and for stock's bf16 GEMM at the same sizes, on the
lent H200 (ncu is in its image).

    ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section WarpStateStats --section ComputeWorkloadAnalysis -k regex:'wo_a_w8|gemm|Kernel' \
        python3 bench/profile_wo_a_w8_ncu.py

Each case launches its kernel three times (a warm-up and two); the report lists launches in the order
the cases print.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wo_a_w8_persistent_variants as v  # noqa: E402
from sweep_wo_a_w8_gluon import weights  # noqa: E402

# (shape, tokens, tiles): the small shape where it is memory-bound, the large one at a full 256-token wave
# and at 300 tokens (256 + 64 tiles)
CASES = (((8, 256, 512), 4096, (256, 0, 4)), ((16, 1024, 1024), 256, (256, 0, 4)),
         ((16, 1024, 1024), 300, (256, 64, 3)))


def main():
    gen = torch.Generator(device="cuda").manual_seed(1)
    for (groups, rows, dim), tokens, tiles in CASES:
        codes, scale, w = weights(groups, rows, dim, gen)
        o = torch.randn(tokens, groups, dim, generator=gen, device="cuda").bfloat16()
        for name in ("bf16", f"pers {tiles}"):
            print(f"case [{groups},{rows},{dim}] T={tokens} {name}: a warm-up and 2 launches", flush=True)
            for _ in range(3):
                if name == "bf16":
                    torch.einsum("tgd,grd->tgr", o, w)
                else:
                    v.wo_a_w8_persistent(o, codes.view(-1, dim), scale.view(-1, dim // 32), tiles=tiles)
            torch.cuda.synchronize()

if __name__ == "__main__":
    main()
