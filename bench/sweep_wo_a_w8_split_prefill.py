"""Split-K for the W8 Triton kernel at prefill sizes on DeepSeek-V4.1-Flash's own wo_a
([2, 1024, 4096] per rank at TP4), graph-timed like bench_wo_a_w8_gpu.py (8 cold-L2 calls a
graph, median of 3 runs).

With DSV41_WO_A_W8_DROP (no bf16 weight) that shape is 1.9-2.0x the bf16 GEMM at 128-256 tokens
(bench/results/wo_a_w8_model_shape.txt): the tile table's tiles cut 2048 rows of 4096 columns
into 128 programs of narrow token tiles, each dequantising its weight slice once per token tile.
The decode sweep (wo_a_w8_decode_sweep.txt) tried split-K only token-left with token tiles of at
most 64. Here the shipped kernel (dsv4_wo_a_w8._wo_a_w8_triton, which takes any tiles and split)
runs weight-left too (the dequantised weight as wgmma's register operand) with one token tile of
64-256 per weight slice, over SPLIT = 1..8 programs per slice (fp32 partials, the fixed-order sum).
Each candidate is checked against the bf16 GEMM first (relative error < 2**-7).

    python bench/sweep_wo_a_w8_split_prefill.py [GxRxD]    (needs the patched sglang and a CUDA GPU)
"""

import itertools
import os
import sys

import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_wo_a_w8_gpu import SETS, _graph_median, _time_correct, _weights  # noqa: E402

TOKENS = (33, 64, 128, 256, 512, 1024)
SPLITS = (1, 2, 4, 8)


def candidates(tokens: int):
    """(tiles, split): tiles (BM, BN, BK, warps, stages, w_left) with one or two token tiles."""
    token_tiles = sorted({min(256, max(64, triton.next_power_of_2(tokens))), min(256, max(64, tokens // 2))})
    for bm in token_tiles:
        block_ks = (64,) if bm == 256 else (64, 128)
        for bn, bk, (warps, stages), split, w_left in itertools.product(
            (64, 128), block_ks, ((4, 3), (8, 3), (4, 4)), SPLITS, (True, False)
        ):
            if not w_left and (bn, warps, stages) != (64, 4, 3):
                continue  # token-left: only the decode sweep's best form, for comparison
            yield (bm, bn, bk, warps, stages, w_left), split


def main() -> int:
    from sglang.kernels.ops.gemm import dsv4_wo_a_w8 as w8

    groups, rows, dim = (int(n) for n in (sys.argv[1] if len(sys.argv) > 1 else "2x1024x4096").split("x"))
    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name}, torch {torch.__version__}, triton {triton.__version__}; wo_a [{groups},{rows},{dim}]")
    print("us per call (graph of 8 cold-L2 calls, median of 3); (ratio to bf16) tiles (BM, BN, BK, warps, stages, "
          "w_left) x SPLIT")
    gen = torch.Generator(device="cuda").manual_seed(0)
    weights = [_weights(groups, rows, dim, gen) for _ in range(SETS)]
    for tokens in TOKENS:
        acts = [torch.randn(tokens, groups, dim, generator=gen, device="cuda").bfloat16() for _ in range(SETS)]
        reference = torch.einsum("tgd,grd->tgr", acts[0], weights[0][2])
        w8_sets = [(a, w[0], w[1]) for a, w in zip(acts, weights)]
        bf16 = _graph_median(lambda x, w: torch.einsum("tgd,grd->tgr", x, w), [(a, w[2]) for a, w in zip(acts, weights)])
        shipped = _graph_median(lambda x, c, s: w8._wo_a_w8_triton(x, c, s), w8_sets)
        deq = _graph_median(lambda x, c, s: w8._wo_a_w8_dequantized(x, c, s), w8_sets)
        calls = [((tiles, split), lambda x, c, s, t=tiles, k=split: w8._wo_a_w8_triton(x, c, s, t, k))
                 for tiles, split in candidates(tokens) if not (dim % (tiles[2] * split) or rows % tiles[1])]
        results = _time_correct(calls, w8_sets, reference, label=f"T={tokens}")
        best = ", ".join(f"{t:.1f} ({t / bf16:.2f}) {tiles} x{split}" for t, (tiles, split) in results[:5])
        print(f"T={tokens:>4} bf16 {bf16:5.1f} | shipped {shipped:5.1f} ({shipped / bf16:.2f}) | deq+bf16 {deq:5.1f} "
              f"({deq / bf16:.2f}) | {best}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
