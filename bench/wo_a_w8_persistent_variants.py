"""Sweep copy of the series' dsv4_wo_a_w8_hopper with the switches under test (PREFETCH, EARLY, DIRECT, DEPTH, RING).

The wo_a W8 GEMM on Hopper (sm_90a) at prefill sizes: a persistent,
warp-specialised kernel in Triton's Gluon dialect.

Same operands and result as the Triton kernel in dsv4_wo_a_w8.py (bf16
activations, e4m3 codes times power-of-two 32x32 block scales, exact in bf16,
float32 accumulation, one rounding to bf16), computed weight-stationary
(swap-AB): per group, out_g^T [R, T] = W_g [R, D] @ x_g^T [D, T].

- Tiles: 128 weight rows x BN (+ TAIL) tokens of one group. The grid is one
  program per SM; program p takes tiles p, p + P, ... (token blocks innermost,
  so neighbouring tiles share a weight block in L2).
- A producer warp streams the fp8 weight tile and the activation tile(s) of
  every k-step into a STAGES-deep shared-memory ring with TMA (mbarriers
  ready/empty), across tile boundaries: the next tile's loads and the last
  tile's TMA store run under a tile's main loop.
- Two consumer warpgroups take 64 rows of each tile each: the fp8 tile goes
  from shared memory into wgmma's register-operand layout, is multiplied by
  its block scale in float32 and rounded to bf16 (the dequantised weight's own
  value), and an async wgmma runs it against the activation tile (B from
  shared memory), one k-step in flight. A register operand stays live until
  the wgmma that reads it has retired (ptxas does not keep it alive by
  itself: with one wgmma in flight, the next operand landed in the same
  registers, giving wrong results).
- TAIL > 0: each k-step also runs a wgmma of N = TAIL on the TAIL tokens after
  the BN ones, from the same converted weight, so a tile spans BN + TAIL
  tokens (300 tokens: one 256 + 64 tile per weight block instead of two 256s).
- Epilogue: accumulator -> bf16 -> shared memory, transposed -> TMA store
  (which clips the token rows past T, as the loads zero-fill them).

Why Gluon and not a tl.dot kernel: Triton's own kernels of this form (and
Triton's bf16 GEMM itself) stayed ~1.2-1.4x cuBLAS from ~256 tokens on; the
H200 sweeps are bench/results/wo_a_w8_gluon_persistent_sweep.txt. Imported only
where it can run (dsv4_wo_a_w8._hopper_kernels): a Triton with Gluon's Hopper
module, an SM 9.0 GPU.
"""

from __future__ import annotations

import torch
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
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

TILE_ROWS = 128  # weight rows per tile: 64 per consumer warpgroup
BLOCK_K = 64
CONSUMER_REGS = 232
PRODUCER_REGS = 40
MIN_TILES = 128  # about a wave of the H200's 132 SMs
# (BN, TAIL, STAGES): 256-token tiles with a 4-deep ring; tiles of 256 + 64
# tokens fit a 3-deep one in shared memory (~228 KB).
PLAIN = (256, 0, 4)
WITH_TAIL = (256, 64, 3)


def tiles_for(tokens: int) -> tuple[int, int, int]:
    """PLAIN, or WITH_TAIL where its tiles cover the tokens with at most 90 %
    of PLAIN's padded tokens (its shallower ring costs ~10 %: H200 sweep)."""
    plain = triton.cdiv(tokens, PLAIN[0]) * PLAIN[0]
    span = WITH_TAIL[0] + WITH_TAIL[1]
    return WITH_TAIL if triton.cdiv(tokens, span) * span <= 0.9 * plain else PLAIN


def tile_count(tokens: int, groups: int, rows: int, tiles: tuple[int, int, int]) -> int:
    return groups * (rows // TILE_ROWS) * triton.cdiv(tokens, tiles[0] + tiles[1])


def fits(tokens: int, groups: int, rows: int, dim: int) -> bool:
    """Whole tiles (128 rows, 64 of D) and at least a wave of them: with fewer
    the kernel leaves SMs idle and is slower than the other paths (the small
    per-rank wo_a [8, 256, 512] below ~1800 tokens on the H200)."""
    if rows % TILE_ROWS or dim % BLOCK_K:
        return False
    return tile_count(tokens, groups, rows, tiles_for(tokens)) >= MIN_TILES


@gluon.jit
def _tile(t, RB: gl.constexpr, TB):
    # tile id -> (group, 128-row block, token block)
    tb = t % TB
    rest = t // TB
    return rest // RB, rest % RB, tb


@gluon.jit
def _scales(s_ptrs, i, KSUB: gl.constexpr, layout: gl.constexpr, ROWS: gl.constexpr, BK: gl.constexpr):
    # k-step i's block scales as a [ROWS, BK] tensor in the register-operand layout
    if KSUB == 1:
        s0 = gl.load(s_ptrs + i)
        sc = gl.broadcast(gl.expand_dims(s0, 1), gl.full([ROWS, BK], 0.0, gl.float32, layout))[0]
    else:
        k_idx = gl.arange(0, BK, layout=gl.SliceLayout(0, layout))
        sc = gl.full([ROWS, BK], 0.0, gl.float32, layout)
        for j in gl.static_range(KSUB):
            sj = gl.load(s_ptrs + i * KSUB + j)
            inside = (k_idx >= j * 32) & (k_idx < (j + 1) * 32)
            sc = gl.where(gl.expand_dims(inside, 0), gl.expand_dims(sj, 1), sc)
    return sc


@gluon.jit
def _producer(x_desc, xt_desc, w_desc, x_bufs, xt_bufs, w_bufs, ready, empty, epi, n_tiles, TB,
              R: gl.constexpr, D: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
              TAIL: gl.constexpr, RING: gl.constexpr):
    K_TILES: gl.constexpr = D // BK
    RB: gl.constexpr = R // 128
    nbytes: gl.constexpr = x_desc.block_type.nbytes + w_desc.block_type.nbytes + (
        xt_desc.block_type.nbytes if TAIL > 0 else 0)
    n = 0  # ring steps so far, across tiles
    for t in range(gl.program_id(0), n_tiles, gl.num_programs(0)):
        g, rb, tb = _tile(t, RB, TB)
        for i in range(K_TILES):
            s = n % STAGES
            # the empties start "completed" for phase 1: the first pass over the ring does not wait
            mbarrier.wait(empty.index(s), ((n // STAGES) & 1) ^ 1)
            if RING == 2:
                # the stage held a tile's last or second-last k-step: consumer c's epilogue went through it,
                # and its TMA store must have read it (epi[c], one phase per tile) before it is loaded again
                prev = n - STAGES
                if prev >= 0:
                    if prev % K_TILES >= K_TILES - 2:
                        mbarrier.wait(epi.index(K_TILES - 1 - prev % K_TILES), (prev // K_TILES) & 1)
            mbarrier.expect(ready.index(s), nbytes)
            tma.async_copy_global_to_shared(w_desc, [g * R + rb * 128, i * BK], ready.index(s), w_bufs.index(s))
            tma.async_copy_global_to_shared(x_desc, [tb * (BN + TAIL), g * D + i * BK], ready.index(s),
                                            x_bufs.index(s))
            if TAIL > 0:
                tma.async_copy_global_to_shared(xt_desc, [tb * (BN + TAIL) + BN, g * D + i * BK], ready.index(s),
                                                xt_bufs.index(s))
            n += 1


@gluon.jit
def _tile_scales(S, t, c: gl.constexpr, R: gl.constexpr, KB: gl.constexpr, RB: gl.constexpr, TB, rows):
    # the scale pointers of tile t's rows for consumer c (k-step 0's scales at +0)
    g, rb, tb = _tile(t, RB, TB)
    r0 = rb * 128 + c * 64
    return S + (g * (R // 32) + (r0 + rows) // 32) * KB


@gluon.jit
def _consumer(x_bufs, xt_bufs, w_bufs, ready, empty, epi, y_desc, yt_desc, y_smem, yt_smem, S, n_tiles, TB, Y, T, YS,
              c: gl.constexpr, R: gl.constexpr, D: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
              STAGES: gl.constexpr, TAIL: gl.constexpr, PREFETCH: gl.constexpr, EARLY: gl.constexpr,
              DIRECT: gl.constexpr, DEPTH: gl.constexpr, RING: gl.constexpr):
    # consumer c: rows c*64 .. c*64+63 of every tile, in step with the other consumer
    WG_ROWS: gl.constexpr = 64
    KSUB: gl.constexpr = BK // 32
    K_TILES: gl.constexpr = D // BK
    KB: gl.constexpr = D // 32
    RB: gl.constexpr = R // 128
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, BN, 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_layout, k_width=2)
    TN: gl.constexpr = TAIL if TAIL > 0 else 8
    tail_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                          instr_shape=[16, TN, 16])
    at_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=tail_layout, k_width=2)
    rows = gl.arange(0, WG_ROWS, layout=gl.SliceLayout(1, a_layout))
    buf = y_smem.index(c)
    tbuf = yt_smem.index(c)
    base = 0  # ring step of this tile's first k-step (the producer's n)
    step = gl.num_programs(0)
    # PREFETCH: each k-step's block scales are loaded one k-step ahead, under the wgmma in flight, and the
    # next tile's first ones under this tile's last k-step (else each k-step waits for its scale load)
    sc = _scales(_tile_scales(S, gl.program_id(0), c, R, KB, RB, TB, rows), 0, KSUB, a_layout, WG_ROWS, BK)
    for t in range(gl.program_id(0), n_tiles, step):
        g, rb, tb = _tile(t, RB, TB)
        r0 = rb * 128 + c * WG_ROWS
        s_ptrs = _tile_scales(S, t, c, R, KB, RB, TB, rows)
        acc = gl.zeros([WG_ROWS, BN], gl.float32, layout=mma_layout)
        if TAIL > 0:
            acc2 = gl.zeros([WG_ROWS, TN], gl.float32, layout=tail_layout)
        if not PREFETCH:
            sc = _scales(s_ptrs, 0, KSUB, a_layout, WG_ROWS, BK)
        mbarrier.wait(ready.index(base % STAGES), (base // STAGES) & 1)
        codes = w_bufs.index(base % STAGES).slice(c * WG_ROWS, WG_ROWS).load(a_layout)
        a_prev = (codes.to(gl.float32) * sc).to(gl.bfloat16)
        if EARLY:
            # k-step 1's codes, read from shared memory under k-step 0's wgmma
            mbarrier.wait(ready.index((base + 1) % STAGES), ((base + 1) // STAGES) & 1)
            codes = w_bufs.index((base + 1) % STAGES).slice(c * WG_ROWS, WG_ROWS).load(a_layout)
        acc = warpgroup_mma(a_prev, x_bufs.index(base % STAGES).permute((1, 0)), acc, is_async=True)
        if TAIL > 0:
            acc2 = warpgroup_mma(gl.convert_layout(a_prev, at_layout), xt_bufs.index(base % STAGES).permute((1, 0)),
                                 acc2, is_async=True)
        if PREFETCH:
            sc = _scales(s_ptrs, 1, KSUB, a_layout, WG_ROWS, BK)
        for i in gl.static_range(1, K_TILES):
            n = base + i
            if not PREFETCH:
                sc = _scales(s_ptrs, i, KSUB, a_layout, WG_ROWS, BK)
            if not EARLY:
                mbarrier.wait(ready.index(n % STAGES), (n // STAGES) & 1)
                codes = w_bufs.index(n % STAGES).slice(c * WG_ROWS, WG_ROWS).load(a_layout)
            a = (codes.to(gl.float32) * sc).to(gl.bfloat16)
            acc = warpgroup_mma(a, x_bufs.index(n % STAGES).permute((1, 0)), acc, is_async=True)
            if TAIL > 0:
                acc2 = warpgroup_mma(gl.convert_layout(a, at_layout), xt_bufs.index(n % STAGES).permute((1, 0)),
                                     acc2, is_async=True)
            if RING == 2:
                if i == 1:
                    if base > 0:
                        # the last tile's store has read its ring stage: the producer may load it again (it
                        # waits for this at the k-step STAGES - 1 - c of this tile, after the ones used so far)
                        tma.store_wait(pendings=0)
                        mbarrier.arrive(epi.index(c))
            if EARLY:
                if i + 1 < K_TILES:
                    mbarrier.wait(ready.index((n + 1) % STAGES), ((n + 1) // STAGES) & 1)
                    codes = w_bufs.index((n + 1) % STAGES).slice(c * WG_ROWS, WG_ROWS).load(a_layout)
            if PREFETCH:
                if i + 1 < K_TILES:
                    sc = _scales(s_ptrs, i + 1, KSUB, a_layout, WG_ROWS, BK)
                else:
                    t_next = gl.minimum(t + step, n_tiles - 1)
                    sc = _scales(_tile_scales(S, t_next, c, R, KB, RB, TB, rows), 0, KSUB, a_layout, WG_ROWS, BK)
            if DEPTH == 1:
                # k-step i-1's wgmma has retired after this wait; a_prev, its register operand, is live until here
                if TAIL > 0:
                    acc, acc2, a_prev, a = warpgroup_mma_wait(2, deps=(acc, acc2, a_prev, a))
                else:
                    acc, a_prev, a = warpgroup_mma_wait(1, deps=(acc, a_prev, a))
                mbarrier.arrive(empty.index((n - 1) % STAGES))
                a_prev = a
            else:
                # DEPTH 2: k-steps i-1 and i stay in flight, so the next operand's scales, read and conversion
                # have two wgmmas' time; k-step i-2's has retired after this wait (a_pp live until here)
                if i >= 2:
                    if TAIL > 0:
                        acc, acc2, a_pp, a_prev, a = warpgroup_mma_wait(4, deps=(acc, acc2, a_pp, a_prev, a))  # noqa: F821 (set by the unrolled k-step before)
                    else:
                        acc, a_pp, a_prev, a = warpgroup_mma_wait(2, deps=(acc, a_pp, a_prev, a))  # noqa: F821
                    mbarrier.arrive(empty.index((n - 2) % STAGES))
                a_pp = a_prev
                a_prev = a
        if DEPTH == 1:
            if TAIL > 0:
                acc, acc2, a_prev = warpgroup_mma_wait(0, deps=(acc, acc2, a_prev))
            else:
                acc, a_prev = warpgroup_mma_wait(0, deps=(acc, a_prev))
        else:
            if TAIL > 0:
                acc, acc2, a_pp, a_prev = warpgroup_mma_wait(0, deps=(acc, acc2, a_pp, a_prev))
            else:
                acc, a_pp, a_prev = warpgroup_mma_wait(0, deps=(acc, a_pp, a_prev))
            mbarrier.arrive(empty.index((base + K_TILES - 2) % STAGES))
        mbarrier.arrive(empty.index((base + K_TILES - 1) % STAGES))
        if DIRECT:
            # straight from the accumulator's registers to global memory: no shared-memory buffer, so the
            # ring can be deeper (each thread's rows r and r + 8 of a token fill a 32-byte sector per warp)
            tok = tb * (BN + TAIL) + gl.arange(0, BN, layout=gl.SliceLayout(0, mma_layout))
            rr = g * R + r0 + gl.arange(0, WG_ROWS, layout=gl.SliceLayout(1, mma_layout))
            gl.store(Y + gl.expand_dims(tok, 0) * YS + gl.expand_dims(rr, 1), acc.to(gl.bfloat16),
                     mask=gl.expand_dims(tok < T, 0))
            if TAIL > 0:
                tok2 = tb * (BN + TAIL) + BN + gl.arange(0, TN, layout=gl.SliceLayout(0, tail_layout))
                rr2 = g * R + r0 + gl.arange(0, WG_ROWS, layout=gl.SliceLayout(1, tail_layout))
                gl.store(Y + gl.expand_dims(tok2, 0) * YS + gl.expand_dims(rr2, 1), acc2.to(gl.bfloat16),
                         mask=gl.expand_dims(tok2 < T, 0))
        else:
            if RING == 2:
                # any number of tiles: the epilogue goes through the stage of this tile's k-step K-1-c, once
                # both consumers have released it; the producer loads it again only after epi[c]
                u = base + K_TILES - 1 - c
                mbarrier.wait(empty.index(u % STAGES), (u // STAGES) & 1)
                buf = x_bufs.index(u % STAGES)
                tbuf = xt_bufs.index(u % STAGES)
            elif RING:
                # one tile per program (the host checks): the epilogue goes through ring stage u, the last use
                # of which both consumers have released once its empty barrier completes (u's phase); no load
                # lands there again, so the ring needs no buffers of its own and can be one stage deeper
                u = base + K_TILES - STAGES + c
                mbarrier.wait(empty.index(u % STAGES), (u // STAGES) & 1)
                buf = x_bufs.index(u % STAGES)
                tbuf = xt_bufs.index(u % STAGES)
            # the previous tile's store out of buf ran under this main loop; it must be done before buf is rewritten
            tma.store_wait(pendings=0)
            buf.permute((1, 0)).store(acc.to(gl.bfloat16))
            if TAIL > 0:
                tbuf.permute((1, 0)).store(acc2.to(gl.bfloat16))
            fence_async_shared()
            tma.async_copy_shared_to_global(y_desc, [tb * (BN + TAIL), g * R + r0], buf)
            if TAIL > 0:
                tma.async_copy_shared_to_global(yt_desc, [tb * (BN + TAIL) + BN, g * R + r0], tbuf)
        base += K_TILES
    if not DIRECT:
        tma.store_wait(pendings=0)


@gluon.jit
def _wo_a_w8_persistent_kernel(x_desc, xt_desc, w_desc, y_desc, yt_desc, S, n_tiles, TB, Y, T, YS,
                               R: gl.constexpr, D: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
                               STAGES: gl.constexpr, TAIL: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                               PRODUCER_REGS: gl.constexpr, PREFETCH: gl.constexpr = False, EARLY: gl.constexpr = False,
                               DIRECT: gl.constexpr = False, DEPTH: gl.constexpr = 1, RING: gl.constexpr = False):
    # x_desc block [BN, BK], xt_desc [TAIL, BK], w_desc [128, BK], y_desc [BN, 64], yt_desc [TAIL, 64].
    # Launched with num_warps=4: consumer 0 is the default partition, consumer 1 and the producer workers.
    x_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES] + x_desc.block_type.shape, x_desc.layout)
    w_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    if TAIL > 0:
        xt_bufs = gl.allocate_shared_memory(xt_desc.dtype, [STAGES] + xt_desc.block_type.shape, xt_desc.layout)
    else:
        xt_bufs = x_bufs
    if DIRECT or RING:  # no epilogue buffers (unused stand-ins; RING: the ring's stages)
        y_smem = x_bufs
        yt_smem = xt_bufs
    else:
        y_smem = gl.allocate_shared_memory(y_desc.dtype, [2] + y_desc.block_type.shape, y_desc.layout)
        if TAIL > 0:
            yt_smem = gl.allocate_shared_memory(yt_desc.dtype, [2] + yt_desc.block_type.shape, yt_desc.layout)
        else:
            yt_smem = y_smem
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    epi = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # both consumers release a stage
    for i in gl.static_range(2):
        mbarrier.init(epi.index(i), count=1)  # RING 2: consumer i's store has read its ring stage
    fence_async_shared()
    gl.warp_specialize([
        (_consumer, (x_bufs, xt_bufs, w_bufs, ready, empty, epi, y_desc, yt_desc, y_smem, yt_smem, S, n_tiles, TB, Y, T, YS,
                     0, R, D, BN, BK, STAGES, TAIL, PREFETCH, EARLY, DIRECT, DEPTH, RING)),
        (_consumer, (x_bufs, xt_bufs, w_bufs, ready, empty, epi, y_desc, yt_desc, y_smem, yt_smem, S, n_tiles, TB, Y, T, YS,
                     1, R, D, BN, BK, STAGES, TAIL, PREFETCH, EARLY, DIRECT, DEPTH, RING)),
        (_producer, (x_desc, xt_desc, w_desc, x_bufs, xt_bufs, w_bufs, ready, empty, epi, n_tiles, TB, R, D, BN, BK,
                     STAGES, TAIL, RING)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


def _descriptor(t2: torch.Tensor, block) -> TensorDescriptor:
    dtype = gl.bfloat16 if t2.dtype == torch.bfloat16 else gl.float8e4nv
    return TensorDescriptor(t2, list(t2.shape), [t2.stride(0), 1], block,
                            gl.NVMMASharedLayout.get_default_for(block, dtype))


def wo_a_w8_persistent(
    o: torch.Tensor,
    codes: torch.Tensor,
    scale: torch.Tensor,
    tiles: tuple[int, int, int] | None = None,
    programs: int | None = None,
    prefetch: bool = False,
    early: bool = False,
    direct: bool = False,
    depth: int = 1,
    out: torch.Tensor | None = None,
    ring: int = 0,
) -> torch.Tensor:
    """o bf16 [T, G, D], codes e4m3 [G*R, D], scale float32 [G*R/32, D/32] ->
    bf16 [T, G, R]; R a multiple of 128, D of 64 (dsv4_wo_a_w8 checks)."""
    tokens, groups, dim = o.shape
    rows = codes.shape[0] // groups
    block_n, tail, stages = tiles or tiles_for(tokens)
    x2 = o.contiguous().view(tokens, groups * dim)
    if out is None:
        out = torch.empty((tokens, groups, rows), dtype=torch.bfloat16, device=o.device)
    y2 = out.view(tokens, groups * rows)
    x_desc = _descriptor(x2, [block_n, BLOCK_K])
    y_desc = _descriptor(y2, [block_n, 64])
    xt_desc, yt_desc = x_desc, y_desc
    if tail:
        xt_desc = _descriptor(x2, [tail, BLOCK_K])
        yt_desc = _descriptor(y2, [tail, 64])
    w_desc = _descriptor(codes, [TILE_ROWS, BLOCK_K])
    token_blocks = triton.cdiv(tokens, block_n + tail)
    n_tiles = groups * (rows // TILE_ROWS) * token_blocks
    if programs is None:
        programs = min(torch.cuda.get_device_properties(o.device).multi_processor_count, n_tiles)
    if ring == 1 and programs != n_tiles:
        raise ValueError(f"ring: one tile per program only ({n_tiles} tiles, {programs} programs)")
    _wo_a_w8_persistent_kernel[(programs,)](
        x_desc, xt_desc, w_desc, y_desc, yt_desc, scale, n_tiles, token_blocks, y2, tokens, y2.stride(0),
        rows, dim, block_n, BLOCK_K, stages, tail, CONSUMER_REGS, PRODUCER_REGS, prefetch, early, direct, depth, ring,
        num_warps=4, maxnreg=168,
    )  # fmt: skip
    return out
