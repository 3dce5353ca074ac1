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


@pytest.mark.guard_on
def test_the_models_wo_a_takes_split_k_then_dequantise_at_the_default_thresholds(monkeypatch):
    """Through the attention's call site with series.toml's defaults, on the
    model's own wo_a per rank at TP4 ([2, 1024, 4096]): the split-K Triton kernel
    (partials added by _sum_splits_kernel) up to 256 tokens, dequantise + cuBLAS
    from DSV41_WO_A_W8_DEQUANT_TOKENS (257) on; each against the reference."""
    import torch
    from sglang.kernels.ops.gemm import dsv4_wo_a_w8
    from sglang.srt.models.deepseek_v4 import MqaAttentionBase
    from sglang.srt.models.deepseek_v4_wo_a_w8 import resolve_wo_a_w8_mode

    monkeypatch.setenv("DSV41_WO_A_W8", "1")
    taken = []
    real_sum = dsv4_wo_a_w8._sum_splits_kernel

    class Recorder:
        def __getitem__(self, grid):
            return lambda *a, **k: taken.append(f"split{k['SPLIT']}") or real_sum[grid](*a, **k)

    monkeypatch.setattr(dsv4_wo_a_w8, "_sum_splits_kernel", Recorder())
    for name in ("_wo_a_w8_dequantized", "_wo_a_w8_triton"):
        fn = getattr(dsv4_wo_a_w8, name)
        monkeypatch.setattr(dsv4_wo_a_w8, name, lambda *a, _n=name, _f=fn: taken.append(_n) or _f(*a))
    mode = resolve_wo_a_w8_mode()
    assert mode.dequant_tokens == 257  # series.toml's default
    layer = object.__new__(MqaAttentionBase)
    torch.nn.Module.__init__(layer)
    layer.wo_a_w8_dequant_tokens = mode.dequant_tokens
    expected_paths = {1: ["_wo_a_w8_triton", "split4"], 32: ["_wo_a_w8_triton", "split4"],
                      200: ["_wo_a_w8_triton", "split2"], 256: ["_wo_a_w8_triton", "split2"],
                      257: ["_wo_a_w8_dequantized"], 2048: ["_wo_a_w8_dequantized"]}
    for tokens, paths in expected_paths.items():
        o, codes, scale, wo_a = _operands(tokens, 2, 1024, 4096, seed=tokens)
        layer.wo_a = torch.nn.Module()
        layer.wo_a.weight_w8, layer.wo_a.weight_w8_scale = codes, scale
        taken.clear()
        result = layer._apply_wo_a_w8(o)
        assert taken == paths, (tokens, taken)
        expected = torch.einsum("tgd,grd->tgr", o.double(), wo_a.double())
        torch.testing.assert_close(result.double(), expected, rtol=2**-6, atol=2**-6)
