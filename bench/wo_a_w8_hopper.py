"""Candidate W8 GEMM kernels for Hopper (the sweep's, not the shipped module).

out[t, g, r] = sum_d x[t, g, d] * dequant(w)[g * R + r, d], x bf16 [T, G, D],
w e4m3 [G*R, D] with float32 power-of-two 32x32 block scales [G*R/32, D/32].

Forms, all "swap AB" (the weight tile, dequantised in registers, is the dot's
left operand, which wgmma reads from registers; activations stream through
shared memory as its right operand) unless W_LEFT is off:
- loads through TMA (host-side tensor descriptors: x as [T, G*D], w as
  [G*R, D]; rows past T read as zeros), pointer or TMA store;
- one tile per program, or a persistent grid (one program per SM looping over
  tiles: n fastest, then group, then token tile), optionally flattened; the
  ws flag asks for warp specialisation (tl.range(..., warp_specialize=True)),
  which Triton 3.6 does not carry out on sm_90a for these kernels
  (bench/compile_wo_a_w8_hopper.py): the sweep leaves it off;
- DEQ: 0 = code.to(f32) * scale -> bf16 (the shipped kernel's conversion);
  1 = the weight already bf16 (no scales): Triton's own bf16 GEMM in the same
  form, the ceiling; 2 = code.to(bf16) * bf16(scale), not swept (wrong in
  Triton 3.8's interpreter).
F32_DOT: float32 dots for Triton's CPU interpreter, which gets bf16 dots wrong.
Measured on the H200: bench/results/wo_a_w8_hopper_sweep3.txt.
"""

from __future__ import annotations

import os

try:
    import torch
except ImportError:  # the compile-only check (no torch there)
    torch = None
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def _tile(x_desc, w_desc, S, tile, tiles_n, R: tl.constexpr, D: tl.constexpr, G: tl.constexpr,
          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, W_LEFT: tl.constexpr,
          DEQ: tl.constexpr, WS_K: tl.constexpr, F32_DOT: tl.constexpr):
    tile_n = tile % tiles_n
    rest = tile // tiles_n
    group = rest % G
    tile_m = rest // G
    m0 = tile_m * BM
    row0 = group * R + tile_n * BN
    srows = row0 // 32 + tl.arange(0, BN) // 32
    scols = tl.arange(0, BK // 32)
    if W_LEFT:
        acc = tl.zeros((BN, BM), tl.float32)
    else:
        acc = tl.zeros((BM, BN), tl.float32)
    for k0 in tl.range(0, D, BK, warp_specialize=WS_K):
        x = x_desc.load([m0, group * D + k0])
        w = w_desc.load([row0, k0])
        if DEQ == 1:
            wb = w
        else:
            s = tl.load(S + srows[:, None] * (D // 32) + k0 // 32 + scols[None, :])
            s = tl.reshape(tl.broadcast_to(s[:, :, None], (BN, BK // 32, 32)), (BN, BK))
            if DEQ == 2:
                wb = w.to(tl.bfloat16) * s.to(tl.bfloat16)
            else:
                wb = (w.to(tl.float32) * s).to(tl.bfloat16)
        if F32_DOT:  # Triton's CPU interpreter gets bf16 dots wrong
            if W_LEFT:
                acc = tl.dot(wb.to(tl.float32), tl.trans(x.to(tl.float32)), acc, input_precision="ieee")
            else:
                acc = tl.dot(x.to(tl.float32), tl.trans(wb.to(tl.float32)), acc, input_precision="ieee")
        elif W_LEFT:
            acc = tl.dot(wb, tl.trans(x), acc)
        else:
            acc = tl.dot(x, tl.trans(wb), acc)
    return acc, m0, group, tile_n


@triton.jit
def _store(acc, y_desc, Y, T, m0, group, tile_n, R: tl.constexpr, G: tl.constexpr, BM: tl.constexpr,
           BN: tl.constexpr, W_LEFT: tl.constexpr, STORE_TMA: tl.constexpr):
    out = acc.to(tl.bfloat16)
    if STORE_TMA:
        if W_LEFT:
            out = tl.trans(out)
        y_desc.store([m0, group * R + tile_n * BN], out)
    else:
        m = m0 + tl.arange(0, BM)
        n = tile_n * BN + tl.arange(0, BN)
        if W_LEFT:
            tl.store(Y + (m[None, :] * G + group) * R + n[:, None], out, m[None, :] < T)
        else:
            tl.store(Y + (m[:, None] * G + group) * R + n[None, :], out, m[:, None] < T)


@triton.jit
def w8_tma_kernel(x_desc, w_desc, y_desc, S, Y, T, R: tl.constexpr, D: tl.constexpr, G: tl.constexpr,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, W_LEFT: tl.constexpr,
                  DEQ: tl.constexpr, STORE_TMA: tl.constexpr, WS_K: tl.constexpr,
                  F32_DOT: tl.constexpr):
    acc, m0, group, tile_n = _tile(x_desc, w_desc, S, tl.program_id(0), R // BN, R, D, G, BM, BN, BK,
                                   W_LEFT, DEQ, WS_K, F32_DOT)
    _store(acc, y_desc, Y, T, m0, group, tile_n, R, G, BM, BN, W_LEFT, STORE_TMA)


@triton.jit
def w8_tma_persistent_kernel(x_desc, w_desc, y_desc, S, Y, T, R: tl.constexpr, D: tl.constexpr,
                             G: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                             W_LEFT: tl.constexpr, DEQ: tl.constexpr, STORE_TMA: tl.constexpr,
                             WS: tl.constexpr, FLATTEN: tl.constexpr, NUM_SMS: tl.constexpr,
                             F32_DOT: tl.constexpr):
    tiles_n = R // BN
    num_tiles = tiles_n * G * tl.cdiv(T, BM)
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_SMS, flatten=FLATTEN, warp_specialize=WS):
        acc, m0, group, tile_n = _tile(x_desc, w_desc, S, tile, tiles_n, R, D, G, BM, BN, BK, W_LEFT, DEQ,
                                       False, F32_DOT)
        _store(acc, y_desc, Y, T, m0, group, tile_n, R, G, BM, BN, W_LEFT, STORE_TMA)


# form: (persistent, ws, flatten, w_left, deq, store_tma); tiles: (BM, BN, BK, warps, stages)
def w8_tma(o, w, scale, tiles, form, num_sms=132):
    persistent, ws, flatten, w_left, deq, store_tma = form
    tokens, groups, dim = o.shape
    rows = w.shape[0] // groups
    bm, bn, bk, warps, stages = tiles
    y = torch.empty((tokens, groups, rows), dtype=torch.bfloat16, device=o.device)
    x_desc = TensorDescriptor.from_tensor(o.view(tokens, groups * dim), [bm, bk])
    w_desc = TensorDescriptor.from_tensor(w, [bn, bk])
    y_desc = TensorDescriptor.from_tensor(y.view(tokens, groups * rows), [bm, bn])
    num_tiles = rows // bn * groups * triton.cdiv(tokens, bm)
    common = dict(F32_DOT=os.environ.get("TRITON_INTERPRET") == "1", BM=bm, BN=bn, BK=bk, W_LEFT=w_left, DEQ=deq, STORE_TMA=store_tma, num_warps=warps,
                  num_stages=stages)
    if persistent:
        w8_tma_persistent_kernel[(min(num_tiles, num_sms),)](
            x_desc, w_desc, y_desc, scale, y, tokens, rows, dim, groups, WS=ws, FLATTEN=flatten,
            NUM_SMS=num_sms, **common)
    else:
        w8_tma_kernel[(num_tiles,)](x_desc, w_desc, y_desc, scale, y, tokens, rows, dim, groups, WS_K=ws,
                                    **common)
    return y
