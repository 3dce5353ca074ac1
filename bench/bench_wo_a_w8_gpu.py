"""wo_a_w8 on a CUDA GPU: the W8 Triton GEMM against stock's bf16 GEMM, one run.

For each wo_a shape and token count: the W8 kernel (e4m3 codes + 32x32 block
scales, sglang.kernels.ops.gemm.dsv4_wo_a_w8.wo_a_w8_matmul, the tile table it
ships with) and the baseline, bf16 ``einsum('tgd,grd->tgr')`` on the
dequantised weight (what stock runs without the patch; cuBLAS). Both are timed
in the same process with triton.testing.do_bench (median of CUDA-event timed
runs), on fresh random inputs, and the W8 result is checked against the bf16
one first. Prints microseconds and the ratio w8/bf16 (<= 1.0: W8 on par or
faster).

    python bench/bench_wo_a_w8_gpu.py                 # the table
    python bench/bench_wo_a_w8_gpu.py --sweep         # also every tile candidate, best per token count

Needs the patched sglang importable (PYTHONPATH) and a CUDA GPU.
"""

from __future__ import annotations

import argparse
import itertools
import sys

import torch
import triton
import triton.testing

# [groups, rows, dim] of wo_a per rank: the two ends of the shapes probed on the H200.
SHAPES = ((8, 256, 512), (16, 1024, 1024))
TOKENS = (1, 4, 7, 16, 32, 64, 128, 256, 300, 512, 1024, 2048, 4096, 8192)
# (BM, BN, BK, warps, stages, w_left): the token-left tiles that led a first
# sweep, and weight-left ones (the dequantised weight as wgmma's register operand).
CANDIDATES = [(16, 32, 128, 4, 3, False), (16, 64, 128, 4, 3, False), (64, 32, 128, 4, 3, False),
              (64, 128, 128, 4, 3, False), (128, 128, 64, 4, 3, False)] + [
    (bm, bn, bk, warps, 3, True)
    for bm, bn, bk in itertools.product((16, 32, 64, 128, 256), (64, 128), (64, 128))
    for warps in (4, 8)
]
SWEEP_TOKENS = (1, 16, 64, 128, 300, 1024, 4096)


def _weights(groups: int, rows: int, dim: int, generator: torch.Generator):
    from sglang.kernels.ops.gemm.dsv4_wo_a_w8 import dequantize_wo_a_w8, quantize_wo_a_w8

    weight = (torch.randn(groups * rows, dim, generator=generator, device="cuda") * 0.02).bfloat16()
    codes, scale = quantize_wo_a_w8(weight)
    bf16 = dequantize_wo_a_w8(codes, scale).view(groups, rows, dim)
    return codes, scale, bf16


def _time(fn, rep: int = 100) -> float:
    return triton.testing.do_bench(fn, warmup=rep // 4, rep=rep, return_mode="median") * 1000.0


def _relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual.float() - expected.float()).norm() / expected.float().norm()).item()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sweep", action="store_true", help="time every tile candidate too")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA GPU: this benchmark runs on one", file=sys.stderr)
        return 2
    from sglang.kernels.ops.gemm import dsv4_wo_a_w8 as w8

    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name} (SM {props.major}.{props.minor}), torch {torch.__version__}, triton {triton.__version__}")
    print("baseline: bf16 einsum('tgd,grd->tgr') on the dequantised weight (cuBLAS); times: median us (do_bench)")
    generator = torch.Generator(device="cuda").manual_seed(0)
    worst = 0.0
    sweep_lines = []
    for groups, rows, dim in SHAPES:
        codes, scale, bf16 = _weights(groups, rows, dim, generator)
        print(f"\nwo_a [groups={groups}, rows={rows}, dim={dim}]: W8 {codes.numel() / 2**20:.1f} MiB + scales, bf16 {bf16.numel() * 2 / 2**20:.1f} MiB")
        print(f"{'tokens':>7} {'bf16 us':>9} {'w8 us':>9} {'w8/bf16':>8} {'deq+bf16':>9} {'rel err':>9}  tiles")
        for tokens in TOKENS:
            o = torch.randn(tokens, groups, dim, generator=generator, device="cuda").bfloat16()
            reference = torch.einsum("tgd,grd->tgr", o, bf16)
            result = w8.wo_a_w8_matmul(o, codes, scale)
            error = _relative_error(result, reference)
            if not error < 2**-7:
                print(f"W8 result differs from bf16 at tokens={tokens}: relative error {error:.2e}", file=sys.stderr)
                return 1
            t_bf16 = _time(lambda: torch.einsum("tgd,grd->tgr", o, bf16))
            t_w8 = _time(lambda: w8.wo_a_w8_matmul(o, codes, scale))
            # Dequantise then bf16 GEMM: what a W8 path without its own kernel costs.
            t_deq = _time(lambda: torch.einsum("tgd,grd->tgr", o, w8.dequantize_wo_a_w8(codes, scale).view(groups, rows, dim)))
            worst = max(worst, t_w8 / t_bf16)
            tiles = w8._tiles(tokens, rows, dim)
            print(f"{tokens:>7} {t_bf16:>9.1f} {t_w8:>9.1f} {t_w8 / t_bf16:>8.2f} {t_deq:>9.1f} {error:>9.1e}  {tiles}")
            if args.sweep and tokens in SWEEP_TOKENS:
                timed = []
                for tiles in CANDIDATES:
                    if rows % tiles[1] or dim % tiles[2]:
                        continue
                    try:
                        timed.append((_time(lambda: w8._wo_a_w8_triton(o, codes, scale, tiles), rep=40), tiles))
                    except Exception as error:  # noqa: BLE001 - out of shared memory etc.: not a candidate
                        print(f"  {tiles}: {type(error).__name__}", file=sys.stderr)
                timed.sort()
                sweep_lines.append(f"[{groups},{rows},{dim}] tokens={tokens:>5} bf16 {t_bf16:7.1f} | "
                                   + ", ".join(f"{t:.1f} {c}" for t, c in timed[:3]))
    if sweep_lines:
        print("\nsweep: best three tiles (BM, BN, BK, warps, stages, w_left) per token count")
        print("\n".join(sweep_lines))
    print(f"\nworst w8/bf16 over all shapes and token counts: {worst:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
