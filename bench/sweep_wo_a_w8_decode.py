"""The W8 Triton kernel at decode sizes on DeepSeek-V4.1-Flash's own wo_a ([2, 1024, 4096] per rank
at TP4), graph-timed like bench_wo_a_w8_gpu.py (8 cold-L2 calls a graph, median of 3 runs).

On that shape the shipped tiles are 1.63x the bf16 GEMM at 1 token (14.6 vs 8.9 us, H200): 2048 rows
over 32-row tiles give 64 programs, each streaming its rows over 4096 columns in 128-column steps,
too few bytes in flight to read 8 MiB at the H200's bandwidth. Two remedies, side by side:
  tiles   the shipped kernel with narrower row tiles (16) and longer k-steps (256, 512): more
          programs, more bytes per step;
  split   the k loop split over SPLIT programs (fp32 partial sums in a workspace, then one
          reduction kernel that adds them in a fixed order and rounds to bf16: deterministic).
Each candidate is checked against the bf16 GEMM first (relative error < 2**-7).

    python bench/sweep_wo_a_w8_decode.py [GxRxD]     (needs the patched sglang and a CUDA GPU)
"""

import os
import statistics
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_wo_a_w8_gpu import SETS, _Graph, _relative_error  # noqa: E402


@triton.jit
def _split_kernel(X, W, S, P, T, R: tl.constexpr, D: tl.constexpr, G: tl.constexpr, BM: tl.constexpr,
                  BN: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr, F32_DOT: tl.constexpr = False):
    # The shipped kernel's token-left form, over one SPLIT-th of D, into fp32 partials P[split, T, G, R].
    tile_n, group, pid = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    tile_m, split = pid // SPLIT, pid % SPLIT
    m = tile_m * BM + tl.arange(0, BM)
    n = tile_n * BN + tl.arange(0, BN)
    k = tl.arange(0, BK)
    rows = group * R + n
    scale_cols = tl.arange(0, BK // 32)
    acc = tl.zeros((BM, BN), tl.float32)
    for k0 in range(split * (D // SPLIT), (split + 1) * (D // SPLIT), BK):
        x = tl.load(X + (m[:, None] * G + group) * D + k0 + k[None, :], m[:, None] < T, 0)
        w = tl.load(W + rows[:, None] * D + k0 + k[None, :])
        s = tl.load(S + (rows[:, None] // 32) * (D // 32) + k0 // 32 + scale_cols[None, :])
        s = tl.reshape(tl.broadcast_to(s[:, :, None], (BN, BK // 32, 32)), (BN, BK))
        w = (w.to(tl.float32) * s).to(tl.bfloat16)
        if F32_DOT:  # the interpreter (CPU check of this file) has no bf16 dot
            acc += tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), input_precision="ieee")
        else:
            acc += tl.dot(x, tl.trans(w))
    out = P + ((split * T + m[:, None]) * G + group) * R + n[None, :]
    tl.store(out, acc, m[:, None] < T)


@triton.jit
def _reduce_kernel(P, Y, N, SPLIT: tl.constexpr, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    acc = tl.load(P + i, i < N, 0.0)
    for s in tl.static_range(1, SPLIT):
        acc += tl.load(P + s * N + i, i < N, 0.0)
    tl.store(Y + i, acc.to(tl.bfloat16), i < N)


def split_matmul(o, codes, scale, bm, bn, bk, split, warps, stages):
    tokens, groups, dim = o.shape
    rows = codes.shape[0] // groups
    partial = torch.empty((split, tokens, groups, rows), dtype=torch.float32, device=o.device)
    out = torch.empty((tokens, groups, rows), dtype=torch.bfloat16, device=o.device)
    _split_kernel[(rows // bn, groups, triton.cdiv(tokens, bm) * split)](
        o, codes, scale, partial, tokens, rows, dim, groups, BM=bm, BN=bn, BK=bk, SPLIT=split,
        F32_DOT=os.environ.get("TRITON_INTERPRET") == "1", num_warps=warps, num_stages=stages)
    n = out.numel()
    _reduce_kernel[(triton.cdiv(n, 1024),)](partial, out, n, SPLIT=split, B=1024, num_warps=4)
    return out


def main() -> int:
    from sglang.kernels.ops.gemm import dsv4_wo_a_w8 as w8

    groups, rows, dim = (int(n) for n in (sys.argv[1] if len(sys.argv) > 1 else "2x1024x4096").split("x"))
    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name}, torch {torch.__version__}, triton {triton.__version__}; wo_a [{groups},{rows},{dim}]")
    print("us per call (graph of 8 cold-L2 calls, median of 3); tiles (BM, BN, BK, warps, stages, w_left); "
          "split (BM, BN, BK, SPLIT, warps, stages)")
    gen = torch.Generator(device="cuda").manual_seed(0)
    weights = []
    for _ in range(SETS):
        wt = (torch.randn(groups * rows, dim, generator=gen, device="cuda") * 0.02).bfloat16()
        c, s = w8.quantize_wo_a_w8(wt)
        weights.append((c, s, w8.dequantize_wo_a_w8(c, s).view(groups, rows, dim)))
    for tokens in (1, 4, 16, 32, 64, 128):
        bm = max(16, min(64, triton.next_power_of_2(tokens)))
        acts = [torch.randn(tokens, groups, dim, generator=gen, device="cuda").bfloat16() for _ in range(SETS)]
        reference = torch.einsum("tgd,grd->tgr", acts[0], weights[0][2])
        w8_sets = [(a, w[0], w[1]) for a, w in zip(acts, weights)]

        def timed(call, sets):
            graph = _Graph(call, sets)
            return statistics.median(graph.run() for _ in range(3))

        bf16 = timed(lambda x, w: torch.einsum("tgd,grd->tgr", x, w), [(a, w[2]) for a, w in zip(acts, weights)])
        shipped = timed(lambda x, c, s: w8._wo_a_w8_triton(x, c, s), w8_sets)
        results = []
        candidates = [("tiles", (bm, bn, bk, warps, stages, False))
                      for bn in (16, 32) for bk in (256, 512) for warps in (4,) for stages in (3, 5)]
        candidates += [("split", (bm, bn, bk, split, 4, 3))
                       for bn in (32, 64) for bk in (128, 256) for split in (4, 8)]
        for kind, cfg in candidates:
            if kind == "tiles":
                call = lambda x, c, s, cfg=cfg: w8._wo_a_w8_triton(x, c, s, cfg)  # noqa: E731
            else:
                bm_, bn, bk, split, warps, stages = cfg
                if dim % (split * bk):
                    continue
                call = lambda x, c, s, a=(bm_, bn, bk, split, warps, stages): split_matmul(x, c, s, *a)  # noqa: E731
            try:
                error = _relative_error(call(*w8_sets[0]), reference)
                if not error < 2**-7:
                    print(f"  T={tokens} {kind} {cfg}: relative error {error:.2e}", flush=True)
                    continue
                results.append((timed(call, w8_sets), kind, cfg))
            except Exception as error:  # noqa: BLE001 - out of resources: not a candidate
                print(f"  T={tokens} {kind} {cfg}: {type(error).__name__}", flush=True)
        results.sort()
        best = ", ".join(f"{t:.1f} ({t / bf16:.2f}) {kind} {cfg}" for t, kind, cfg in results[:4])
        print(f"T={tokens:>4} bf16 {bf16:5.1f} | shipped {shipped:5.1f} ({shipped / bf16:.2f}) "
              f"{w8._tiles(tokens, groups, rows, dim)} | {best}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
