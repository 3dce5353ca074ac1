"""wo_a W8 on Hopper (sm_90a) in Triton's Gluon dialect: warp-specialised mixed-input GEMMs.

out[t, g, r] = sum_d o[t, g, d] * bf16(codes[g, r, d] * scale[g, r // 32, d // 32])

codes float8_e4m3fn [G, R, D], scale float32 [G, R/32, D/32], o bf16 [T, G, D] contiguous,
out bf16 [T, G, R]. Entry point: wo_a_w8_gluon_matmul(o, codes, scale) (tiles picked from the
H200 sweep, bench/results/wo_a_w8_gluon_sweep.txt).

Swap-AB: per group, out_g^T [R, T] = W_g [R, D] @ x_g^T [D, T]. A program computes BM weight rows x
BN tokens of one group (grid (R/BM, G, cdiv(T, BN))).

wo_a_w8_gluon_kernel (RS, the fastest measured):
  - a producer partition (1 warp, 40 registers) streams the fp8 weight tile [BM, 64] and the
    activation tile [BN, 64] into a STAGES-deep shared-memory ring with TMA (mbarrier ready/empty);
  - one or two consumer warpgroups (partitions of 4 warps, 232 registers each with two), 64 rows
    each (128 with BM=256), load the fp8 tile from shared memory straight into wgmma's register
    operand layout, convert it (fp32 multiply by the block scale, round to bf16: the dequantised
    weight's own value) and issue an async wgmma (A registers, B = activation tile in smem).
    The conversion's f32 part is written before waiting for the previous wgmma, the bf16 operand
    only after it (wait(0)): ptxas does not keep a register operand of an in-flight wgmma alive
    (with one wgmma left in flight the next tile's operand landed in the same registers: wrong
    results), and it schedules most of the conversion after that wait anyway, so the overlap of
    conversion and MMA comes from the two warpgroups interleaving, not from within one;
  - epilogue: acc -> bf16 -> shared memory transposed (stmatrix) -> TMA store (clips T), or masked
    pointer stores (EPI_TMA False).
  A_SMEM=1: the consumer writes the converted tile to a double-buffered smem A operand and keeps one
  wgmma in flight (SS wgmma). A_SMEM=2: RS with one wgmma in flight, the K loop unrolled so each tile's
  register operand is its own value, passed to the wait after the next wgmma (no faster on the H200).
wo_a_w8_gluon_pp_kernel (PP, below): the persistent forms (cooperative, ping-pong, fused token tail).
wo_a_w8_gluon_cvt_kernel (CVT): the default partition (4 warps) issues the TMA loads and converts fp8
  -> bf16 into a shared-memory ring of two; two consumer warpgroups run a plain SS bf16 wgmma loop with
  one wgmma in flight.
"""

from __future__ import annotations

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

BLOCK = 32  # the scale block (32 x 32)


@gluon.jit
def _w8_producer(x_desc, w_desc, x_bufs, w_bufs, ready, empty, off_t, off_xk, off_w,
                 K_TILES: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr):
    for i in range(K_TILES):
        s = i % STAGES
        phase = (i // STAGES) & 1
        # empties start "completed" for phase 1: the first pass over the ring does not wait
        mbarrier.wait(empty.index(s), phase ^ 1)
        mbarrier.expect(ready.index(s), x_desc.block_type.nbytes + w_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(w_desc, [off_w, i * BK], ready.index(s), w_bufs.index(s))
        tma.async_copy_global_to_shared(x_desc, [off_t, off_xk + i * BK], ready.index(s), x_bufs.index(s))


@gluon.jit
def _w8_scale(s_ptrs, kb: gl.constexpr, i, KSUB: gl.constexpr, a_layout: gl.constexpr, BM: gl.constexpr,
              BK: gl.constexpr):
    # the block scales of K-tile i as a [BM, BK] tensor in the register-operand layout
    if KSUB == 1:
        s0 = gl.load(s_ptrs + i)
        sc = gl.broadcast(gl.expand_dims(s0, 1), gl.full([BM, BK], 0.0, gl.float32, a_layout))[0]
    else:
        k_idx = gl.arange(0, BK, layout=gl.SliceLayout(0, a_layout))
        sc = gl.full([BM, BK], 0.0, gl.float32, a_layout)
        for j in gl.static_range(KSUB):
            sj = gl.load(s_ptrs + i * KSUB + j)
            inside = (k_idx >= j * 32) & (k_idx < (j + 1) * 32)
            sc = gl.where(gl.expand_dims(inside, 0), gl.expand_dims(sj, 1), sc)
    return sc


@gluon.jit
def _w8_consumer(x_bufs, w_bufs, ready, empty, y_desc, y_smem, a_smem, S, Y, g, off_r, off_t, T, ys_t, wg: gl.constexpr,
                 R: gl.constexpr, D: gl.constexpr, WG_ROWS: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
                 STAGES: gl.constexpr, EPI_TMA: gl.constexpr, A_SMEM: gl.constexpr):
    """One consumer warpgroup (4 warps): rows [wg * WG_ROWS, (wg + 1) * WG_ROWS) of the program's tile."""
    KSUB: gl.constexpr = BK // 32
    K_TILES: gl.constexpr = D // BK
    KB: gl.constexpr = D // 32
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, BN, 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_layout, k_width=2)
    rows = gl.arange(0, WG_ROWS, layout=gl.SliceLayout(1, a_layout))
    r0 = off_r + wg * WG_ROWS
    s_ptrs = S + (g * (R // 32) + (r0 + rows) // 32) * KB
    acc = gl.zeros([WG_ROWS, BN], gl.float32, layout=mma_layout)

    if A_SMEM == 2:
        # RS with one wgmma in flight, K loop unrolled: tile i's operand is its own value, passed to the wait
        # after wgmma i+1 is issued, so its registers stay live (not reused for tile i+1's operand) until wgmma i
        # has retired
        sc = _w8_scale(s_ptrs, 0, 0, KSUB, a_layout, WG_ROWS, BK)
        mbarrier.wait(ready.index(0), 0)
        codes = w_bufs.index(0).slice(wg * WG_ROWS, WG_ROWS).load(a_layout)
        a_prev = (codes.to(gl.float32) * sc).to(gl.bfloat16)
        acc = warpgroup_mma(a_prev, x_bufs.index(0).permute((1, 0)), acc, is_async=True)
        for i in gl.static_range(1, K_TILES):
            sc = _w8_scale(s_ptrs, 0, i, KSUB, a_layout, WG_ROWS, BK)
            mbarrier.wait(ready.index(i % STAGES), (i // STAGES) & 1)
            codes = w_bufs.index(i % STAGES).slice(wg * WG_ROWS, WG_ROWS).load(a_layout)
            a = (codes.to(gl.float32) * sc).to(gl.bfloat16)
            acc = warpgroup_mma(a, x_bufs.index(i % STAGES).permute((1, 0)), acc, is_async=True)
            acc, a_prev, a = warpgroup_mma_wait(1, deps=(acc, a_prev, a))
            fence_async_shared()
            mbarrier.arrive(empty.index((i - 1) % STAGES))
            a_prev = a
        acc, a_prev = warpgroup_mma_wait(0, deps=(acc, a_prev))
    elif A_SMEM:
        # the converted tile goes to shared memory (two buffers per warpgroup), wgmma reads both operands
        # there: no register operand in flight, so one wgmma can stay in flight while the next tile converts
        sc = _w8_scale(s_ptrs, 0, 0, KSUB, a_layout, WG_ROWS, BK)
        mbarrier.wait(ready.index(0), 0)
        codes = w_bufs.index(0).slice(wg * WG_ROWS, WG_ROWS).load(a_layout)
        a_smem.index(wg * 2).store((codes.to(gl.float32) * sc).to(gl.bfloat16))
        fence_async_shared()
        acc = warpgroup_mma(a_smem.index(wg * 2), x_bufs.index(0).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc, ))
        for i in range(1, K_TILES):
            s = i % STAGES
            phase = (i // STAGES) & 1
            sc = _w8_scale(s_ptrs, 0, i, KSUB, a_layout, WG_ROWS, BK)
            mbarrier.wait(ready.index(s), phase)
            codes = w_bufs.index(s).slice(wg * WG_ROWS, WG_ROWS).load(a_layout)
            a = (codes.to(gl.float32) * sc).to(gl.bfloat16)
            # buffer i % 2 was last read by wgmma i-2, retired by the previous iteration's wait
            a_smem.index(wg * 2 + i % 2).store(a)
            fence_async_shared()
            acc = warpgroup_mma(a_smem.index(wg * 2 + i % 2), x_bufs.index(s).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(1, deps=(acc, ))
            fence_async_shared()
            mbarrier.arrive(empty.index((i - 1) % STAGES))
        acc = warpgroup_mma_wait(0, deps=(acc, ))
    else:
        # k-tile 0
        sc = _w8_scale(s_ptrs, 0, 0, KSUB, a_layout, WG_ROWS, BK)
        mbarrier.wait(ready.index(0), 0)
        codes = w_bufs.index(0).slice(wg * WG_ROWS, WG_ROWS).load(a_layout)
        a = (codes.to(gl.float32) * sc).to(gl.bfloat16)
        acc = warpgroup_mma(a, x_bufs.index(0).permute((1, 0)), acc, is_async=True)
        acc, a = warpgroup_mma_wait(1, deps=(acc, a))  # returns at once: a tensor for the loop
        for i in range(1, K_TILES):
            s = i % STAGES
            phase = (i // STAGES) & 1
            sc = _w8_scale(s_ptrs, 0, i, KSUB, a_layout, WG_ROWS, BK)
            mbarrier.wait(ready.index(s), phase)
            codes = w_bufs.index(s).slice(wg * WG_ROWS, WG_ROWS).load(a_layout)
            wf = codes.to(gl.float32) * sc  # overlaps wgmma i-1
            # wgmma i-1 reads its A operand from registers until it completes: the bf16 operand of tile i
            # is written only after the wait (wf passes through it, so the rounding is not hoisted above)
            acc, wf = warpgroup_mma_wait(0, deps=(acc, wf))
            a = wf.to(gl.bfloat16)
            acc = warpgroup_mma(a, x_bufs.index(s).permute((1, 0)), acc, is_async=True)
            acc, a = warpgroup_mma_wait(1, deps=(acc, a))  # returns at once
            # stage i-1 is free (its wgmma is done, its weight tile was read before): off the critical path
            fence_async_shared()
            mbarrier.arrive(empty.index((i - 1) % STAGES))
        acc, a = warpgroup_mma_wait(0, deps=(acc, a))

    if EPI_TMA:
        # epilogue through shared memory, transposed ([BN tokens, WG_ROWS rows], rows contiguous), then a TMA
        # store, which clips the tokens past T
        buf = y_smem.index(wg)
        buf.permute((1, 0)).store(acc.to(gl.bfloat16))
        fence_async_shared()
        tma.async_copy_shared_to_global(y_desc, [off_t, g * R + r0], buf)
        tma.store_wait(pendings=0)
        return
    # epilogue: out[t, r] with rows contiguous, 8 bf16 (16 bytes) per thread
    TPR: gl.constexpr = WG_ROWS // 8 if WG_ROWS // 8 < 32 else 32
    out_layout: gl.constexpr = gl.BlockedLayout([8, 1], [TPR, 32 // TPR], [1, 4], [0, 1])
    out = gl.convert_layout(acc.to(gl.bfloat16), out_layout)
    r = gl.arange(0, WG_ROWS, layout=gl.SliceLayout(1, out_layout))
    t = gl.arange(0, BN, layout=gl.SliceLayout(0, out_layout))
    tt = off_t + t
    ptrs = Y + (g * R + r0) + gl.expand_dims(r, 1) + gl.expand_dims(tt.to(gl.int64) * ys_t, 0)
    mask = gl.expand_dims(tt < T, 0) & gl.expand_dims(r >= 0, 1)
    gl.store(ptrs, out, mask=mask)


@gluon.jit
def wo_a_w8_gluon_kernel(x_desc, w_desc, y_desc, S, Y, T, ys_t,
                         G: gl.constexpr, R: gl.constexpr, D: gl.constexpr,
                         BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
                         NWG: gl.constexpr, CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                         EPI_TMA: gl.constexpr, A_SMEM: gl.constexpr):
    """One program: BM weight rows x BN tokens of one group, NWG consumer warpgroups of BM/NWG rows.

    x_desc: TMA descriptor of o viewed [T, G*D] bf16, block [BN, BK];
    w_desc: TMA descriptor of codes viewed [G*R, D] fp8e4nv, block [BM, BK];
    S: scale float32 [G, R/32, D/32] contiguous; Y: out bf16, out[t, g, r] at t*ys_t + g*R + r.
    grid = (R/BM, G, cdiv(T, BN)); launch with num_warps=4.
    """
    pid_r = gl.program_id(0)
    g = gl.program_id(1)
    pid_t = gl.program_id(2)
    off_r = pid_r * BM
    off_t = pid_t * BN
    K_TILES: gl.constexpr = D // BK
    WG_ROWS: gl.constexpr = BM // NWG

    x_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES] + x_desc.block_type.shape, x_desc.layout)
    w_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    if EPI_TMA:
        y_smem = gl.allocate_shared_memory(y_desc.dtype, [NWG] + y_desc.block_type.shape, y_desc.layout)
    else:
        y_smem = x_bufs
    if A_SMEM == 1:
        a_smem = gl.allocate_shared_memory(gl.bfloat16, [NWG * 2, WG_ROWS, BK],
                                           gl.NVMMASharedLayout.get_default_for([WG_ROWS, BK], gl.bfloat16))
    else:
        a_smem = x_bufs
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=NWG)
    fence_async_shared()

    if NWG == 1:
        gl.warp_specialize([
            (_w8_consumer, (x_bufs, w_bufs, ready, empty, y_desc, y_smem, a_smem, S, Y, g, off_r, off_t, T, ys_t, 0,
                            R, D, WG_ROWS, BN, BK, STAGES, EPI_TMA, A_SMEM)),
            (_w8_producer, (x_desc, w_desc, x_bufs, w_bufs, ready, empty, off_t, g * D, g * R + off_r,
                            K_TILES, BK, STAGES)),
        ], [1], [PRODUCER_REGS])
    else:
        gl.static_assert(NWG == 2)
        gl.warp_specialize([
            (_w8_consumer, (x_bufs, w_bufs, ready, empty, y_desc, y_smem, a_smem, S, Y, g, off_r, off_t, T, ys_t, 0,
                            R, D, WG_ROWS, BN, BK, STAGES, EPI_TMA, A_SMEM)),
            (_w8_consumer, (x_bufs, w_bufs, ready, empty, y_desc, y_smem, a_smem, S, Y, g, off_r, off_t, T, ys_t, 1,
                            R, D, WG_ROWS, BN, BK, STAGES, EPI_TMA, A_SMEM)),
            (_w8_producer, (x_desc, w_desc, x_bufs, w_bufs, ready, empty, off_t, g * D, g * R + off_r,
                            K_TILES, BK, STAGES)),
        ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


# ---------------------------------------------------------------------------------------------
# Variant CVT: a converter warpgroup turns the fp8 tile into bf16 in shared memory, the consumer
# warpgroups issue wgmma with both operands in shared memory and keep one in flight (a bf16 GEMM's loop).


@gluon.jit
def _cvt_converter(x_desc, w_desc, x_bufs, w_bufs, a_bufs, ready, conv, empty, S, g, off_r, off_t,
                   R: gl.constexpr, D: gl.constexpr, BM: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr):
    """The default partition (4 warps): TMA producer and fp8 -> bf16 converter in one.

    Per k-tile i: convert tile i (fp8 ring slot i % STAGES -> bf16 buffer i % 2), signal conv, then refill
    the slot of tile i-1 (freed by the consumers once wgmma i-1 is done) with tile i + STAGES - 1."""
    K_TILES: gl.constexpr = D // BK
    KB: gl.constexpr = D // 32
    layout: gl.constexpr = gl.BlockedLayout([1, 16], [32 // (BK // 16), BK // 16], [4, 1], [1, 0])
    rows = gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
    k_idx = gl.expand_dims(gl.arange(0, BK, layout=gl.SliceLayout(0, layout)), 0)
    s_ptrs = S + (g * (R // 32) + (off_r + rows) // 32) * KB
    nbytes: gl.constexpr = x_desc.block_type.nbytes + w_desc.block_type.nbytes
    for j in gl.static_range(STAGES - 1):
        mbarrier.expect(ready.index(j), nbytes)
        tma.async_copy_global_to_shared(w_desc, [g * R + off_r, j * BK], ready.index(j), w_bufs.index(j))
        tma.async_copy_global_to_shared(x_desc, [off_t, g * D + j * BK], ready.index(j), x_bufs.index(j))
    for i in range(K_TILES):
        s = i % STAGES
        phase = (i // STAGES) & 1
        sc = gl.full([BM, BK], 0.0, gl.float32, layout)
        for j in gl.static_range(BK // 32):
            sj = gl.expand_dims(gl.load(s_ptrs + i * (BK // 32) + j), 1)
            sc = gl.where((k_idx >= j * 32) & (k_idx < (j + 1) * 32), sj, sc)
        mbarrier.wait(ready.index(s), phase)
        codes = w_bufs.index(s).load(layout)
        a = (codes.to(gl.float32) * sc).to(gl.bfloat16)
        # a_bufs[i % 2] was last read by wgmma i-2, whose release this partition waited for last iteration
        a_bufs.index(i % 2).store(a)
        fence_async_shared()
        mbarrier.arrive(conv.index(i % 2))
        nxt = i + STAGES - 1
        if i > 0:
            # tile i-1 released by both consumers (wgmma i-1 done): its ring slot can be refilled, and the
            # bf16 buffer (i+1) % 2 written next iteration is no longer read
            mbarrier.wait(empty.index((i - 1) % STAGES), ((i - 1) // STAGES) & 1)
        if nxt < K_TILES:
            ns = nxt % STAGES
            mbarrier.expect(ready.index(ns), nbytes)
            tma.async_copy_global_to_shared(w_desc, [g * R + off_r, nxt * BK], ready.index(ns), w_bufs.index(ns))
            tma.async_copy_global_to_shared(x_desc, [off_t, g * D + nxt * BK], ready.index(ns), x_bufs.index(ns))


@gluon.jit
def _cvt_consumer(x_bufs, a_bufs, ready, conv, empty, y_desc, y_smem, Y, g, off_r, off_t, T, ys_t, wg: gl.constexpr,
                  R: gl.constexpr, D: gl.constexpr, WG_ROWS: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
                  STAGES: gl.constexpr, EPI_TMA: gl.constexpr):
    K_TILES: gl.constexpr = D // BK
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, BN, 16])
    acc = gl.zeros([WG_ROWS, BN], gl.float32, layout=mma_layout)
    r0 = off_r + wg * WG_ROWS
    for i in range(K_TILES):
        s = i % STAGES
        phase = (i // STAGES) & 1
        mbarrier.wait(conv.index(i % 2), (i // 2) & 1)
        mbarrier.wait(ready.index(s), phase)
        acc = warpgroup_mma(a_bufs.index(i % 2).slice(wg * WG_ROWS, WG_ROWS), x_bufs.index(s).permute((1, 0)), acc,
                            is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc, ))
        mbarrier.arrive(empty.index((i + STAGES - 1) % STAGES), pred=i > 0)
    acc = warpgroup_mma_wait(0, deps=(acc, ))
    if EPI_TMA:
        buf = y_smem.index(wg)
        buf.permute((1, 0)).store(acc.to(gl.bfloat16))
        fence_async_shared()
        tma.async_copy_shared_to_global(y_desc, [off_t, g * R + r0], buf)
        tma.store_wait(pendings=0)
    else:
        TPR: gl.constexpr = WG_ROWS // 8 if WG_ROWS // 8 < 32 else 32
        out_layout: gl.constexpr = gl.BlockedLayout([8, 1], [TPR, 32 // TPR], [1, 4], [0, 1])
        out = gl.convert_layout(acc.to(gl.bfloat16), out_layout)
        r = gl.arange(0, WG_ROWS, layout=gl.SliceLayout(1, out_layout))
        t = gl.arange(0, BN, layout=gl.SliceLayout(0, out_layout))
        tt = off_t + t
        ptrs = Y + (g * R + r0) + gl.expand_dims(r, 1) + gl.expand_dims(tt.to(gl.int64) * ys_t, 0)
        mask = gl.expand_dims(tt < T, 0) & gl.expand_dims(r >= 0, 1)
        gl.store(ptrs, out, mask=mask)


@gluon.jit
def wo_a_w8_gluon_cvt_kernel(x_desc, w_desc, y_desc, S, Y, T, ys_t,
                             G: gl.constexpr, R: gl.constexpr, D: gl.constexpr,
                             BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
                             CONSUMER_REGS: gl.constexpr, EPI_TMA: gl.constexpr):
    """BM = 128 rows (two consumer warpgroups of 64) x BN tokens; launch with num_warps=4 (consumer 0)."""
    pid_r = gl.program_id(0)
    g = gl.program_id(1)
    pid_t = gl.program_id(2)
    off_r = pid_r * BM
    off_t = pid_t * BN
    WG_ROWS: gl.constexpr = BM // 2

    x_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES] + x_desc.block_type.shape, x_desc.layout)
    w_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    a_bufs = gl.allocate_shared_memory(gl.bfloat16, [2, BM, BK],
                                       gl.NVMMASharedLayout.get_default_for([BM, BK], gl.bfloat16))
    if EPI_TMA:
        y_smem = gl.allocate_shared_memory(y_desc.dtype, [2] + y_desc.block_type.shape, y_desc.layout)
    else:
        y_smem = x_bufs
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    conv = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # the two consumers
    for i in gl.static_range(2):
        mbarrier.init(conv.index(i), count=1)
    fence_async_shared()

    # the default partition loads and converts (few registers); the consumers, holding the accumulators, are
    # workers
    gl.warp_specialize([
        (_cvt_converter, (x_desc, w_desc, x_bufs, w_bufs, a_bufs, ready, conv, empty, S, g, off_r, off_t,
                          R, D, BM, BK, STAGES)),
        (_cvt_consumer, (x_bufs, a_bufs, ready, conv, empty, y_desc, y_smem, Y, g, off_r, off_t, T, ys_t, 0,
                         R, D, WG_ROWS, BN, BK, STAGES, EPI_TMA)),
        (_cvt_consumer, (x_bufs, a_bufs, ready, conv, empty, y_desc, y_smem, Y, g, off_r, off_t, T, ys_t, 1,
                         R, D, WG_ROWS, BN, BK, STAGES, EPI_TMA)),
    ], [4, 4], [CONSUMER_REGS, CONSUMER_REGS])


def tma_desc(t2, block):
    """A TMA descriptor of the 2-D view t2 (last dim contiguous) with the default NVMMA layout for its dtype."""
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    dtype = gl.bfloat16 if t2.dtype == torch.bfloat16 else gl.float8e4nv
    return TensorDescriptor(t2, list(t2.shape), [t2.stride(0), 1], block,
                            gl.NVMMASharedLayout.get_default_for(block, dtype))


def launch_cvt(o, codes, scale, out, tiles, epi_tma=None, consumer_regs=208):
    bm, bn, bk, stages = tiles
    assert bm == 128
    T, G, D = o.shape
    R = codes.shape[1]
    x2 = o.view(T, G * D)
    w2 = codes.view(G * R, D)
    x_desc = tma_desc(x2, [bn, bk])
    w_desc = tma_desc(w2, [bm, bk])
    if epi_tma is None:
        epi_tma = stages * (bn * bk * 2 + bm * bk) + 2 * bm * bk * 2 + bn * bm * 2 + 512 <= 227 * 1024
    y2 = out.view(T, G * R)
    y_desc = tma_desc(y2, [bn, bm // 2])
    grid = (R // bm, G, triton.cdiv(T, bn))
    wo_a_w8_gluon_cvt_kernel[grid](x_desc, w_desc, y_desc, scale, out, T, out.stride(0), G, R, D, bm, bn, bk, stages,
                                   consumer_regs, bool(epi_tma), num_warps=4, maxnreg=168)
    return out


# (BM, BN, BK, STAGES): BM = 64 per consumer warpgroup (two warpgroups from 128)
def pick_tiles(tokens: int, groups: int, rows: int, dim: int):
    """The best RS tiles of the H200 sweep (bench/results/wo_a_w8_gluon_sweep.txt) by problem size."""
    if rows * groups <= 2048 and tokens <= 1024:  # the [8, 256, 512] shape below 2048 tokens: more programs
        return (64, 64, 64, 6) if tokens <= 256 else (64, 128, 64, 4)
    return (128, 256, 64, 4)


TAIL_TILES = (128, 64, 64, 8)


def smem_bytes(tiles) -> int:
    bm, bn, bk, stages = tiles
    return stages * (bn * bk * 2 + bm * bk) + 256


def regs_for(nwg, bn, producer_regs=40):
    """(maxnreg, consumer regs). Two consumer warpgroups: 232 registers each, the producer's warpgroup 40
    (504 of the 512 per thread-slot an SM has); the kernel is launched with 168 (12 warps, 64512 registers).
    One consumer warpgroup (the default partition): 128 at launch when its accumulator allows
    (BN <= 128: two programs per SM), else 168."""
    if nwg == 2:
        return 168, 232
    return (128 if bn <= 128 else 168), 0


def launch(o, codes, scale, out, tiles, producer_regs=40, nwg=None, epi_tma=None, a_smem=False):
    """o [T, G, D] bf16 (row stride G*D... any, last dim contiguous), codes [G, R, D] e4m3, scale [G, R/32, D/32] f32,
    out [T, G, R] bf16 (rows contiguous)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    bm, bn, bk, stages = tiles
    T, G, D = o.shape
    R = codes.shape[1]
    x2 = o.reshape(T, G * D) if o.is_contiguous() else o.view(T, G * D)
    w2 = codes.view(G * R, D)
    x_layout = gl.NVMMASharedLayout.get_default_for([bn, bk], gl.bfloat16)
    w_layout = gl.NVMMASharedLayout.get_default_for([bm, bk], gl.float8e4nv)
    x_desc = TensorDescriptor(x2, [T, G * D], [x2.stride(0), 1], [bn, bk], x_layout)
    w_desc = TensorDescriptor(w2, [G * R, D], [D, 1], [bm, bk], w_layout)
    nwg = nwg or min(bm // 64, 2)
    if epi_tma is None and (bm // nwg) * 2 > 128:
        epi_tma = False  # a TMA box row of the output would pass the 128-byte swizzle
    if epi_tma is None:
        epi_tma = smem_bytes(tiles) + nwg * bn * (bm // nwg) * 2 + (bm * bk * 4 if a_smem == 1 else 0) <= 227 * 1024
    y2 = out.view(T, G * R)
    y_layout = gl.NVMMASharedLayout.get_default_for([bn, bm // nwg], gl.bfloat16)
    y_desc = TensorDescriptor(y2, [T, G * R], [out.stride(0), 1], [bn, bm // nwg], y_layout)
    maxnreg, consumer_regs = regs_for(nwg, bn, producer_regs)
    grid = (R // bm, G, triton.cdiv(T, bn))
    wo_a_w8_gluon_kernel[grid](x_desc, w_desc, y_desc, scale, out, T, out.stride(0), G, R, D, bm, bn, bk, stages,
                               nwg, consumer_regs, producer_regs, bool(epi_tma), int(a_smem), num_warps=4, maxnreg=maxnreg)
    return out


def wo_a_w8_gluon(o, codes, scale, tiles=None, epi_tma=None, a_smem=False, out=None, cvt=False):
    import torch

    T, G, D = o.shape
    R = codes.shape[1]
    if tiles is None:
        tiles = pick_tiles(T, G, R, D)
    if out is None:
        out = torch.empty(T, G, R, device=o.device, dtype=torch.bfloat16)
    if cvt:
        return launch_cvt(o, codes.view(torch.float8_e4m3fn), scale, out, tiles, epi_tma=epi_tma)
    return launch(o, codes.view(torch.float8_e4m3fn), scale, out, tiles, epi_tma=epi_tma, a_smem=a_smem)


def wo_a_w8_gluon_split(o, codes, scale, tiles, tail_tiles, epi_tma=None, a_smem=False, cvt=False):
    """Tokens in whole BN-tiles of `tiles`, the rest (T mod BN) by a second launch with `tail_tiles`."""
    import torch

    T, G, D = o.shape
    R = codes.shape[1]
    out = torch.empty(T, G, R, device=o.device, dtype=torch.bfloat16)
    main = T // tiles[1] * tiles[1]
    if main:
        wo_a_w8_gluon(o[:main], codes, scale, tiles, epi_tma=epi_tma, a_smem=a_smem, out=out[:main], cvt=cvt)
    if main < T:
        wo_a_w8_gluon(o[main:], codes, scale, tail_tiles, epi_tma=epi_tma, a_smem=a_smem, out=out[main:], cvt=cvt)
    return out


def wo_a_w8_gluon_matmul(o, codes, scale):
    """einsum('tgd,grd->tgr', o, dequantize(codes, scale)) in bf16: o [T, G, D] bf16 contiguous, codes
    [G, R, D] float8_e4m3fn, scale [G, R/32, D/32] float32 contiguous; R % 128 == 0 (64 for the small
    tiles), D % 64 == 0. Tokens past the last whole 256-token tile go to a second launch when they fill
    at most half a tile (measured at 300 tokens: 1.43x cuBLAS against 1.76-1.92x in one launch)."""
    T, G, D = o.shape
    R = codes.shape[1]
    tiles = pick_tiles(T, G, R, D)
    if tiles[1] == 256 and T > 256 and 0 < T % 256 <= 128 and R % TAIL_TILES[0] == 0:
        return wo_a_w8_gluon_split(o, codes, scale, tiles, TAIL_TILES)
    return wo_a_w8_gluon(o, codes, scale, tiles)


# ---------------------------------------------------------------------------------------------
# Variant PP: persistent (grid = the SMs; program p takes tiles p, p + P, ...). The producer fills the ring tile
# after tile, so the next tile's loads and the last tile's TMA store run under a tile's main loop: the
# one-tile-per-program kernels above leave the tensor cores idle in each program's prologue and epilogue.
#   COOP: both consumer warpgroups on every tile (128 weight rows x BN tokens, 64 rows each), in step.
#   not COOP (ping-pong): 64-row tiles, each consumer its own (alternate local tiles); an order barrier makes the
#     two main loops alternate (without it a consumer runs a tile ahead of the ring, past what a ready barrier's
#     parity can tell apart: it hung on the H200).
#   TAIL (COOP): each tile also takes the next TAIL tokens with a second wgmma (N = TAIL) on the same converted
#     weight operand, so a tile spans BN + TAIL tokens (e.g. 300 tokens in one 256 + 64 tile instead of two 256s).
# Main loop: RS wgmma with one k-step in flight (as A_SMEM=2).


@gluon.jit
def _pp_tile(t, RB: gl.constexpr, TB):
    # tile id -> (group, 64-row block, token block); token blocks innermost: neighbours share a weight block
    tb = t % TB
    rest = t // TB
    return rest // RB, rest % RB, tb


@gluon.jit
def _pp_producer(x_desc, xt_desc, w_desc, x_bufs, xt_bufs, w_bufs, ready, empty, n_tiles, TB,
                 R: gl.constexpr, D: gl.constexpr, TILE_ROWS: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
                 STAGES: gl.constexpr, TAIL: gl.constexpr):
    K_TILES: gl.constexpr = D // BK
    RB: gl.constexpr = R // TILE_ROWS
    nbytes: gl.constexpr = x_desc.block_type.nbytes + w_desc.block_type.nbytes + (
        xt_desc.block_type.nbytes if TAIL > 0 else 0)
    n = 0
    for t in range(gl.program_id(0), n_tiles, gl.num_programs(0)):
        g, rb, tb = _pp_tile(t, RB, TB)
        for i in range(K_TILES):
            s = n % STAGES
            mbarrier.wait(empty.index(s), ((n // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), nbytes)
            tma.async_copy_global_to_shared(w_desc, [g * R + rb * TILE_ROWS, i * BK], ready.index(s), w_bufs.index(s))
            tma.async_copy_global_to_shared(x_desc, [tb * (BN + TAIL), g * D + i * BK], ready.index(s), x_bufs.index(s))
            if TAIL > 0:
                tma.async_copy_global_to_shared(xt_desc, [tb * (BN + TAIL) + BN, g * D + i * BK], ready.index(s),
                                                xt_bufs.index(s))
            n += 1


@gluon.jit
def _pp_consumer(x_bufs, xt_bufs, w_bufs, ready, empty, order, y_desc, yt_desc, y_smem, yt_smem, S, n_tiles, TB,
                 c: gl.constexpr, R: gl.constexpr, D: gl.constexpr, WG_ROWS: gl.constexpr, BN: gl.constexpr,
                 BK: gl.constexpr, STAGES: gl.constexpr, COOP: gl.constexpr, TAIL: gl.constexpr):
    # COOP: both consumers on every tile of 128 rows (rows c*64 of it), in step; else ping-pong, 64-row tiles
    TILE_ROWS: gl.constexpr = 128 if COOP else WG_ROWS
    KSUB: gl.constexpr = BK // 32
    K_TILES: gl.constexpr = D // BK
    KB: gl.constexpr = D // 32
    RB: gl.constexpr = R // TILE_ROWS
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, BN, 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_layout, k_width=2)
    # TAIL: a second wgmma per k-step (N = TAIL) on the TAIL tokens after the BN ones, from the same weight operand
    TN: gl.constexpr = TAIL if TAIL > 0 else 8
    tail_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, TN, 16])
    at_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=tail_layout, k_width=2)
    rows = gl.arange(0, WG_ROWS, layout=gl.SliceLayout(1, a_layout))
    nprog = gl.num_programs(0)
    tbuf = yt_smem.index(c)
    buf = y_smem.index(c)
    base = 0 if COOP else c * K_TILES  # ring step of this tile's first k-step (the producer's n)
    m = 0  # this consumer's tiles so far
    for t in range(gl.program_id(0) + (0 if COOP else c) * nprog, n_tiles, (1 if COOP else 2) * nprog):
        g, rb, tb = _pp_tile(t, RB, TB)
        # main loops alternate: this tile's starts once the other consumer's previous tile's main loop is done.
        # Without that order a consumer runs a whole tile ahead of the ring, past what the parity of a ready
        # barrier can tell apart (it waits on the phase two uses ahead and takes the one before for it).
        if not COOP:
            if c == 0:
                mbarrier.wait(order.index(1), (m - 1) & 1, pred=m > 0)
            else:
                mbarrier.wait(order.index(0), m & 1)
        r0 = rb * TILE_ROWS + (c * WG_ROWS if COOP else 0)
        s_ptrs = S + (g * (R // 32) + (r0 + rows) // 32) * KB
        acc = gl.zeros([WG_ROWS, BN], gl.float32, layout=mma_layout)
        if TAIL > 0:
            acc2 = gl.zeros([WG_ROWS, TN], gl.float32, layout=tail_layout)
        sc = _w8_scale(s_ptrs, 0, 0, KSUB, a_layout, WG_ROWS, BK)
        mbarrier.wait(ready.index(base % STAGES), (base // STAGES) & 1)
        codes = w_bufs.index(base % STAGES).slice((c if COOP else 0) * WG_ROWS, WG_ROWS).load(a_layout)
        a_prev = (codes.to(gl.float32) * sc).to(gl.bfloat16)
        acc = warpgroup_mma(a_prev, x_bufs.index(base % STAGES).permute((1, 0)), acc, is_async=True)
        if TAIL > 0:
            acc2 = warpgroup_mma(gl.convert_layout(a_prev, at_layout), xt_bufs.index(base % STAGES).permute((1, 0)),
                                 acc2, is_async=True)
        for i in gl.static_range(1, K_TILES):
            n = base + i
            sc = _w8_scale(s_ptrs, 0, i, KSUB, a_layout, WG_ROWS, BK)
            mbarrier.wait(ready.index(n % STAGES), (n // STAGES) & 1)
            codes = w_bufs.index(n % STAGES).slice((c if COOP else 0) * WG_ROWS, WG_ROWS).load(a_layout)
            a = (codes.to(gl.float32) * sc).to(gl.bfloat16)
            acc = warpgroup_mma(a, x_bufs.index(n % STAGES).permute((1, 0)), acc, is_async=True)
            # wgmma i-1 has retired after this wait; a_prev, its register operand, is live until here
            if TAIL > 0:
                acc2 = warpgroup_mma(gl.convert_layout(a, at_layout), xt_bufs.index(n % STAGES).permute((1, 0)), acc2,
                                     is_async=True)
                acc, acc2, a_prev, a = warpgroup_mma_wait(2, deps=(acc, acc2, a_prev, a))
            else:
                acc, a_prev, a = warpgroup_mma_wait(1, deps=(acc, a_prev, a))
            mbarrier.arrive(empty.index((n - 1) % STAGES))
            a_prev = a
        if TAIL > 0:
            acc, acc2, a_prev = warpgroup_mma_wait(0, deps=(acc, acc2, a_prev))
        else:
            acc, a_prev = warpgroup_mma_wait(0, deps=(acc, a_prev))
        mbarrier.arrive(empty.index((base + K_TILES - 1) % STAGES))
        if not COOP:
            mbarrier.arrive(order.index(c))
        m += 1
        # the previous tile's store out of buf must be done before buf is written again; it ran under this main loop
        tma.store_wait(pendings=0)
        buf.permute((1, 0)).store(acc.to(gl.bfloat16))
        if TAIL > 0:
            tbuf.permute((1, 0)).store(acc2.to(gl.bfloat16))
        fence_async_shared()
        tma.async_copy_shared_to_global(y_desc, [tb * (BN + TAIL), g * R + r0], buf)
        if TAIL > 0:
            tma.async_copy_shared_to_global(yt_desc, [tb * (BN + TAIL) + BN, g * R + r0], tbuf)
        base += (1 if COOP else 2) * K_TILES
    tma.store_wait(pendings=0)


@gluon.jit
def wo_a_w8_gluon_pp_kernel(x_desc, xt_desc, w_desc, y_desc, yt_desc, S, n_tiles, TB,
                            R: gl.constexpr, D: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
                            STAGES: gl.constexpr, CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                            COOP: gl.constexpr, TAIL: gl.constexpr):
    """Persistent: program p takes tiles p, p + P, ... (P programs), its consumer c the ones of local index = c
    mod 2. Tiles: 64 weight rows x BN tokens of one group. x_desc block [BN, BK], w_desc [64, BK], y_desc [BN, 64].
    Launch with num_warps=4: consumer 0 is the default partition; consumer 1 and the producer are workers."""
    WG_ROWS: gl.constexpr = 64
    x_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES] + x_desc.block_type.shape, x_desc.layout)
    w_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    y_smem = gl.allocate_shared_memory(y_desc.dtype, [2] + y_desc.block_type.shape, y_desc.layout)
    if TAIL > 0:
        xt_bufs = gl.allocate_shared_memory(xt_desc.dtype, [STAGES] + xt_desc.block_type.shape, xt_desc.layout)
        yt_smem = gl.allocate_shared_memory(yt_desc.dtype, [2] + yt_desc.block_type.shape, yt_desc.layout)
    else:
        xt_bufs = x_bufs
        yt_smem = y_smem
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    order = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2 if COOP else 1)
    for i in gl.static_range(2):
        mbarrier.init(order.index(i), count=1)
    fence_async_shared()
    gl.warp_specialize([
        (_pp_consumer, (x_bufs, xt_bufs, w_bufs, ready, empty, order, y_desc, yt_desc, y_smem, yt_smem, S, n_tiles, TB,
                        0, R, D, WG_ROWS, BN, BK, STAGES, COOP, TAIL)),
        (_pp_consumer, (x_bufs, xt_bufs, w_bufs, ready, empty, order, y_desc, yt_desc, y_smem, yt_smem, S, n_tiles, TB,
                        1, R, D, WG_ROWS, BN, BK, STAGES, COOP, TAIL)),
        (_pp_producer, (x_desc, xt_desc, w_desc, x_bufs, xt_bufs, w_bufs, ready, empty, n_tiles, TB, R, D,
                        128 if COOP else WG_ROWS, BN, BK, STAGES, TAIL)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


def launch_pp(o, codes, scale, out, tiles, programs=None, consumer_regs=232, producer_regs=40, coop=False, tail=0):
    """tiles (BN, BK, STAGES); programs: the persistent grid (default: the SMs, at most ceil(tiles / 2))."""
    import torch

    bn, bk, stages = tiles
    T, G, D = o.shape
    R = codes.shape[1]
    x2 = o.reshape(T, G * D)
    w2 = codes.view(G * R, D)
    x_desc = tma_desc(x2, [bn, bk])
    rows = 128 if coop else 64
    w_desc = tma_desc(w2, [rows, bk])
    y2 = out.view(T, G * R)
    y_desc = tma_desc(y2, [bn, 64])
    xt_desc, yt_desc = x_desc, y_desc
    if tail:
        xt_desc = tma_desc(x2, [tail, bk])
        yt_desc = tma_desc(y2, [tail, 64])
    tb = triton.cdiv(T, bn + tail)
    n_tiles = G * (R // rows) * tb
    if programs is None:
        programs = min(torch.cuda.get_device_properties(o.device).multi_processor_count,
                       n_tiles if coop else triton.cdiv(n_tiles, 2))
    wo_a_w8_gluon_pp_kernel[(programs,)](x_desc, xt_desc, w_desc, y_desc, yt_desc, scale, n_tiles, tb, R, D, bn, bk,
                                         stages, consumer_regs, producer_regs, bool(coop), int(tail), num_warps=4,
                                         maxnreg=168)
    return out
