"""wo_a_w8 tile sweep timed as bench_wo_a_w8_gpu.py times (CUDA graphs of 8
calls on 8 cold-L2 operand sets), after its first run showed the do_bench
sweeps misled below ~1024 tokens (launch overhead hid the kernel). For each
shape and token count: bf16 (cuBLAS), dequantise + bf16, and every tile
candidate of the shipped W8 kernel (_wo_a_w8_triton with explicit tiles);
prints the best three with their grid size (programs; the H200 has 132 SMs).

    python3 bench/sweep_wo_a_w8_tiles_graph.py KERNEL_FILE [--budget-s 300]

KERNEL_FILE: the patched sglang's kernels/ops/gemm/dsv4_wo_a_w8.py (it needs
only torch and triton), so the sweep needs no sglang install.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import os
import statistics
import sys
import time

import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_wo_a_w8_gpu import SETS, _Graph  # noqa: E402

SHAPES = ((8, 256, 512), (16, 1024, 1024))
TOKENS = (16, 32, 64, 128, 256, 300, 512, 1024, 2048)
CANDIDATES = [(bm, bn, 128, 4, 3, False) for bm, bn in ((16, 32), (16, 64), (32, 32), (32, 64), (64, 32), (64, 64))] + [
    (bm, bn, bk, warps, 3, True)
    for bm, bn, bk in itertools.product((16, 32, 64, 128, 256), (64, 128), (64, 128))
    for warps in (4, 8)
    if not (bm == 256 and bk == 128)
]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("kernel_file")
    parser.add_argument("--budget-s", type=float, default=300.0)
    args = parser.parse_args()
    spec = importlib.util.spec_from_file_location("dsv4_wo_a_w8", args.kernel_file)
    w8 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(w8)
    start = time.monotonic()
    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name} ({props.multi_processor_count} SMs), torch {torch.__version__}, triton {triton.__version__}")
    print("us per call: CUDA graph of 8 calls on 8 operand sets, median of 3 runs; ratio to bf16")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for groups, rows, dim in SHAPES:
        weights = []
        for _ in range(SETS):
            weight = (torch.randn(groups * rows, dim, generator=gen, device="cuda") * 0.02).bfloat16()
            codes, scale = w8.quantize_wo_a_w8(weight)
            weights.append((codes, scale, w8.dequantize_wo_a_w8(codes, scale).view(groups, rows, dim)))
        for tokens in TOKENS:
            acts = [torch.randn(tokens, groups, dim, generator=gen, device="cuda").bfloat16() for _ in range(SETS)]

            def timed(call, sets):
                graph = _Graph(call, sets)
                return statistics.median(graph.run() for _ in range(3))

            bf16 = timed(lambda x, w: torch.einsum("tgd,grd->tgr", x, w), [(a, w[2]) for a, w in zip(acts, weights, strict=True)])
            deq = timed(lambda x, c, s: w8.wo_a_w8_matmul(x, c, s, dequant_tokens=1),
                        [(a, w[0], w[1]) for a, w in zip(acts, weights, strict=True)])
            shipped = w8._tiles(tokens, groups, rows, dim)
            results = []
            for tiles in CANDIDATES:
                if time.monotonic() - start > args.budget_s:
                    break
                if rows % tiles[1] or dim % tiles[2]:
                    continue
                reference = torch.einsum("tgd,grd->tgr", acts[0], weights[0][2])
                try:
                    out = w8._wo_a_w8_triton(acts[0], weights[0][0], weights[0][1], tiles)
                    if not ((out.float() - reference.float()).norm() / reference.float().norm()).item() < 2**-7:
                        print(f"  {tiles}: wrong result", file=sys.stderr)
                        continue
                    t = timed(lambda x, c, s, tiles=tiles: w8._wo_a_w8_triton(x, c, s, tiles),
                              [(a, w[0], w[1]) for a, w in zip(acts, weights, strict=True)])
                except Exception as error:  # noqa: BLE001 - out of resources: not a candidate
                    print(f"  {tiles}: {type(error).__name__}", file=sys.stderr)
                    continue
                grid = rows // tiles[1] * groups * triton.cdiv(tokens, tiles[0])
                results.append((t, tiles, grid))
            results.sort()
            ship = next((r for r in results if r[1] == shipped), None)
            print(f"[{groups},{rows},{dim}] T={tokens:>5} bf16 {bf16:6.1f} deq {deq:6.1f} ({deq / bf16:.2f}) "
                  f"table {ship[0] if ship else float('nan'):6.1f} | "
                  + ", ".join(f"{t:.1f} ({t / bf16:.2f}) {c} g{g}" for t, c, g in results[:3]))
            sys.stdout.flush()
        del weights
        torch.cuda.empty_cache()
    print(f"done in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
