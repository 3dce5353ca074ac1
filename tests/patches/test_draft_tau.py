"""draft_tau: DSV41_DRAFT_TAU scales the DSpark draft's sampling temperature.

The staged path (DsparkDraftSampler.stage_sampling_params, read by the draft
graph and the megakernel sampler) and the eager path (sample_draft_block) both
go through resolve_draft_params; the accept step's q (_draft_probs) must use the
temperatures the draft actually sampled at. All on CPU: the markov sampler and
the softmax have torch paths.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

FEATURE = "draft_tau"

# Request temperatures; row 1 is greedy (top_k 1), so the draft argmaxes it.
TEMPERATURES = (0.7, 1.0, 0.5)
TOP_KS = (50, 1, 40)
VOCAB = 32
GAMMA = 2


@pytest.fixture
def draft_modules(monkeypatch):
    """Sets DSV41_DRAFT_TAU and re-reads it into the draft module's import-time
    constant (reloading the module would re-register its invariants)."""
    from sglang.srt.speculative.dspark_components import dspark_draft, dspark_draft_sampler

    def load(tau: str):
        monkeypatch.setenv("DSV41_DRAFT_TAU", tau)
        monkeypatch.setattr(dspark_draft, "_DRAFT_TAU", dspark_draft._read_draft_tau())
        return dspark_draft, dspark_draft_sampler

    return load


def _sampling_info():
    import torch

    return SimpleNamespace(
        temperatures=torch.tensor(TEMPERATURES).view(-1, 1),
        top_ks=torch.tensor(TOP_KS, dtype=torch.int32),
    )


def _tp_sync():
    from sglang.srt.speculative.spec_tp_sync import SpecTpSync

    # A single-rank group: SpecTpSync broadcasts nothing.
    return SpecTpSync(SimpleNamespace(world_size=1, rank_in_group=0))


def _markov_head():
    import torch
    from sglang.srt.models.dspark import VanillaMarkov

    torch.manual_seed(0)
    return VanillaMarkov(vocab_size=VOCAB, markov_rank=8)


def _staged_params(sampler_module, draft_module):
    import torch

    model = SimpleNamespace(markov_head=_markov_head(), sample_from_anchor=False, confidence_head=None)
    noise = draft_module.DraftNoise(key=1, offset=torch.zeros(1, dtype=torch.int64))
    sampler = sampler_module.DsparkDraftSampler(
        model=model,
        gamma=GAMMA,
        max_bs=4,
        device="cpu",
        noise=noise,
        tp_sync=_tp_sync(),
        greedy_draft=False,
    )
    sampler.stage_sampling_params(bs=len(TEMPERATURES), sampling_info=_sampling_info())
    return sampler.params


def _eager_block(draft_module):
    import torch

    torch.manual_seed(1)
    bs = len(TEMPERATURES)
    noise = draft_module.DraftNoise(key=7, offset=torch.zeros(1, dtype=torch.int64))
    return draft_module.sample_draft_block(
        base_logits=torch.randn(bs, GAMMA, VOCAB),
        anchor_tokens=torch.tensor([3, 5, 9]),
        draft_hidden=None,
        sampling_info=_sampling_info(),
        markov_head=_markov_head(),
        noise=noise,
        device=torch.device("cpu"),
        tp_sync=_tp_sync(),
        greedy_draft=False,
    )


def _expected_step_temperatures(tau: float):
    import torch

    return torch.tensor([0.0 if k <= 1 else t * tau for t, k in zip(TEMPERATURES, TOP_KS)])


def _stock_modules():
    from sglang.srt.speculative.dspark_components import dspark_draft, dspark_draft_sampler

    return dspark_draft, dspark_draft_sampler


@pytest.mark.guard_off
def test_staged_temperatures_are_stock_when_unset():
    import torch

    draft, sampler_module = _stock_modules()
    params = _staged_params(sampler_module, draft)
    bs = len(TEMPERATURES)
    torch.testing.assert_close(params.temperatures[:bs], torch.tensor(TEMPERATURES))
    torch.testing.assert_close(params.step_temperatures[:bs], _expected_step_temperatures(1.0))


@pytest.mark.guard_on
@pytest.mark.parametrize("tau", ["1", "1.0"])
def test_tau_one_is_the_stock_path(draft_modules, tau):
    import torch

    draft, sampler_module = draft_modules(tau)
    params = _staged_params(sampler_module, draft)
    bs = len(TEMPERATURES)
    torch.testing.assert_close(params.temperatures[:bs], torch.tensor(TEMPERATURES))
    torch.testing.assert_close(params.step_temperatures[:bs], _expected_step_temperatures(1.0))
    # The identity hands the request's own tensor to the accept step, as stock does.
    assert draft.draft_temperatures(params.temperatures) is params.temperatures


@pytest.mark.guard_off
def test_eager_draft_q_uses_request_temperatures():
    import torch
    from sglang.srt.speculative.dspark_components.dspark_verify import _draft_probs

    draft, _ = _stock_modules()
    block = _eager_block(draft)
    torch.testing.assert_close(block.temperatures, torch.tensor(TEMPERATURES))
    q = _draft_probs(block, VOCAB, torch.device("cpu"))
    temps = torch.tensor(TEMPERATURES).view(-1, 1, 1)
    torch.testing.assert_close(q, torch.softmax(block.corrected_logits.float() / temps, dim=-1))


@pytest.mark.guard_on
@pytest.mark.parametrize("tau", [2.0, 0.5])
def test_staged_temperatures_scale_by_tau(draft_modules, tau):
    import torch

    draft, sampler_module = draft_modules(str(tau))
    params = _staged_params(sampler_module, draft)
    bs = len(TEMPERATURES)
    # The draft samples at tau x T; greedy rows still argmax.
    torch.testing.assert_close(params.step_temperatures[:bs], _expected_step_temperatures(tau))
    # The verify target keeps the request's temperature (the sampling-accept
    # graph reads it from here as the target's).
    torch.testing.assert_close(params.temperatures[:bs], torch.tensor(TEMPERATURES))


@pytest.mark.guard_on
def test_accept_q_is_the_distribution_sampled_from(draft_modules):
    import torch
    from sglang.kernels.ops.speculative.dspark.markov_sample import MarkovSampleStep
    from sglang.srt.speculative.dspark_components.dspark_verify import _draft_probs

    tau = 2.0
    draft, _ = draft_modules(str(tau))
    block = _eager_block(draft)
    scaled = torch.tensor(TEMPERATURES) * tau
    torch.testing.assert_close(block.temperatures, scaled)
    # The accept step's q: softmax of the kept step logits at the scaled temperatures.
    q = _draft_probs(block, VOCAB, torch.device("cpu"))
    torch.testing.assert_close(q, torch.softmax(block.corrected_logits.float() / scaled.view(-1, 1, 1), dim=-1))
    # And the first drafted token is the one the sampler draws at those temperatures
    # from the same noise (its kept logits already carry the markov bias).
    step_temps = _expected_step_temperatures(tau)
    first = MarkovSampleStep.torch(
        base_logits=block.corrected_logits[:, 0].float(),
        bias=torch.zeros(len(TEMPERATURES), VOCAB),
        temperatures=step_temps,
        key=7,
        offset=torch.zeros(1, dtype=torch.int64),
        step=0,
        step_dtype=torch.float32,
    )
    torch.testing.assert_close(block.draft_tokens[:, 0], first)


@pytest.mark.guard_on
@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "fast"])
def test_bad_tau_is_rejected_naming_the_variable(monkeypatch, value):
    from sglang.srt.speculative.dspark_components import dspark_draft

    monkeypatch.setenv("DSV41_DRAFT_TAU", value)
    with pytest.raises(ValueError, match="DSV41_DRAFT_TAU"):
        dspark_draft._read_draft_tau()


@pytest.mark.guard_on
def test_bad_tau_stops_the_import(monkeypatch):
    # The module reads the guard once, at import (startup): importing it afresh must fail.
    monkeypatch.setenv("DSV41_DRAFT_TAU", "0")
    with pytest.raises(ValueError, match="DSV41_DRAFT_TAU must be a finite number > 0"):
        _import_afresh(monkeypatch, "sglang.srt.speculative.dspark_components.dspark_draft")


def _import_afresh(monkeypatch, name: str):
    """Runs module `name`'s import again in this process, as a fresh interpreter would (in
    milliseconds, not the seconds of a new interpreter importing sglang). The cached module,
    its package's attribute and the invariant registry are restored after the test."""
    import importlib

    from sglang.srt.utils import invariants

    package, _, attribute = name.rpartition(".")
    monkeypatch.setattr(importlib.import_module(package), attribute, importlib.import_module(name))
    monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(invariants, "_REGISTRY", {})  # the module registers its invariants again
    return importlib.import_module(name)


@pytest.mark.absent
def test_without_the_feature_tau_is_ignored(monkeypatch):
    import torch
    from sglang.srt.environ import Envs

    monkeypatch.setenv("DSV41_DRAFT_TAU", "2")
    assert "DSV41_DRAFT_TAU" not in vars(Envs)
    draft, sampler_module = _stock_modules()
    params = _staged_params(sampler_module, draft)
    bs = len(TEMPERATURES)
    torch.testing.assert_close(params.step_temperatures[:bs], _expected_step_temperatures(1.0))


class _Recorded(Exception):
    """Raised by a recording stub once it has what the test needs."""


def _staged_sampler(sampler_module, draft_module):
    import torch

    model = SimpleNamespace(markov_head=_markov_head(), sample_from_anchor=False, confidence_head=None)
    noise = draft_module.DraftNoise(key=1, offset=torch.zeros(1, dtype=torch.int64))
    sampler = sampler_module.DsparkDraftSampler(model=model, gamma=GAMMA, max_bs=4, device="cpu", noise=noise,
                                                tp_sync=_tp_sync(), greedy_draft=False)
    sampler.stage_sampling_params(bs=len(TEMPERATURES), sampling_info=_sampling_info())
    # The buffer the draft tail's first (warmup) call sizes, as
    # DsparkDraftSampler._step_logits does; its capture probe needs a GPU.
    sampler.step_logits = torch.zeros(sampler.max_bs, GAMMA, VOCAB)
    return sampler


@pytest.mark.guard_on
@pytest.mark.parametrize("tau", [2.0, 1.0])
def test_sampling_accept_graph_q_uses_the_scaled_temperature(draft_modules, monkeypatch, tau):
    """The static verify graph's sampling-accept region builds its own
    DraftBlockResult from the staged sampler: its q must be the draft's."""
    import torch
    from sglang.srt.speculative.dspark_components import dspark_sampling_accept_graph as graph

    draft_module, sampler_module = draft_modules(str(tau))
    sampler = _staged_sampler(sampler_module, draft_module)
    seen = {}

    def accept(**kwargs):  # the accept kernel, recording what it is handed
        seen.update(kwargs)
        raise _Recorded

    monkeypatch.setattr(graph, "accept_draft_tokens", accept)
    bs = len(TEMPERATURES)
    io = SimpleNamespace(candidates=torch.zeros(bs, GAMMA + 1, dtype=torch.int64), logits=torch.zeros(bs * (GAMMA + 1), VOCAB),
                         seq_lens=torch.full((bs,), 10))
    with pytest.raises(_Recorded):
        graph.sampling_accept_commit_lens(io, verify_lens=None, gate=None, gated=False, draft_sampler=sampler,
                                          epilogue=None, tp_sync=_tp_sync(), fused_argmax=False,
                                          block_verification=False, rejection_noise=None)
    request = sampler.params.temperatures[:bs]
    torch.testing.assert_close(seen["draft_block"].temperatures, request * tau)
    # The target keeps the request's temperatures.
    torch.testing.assert_close(seen["sampling_info"].temperatures, request)


@pytest.mark.guard_on
@pytest.mark.parametrize("tau", [2.0, 1.0])
def test_folded_proposal_q_uses_the_scaled_temperature(draft_modules, monkeypatch, tau):
    """DraftBlockProposer.propose (built through __init__) on the folded path:
    the block it hands the verify step carries the scaled q."""
    import torch
    from torch import nn

    draft_module, sampler_module = draft_modules(str(tau))
    monkeypatch.setenv("SGLANG_DSPARK_FOLDED_PROPOSAL", "1")
    from sglang.srt.runtime_context import get_parallel

    draft_model = SimpleNamespace(sample_from_anchor=False, confidence_head=None, embed_tokens=nn.Embedding(VOCAB, 8))
    with get_parallel().override(attn_tp_rank=0, attn_tp_size=1, tp_size=1, tp_rank=0, moe_ep_size=1,
                                 moe_tp_size=1, attn_dp_size=1, pp_size=1):  # one rank
        proposer = draft_module.DraftBlockProposer(
            draft_model=draft_model, draft_model_runner=SimpleNamespace(device="cpu"), gamma=GAMMA, mask_token_id=0,
            draft_block_spec_info=None, tp_sync=_tp_sync(), random_seed=0, greedy_draft=False)
    sampler = _staged_sampler(sampler_module, draft_module)
    proposer.attach_draft_sampler(sampler)
    bs = len(TEMPERATURES)
    # The draft forward is a CUDA graph replay; its result on a replayable batch:
    forward = SimpleNamespace(draft_block_ids=torch.zeros(bs, GAMMA + 1, dtype=torch.int64), can_run_graph=True)
    monkeypatch.setattr(proposer, "_run_forward", lambda **kwargs: forward)
    proposal = proposer.propose(batch=None, draft_input=None, verify_window=None, bs=bs, device="cpu",
                                target_model=None, sampling_info=_sampling_info())
    assert proposal.folded
    torch.testing.assert_close(proposal.draft_block.temperatures, sampler.params.temperatures[:bs] * tau)
