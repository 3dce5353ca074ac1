"""wo_a_w8 on a CUDA GPU: the Triton W8 GEMM itself (on CPU the tests take the
torch fallback, or the Triton interpreter).

Reference: bf16 einsum on the dequantised weight, computed in float64. The W8
kernel multiplies the same operands (bf16 activations; e4m3 codes times
power-of-two scales are exact in bf16) with float32 accumulation and rounds
once to bf16, so the stated tolerance is per element two bf16 ulps of the
result (rtol 2**-7 * 2) plus an absolute floor for near-zero outputs, and
overall a relative Frobenius error under 2**-8. Token counts cover decode, the
tile table's boundaries and prefill sizes. GPU-only (marked cuda).
"""

from __future__ import annotations

import pytest

FEATURE = "wo_a_w8"
pytestmark = pytest.mark.cuda

# tokens: decode, verify, each boundary of the tile table +/- 1, prefill.
TOKENS = (1, 2, 7, 16, 17, 64, 65, 128, 129, 300, 512, 513, 2049, 4096)
# [groups, rows, dim] per rank; the last is DeepSeek-V4.1-Flash's own at TP4 (split-K at decode sizes).
SHAPES = ((2, 64, 96), (8, 256, 512), (16, 1024, 1024), (2, 1024, 4096))


def _operands(tokens, groups, rows, dim, seed):
    import torch
    from sglang.kernels.ops.gemm.dsv4_wo_a_w8 import dequantize_wo_a_w8, quantize_wo_a_w8

    generator = torch.Generator(device="cuda").manual_seed(seed)
    weight = (torch.randn(groups * rows, dim, generator=generator, device="cuda") * 0.05).bfloat16()
    codes, scale = quantize_wo_a_w8(weight)
    o = torch.randn(tokens, groups, dim, generator=generator, device="cuda").bfloat16()
    return o, codes, scale, dequantize_wo_a_w8(codes, scale).view(groups, rows, dim)


@pytest.mark.guard_on
@pytest.mark.parametrize("groups,rows,dim", SHAPES)
def test_w8_gemm_matches_the_bf16_reference_on_the_gpu(groups, rows, dim, monkeypatch):
    import torch
    from sglang.kernels.ops.gemm import dsv4_wo_a_w8
    from sglang.srt.models.deepseek_v4_wo_a_w8 import resolve_wo_a_w8_mode

    # The guard on (the kernel is its path) and 0 for the dequant threshold: the
    # W8 kernel at every token count, prefill sizes included.
    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    monkeypatch.setenv("DSV41_WO_A_W8_DEQUANT_TOKENS", "0")

    for seed, tokens in enumerate(TOKENS):
        o, codes, scale, wo_a = _operands(tokens, groups, rows, dim, seed)
        expected = torch.einsum("tgd,grd->tgr", o.double(), wo_a.double())
        result = torch.full((tokens, groups, rows), float("nan"), dtype=torch.bfloat16, device="cuda")
        result.copy_(dsv4_wo_a_w8.wo_a_w8_matmul(o, codes, scale, dequant_tokens=resolve_wo_a_w8_mode().dequant_tokens))
        assert result.is_cuda and not result.isnan().any(), f"tokens={tokens}: unwritten outputs"
        torch.testing.assert_close(result.double(), expected, rtol=2**-6, atol=2**-6,
                                   msg=lambda m: f"tokens={tokens} [{groups},{rows},{dim}]: {m}")
        relative = ((result.double() - expected).norm() / expected.norm()).item()
        assert relative < 2**-8, f"tokens={tokens}: relative error {relative:.2e}"


@pytest.mark.guard_on
def test_the_attention_module_runs_the_triton_kernel_on_cuda(monkeypatch):
    """Through the real call site: MqaAttentionBase._apply_wo_a_w8 on CUDA tensors
    takes the Triton kernel (not the torch fallback) and matches the reference."""
    import torch
    from sglang.kernels.ops.gemm import dsv4_wo_a_w8

    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    o, codes, scale, wo_a = _operands(33, 8, 256, 512, seed=11)
    calls = []
    real = dsv4_wo_a_w8._wo_a_w8_triton
    monkeypatch.setattr(dsv4_wo_a_w8, "_wo_a_w8_triton", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(dsv4_wo_a_w8, "_wo_a_w8_torch", lambda *a, **k: pytest.fail("took the CPU fallback"))
    from sglang.srt.models.deepseek_v4 import MqaAttentionBase

    layer = object.__new__(MqaAttentionBase)
    torch.nn.Module.__init__(layer)
    layer.wo_a = torch.nn.Module()
    layer.wo_a.weight_w8, layer.wo_a.weight_w8_scale = codes, scale
    result = layer._apply_wo_a_w8(o)
    assert calls == [1]
    expected = torch.einsum("tgd,grd->tgr", o.double(), wo_a.double())
    torch.testing.assert_close(result.double(), expected, rtol=2**-6, atol=2**-6)


@pytest.mark.guard_on
@pytest.mark.parametrize("groups,rows,dim", SHAPES)
def test_prefill_dequant_path_matches_the_bf16_reference_on_the_gpu(groups, rows, dim, monkeypatch):
    """From DSV41_WO_A_W8_DEQUANT_TOKENS tokens on, the weight is dequantised in
    one Triton pass, bit for bit torch's, and cuBLAS's bf16 GEMM runs on it:
    the same tolerance as the W8 kernel against float64; below, the kernel."""
    import torch
    from sglang.kernels.ops.gemm import dsv4_wo_a_w8
    from sglang.srt.models.deepseek_v4_wo_a_w8 import resolve_wo_a_w8_mode

    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    monkeypatch.setenv("DSV41_WO_A_W8_DEQUANT_TOKENS", "300")
    threshold = resolve_wo_a_w8_mode().dequant_tokens
    calls = []
    for name in ("_wo_a_w8_dequantized", "_wo_a_w8_triton"):
        real = getattr(dsv4_wo_a_w8, name)
        monkeypatch.setattr(dsv4_wo_a_w8, name, lambda *a, _n=name, _r=real: calls.append(_n) or _r(*a))
    for seed, tokens in enumerate((1, 299, 300, 1024, 4096)):
        o, codes, scale, wo_a = _operands(tokens, groups, rows, dim, seed + 100)
        fast = dsv4_wo_a_w8.dequantize_wo_a_w8_triton(codes, scale)
        assert torch.equal(fast.view(groups, rows, dim), wo_a), "one-pass dequantisation differs from torch's"
        expected = torch.einsum("tgd,grd->tgr", o.double(), wo_a.double())
        calls.clear()
        result = dsv4_wo_a_w8.wo_a_w8_matmul(o, codes, scale, dequant_tokens=threshold)
        assert calls == ["_wo_a_w8_dequantized" if tokens >= 300 else "_wo_a_w8_triton"], (tokens, calls)
        torch.testing.assert_close(result.double(), expected, rtol=2**-6, atol=2**-6,
                                   msg=lambda m: f"tokens={tokens} [{groups},{rows},{dim}]: {m}")
        relative = ((result.double() - expected).norm() / expected.norm()).item()
        assert relative < 2**-8, f"tokens={tokens}: relative error {relative:.2e}"


@pytest.mark.guard_on
def test_one_pass_dequantisation_is_exact_for_every_code_on_the_gpu(monkeypatch):
    """The prefill path's dequantisation (the guard on: what it runs) on every
    e4m3 code, zeros and subnormals included, times power-of-two scales."""
    import torch
    from sglang.kernels.ops.gemm import dsv4_wo_a_w8

    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    codes = torch.arange(256, dtype=torch.uint8, device="cuda").repeat(256).view(1024, 64)
    codes = codes.view(torch.float8_e4m3fn)
    codes = torch.where(codes.float().isnan(), 0.0, codes.float()).to(torch.float8_e4m3fn)
    exponents = torch.randint(-40, 4, (32, 2), generator=torch.Generator(device="cuda").manual_seed(1), device="cuda")
    scale = torch.ldexp(torch.ones(32, 2, device="cuda"), exponents)
    fast = dsv4_wo_a_w8.dequantize_wo_a_w8_triton(codes, scale)
    assert torch.equal(fast, dsv4_wo_a_w8.dequantize_wo_a_w8(codes, scale))


def _hopper_or_skip():
    import torch
    from sglang.kernels.ops.gemm import dsv4_wo_a_w8

    hopper = dsv4_wo_a_w8._hopper_kernels(torch.cuda.current_device())
    if hopper is None:
        pytest.skip("the persistent kernel needs an SM 9.0 GPU (wgmma, TMA) and Triton's Gluon: "
                    f"this is SM {'.'.join(map(str, torch.cuda.get_device_capability()))}")
    return hopper


# Persistent kernel: the wave's edge (256), tail tiles (300, 320, 576), plain tiles just past
# a tile (257, 384, 513), and prefill sizes.
PERSISTENT_TOKENS = (256, 257, 300, 320, 384, 513, 576, 1024, 2049, 4096)


# The shapes the dispatch gives the persistent kernel (whole 128-row tiles, at most
# 16 k-steps): not the model's 4096-wide wo_a, which takes split-K and dequantise.
PERSISTENT_SHAPES = ((8, 256, 512), (16, 1024, 1024))


@pytest.mark.guard_on
@pytest.mark.parametrize("groups,rows,dim", PERSISTENT_SHAPES)
def test_persistent_hopper_kernel_matches_the_bf16_reference(groups, rows, dim, monkeypatch):
    """Both tile forms (256 tokens; 256 + 64 with the tail wgmma) at every token
    count, against float64 with the W8 kernel's tolerance; every output written
    (the TMA store clips the last tile, whose loads zero-fill past T). Each on a
    program per SM and on 64 programs (several tiles each where there are
    more): RING where the tiles fit one wave or have a tail (with several
    tiles a program, its producer refilling the epilogue's stages after epi),
    the epilogue's own buffers for 256-token tiles several to a program."""
    import torch

    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    hopper = _hopper_or_skip()
    rings = []
    real_ring_for = hopper.ring_for
    monkeypatch.setattr(hopper, "ring_for", lambda *args: rings.append(real_ring_for(*args)[0]) or real_ring_for(*args))
    for seed, tokens in enumerate(PERSISTENT_TOKENS):
        o, codes, scale, wo_a = _operands(tokens, groups, rows, dim, seed + 200)
        expected = torch.einsum("tgd,grd->tgr", o.double(), wo_a.double())
        for tiles in (hopper.PLAIN, hopper.WITH_TAIL):
            for programs in (None, 64):
                form = f"tokens={tokens} {tiles} programs={programs or 'SMs'}"
                # The output the kernel writes, poisoned: torch.empty hands it out for the call.
                result = torch.full((tokens, groups, rows), float("nan"), dtype=torch.bfloat16, device="cuda")
                with monkeypatch.context() as poisoned:
                    poisoned.setattr(torch, "empty", lambda *a, result=result, **k: result)
                    assert hopper.wo_a_w8_persistent(o, codes, scale, tiles=tiles, programs=programs) is result
                assert not result.isnan().any(), f"{form}: outputs left unwritten (NaN)"
                torch.testing.assert_close(result.double(), expected, rtol=2**-6, atol=2**-6,
                                           msg=lambda m, form=form: f"{form} [{groups},{rows},{dim}]: {m}")
                relative = ((result.double() - expected).norm() / expected.norm()).item()
                assert relative < 2**-8, f"{form}: relative error {relative:.2e}"
    assert set(rings) == {True, False}, f"RING taken {rings.count(True)} of {len(rings)} launches"


@pytest.mark.guard_on
def test_drop_layers_take_the_persistent_kernel_where_it_fills_a_wave(monkeypatch):
    """Through the attention's call site, DSV41_WO_A_W8_PERSISTENT_TOKENS at its
    default: the large per-rank wo_a from 256 tokens on, the small one only
    where its tiles fill a wave (2048 tokens), never the model's 4096-wide one;
    the Triton kernel or the dequant path (DSV41_WO_A_W8_DEQUANT_TOKENS at its
    default) elsewhere; 0 turns it off. Each result against the reference."""
    import torch
    from sglang.kernels.ops.gemm import dsv4_wo_a_w8
    from sglang.srt.models.deepseek_v4 import MqaAttentionBase
    from sglang.srt.models.deepseek_v4_wo_a_w8 import resolve_wo_a_w8_mode

    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    hopper = _hopper_or_skip()
    taken = []
    real = hopper.wo_a_w8_persistent
    monkeypatch.setattr(hopper, "wo_a_w8_persistent", lambda *a, **k: taken.append("persistent") or real(*a, **k))
    for name in ("_wo_a_w8_dequantized", "_wo_a_w8_triton"):
        fn = getattr(dsv4_wo_a_w8, name)
        monkeypatch.setattr(dsv4_wo_a_w8, name, lambda *a, _n=name, _f=fn: taken.append(_n) or _f(*a))

    def path(tokens, groups, rows, dim):
        mode = resolve_wo_a_w8_mode()
        layer = object.__new__(MqaAttentionBase)
        torch.nn.Module.__init__(layer)
        layer.wo_a_w8_dequant_tokens = mode.dequant_tokens
        layer.wo_a_w8_persistent_tokens = mode.persistent_tokens
        o, codes, scale, wo_a = _operands(tokens, groups, rows, dim, seed=tokens)
        layer.wo_a = torch.nn.Module()
        layer.wo_a.weight_w8, layer.wo_a.weight_w8_scale = codes, scale
        taken.clear()
        result = layer._apply_wo_a_w8(o)
        expected = torch.einsum("tgd,grd->tgr", o.double(), wo_a.double())
        torch.testing.assert_close(result.double(), expected, rtol=2**-6, atol=2**-6)
        return list(taken)

    assert resolve_wo_a_w8_mode().persistent_tokens == 256  # series.toml's defaults
    assert resolve_wo_a_w8_mode().dequant_tokens == 257
    assert path(128, 16, 1024, 1024) == ["_wo_a_w8_triton"]
    assert path(256, 16, 1024, 1024) == ["persistent"]
    assert path(300, 16, 1024, 1024) == ["persistent"]
    assert path(4096, 16, 1024, 1024) == ["persistent"]
    assert path(1024, 8, 256, 512) == ["_wo_a_w8_dequantized"]  # 16 x 4 tiles: under a wave
    assert path(2048, 8, 256, 512) == ["persistent"]
    assert path(256, 2, 64, 96) == ["_wo_a_w8_triton"]  # rows not in 128-row tiles
    assert path(512, 2, 64, 96) == ["_wo_a_w8_dequantized"]
    # The model's own wo_a: split-K to 256 tokens, then dequantised, also where
    # its tiles fill a wave (2048 tokens): 64 k-steps a tile, past MAX_K_STEPS.
    assert path(256, 2, 1024, 4096) == ["_wo_a_w8_triton"]
    assert path(2048, 2, 1024, 4096) == ["_wo_a_w8_dequantized"]
    monkeypatch.setenv("DSV41_WO_A_W8_PERSISTENT_TOKENS", "0")
    assert path(4096, 16, 1024, 1024) == ["_wo_a_w8_dequantized"]
