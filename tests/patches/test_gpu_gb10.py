"""GB10-only kernels, run for real where the GPU is a GB10 (SM12x); elsewhere,
the H200 included, they skip naming the kernel (conftest's gb10 marker).

mxfp8_backend: the b12x MXFP8 dense GEMM (b12x's kernels are SM120/SM121
only) through Fp8LinearMethod, against the dequantised reference.
"""

from __future__ import annotations

import pytest

FEATURE = "mxfp8_backend"


@pytest.mark.guard_on
@pytest.mark.gb10("b12x MXFP8 dense GEMM (b12x.gemm.mxfp8_linear)")
def test_b12x_linear_matches_the_reference_on_gb10(monkeypatch):
    import torch

    pytest.importorskip("b12x.gemm.mxfp8_linear", reason="the b12x package is not installed on this GB10")
    from test_mxfp8_backend import _block_fp8_layer, _block_fp8_method, _reference

    monkeypatch.setenv("DSV41_MXFP8_BACKEND", "b12x")
    method = _block_fp8_method()
    layer = _block_fp8_layer(n=256, k=512).to("cuda")
    method._prepare_block_fp8_as_mxfp8(layer)
    assert layer.block_fp8_mxfp8_ready
    generator = torch.Generator(device="cuda").manual_seed(1)
    for rows in (1, 5, 64, 300):
        x = torch.randn(rows, 512, generator=generator, device="cuda").bfloat16()
        out, expected = method.apply(layer, x).float(), _reference(layer, x).float()
        # b12x quantises the activations to MXFP8 (e4m3, one scale per 32): ~2**-4 per element.
        assert ((out - expected).norm() / expected.norm()).item() < 3e-2, rows
