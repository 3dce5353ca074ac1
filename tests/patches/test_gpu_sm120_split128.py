"""sm120_split128 on a GB10 (SM12x) with the real DeepGEMM: the split-128
planner runs for a ratio-1 indexer. Elsewhere, the H200 included, it skips
naming the kernel (conftest's gb10 marker); the CPU tests stub the device.
"""

from __future__ import annotations

import importlib

import pytest

FEATURE = "sm120_split128"


@pytest.mark.guard_on
@pytest.mark.gb10("DeepGEMM's SM12x paged-MQA split-128 planner (deep_gemm)")
def test_guard_on_plans_with_deep_gemm_on_gb10(monkeypatch):
    import torch

    deep_gemm = pytest.importorskip("deep_gemm", reason="DeepGEMM is not installed on this GB10")
    from sglang.srt.layers.attention.dsv4 import metadata

    monkeypatch.setenv("DSV41_SM120_SPLIT128", "1")
    module = importlib.reload(metadata)
    try:
        plan = module.PagedIndexerMetadata(
            page_size=256, compressed_page_size=64,
            page_table=torch.zeros(3, 4, dtype=torch.int32, device="cuda"),
            compressed_seq_lens=torch.tensor([10, 70, 200], device="cuda"),
            use_topk_v2=False, compress_ratio=1,
        )  # fmt: skip
        assert plan.force_deep_gemm_metadata
        assert plan.deep_gemm_metadata.is_cuda
        assert plan.deep_gemm_metadata.shape == (deep_gemm.get_num_sms() + 1, 2)
    finally:
        monkeypatch.delenv("DSV41_SM120_SPLIT128")
        importlib.reload(metadata)
