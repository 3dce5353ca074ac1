"""sm120_split128: DeepGEMM's split-128 planner for V4.1's ratio-1/2 indexers on SM12x.

The device is stubbed (torch.cuda reports an SM121 GB10, or an SM100 for the
control), and so are the two planners, which are GPU kernels: DeepGEMM's (a
stub ``deep_gemm`` module) and sglang's JIT one. What runs is
PagedIndexerMetadata.__post_init__, reloaded under the stubbed device so its
import-time probes see it.
"""

from __future__ import annotations

import importlib
import types

import pytest
import torch

FEATURE = "sm120_split128"


class _Planner:
    def __init__(self):
        self.calls = 0

    def __call__(self, seq_lens, page_size, num_sms):
        self.calls += 1
        return torch.zeros(num_sms + 1, 2, dtype=torch.int32)


def _clear_platform_caches():
    from sglang.srt.utils import common

    common.is_cuda.cache_clear()
    common.is_sm120_supported.cache_clear()


@pytest.fixture
def on_device(monkeypatch):
    """Reload dsv4.metadata on a stubbed device; returns (metadata module, planners)."""
    from sglang.kernels.ops.attention import dsv4 as jit_ops
    from sglang.srt.layers.attention.dsv4 import metadata

    planners = types.SimpleNamespace(deep_gemm=_Planner(), jit=_Planner())
    deep_gemm = types.ModuleType("deep_gemm")
    deep_gemm.get_paged_mqa_logits_metadata = planners.deep_gemm
    deep_gemm.get_num_sms = lambda: 48
    monkeypatch.setitem(__import__("sys").modules, "deep_gemm", deep_gemm)
    monkeypatch.setattr(jit_ops, "get_paged_mqa_logits_metadata", planners.jit)
    # The JIT planner is what stock picks on SM12x without the FP4 indexer flag.
    monkeypatch.setenv("SGLANG_OPT_USE_JIT_INDEXER_METADATA", "1")

    stubs = pytest.MonkeyPatch()

    def load(capability):
        stubs.setattr(torch.cuda, "is_available", lambda: True)
        stubs.setattr(torch.cuda, "is_initialized", lambda: True)
        stubs.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        _clear_platform_caches()
        return importlib.reload(metadata), planners

    yield load
    stubs.undo()
    _clear_platform_caches()
    importlib.reload(metadata)


def _plan(module, compress_ratio):
    return module.PagedIndexerMetadata(
        page_size=256,
        compressed_page_size=64,
        page_table=torch.zeros(3, 4, dtype=torch.int32),
        compressed_seq_lens=torch.tensor([10, 70, 200]),
        use_topk_v2=False,
        compress_ratio=compress_ratio,
    )


@pytest.mark.guard_off
@pytest.mark.parametrize("compress_ratio", [1, 2, 4])
def test_guard_off_sm121_plans_with_the_jit_planner(on_device, compress_ratio):
    module, planners = on_device((12, 1))
    assert module._IS_SM120
    plan = _plan(module, compress_ratio)
    assert not plan.force_deep_gemm_metadata
    assert (planners.jit.calls, planners.deep_gemm.calls) == (1, 0)


@pytest.mark.guard_off
def test_guard_off_torch_logits_leave_no_deep_gemm_plan(on_device, monkeypatch):
    monkeypatch.setenv("SGLANG_FP8_PAGED_MQA_LOGITS_TORCH", "1")
    module, planners = on_device((12, 1))
    assert _plan(module, 1).deep_gemm_metadata is None


@pytest.mark.absent
def test_absent_declares_no_guard():
    from sglang.srt.environ import Envs

    assert "DSV41_SM120_SPLIT128" not in vars(Envs)


@pytest.mark.guard_on
@pytest.mark.parametrize("compress_ratio", [1, 2])
def test_guard_on_sm121_forces_deep_gemm_for_ratio_1_and_2(on_device, monkeypatch, compress_ratio):
    monkeypatch.setenv("DSV41_SM120_SPLIT128", "1")
    module, planners = on_device((12, 1))
    plan = _plan(module, compress_ratio)
    assert plan.force_deep_gemm_metadata
    assert (planners.jit.calls, planners.deep_gemm.calls) == (0, 1)
    assert plan.deep_gemm_metadata.shape == (49, 2)


@pytest.mark.guard_on
def test_guard_on_plans_even_when_torch_logits_are_selected(on_device, monkeypatch):
    monkeypatch.setenv("DSV41_SM120_SPLIT128", "1")
    monkeypatch.setenv("SGLANG_FP8_PAGED_MQA_LOGITS_TORCH", "1")
    module, planners = on_device((12, 1))
    assert _plan(module, 2).deep_gemm_metadata is not None
    assert planners.deep_gemm.calls == 1


@pytest.mark.guard_on
def test_guard_on_leaves_c4_and_other_devices_alone(on_device, monkeypatch):
    monkeypatch.setenv("DSV41_SM120_SPLIT128", "1")
    module, planners = on_device((12, 1))
    assert module._DSV41_SM120_SPLIT128
    assert not _plan(module, 4).force_deep_gemm_metadata
    module, planners = on_device((10, 0))
    assert not _plan(module, 1).force_deep_gemm_metadata
    assert (planners.jit.calls, planners.deep_gemm.calls) == (2, 0)
