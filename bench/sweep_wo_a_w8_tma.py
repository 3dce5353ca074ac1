"""wo_a_w8 at prefill sizes, second sweep: the W8 kernel with TMA loads
(Hopper's bulk tensor copy, through triton.tools.tensor_descriptor), one tile
per program or persistent, pointer or TMA store; and the same kernel on a
bf16 weight (Triton's ceiling). The first sweep (sweep_wo_a_w8_prefill.py,
results/wo_a_w8_prefill_sweep1.txt) showed Triton's pointer-load bf16 GEMM
itself at 1.33-1.48x cuBLAS here, so the dequantisation was not what cost.

Stage 1: forms x a few tiles on [16,1024,1024] at 256/1024/4096 tokens.
Stage 2: tile sweep of the best W8 form, every prefill token count, both shapes.

    PYTHONUNBUFFERED=1 python3 bench/sweep_wo_a_w8_tma.py [--budget-s 420]
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import sys
import time

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweep_wo_a_w8_prefill import bench, dequantize_torch, quantize, rel  # noqa: E402


@triton.jit
def _gemm_tma(x_desc, w_desc, y_desc, S, Y, T, R: tl.constexpr, D: tl.constexpr, G: tl.constexpr,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, W_LEFT: tl.constexpr,
              DEQ: tl.constexpr, PERSISTENT: tl.constexpr, STORE_TMA: tl.constexpr,
              NUM_SMS: tl.constexpr):
    tiles_n = R // BN
    num_tiles = tiles_n * G * tl.cdiv(T, BM)
    step = num_tiles
    if PERSISTENT:
        step = NUM_SMS
    scale_cols = tl.arange(0, BK // 32)
    for tile in range(tl.program_id(0), num_tiles, step):
        tile_n = tile % tiles_n
        group = (tile // tiles_n) % G
        tile_m = tile // (tiles_n * G)
        m0 = tile_m * BM
        n0 = tile_n * BN
        rows = group * R + n0 + tl.arange(0, BN)
        if W_LEFT:
            acc = tl.zeros((BN, BM), tl.float32)
        else:
            acc = tl.zeros((BM, BN), tl.float32)
        for k0 in range(0, D, BK):
            x = x_desc.load([m0, group * D + k0])
            w = w_desc.load([group * R + n0, k0])
            if DEQ == 3:
                wb = w
            else:
                s = tl.load(S + (rows[:, None] // 32) * (D // 32) + k0 // 32 + scale_cols[None, :])
                s = tl.reshape(tl.broadcast_to(s[:, :, None], (BN, BK // 32, 32)), (BN, BK))
                wb = (w.to(tl.float32) * s).to(tl.bfloat16)
            if W_LEFT:
                acc += tl.dot(wb, tl.trans(x))
            else:
                acc += tl.dot(x, tl.trans(wb))
        if STORE_TMA:
            if W_LEFT:
                y_desc.store([m0, group * R + n0], tl.trans(acc.to(tl.bfloat16)))
            else:
                y_desc.store([m0, group * R + n0], acc.to(tl.bfloat16))
        else:
            m = m0 + tl.arange(0, BM)
            n = n0 + tl.arange(0, BN)
            if W_LEFT:
                tl.store(Y + (m[None, :] * G + group) * R + n[:, None], acc.to(tl.bfloat16), m[None, :] < T)
            else:
                tl.store(Y + (m[:, None] * G + group) * R + n[None, :], acc.to(tl.bfloat16), m[:, None] < T)


NUM_SMS = torch.cuda.get_device_properties(0).multi_processor_count


def gemm_tma(o, w, scale, tiles, form):
    w_left, deq, persistent, store_tma = form
    tokens, groups, dim = o.shape
    rows = w.shape[0] // groups
    bm, bn, bk, warps, stages = tiles
    y = torch.empty((tokens, groups, rows), dtype=torch.bfloat16, device=o.device)
    x_desc = TensorDescriptor.from_tensor(o.view(tokens, groups * dim), [bm, bk])
    w_desc = TensorDescriptor.from_tensor(w, [bn, bk])
    y_desc = TensorDescriptor.from_tensor(y.view(tokens, groups * rows), [bm, bn])
    num_tiles = rows // bn * groups * triton.cdiv(tokens, bm)
    grid = (min(num_tiles, NUM_SMS) if persistent else num_tiles,)
    _gemm_tma[grid](x_desc, w_desc, y_desc, scale, y, tokens, rows, dim, groups, BM=bm, BN=bn, BK=bk,
                    W_LEFT=w_left, DEQ=deq, PERSISTENT=persistent, STORE_TMA=store_tma,
                    NUM_SMS=NUM_SMS, num_warps=warps, num_stages=stages)
    return y


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget-s", type=float, default=420.0)
    args = parser.parse_args()
    start = time.monotonic()
    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name} (SM {props.major}.{props.minor}, {props.multi_processor_count} SMs), "
          f"torch {torch.__version__}, triton {triton.__version__}")
    gen = torch.Generator(device="cuda").manual_seed(0)
    shapes = {}
    for shape in ((16, 1024, 1024), (8, 256, 512)):
        groups, rows, dim = shape
        weight = (torch.randn(groups * rows, dim, generator=gen, device="cuda") * 0.02).bfloat16()
        codes, scale = quantize(weight)
        shapes[shape] = (codes, scale, dequantize_torch(codes, scale))
    big = (16, 1024, 1024)
    inputs, baseline = {}, {}

    def operands(shape, tokens):
        if (shape, tokens) not in inputs:
            inputs[(shape, tokens)] = torch.randn(tokens, shape[0], shape[2], generator=gen, device="cuda").bfloat16()
        return inputs[(shape, tokens)]

    def t_bf16(shape, tokens):
        if (shape, tokens) not in baseline:
            o, w16 = operands(shape, tokens), shapes[shape][2].view(shape)
            baseline[(shape, tokens)] = bench(lambda: torch.einsum("tgd,grd->tgr", o, w16))
        return baseline[(shape, tokens)]

    def run(shape, tokens, tiles, form):
        codes, scale, w16 = shapes[shape]
        o = operands(shape, tokens)
        w = w16 if form[1] == 3 else codes
        ref = torch.einsum("tgd,grd->tgr", o, w16.view(shape))
        out = torch.full_like(ref, float("nan"))
        out.copy_(gemm_tma(o, w, scale, tiles, form))
        err = rel(out, ref)
        if not err < 2**-7:
            raise AssertionError(f"wrong: rel err {err:.2e}")
        return bench(lambda: gemm_tma(o, w, scale, tiles, form))

    forms = [(wl, deq, pers, st) for deq in (0, 3) for wl in (True, False) for pers in (False, True) for st in (False, True)]
    tiles1 = [(256, 128, 64, 8, 3), (128, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 256, 64, 8, 3),
              (128, 128, 128, 8, 3), (64, 128, 64, 4, 4)]
    tokens1 = (256, 1024, 4096)
    print("\nstage 1: [16,1024,1024], w8/bf16 per form (w_left, deq, persistent, store_tma) and tiles (BM, BN, BK, warps, stages)")
    print("bf16 us: " + ", ".join(f"{t}: {t_bf16(big, t):.1f}" for t in tokens1))
    best = {}
    for form in forms:
        line = []
        for tiles in tiles1:
            try:
                ratios = [run(big, t, tiles, form) / t_bf16(big, t) for t in tokens1]
            except Exception as error:  # noqa: BLE001
                line.append(f"{tiles}: {type(error).__name__} {str(error)[:80]}")
                continue
            g = math.exp(sum(map(math.log, ratios)) / len(ratios))
            best[form] = min(best.get(form, (9e9, None)), (g, tiles))
            line.append(f"{tiles}: " + "/".join(f"{r:.2f}" for r in ratios))
        print(f"form {form}: " + "; ".join(line))
        sys.stdout.flush()
    w8 = {f: v for f, v in best.items() if f[1] == 0}
    if not w8:
        print("no W8 TMA form ran")
        return 1
    chosen = min(w8, key=lambda f: w8[f][0])
    print(f"best W8 TMA form: {chosen} (geomean {w8[chosen][0]:.2f} at {w8[chosen][1]})")
    for f, v in sorted(best.items(), key=lambda kv: kv[1][0]):
        print(f"  {f}: geomean {v[0]:.2f} at {v[1]}")

    tokens_all = (128, 256, 300, 512, 1024, 2048, 4096, 8192)
    print(f"\nstage 2: tile sweep of {chosen}, best three per token count (elapsed {time.monotonic() - start:.0f} s)")
    cand = [c for c in itertools.product((64, 128, 256), (64, 128, 256), (64, 128), (4, 8), (3, 4))
            if c[0] * c[1] <= 256 * 128 and not (c[0] * c[1] >= 128 * 128 and c[3] == 4)]
    for shape in (big, (8, 256, 512)):
        for t in tokens_all:
            base = t_bf16(shape, t)
            timed = []
            for tiles in cand:
                if time.monotonic() - start > args.budget_s:
                    break
                if shape[1] % tiles[1] or shape[2] % tiles[2]:
                    continue
                try:
                    timed.append((run(shape, t, tiles, chosen), tiles))
                except Exception:  # noqa: BLE001
                    continue
            timed.sort()
            if timed:
                print(f"{list(shape)} tokens={t:>5} bf16 {base:7.1f} | "
                      + ", ".join(f"{v:.1f} ({v / base:.2f}) {c}" for v, c in timed[:3]))
            sys.stdout.flush()
    print(f"\ndone in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
