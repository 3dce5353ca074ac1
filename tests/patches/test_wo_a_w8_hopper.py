"""wo_a_w8's persistent Hopper kernel (dsv4_wo_a_w8_hopper), on a CPU: its tile
rules, and the kernel compiled for sm_90a with the pinned Triton (ptxas runs
without a GPU), read back from its SASS and PTX.

What the GPU run proves (test_gpu_wo_a_w8, on the lent H200): results against
the bf16 reference at every tile form and token count, and that the DROP
layers take it. What this proves without one: the kernel still compiles with
the Triton that sglang pins (Gluon is an experimental dialect that changes
between releases; the H200 runs its image's Triton), fits the H200's shared
memory, spills nothing, issues its wgmmas, TMA loads and stores, initialises
every ring barrier and fences its shared-memory writes before the TMA store
reads them, and no register operand of a wgmma is overwritten while that
wgmma may still run (the bug that gave wrong results in an earlier form).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from types import SimpleNamespace
from unittest import mock

import pytest

FEATURE = "wo_a_w8"

H200_SHARED = 232448  # bytes of shared memory a program may use on SM 9.0 (227 KiB)


# -- compiling for sm_90a without a GPU, and reading the SASS (bench/compile_wo_a_w8_gluon.py uses these too) --

@dataclass(frozen=True)
class Compiled:
    shared: int  # bytes of shared memory per program
    sass: str
    ptx: str

    def count(self, opcode: str) -> int:
        """Instructions whose opcode starts with `opcode` (HGMMA, STL, ...)."""
        return len(re.findall(rf"/\*[0-9a-f]{{4,}}\*/\s+(?:@!?U?P\w+\s+)?{re.escape(opcode)}[\w.]*\s", self.sass))


def tensordesc(dtype: str, block: list[int]) -> str:
    """A kernel-signature type for a TMA descriptor of `block` with the default NVMMA layout."""
    from triton.experimental.gluon import language as gl

    layout = gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16 if dtype == "bf16" else gl.float8e4nv)
    return f"tensordesc<{dtype}[{block[0]},{block[1]}],{layout!r}>"


def compile_sm90(fn, signature: dict, constexprs: dict, **options) -> Compiled:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    signature = {**signature, **{name: "constexpr" for name in constexprs}}
    # Compiled afresh: Triton's cache keys a Gluon kernel by its source, not by the
    # module globals it names, so a build cached before would hide a lost import.
    with mock.patch.dict(os.environ, {"TRITON_ALWAYS_COMPILE": "1"}):
        kernel = triton.compile(GluonASTSource(fn, signature, constexprs=constexprs),
                                target=GPUTarget("cuda", 90, 32), options=options)
    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(kernel.asm["cubin"])
        cubin.flush()
        sass = subprocess.run([cuobjdump, "-sass", cubin.name], capture_output=True, text=True, check=True).stdout
    return Compiled(kernel.metadata.shared, sass, kernel.asm["ptx"])


def wgmma_hazards(sass: str) -> int:
    """Registers written while an HGMMA that reads them (its A operand) may still run: the count of writes
    between an HGMMA group and the WARPGROUP.DEPBAR that retires it (a straight-line reading of the SASS, which
    holds for the unrolled K loops). ptxas does not keep a register operand of an in-flight wgmma alive by itself."""
    pending, group, hazards = [], set(), 0
    for op, args in re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)\s*(.*?);", sass):
        if op.startswith("HGMMA"):
            a = re.fullmatch(r"R(\d+)", args.split(",")[1].strip())
            group |= set(range(int(a.group(1)), int(a.group(1)) + 4)) if a else set()
            if "gsb0" in args:
                pending.append(group)
                group = set()
        elif op.startswith("WARPGROUP.DEPBAR"):
            del pending[:max(0, len(pending) - int(args.split(",")[1], 16))]
        elif not op.startswith(("ST", "RED", "ATOM", "BRA", "BAR", "SYNCS", "EXIT", "RET", "WARPGROUP", "UTMA",
                                "ISETP", "FSETP", "NOP", "U")):
            dst = re.fullmatch(r"R(\d+)", args.split(",")[0].strip())
            width = 4 if ".128" in op else 2 if ".64" in op else 1
            if dst and any(set(range(int(dst.group(1)), int(dst.group(1)) + width)) & g for g in pending):
                hazards += 1
    return hazards



def _hopper():
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper",
                        reason="the persistent kernel is Gluon's: this Triton has no Gluon Hopper module")
    from sglang.kernels.ops.gemm import dsv4_wo_a_w8_hopper

    return dsv4_wo_a_w8_hopper


@pytest.mark.guard_on
def test_tiles_cover_the_tokens_and_the_wave_rule_picks_the_shapes(monkeypatch):
    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    hopper = _hopper()
    # 256-token tiles, or 256 + 64 where those pad to at most 90 % of the 256s.
    assert [hopper.tiles_for(t) for t in (256, 257, 300, 320, 384, 512, 576, 640, 900, 1024)] == [
        hopper.PLAIN, hopper.WITH_TAIL, hopper.WITH_TAIL, hopper.WITH_TAIL, hopper.PLAIN, hopper.PLAIN,
        hopper.WITH_TAIL, hopper.WITH_TAIL, hopper.PLAIN, hopper.PLAIN]
    assert hopper.tile_count(300, 16, 1024, hopper.WITH_TAIL) == 16 * 8 * 1
    assert hopper.tile_count(300, 16, 1024, hopper.PLAIN) == 16 * 8 * 2
    # The large per-rank wo_a fills a wave from its first tile; the small one from 1793 tokens.
    assert hopper.fits(256, 16, 1024, 1024) and hopper.fits(300, 16, 1024, 1024)
    assert not hopper.fits(1792, 8, 256, 512) and hopper.fits(1793, 8, 256, 512)
    # Rows must come in 128-row tiles, D in 64-wide k-steps.
    assert not hopper.fits(4096, 2, 64, 96) and not hopper.fits(4096, 16, 1024, 1056)
    # At most 16 k-steps a tile: the model's 4096-wide wo_a, a wave of tiles at
    # 2048 tokens, is faster dequantised; the same rows 1024 wide are not.
    assert not hopper.fits(2048, 2, 1024, 4096) and not hopper.fits(8192, 2, 1024, 1088)
    assert hopper.fits(2048, 2, 1024, 1024)


@pytest.mark.guard_on
def test_a_call_the_persistent_kernel_takes_runs_it_ahead_of_the_other_paths(monkeypatch):
    """wo_a_w8_matmul's order: the persistent kernel where _persistent_kernels
    offers it (on a GPU: SM 9.0, from DSV41_WO_A_W8_PERSISTENT_TOKENS, a wave),
    even past DSV41_WO_A_W8_DEQUANT_TOKENS; on a CPU it is never offered."""
    import torch
    from sglang.kernels.ops.gemm import dsv4_wo_a_w8

    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    o = torch.randn(8, 2, 64).bfloat16()
    codes, scale = dsv4_wo_a_w8.quantize_wo_a_w8(torch.randn(2 * 64, 64).bfloat16())
    assert dsv4_wo_a_w8._persistent_kernels(o, 64, 1) is None  # CPU tensors
    asked = []

    class Offered:
        @staticmethod
        def wo_a_w8_persistent(o, codes, scale):
            return "persistent"

    monkeypatch.setattr(dsv4_wo_a_w8, "_persistent_kernels",
                        lambda o, rows, tokens: asked.append((o.shape[0], rows, tokens)) or Offered)
    assert dsv4_wo_a_w8.wo_a_w8_matmul(o, codes, scale, dequant_tokens=1, persistent_tokens=5) == "persistent"
    assert asked == [(8, 64, 5)]


def _compile(hopper, tiles, rows=1024, dim=1024, ring=False):
    block_n, tail, stages = tiles
    tail_block = tail or block_n
    signature = {"x_desc": tensordesc("bf16", [block_n, hopper.BLOCK_K]),
                 "xt_desc": tensordesc("bf16", [tail_block, hopper.BLOCK_K]),
                 "w_desc": tensordesc("fp8e4nv", [hopper.TILE_ROWS, hopper.BLOCK_K]),
                 "y_desc": tensordesc("bf16", [block_n, 64]), "yt_desc": tensordesc("bf16", [tail_block, 64]),
                 "S": "*fp32", "n_tiles": "i32", "TB": "i32"}
    constexprs = dict(R=rows, D=dim, BN=block_n, BK=hopper.BLOCK_K, STAGES=stages, TAIL=tail, RING=ring,
                      CONSUMER_REGS=hopper.CONSUMER_REGS, PRODUCER_REGS=hopper.PRODUCER_REGS)
    return compile_sm90(hopper._wo_a_w8_persistent_kernel, signature, constexprs, num_warps=4, maxnreg=168)


@pytest.mark.guard_on
@pytest.mark.parametrize("form,ring", [("PLAIN", False), ("WITH_TAIL", False), ("PLAIN", True), ("WITH_TAIL", True)])
def test_the_persistent_kernel_compiles_for_sm90a_with_the_pinned_triton(form, ring, monkeypatch):
    """Both tile forms, each with its own epilogue buffers and as RING (the
    epilogue takes ring stages, and the ring is one deeper).
    The RING forms compile with D = 512 (8 k-steps), which keeps this test's
    time down; the k-loop is unrolled, so its counts scale with D."""
    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    hopper = _hopper()
    tiles = getattr(hopper, form)
    block_n, tail, stages = tiles
    dim = 512 if ring else 1024
    if ring:
        assert hopper.ring_for(tiles, 128, 132, dim // 64) == (True, stages + 1)
        stages += 1
    kernel = _compile(hopper, (block_n, tail, stages), dim=dim, ring=ring)
    assert kernel.shared <= H200_SHARED, f"{form}: {kernel.shared} bytes of shared memory"
    stage = (block_n + tail) * 64 * 2 + 128 * 64  # bf16 tokens (+ tail) and fp8 weight, per k-step
    epilogue = 2 * (block_n + tail) * 64 * 2  # two output buffers of their own
    # RING: no epilogue buffers (the stages plus barriers); else the ring and both buffers.
    assert stages * stage + (0 if ring else epilogue) <= kernel.shared < stages * stage + (0 if ring else epilogue) + 1024
    assert kernel.count("STL") == 0 and kernel.count("LDL") == 0, f"{form}: spills to local memory"
    # Two consumers x D/64 k-steps x 4 wgmmas of K=16 (x 2 with the tail's second wgmma), unrolled.
    assert kernel.count("HGMMA") == 2 * (dim // 64) * 4 * (2 if tail else 1)
    assert wgmma_hazards(kernel.sass) == 0, f"{form}: a wgmma's register operand is overwritten in flight"
    ptx = kernel.ptx
    assert len(re.findall(r"mbarrier\.init", ptx)) == 2 * stages + 2  # ready and empty of every stage; epi
    loads = re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::\w+\.global\.mbarrier", ptx)  # ::cluster in 3.6
    stores = re.findall(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::\w+", ptx)
    assert (len(loads), len(stores)) == ((3, 4) if tail else (2, 2))  # weight, tokens (+ tail); per consumer
    # Fences: after the barriers' init, and in each consumer before its TMA store reads what it wrote.
    assert len(re.findall(r"fence\.proxy\.async", ptx)) == 1 + 2
    # Store waits, per consumer: before a tile's epilogue rewrites its buffer, and before it exits; RING: after
    # the next tile's k-step 1 (then the producer may refill the stage: epi). Each waits for the store's reads.
    assert len(re.findall(r"cp\.async\.bulk\.wait_group\.read", ptx)) == 2 * (3 if ring else 2)
    assert "setmaxnreg.inc" in ptx and "setmaxnreg.dec" in ptx  # warp-specialised register split
    # Barrier waits: each consumer's per k-step (ready; unrolled) and the producer's one (empty, in its loop);
    # RING: one more per consumer (the release of the stage its epilogue takes) and the producer's epi.
    assert len(re.findall(r"mbarrier\.try_wait\.parity", ptx)) == 2 * (dim // 64) + 1 + (3 if ring else 0)


@pytest.mark.guard_on
def test_ring_where_the_tiles_fit_a_wave_or_have_a_tail_and_the_tile_has_the_k_steps(monkeypatch):
    """RING (epilogue through the ring, one stage deeper) where every program
    has one tile or the tiles have a tail; 256-token tiles several to a
    program keep their buffers; never a ring deeper than the tile's k-steps."""
    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    hopper = _hopper()
    plain, with_tail = hopper.PLAIN, hopper.WITH_TAIL
    assert hopper.ring_for(plain, 128, 132, 16) == (True, plain[2] + 1)
    assert hopper.ring_for(plain, 132, 132, 8) == (True, plain[2] + 1)
    assert hopper.ring_for(plain, 133, 132, 16) == (False, plain[2])  # a program with two tiles
    assert hopper.ring_for(with_tail, 256, 132, 16) == (True, with_tail[2] + 1)
    assert hopper.ring_for(with_tail, 128, 132, 16) == (True, with_tail[2] + 1)
    assert hopper.ring_for(plain, 16, 132, 4) == (False, plain[2])  # D = 256: 4 k-steps, no room for a 5th
    assert hopper.ring_for(with_tail, 16, 132, 3) == (False, with_tail[2])


@pytest.mark.guard_on
@pytest.mark.parametrize("tokens", [300, 512])
def test_the_host_launch_hands_the_kernel_what_its_tiles_need(tokens, monkeypatch):
    """wo_a_w8_persistent's launch, the kernel itself replaced by a recorder (it
    needs an SM 9.0 GPU; test_gpu_wo_a_w8 runs it): TMA descriptors over the 2-D
    views with the blocks the kernel's tiles read and write, one program per
    SM at most, the tile and token-block counts its loop walks, its constexprs.
    300 tokens take tiles of 256 + 64 (a second descriptor pair for the tail),
    one per program (RING: a ring one stage deeper), 512 two plain 256-token
    blocks (two tiles on most programs: the form's ring and buffers)."""
    import torch

    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    hopper = _hopper()
    groups, rows, dim = 16, 1024, 1024
    launches = []

    class Recorder:
        def __getitem__(self, grid):
            return lambda *args, **options: launches.append((grid, args, options))

    monkeypatch.setattr(hopper, "_wo_a_w8_persistent_kernel", Recorder())
    o = torch.zeros(tokens, groups, dim, dtype=torch.bfloat16)
    codes = torch.zeros(groups * rows, dim, dtype=torch.float8_e4m3fn)
    scale = torch.ones(groups * rows // 32, dim // 32)
    # The grid: one program per SM (the device's count, here a stand-in's 132), at most one per tile.
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(multi_processor_count=132))
    out = hopper.wo_a_w8_persistent(o, codes, scale)
    assert out.shape == (tokens, groups, rows) and out.dtype == torch.bfloat16
    [(grid, args, options)] = launches
    launches.clear()
    hopper.wo_a_w8_persistent(o[:1], codes, scale)  # 1 token: 128 tiles, fewer than the SMs
    assert launches[0][0] == (128,)
    x_desc, xt_desc, w_desc, y_desc, yt_desc, s, n_tiles, token_blocks, *constexprs = args
    block_n, tail, stages = hopper.tiles_for(tokens)
    assert (block_n, tail) == ((256, 64) if tokens == 300 else (256, 0))
    blocks = -(-tokens // (block_n + tail))
    assert (n_tiles, token_blocks) == (groups * rows // 128 * blocks, blocks)
    assert grid == (min(132, n_tiles),)  # 300 tokens: 128 tiles of 320; 512: 256 tiles of 256
    ring = tokens == 300  # 128 tiles for 132 programs; 512 tokens: 256 tiles
    assert constexprs == [rows, dim, block_n, 64, stages + ring, tail, ring, hopper.CONSUMER_REGS,
                          hopper.PRODUCER_REGS]
    assert options == {"num_warps": 4, "maxnreg": 168} and s is scale
    # The views the descriptors cover, and the blocks: tokens x k-step, 128 rows x k-step, tokens x 64 outputs.
    assert x_desc.shape == [tokens, groups * dim] and x_desc.block_shape == [block_n, 64]
    assert w_desc.base is codes and w_desc.block_shape == [128, 64]
    assert y_desc.shape == [tokens, groups * rows] and y_desc.block_shape == [block_n, 64]
    assert y_desc.base.data_ptr() == out.data_ptr() and y_desc.strides == [groups * rows, 1]
    if tail:
        assert (xt_desc.block_shape, yt_desc.block_shape) == ([tail, 64], [tail, 64])
        assert xt_desc.base.data_ptr() == o.data_ptr() and yt_desc.base.data_ptr() == out.data_ptr()
    else:
        assert xt_desc is x_desc and yt_desc is y_desc
    # Layouts for the element types: bf16 activations and outputs, e4m3 weight codes.
    assert x_desc.layout.element_bitwidth == 16 and w_desc.layout.element_bitwidth == 8
