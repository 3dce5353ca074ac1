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
