"""wo_a_w8 at prefill sizes on a CUDA GPU: which kernel form, which tiles, and
where dequantise + cuBLAS wins. A standalone sweep (no sglang import: the
kernel variants are written out here), one device call.

Stage 1 -- kernel forms, at a few tiles that led earlier sweeps, on the largest
per-rank shape [16, 1024, 1024] at 256 / 1024 / 4096 tokens:
  deq=0  codes -> float32, times the float32 scale, -> bf16 (the shipped kernel)
  deq=1  codes -> bf16, times the scale as bf16 (power of two: exact)
  deq=2  bit trick: e4m3 bits shifted into bf16's (= value * 2**-120, exact for
         normals, subnormals and zero), times scale * 2**120 in float32
  deq=3  the weight already bf16 (no dequantisation): Triton's own ceiling
  gather=1  the scale loaded per element ([BN, BK] gather of L1-resident
         values) instead of [BN, BK/32] broadcast through a reshape
  w_left  the dequantised weight as the dot's left (register) operand
Stage 2 -- a tile sweep of the best form, every prefill token count, both shapes.
Stage 3 -- one-pass Triton dequantisation (codes + scales -> bf16, bit-exact
against torch's) + the bf16 einsum, per token count.

Baseline everywhere: bf16 einsum('tgd,grd->tgr') on the dequantised weight
(stock's GEMM; cuBLAS), timed in the same process. Times: median of
triton.testing.do_bench (CUDA events), microseconds.

    PYTHONUNBUFFERED=1 python3 bench/sweep_wo_a_w8_prefill.py [--budget-s 420]
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time

import torch
import triton
import triton.language as tl
import triton.testing

FP8_MAX = torch.finfo(torch.float8_e4m3fn).max


def quantize(weight):
    rows, cols = weight.shape
    blocks = weight.float().view(rows // 32, 32, cols // 32, 32)
    amax = blocks.abs().amax(dim=(1, 3))
    mantissa, exponent = torch.frexp(amax / FP8_MAX)
    exponent = torch.where(mantissa == 0.5, exponent - 1, exponent)
    scale = torch.ldexp(torch.ones_like(amax), exponent)
    codes = (blocks / scale[:, None, :, None]).to(torch.float8_e4m3fn)
    return codes.view(rows, cols), scale


def dequantize_torch(codes, scale):
    rows, cols = codes.shape
    blocks = codes.float().view(rows // 32, 32, cols // 32, 32)
    return (blocks * scale[:, None, :, None]).view(rows, cols).to(torch.bfloat16)


@triton.jit
def _gemm(X, W, S, Y, T, R: tl.constexpr, D: tl.constexpr, G: tl.constexpr,
          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, W_LEFT: tl.constexpr,
          DEQ: tl.constexpr, GATHER: tl.constexpr):
    tile_n, group, tile_m = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    m = tile_m * BM + tl.arange(0, BM)
    n = tile_n * BN + tl.arange(0, BN)
    k = tl.arange(0, BK)
    rows = group * R + n
    scale_cols = tl.arange(0, BK // 32)
    if W_LEFT:
        acc = tl.zeros((BN, BM), tl.float32)
    else:
        acc = tl.zeros((BM, BN), tl.float32)
    for k0 in range(0, D, BK):
        x = tl.load(X + (m[:, None] * G + group) * D + k0 + k[None, :], m[:, None] < T, 0)
        w = tl.load(W + rows[:, None] * D + k0 + k[None, :])
        if DEQ == 3:
            wb = w
        else:
            if GATHER:
                s = tl.load(S + (rows[:, None] // 32) * (D // 32) + (k0 + k[None, :]) // 32)
            else:
                s = tl.load(S + (rows[:, None] // 32) * (D // 32) + k0 // 32 + scale_cols[None, :])
                s = tl.reshape(tl.broadcast_to(s[:, :, None], (BN, BK // 32, 32)), (BN, BK))
            if DEQ == 0:
                wb = (w.to(tl.float32) * s).to(tl.bfloat16)
            elif DEQ == 1:
                wb = w.to(tl.bfloat16) * s.to(tl.bfloat16)
            else:
                b = w.to(tl.uint16)
                bits = ((b & 0x80) << 8) | ((b & 0x7F) << 4)
                wb = (bits.to(tl.bfloat16, bitcast=True).to(tl.float32) * (s * 1.329227995784916e36)).to(tl.bfloat16)
        if W_LEFT:
            acc += tl.dot(wb, tl.trans(x))
        else:
            acc += tl.dot(x, tl.trans(wb))
    if W_LEFT:
        tl.store(Y + (m[None, :] * G + group) * R + n[:, None], acc.to(tl.bfloat16), m[None, :] < T)
    else:
        tl.store(Y + (m[:, None] * G + group) * R + n[None, :], acc.to(tl.bfloat16), m[:, None] < T)


def gemm(o, w, scale, tiles, form):
    w_left, deq, gather = form
    tokens, groups, dim = o.shape
    rows = w.shape[0] // groups
    bm, bn, bk, warps, stages = tiles
    y = torch.empty((tokens, groups, rows), dtype=torch.bfloat16, device=o.device)
    grid = (rows // bn, groups, triton.cdiv(tokens, bm))
    _gemm[grid](o, w, scale, y, tokens, rows, dim, groups, BM=bm, BN=bn, BK=bk, W_LEFT=w_left,
                DEQ=deq, GATHER=gather, num_warps=warps, num_stages=stages)
    return y


@triton.jit
def _dequant(W, S, OUT, D: tl.constexpr, BC: tl.constexpr):
    # One program: one 32-row scale block x BC columns. Codes times their
    # block's power-of-two scale, rounded once to bf16 (exact for e4m3 codes).
    row_block, col_tile = tl.program_id(0), tl.program_id(1)
    r = row_block * 32 + tl.arange(0, 32)
    c = col_tile * BC + tl.arange(0, BC)
    s = tl.load(S + row_block * (D // 32) + c // 32)
    w = tl.load(W + r[:, None] * D + c[None, :])
    tl.store(OUT + r[:, None] * D + c[None, :], (w.to(tl.float32) * s[None, :]).to(tl.bfloat16))


def dequant(codes, scale, bc=256, warps=4):
    rows, dim = codes.shape
    out = torch.empty((rows, dim), dtype=torch.bfloat16, device=codes.device)
    bc = min(bc, dim)
    _dequant[(rows // 32, dim // bc)](codes, scale, out, dim, BC=bc, num_warps=warps)
    return out


def bench(fn, rep=30):
    return triton.testing.do_bench(fn, warmup=max(rep // 4, 5), rep=rep, return_mode="median") * 1000.0


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


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
    for groups, rows, dim in ((16, 1024, 1024), (8, 256, 512)):
        weight = (torch.randn(groups * rows, dim, generator=gen, device="cuda") * 0.02).bfloat16()
        codes, scale = quantize(weight)
        shapes[(groups, rows, dim)] = (codes, scale, dequantize_torch(codes, scale))

    # Dequantisation exactness on every e4m3 code and a spread of scales.
    every = torch.arange(256, dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
    every = every.repeat(256).view(32 * 32, 64)
    every = torch.where(every.float().isnan(), torch.zeros_like(every.float()), every.float()).to(torch.float8_e4m3fn)
    sc = torch.ldexp(torch.ones(32, 2, device="cuda"), torch.randint(-30, 0, (32, 2), device="cuda"))
    exact = torch.equal(dequant(every, sc, bc=64), dequantize_torch(every, sc))
    print(f"one-pass dequant bit-exact against torch over all e4m3 codes: {exact}")

    big = (16, 1024, 1024)
    inputs = {}

    def operands(shape, tokens):
        key = (shape, tokens)
        if key not in inputs:
            inputs[key] = torch.randn(tokens, shape[0], shape[2], generator=gen, device="cuda").bfloat16()
        return inputs[key]

    baseline = {}

    def t_bf16(shape, tokens):
        if (shape, tokens) not in baseline:
            o = operands(shape, tokens)
            w16 = shapes[shape][2].view(shape)
            baseline[(shape, tokens)] = bench(lambda: torch.einsum("tgd,grd->tgr", o, w16))
        return baseline[(shape, tokens)]

    def run(shape, tokens, tiles, form):
        codes, scale, w16 = shapes[shape]
        o = operands(shape, tokens)
        w = w16 if form[1] == 3 else (codes.view(torch.uint8) if form[1] == 2 else codes)
        ref = torch.einsum("tgd,grd->tgr", o, w16.view(shape))
        out = gemm(o, w, scale, tiles, form)
        err = rel(out, ref)
        if not err < 2**-7:
            raise AssertionError(f"wrong: rel err {err:.2e}")
        return bench(lambda: gemm(o, w, scale, tiles, form))

    # ---- stage 1
    forms = [(True, 0, False), (True, 1, False), (True, 2, False), (True, 0, True), (True, 1, True),
             (False, 1, False), (False, 0, False), (True, 3, False), (False, 3, False)]
    tiles1 = [(256, 128, 64, 8, 3), (128, 128, 64, 8, 3), (128, 256, 64, 8, 3), (128, 128, 128, 8, 3),
              (256, 64, 64, 4, 3), (128, 128, 64, 4, 4)]
    tokens1 = (256, 1024, 4096)
    print("\nstage 1: [16,1024,1024], w8/bf16 per form (w_left, deq, gather) and tiles (BM, BN, BK, warps, stages)")
    print("bf16 us: " + ", ".join(f"{t}: {t_bf16(big, t):.1f}" for t in tokens1))
    best_form = {}
    for form in forms:
        line = []
        for tiles in tiles1:
            try:
                ratios = [run(big, t, tiles, form) / t_bf16(big, t) for t in tokens1]
            except Exception as error:  # noqa: BLE001 - out of resources etc.
                line.append(f"{tiles}: {type(error).__name__}")
                continue
            g = math.exp(sum(map(math.log, ratios)) / len(ratios))
            best_form[form] = min(best_form.get(form, (9e9, None)), (g, tiles))
            line.append(f"{tiles}: " + "/".join(f"{r:.2f}" for r in ratios))
        print(f"form {form}: " + "; ".join(line))
    w8_forms = {f: v for f, v in best_form.items() if f[1] != 3}
    chosen = min(w8_forms, key=lambda f: w8_forms[f][0])
    print(f"best W8 form by geomean over {tokens1}: {chosen} ({w8_forms[chosen][0]:.2f} at {w8_forms[chosen][1]})")
    for f in ((True, 3, False), (False, 3, False)):
        if f in best_form:
            print(f"Triton bf16 ceiling {f}: geomean {best_form[f][0]:.2f} at {best_form[f][1]}")
    sys.stdout.flush()

    # ---- stage 3 (before 2: short, and needed whatever stage 2 reaches)
    tokens_all = (128, 256, 300, 512, 1024, 2048, 4096, 8192)
    print("\nstage 3: one-pass dequant + bf16 einsum (us); dequant alone per block size")
    for shape in shapes:
        codes, scale, w16 = shapes[shape]
        deq_t = {(bc, wp): bench(lambda bc=bc, wp=wp: dequant(codes, scale, bc, wp))
                 for bc in (128, 256, 512) for wp in (4, 8) if bc <= shape[2]}
        (bc, wp), best = min(deq_t.items(), key=lambda kv: kv[1])
        print(f"{list(shape)} dequant alone: " + ", ".join(f"BC={b},w={w}: {v:.1f}" for (b, w), v in deq_t.items()))
        row = []
        for t in tokens_all:
            o = operands(shape, t)
            tot = bench(lambda: torch.einsum("tgd,grd->tgr", o, dequant(codes, scale, bc, wp).view(shape)))
            row.append(f"{t}: {tot:.1f}/{t_bf16(shape, t):.1f}={tot / t_bf16(shape, t):.2f}")
        print(f"{list(shape)} deq+bf16 / bf16: " + ", ".join(row))
    sys.stdout.flush()

    # ---- stage 2
    print(f"\nstage 2: tile sweep of form {chosen}, best three per token count (elapsed {time.monotonic() - start:.0f} s)")
    cand = [(bm, bn, bk, wp, st) for bm, bn, bk, wp, st in
            itertools.product((64, 128, 256), (64, 128, 256), (64, 128), (4, 8), (3, 4))
            if bm * bn <= 256 * 128 and not (bm * bn >= 128 * 128 and wp == 4 and bk == 128)]
    results = {}
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
            results[(shape, t)] = timed
            if timed:
                print(f"{list(shape)} tokens={t:>5} bf16 {base:7.1f} | "
                      + ", ".join(f"{v:.1f} ({v / base:.2f}) {c}" for v, c in timed[:3]))
            sys.stdout.flush()
    print(f"\ndone in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
