"""moe_finalize_determinism: FlashInfer's MoE keeps the non-atomic finalize.

The choice is handed to FlashInfer as ``use_fused_finalize`` (CUTLASS and
CuTe-DSL runners) and gates the SM120 MTP MMA path, which needs the fused
epilogue. FlashInfer itself is a GPU library: these tests check the choice
sglang makes, with the SM120 probe stubbed.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

FEATURE = "moe_finalize_determinism"


@pytest.fixture
def runner(monkeypatch):
    """flashinfer_cutlass on a stubbed SM120. ``load(read_guard=True)`` redoes
    the module's import-time guard read under the test's environment (a
    reload would re-register the module's fused functions)."""
    from sglang.srt.layers.moe.moe_runner import flashinfer_cutlass

    monkeypatch.setattr(flashinfer_cutlass, "is_sm120", lambda: True)

    def load(read_guard=False):
        if read_guard:
            from sglang.srt.environ import envs

            monkeypatch.setattr(
                flashinfer_cutlass,
                "_DSV41_MOE_DETERMINISTIC_FINALIZE",
                envs.DSV41_MOE_DETERMINISTIC_FINALIZE.get(),
            )
        return flashinfer_cutlass

    return load


@pytest.mark.guard_off
def test_guard_off_fused_finalize_follows_the_upstream_flag(runner, monkeypatch):
    monkeypatch.setenv("SGLANG_FLASHINFER_MOE_FUSED_FINALIZE", "1")
    module = runner()
    assert module._sm120_mtp_mma_supported()
    monkeypatch.setenv("SGLANG_FLASHINFER_MOE_FUSED_FINALIZE", "0")
    assert not module._sm120_mtp_mma_supported()


@pytest.mark.absent
def test_absent_declares_no_guard():
    from sglang.srt.environ import Envs
    from sglang.srt.layers.moe.moe_runner import flashinfer_cutlass

    assert "DSV41_MOE_DETERMINISTIC_FINALIZE" not in vars(Envs)
    assert not hasattr(flashinfer_cutlass, "flashinfer_moe_fused_finalize")


@pytest.mark.guard_on
@pytest.mark.parametrize("upstream_flag", ["1", "0", None])
def test_guard_on_never_selects_the_atomic_finalize(runner, monkeypatch, upstream_flag):
    monkeypatch.setenv("DSV41_MOE_DETERMINISTIC_FINALIZE", "1")
    if upstream_flag is not None:
        monkeypatch.setenv("SGLANG_FLASHINFER_MOE_FUSED_FINALIZE", upstream_flag)
    module = runner(read_guard=True)
    assert module.flashinfer_moe_fused_finalize() is False
    # The SM120 MTP MMA path exists only with the fused epilogue: off too.
    assert not module._sm120_mtp_mma_supported()


@pytest.mark.guard_on
def test_guard_on_is_what_both_runners_read(runner, monkeypatch):
    monkeypatch.setenv("DSV41_MOE_DETERMINISTIC_FINALIZE", "1")
    monkeypatch.setenv("SGLANG_FLASHINFER_MOE_FUSED_FINALIZE", "1")
    module = runner(read_guard=True)
    from sglang.srt.layers.moe.moe_runner import flashinfer_cutedsl

    # CuTe-DSL imports the decision by name: the same function, same guard.
    assert flashinfer_cutedsl.flashinfer_moe_fused_finalize.__globals__ is vars(module)
    assert flashinfer_cutedsl.flashinfer_moe_fused_finalize() is False
    monkeypatch.setenv("DSV41_MOE_DETERMINISTIC_FINALIZE", "0")
    assert runner(read_guard=True).flashinfer_moe_fused_finalize() is True


def _run_cutlass_moe(module, monkeypatch) -> dict:
    """FlashInfer's CUTLASS MoE as sglang's runner calls it, with the GPU kernel
    replaced by a stub that records its arguments: what use_fused_finalize the
    runner hands FlashInfer for a bf16 batch."""
    import torch
    from sglang.srt.layers.moe.moe_runner.base import MoeRunnerConfig
    from sglang.srt.layers.moe.topk import StandardTopKOutput
    from sglang.srt.layers.moe.token_dispatcher.standard import StandardDispatchOutput

    calls = []

    def kernel(**kwargs):
        calls.append(kwargs)
        return [kwargs["output"]]

    monkeypatch.setattr(module, "_flashinfer_cutlass_fused_moe", lambda: (kernel, None))
    # Resolved from FlashInfer's enum and the scheduler's config on a server.
    monkeypatch.setattr(module, "_activation_type", lambda runner_config: "swiglu")
    monkeypatch.setattr(module, "_cutlass_moe_tune_max_num_tokens", lambda tokens: 16)
    tokens, hidden, experts = 3, 8, 4
    placement = SimpleNamespace(moe_tp_size=1, moe_tp_rank=0, moe_ep_size=1, moe_ep_rank=0)  # the layer's
    topk = StandardTopKOutput(topk_weights=torch.ones(tokens, 2), topk_ids=torch.zeros(tokens, 2, dtype=torch.int32),
                              router_logits=torch.zeros(tokens, experts))
    dispatch = StandardDispatchOutput(hidden_states=torch.ones(tokens, hidden, dtype=torch.bfloat16),
                                      hidden_states_scale=None, topk_output=topk)
    quant = module.FlashInferCutlassMoeQuantInfo(quant_type="bf16", w13_weight=torch.zeros(experts, 2 * hidden, hidden),
                                                 w2_weight=torch.zeros(experts, hidden, hidden))
    out = module._run_flashinfer_cutlass(dispatch_output=dispatch, quant_info=quant,
                                         runner_config=MoeRunnerConfig(num_experts=experts, top_k=2, layer=placement),
                                         output=torch.zeros(tokens, hidden, dtype=torch.bfloat16))
    assert out.shape == (tokens, hidden) and len(calls) == 1
    return calls[0]


@pytest.mark.guard_off
def test_guard_off_the_cutlass_runner_passes_the_upstream_flag(runner, monkeypatch):
    monkeypatch.setenv("SGLANG_FLASHINFER_MOE_FUSED_FINALIZE", "1")
    assert _run_cutlass_moe(runner(), monkeypatch)["use_fused_finalize"] is True


@pytest.mark.guard_on
def test_guard_on_the_cutlass_runner_asks_for_the_non_atomic_finalize(runner, monkeypatch):
    monkeypatch.setenv("DSV41_MOE_DETERMINISTIC_FINALIZE", "1")
    monkeypatch.setenv("SGLANG_FLASHINFER_MOE_FUSED_FINALIZE", "1")
    assert _run_cutlass_moe(runner(read_guard=True), monkeypatch)["use_fused_finalize"] is False


def _run_cutlass_mxfp4_moe(module, monkeypatch) -> dict:
    """The CUTLASS MXFP4 MoE entry (`flashinfer_mxfp4` fused func, the W4A16 path)
    as sglang's MoE runner dispatches it, with FlashInfer's kernel replaced by a
    stub that records its arguments: the second call site of use_fused_finalize."""
    import torch
    from sglang.srt.layers.moe.moe_runner.base import MoeRunnerConfig
    from sglang.srt.layers.moe.topk import StandardTopKOutput
    from sglang.srt.layers.moe.token_dispatcher.standard import StandardDispatchOutput

    calls = []

    def kernel(**kwargs):
        calls.append(kwargs)
        return [kwargs["output"]]

    # FlashInfer's enum: a GPU package, not installed on CPU.
    activation_type = SimpleNamespace(Swiglu="swiglu", SwigluStep="swiglu_step")
    monkeypatch.setattr(module, "_flashinfer_cutlass_fused_moe", lambda: (kernel, activation_type))
    monkeypatch.setattr(module, "_cutlass_moe_tune_max_num_tokens", lambda tokens: 16)
    tokens, hidden, experts = 3, 128, 4
    placement = SimpleNamespace(moe_tp_size=1, moe_tp_rank=0, moe_ep_size=1, moe_ep_rank=0)  # the layer's
    topk = StandardTopKOutput(topk_weights=torch.ones(tokens, 2), topk_ids=torch.zeros(tokens, 2, dtype=torch.int32),
                              router_logits=torch.zeros(tokens, experts))
    dispatch = StandardDispatchOutput(hidden_states=torch.ones(tokens, hidden, dtype=torch.bfloat16),
                                      hidden_states_scale=None, topk_output=topk)
    quant = module.FlashInferCutlassMxfp4MoeQuantInfo(
        w13_weight=torch.zeros(experts, 2 * hidden, hidden // 2, dtype=torch.uint8),
        w2_weight=torch.zeros(experts, hidden, hidden // 2, dtype=torch.uint8),
        # E8M0 scale bytes, one per 32 elements (FlashInfer reads them as int32 words).
        w13_weight_scale=torch.zeros(experts, 2 * hidden, hidden // 32, dtype=torch.uint8),
        w2_weight_scale=torch.zeros(experts, hidden, hidden // 32, dtype=torch.uint8),
    )
    from sglang.srt.runtime_context import get_parallel

    # The output buffer is allocated under the TP group's symmetric-memory scope:
    # a one-rank group (a server builds it with torch.distributed).
    with get_parallel().override(tp_group=SimpleNamespace(world_size=1)):
        combine = module.fused_experts_none_to_flashinfer_mxfp4(
            dispatch, quant, MoeRunnerConfig(num_experts=experts, top_k=2, layer=placement))
    assert combine.hidden_states.shape == (tokens, hidden) and len(calls) == 1
    return calls[0]


@pytest.mark.guard_off
def test_guard_off_the_mxfp4_cutlass_runner_passes_the_upstream_flag(runner, monkeypatch):
    monkeypatch.setenv("SGLANG_FLASHINFER_MOE_FUSED_FINALIZE", "1")
    assert _run_cutlass_mxfp4_moe(runner(), monkeypatch)["use_fused_finalize"] is True


@pytest.mark.guard_on
def test_guard_on_the_mxfp4_cutlass_runner_asks_for_the_non_atomic_finalize(runner, monkeypatch):
    monkeypatch.setenv("DSV41_MOE_DETERMINISTIC_FINALIZE", "1")
    monkeypatch.setenv("SGLANG_FLASHINFER_MOE_FUSED_FINALIZE", "1")
    assert _run_cutlass_mxfp4_moe(runner(read_guard=True), monkeypatch)["use_fused_finalize"] is False


def _build_cutedsl_wrapper(monkeypatch) -> dict:
    """The CuTe-DSL MoE layer's lazy wrapper construction (ensure_cutedsl_wrapper,
    run on the layer's first forward) with FlashInfer's CuteDslMoEWrapper replaced
    by a stub that records its arguments (FlashInfer is a GPU package). The
    layer is a namespace with the attributes an NVFP4 FusedMoE layer carries."""
    import sys
    import types

    import torch
    from sglang.srt.layers.moe.moe_runner import flashinfer_cutedsl

    built = []

    class CuteDslMoEWrapper:
        def __init__(self, **kwargs):
            built.append(kwargs)

    flashinfer = types.ModuleType("flashinfer")
    flashinfer.ActivationType = SimpleNamespace(Swiglu="swiglu", Relu2="relu2")
    flashinfer.CuteDslMoEWrapper = CuteDslMoEWrapper
    monkeypatch.setitem(sys.modules, "flashinfer", flashinfer)
    experts = 4
    layer = SimpleNamespace(
        _cutedsl_wrapper=None, intermediate_size_per_partition=32, num_experts=experts, top_k=2,
        hidden_size=64, num_local_experts=experts, moe_ep_rank=0,
        # An all-to-all dispatcher bounds the tokens itself (no scheduler config needed).
        dispatcher=SimpleNamespace(max_num_tokens=16, ep_size=1),
        moe_runner_config=SimpleNamespace(params_dtype=torch.bfloat16, activation="silu", top_k=2),
        w13_weight=torch.zeros(experts, 64, 32, dtype=torch.uint8),
        quant_config=SimpleNamespace(use_per_token_activation=False),
        g1_alphas=torch.ones(experts), g2_alphas=torch.ones(experts),
        w13_input_scale_quant=torch.ones(1), w2_input_scale_quant=torch.ones(1),
    )
    flashinfer_cutedsl.ensure_cutedsl_wrapper(layer)
    assert len(built) == 1 and isinstance(layer._cutedsl_wrapper, CuteDslMoEWrapper)
    return built[0]


@pytest.mark.guard_off
def test_guard_off_the_cutedsl_wrapper_gets_the_upstream_flag(runner, monkeypatch):
    monkeypatch.setenv("SGLANG_FLASHINFER_MOE_FUSED_FINALIZE", "1")
    runner()
    assert _build_cutedsl_wrapper(monkeypatch)["use_fused_finalize"] is True


@pytest.mark.guard_on
def test_guard_on_the_cutedsl_wrapper_gets_the_non_atomic_finalize(runner, monkeypatch):
    monkeypatch.setenv("DSV41_MOE_DETERMINISTIC_FINALIZE", "1")
    monkeypatch.setenv("SGLANG_FLASHINFER_MOE_FUSED_FINALIZE", "1")
    runner(read_guard=True)
    assert _build_cutedsl_wrapper(monkeypatch)["use_fused_finalize"] is False
