"""verify_cap: DSV41_VERIFY_CAP caps the DSpark draft tokens verified per request.

Unset/"0": off. An integer N: at most N drafts. "conf:T": the leading drafts
whose survival (cumulative confidence) stays >= T; that needs the draft
confidence head, which stock builds only in ragged verify modes.

The planner, the accept cutoff and the layout run on CPU tensors; the MoE gate
check runs the Triton kernel under TRITON_INTERPRET=1 in a fresh interpreter
(Triton picks the interpreter when a kernel module is imported).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

FEATURE = "verify_cap"

GAMMA = 3
VERIFY_NUM_DRAFT_TOKENS = GAMMA + 1
# Per-position draft confidence; survival = cumprod per row.
CONFIDENCE = (
    (0.9, 0.9, 0.5),  # survival 0.9, 0.81, 0.405
    (0.4, 1.0, 1.0),  # survival 0.4 from the first draft on
    (1.0, 1.0, 1.0),
)


def _head_config():
    return SimpleNamespace(hidden_size=16, enable_confidence_head=True, confidence_head_with_markov=None)


def _build_head():
    from sglang.srt.models.deepseek_v4_dspark import build_dspark_v4_confidence_head

    return build_dspark_v4_confidence_head(config=_head_config(), markov_rank=4)


@pytest.fixture
def planner_factory(monkeypatch):
    """DSparkVerifyPlanner through its __init__ (static verify mode), as the
    DSpark worker builds it; the published runtime config it reads (get_spec)
    is a namespace. confidence_head: the draft model's head (None: head-less)."""
    import torch
    from sglang.srt.speculative.dspark_components import dspark_planner
    from sglang.srt.speculative.spec_tp_sync import SpecTpSync

    spec = SimpleNamespace(speculative_dspark_align_verify_tokens_to_graph_tier=False,
                           speculative_dspark_confidence_sts_path=None, speculative_dspark_sps_table_path=None)
    monkeypatch.setattr(dspark_planner, "get_spec", lambda: spec)

    def build(confidence_head=object(), *, tp_rank=0, tp_group=None):
        group = tp_group or SimpleNamespace(world_size=1, rank_in_group=0)
        return dspark_planner.DSparkVerifyPlanner(
            draft_model=SimpleNamespace(confidence_head=confidence_head), gamma=GAMMA, model_runner=None,
            device=torch.device("cpu"), tp_rank=tp_rank, verify_num_draft_tokens=VERIFY_NUM_DRAFT_TOKENS,
            tp_sync=SpecTpSync(group))

    return build


def _static_layout(planner, confidence=CONFIDENCE):
    import torch

    bs = len(CONFIDENCE)
    return planner.schedule_layout(
        req_pool_indices=torch.arange(bs),
        prefix_lens=torch.full((bs,), 10),
        device=torch.device("cpu"),
        confidence=None if confidence is None else torch.tensor(confidence),
        budget=None,
    )


@pytest.mark.guard_off
def test_static_mode_builds_no_confidence_head():
    assert _build_head() is None


@pytest.mark.guard_on
def test_conf_cap_builds_the_confidence_head_in_static_mode(monkeypatch):
    from sglang.srt.models.dspark import DSparkConfidenceHead

    monkeypatch.setenv("DSV41_VERIFY_CAP", "conf:0.5")
    assert isinstance(_build_head(), DSparkConfidenceHead)
    # An integer cap reads no confidence: static mode stays head-less.
    monkeypatch.setenv("DSV41_VERIFY_CAP", "2")
    assert _build_head() is None


@pytest.mark.guard_on
@pytest.mark.parametrize("cap, expected", [("1", [2, 2, 2]), ("2", [3, 3, 3])])
def test_static_plan_respects_n(monkeypatch, planner_factory, cap, expected):
    monkeypatch.setenv("DSV41_VERIFY_CAP", cap)
    planner = planner_factory(confidence_head=None)  # an integer cap needs no head
    assert planner._is_verify_all is False
    layout = _static_layout(planner)
    # verify_len counts the anchor row: N drafts -> N + 1, never past gamma + 1.
    assert layout.verify_lens.tolist() == expected
    # Packed: the verify forward runs these rows only.
    assert layout.graph_num_tokens == sum(expected)


@pytest.mark.guard_on
@pytest.mark.parametrize("cap", [str(GAMMA), "9"])
def test_a_cap_of_gamma_or_more_drafts_is_no_cap(monkeypatch, planner_factory, cap):
    # One draft fewer than gamma cuts (so this fails on an sglang without the cap) ...
    monkeypatch.setenv("DSV41_VERIFY_CAP", str(GAMMA - 1))
    assert _static_layout(planner_factory(confidence_head=None)) is not None
    # ... gamma or more cuts nothing: the stock plan, verify-all, so the worker keeps
    # the verify graph's folded accept (test_stock_greedy_static_step_...) and
    # SGLANG_SIMULATE_ACC_LEN stays allowed.
    monkeypatch.setenv("DSV41_VERIFY_CAP", cap)
    planner = planner_factory(confidence_head=None)
    assert planner._is_verify_all is True
    assert _static_layout(planner) is None


@pytest.mark.guard_on
@pytest.mark.parametrize("threshold, expected", [("0.5", [3, 1, 4]), ("0.85", [2, 1, 4]), ("1", [1, 1, 4])])
def test_static_plan_respects_confidence_threshold(monkeypatch, planner_factory, threshold, expected):
    monkeypatch.setenv("DSV41_VERIFY_CAP", f"conf:{threshold}")
    assert _static_layout(planner_factory()).verify_lens.tolist() == expected


@pytest.mark.guard_on
def test_conf_plan_without_confidences_verifies_every_draft(monkeypatch, planner_factory):
    # A step whose proposal carries no confidence (nothing to cut on): uncapped lengths.
    monkeypatch.setenv("DSV41_VERIFY_CAP", "conf:0.5")
    layout = _static_layout(planner_factory(), confidence=None)
    assert layout is not None
    assert layout.verify_lens.tolist() == [VERIFY_NUM_DRAFT_TOKENS] * len(CONFIDENCE)


class _RankGroup:
    """A two-rank TP group as seen from rank 1: broadcast(src=0) overwrites the
    tensor with what rank 0 decided (torch.distributed's semantics; a real group
    needs a second process)."""

    world_size, rank_in_group = 2, 1

    def __init__(self, rank0_values):
        self.rank0_values = rank0_values
        self.broadcasts = []

    def broadcast(self, tensor, src):
        self.broadcasts.append(tensor.clone())
        tensor.copy_(tensor.new_tensor(self.rank0_values))


@pytest.mark.guard_on
def test_static_cap_plan_is_rank_zeros_on_every_rank(monkeypatch, planner_factory):
    # Confidence can differ across ranks by a rounding; the cut must not.
    monkeypatch.setenv("DSV41_VERIFY_CAP", "conf:0.5")
    group = _RankGroup(rank0_values=[2, 1, 4])
    layout = _static_layout(planner_factory(tp_rank=1, tp_group=group))
    assert layout is not None
    assert [t.tolist() for t in group.broadcasts] == [[3, 1, 4]]  # rank 1's own cut, replaced
    assert layout.verify_lens.tolist() == [2, 1, 4]


@pytest.mark.guard_on
def test_the_cap_is_logged_once_by_rank_zero(monkeypatch, planner_factory, caplog):
    import logging

    def cap_lines(tp_rank):
        caplog.clear()
        with caplog.at_level(logging.INFO):
            planner_factory(confidence_head=None, tp_rank=tp_rank)
        return [r.getMessage() for r in caplog.records if "DSV41_VERIFY_CAP" in r.getMessage()]

    monkeypatch.setenv("DSV41_VERIFY_CAP", "2")
    assert cap_lines(0) == ["DSpark verify cap (DSV41_VERIFY_CAP): VerifyCap(max_drafts=2, min_confidence=None)"]
    assert cap_lines(1) == []


@pytest.mark.guard_on
def test_conf_cap_without_a_confidence_head_fails_at_startup(monkeypatch, planner_factory):
    monkeypatch.setenv("DSV41_VERIFY_CAP", "conf:0.5")
    with pytest.raises(ValueError, match="DSV41_VERIFY_CAP=conf:T needs the draft confidence head"):
        planner_factory(confidence_head=None)


@pytest.mark.guard_off
def test_static_plan_is_uncapped_when_unset(planner_factory):
    planner = planner_factory(confidence_head=None)
    # Stock static mode verifies every draft: no layout, verify-all.
    assert planner._is_verify_all is True
    assert _static_layout(planner) is None


@pytest.mark.guard_on
def test_ragged_schedule_is_capped(monkeypatch, planner_factory):
    import torch

    monkeypatch.setenv("DSV41_VERIFY_CAP", "1")
    planner = planner_factory()
    # Any non-None budget planner: _schedule_verify_lens only checks it exists.
    planner._budget_planner = SimpleNamespace()
    bs = len(CONFIDENCE)
    lens = planner._schedule_verify_lens(
        req_pool_indices=torch.arange(bs),
        prefix_lens=torch.full((bs,), 10),
        device=torch.device("cpu"),
        confidence=torch.tensor(CONFIDENCE),
        budget=bs * GAMMA,
    )
    assert lens.tolist() == [2, 2, 2]


@pytest.mark.guard_on
def test_accept_stops_at_the_capped_length(monkeypatch, planner_factory):
    import torch
    from sglang.srt.speculative.dspark_components.dspark_draft import DraftBlockResult
    from sglang.srt.speculative.dspark_components.dspark_verify import accept_draft_tokens

    monkeypatch.setenv("DSV41_VERIFY_CAP", "conf:0.5")
    layout = _static_layout(planner_factory())
    bs, vocab = len(CONFIDENCE), 16
    candidates = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]])
    # The target agrees with every draft: uncapped, all gamma drafts are accepted.
    predict = torch.cat([candidates[:, 1:], torch.full((bs, 1), 13)], dim=1)
    target_logits = torch.nn.functional.one_hot(predict.reshape(-1), vocab).float()
    block = DraftBlockResult(
        draft_tokens=candidates[:, 1:],
        corrected_logits=None,
        greedy_mask=torch.ones(bs, dtype=torch.bool),
        temperatures=torch.ones(bs),
        greedy_draft=True,
    )
    correct_len, bonus, _ = accept_draft_tokens(
        candidates=candidates,
        target_logits=target_logits,
        draft_block=block,
        sampling_info=None,
        draft_input=None,
        gamma=GAMMA,
        verify_num_draft_tokens=VERIFY_NUM_DRAFT_TOKENS,
        cutoff_layout=layout,
    )
    assert correct_len.tolist() == [2, 0, 3]
    # The bonus is the target's token right after the last verified draft.
    assert bonus.tolist() == [predict[0, 2].item(), predict[1, 0].item(), 13]


_GATE_SCRIPT = textwrap.dedent(
    """
    import json, sys, torch
    from sglang.kernels.ops.moe.moe_fused_gate import moe_fused_gate

    device = sys.argv[1]
    results = {}
    for verify_lens, rows in json.loads(sys.argv[2]):
        mark = sum(verify_lens)
        torch.manual_seed(0)
        weights, ids = moe_fused_gate(
            torch.randn(rows, 16).to(device), torch.zeros(16, device=device), 4,
            num_token_non_padded=torch.tensor(mark, dtype=torch.int32, device=device),
        )
        results[json.dumps([verify_lens, rows])] = {"mark": mark, "weights": weights.tolist(), "ids": ids.tolist()}
    print(json.dumps(results))
    """
)
# Both gate tests' layouts: uncapped, padded by 4 rows; conf:0.5's capped lengths, padded to the
# uncapped graph. The gate is stock code: one interpreter runs both (each start imports sglang).
_GATE_LAYOUTS = ([[VERIFY_NUM_DRAFT_TOKENS] * len(CONFIDENCE), len(CONFIDENCE) * VERIFY_NUM_DRAFT_TOKENS + 4],
                 [[3, 1, 4], len(CONFIDENCE) * VERIFY_NUM_DRAFT_TOKENS])
_gate_results: dict[tuple[str, str], dict] = {}


def _run_gate(monkeypatch, device: str, *, verify_lens: list[int], rows: int) -> dict:
    # On CPU the Triton gate runs in Triton's interpreter; under --device cuda, compiled on the GPU.
    key = (device, json.dumps([verify_lens, rows]))
    if key not in _gate_results:
        if device == "cpu":
            monkeypatch.setenv("TRITON_INTERPRET", "1")
        layouts = [[verify_lens, rows], *(layout for layout in _GATE_LAYOUTS if layout != [verify_lens, rows])]
        proc = subprocess.run(
            [sys.executable, "-c", _GATE_SCRIPT, device, json.dumps(layouts)],
            capture_output=True,
            text=True,
            timeout=900,
            check=True,
        )
        for layout, result in json.loads(proc.stdout.strip().splitlines()[-1]).items():
            _gate_results[device, layout] = result
    return _gate_results[key]


def _assert_padded_rows_inert(result: dict, rows: int) -> None:
    mark = result["mark"]
    for row in range(rows):
        weights, ids = result["weights"][row], result["ids"][row]
        if row < mark:
            assert min(ids) >= 0 and abs(sum(weights) - 1.0) < 1e-4, row
        else:
            assert weights == [0.0] * 4 and ids == [-1] * 4, row


@pytest.mark.guard_off
def test_gate_zeroes_rows_past_the_padding_mark(monkeypatch, test_device):
    rows = len(CONFIDENCE) * VERIFY_NUM_DRAFT_TOKENS
    # Uncapped: every request verifies gamma + 1 rows; pad the graph by 4 rows.
    result = _run_gate(monkeypatch, test_device, verify_lens=[VERIFY_NUM_DRAFT_TOKENS] * len(CONFIDENCE), rows=rows + 4)
    _assert_padded_rows_inert(result, rows + 4)


@pytest.mark.guard_on
def test_gate_keeps_a_capped_layouts_padding_inert(monkeypatch, test_device):
    import torch
    from sglang.srt.speculative.ragged_verify import capped_verify_lens, read_verify_cap

    monkeypatch.setenv("DSV41_VERIFY_CAP", "conf:0.5")
    bs = len(CONFIDENCE)
    full = torch.full((bs,), VERIFY_NUM_DRAFT_TOKENS, dtype=torch.int32)
    lens = capped_verify_lens(read_verify_cap(), verify_lens=full, confidence=torch.tensor(CONFIDENCE))
    assert lens.tolist() == [3, 1, 4]
    # A packed (compact) verify of the capped lengths, padded to the uncapped graph.
    rows = bs * VERIFY_NUM_DRAFT_TOKENS
    result = _run_gate(monkeypatch, test_device, verify_lens=lens.tolist(), rows=rows)
    assert result["mark"] == 8
    _assert_padded_rows_inert(result, rows)


@pytest.mark.guard_on
@pytest.mark.parametrize("value, expected", [("0", None), ("off", None), ("", None), ("3", 3), (" 2 ", 2)])
def test_integer_spellings(monkeypatch, value, expected):
    from sglang.srt.speculative.ragged_verify import read_verify_cap

    monkeypatch.setenv("DSV41_VERIFY_CAP", value)
    cap = read_verify_cap()
    assert (cap.max_drafts if cap is not None else None) == expected
    assert cap is None or cap.min_confidence is None


@pytest.mark.guard_on
@pytest.mark.parametrize("value", ["conf:", "conf:x", "-3", "conf:0", "conf:1.5", "2.5", "cap"])
def test_malformed_values_fail_at_startup_naming_the_variable(monkeypatch, value):
    from sglang.srt.speculative.ragged_verify import read_verify_cap

    monkeypatch.setenv("DSV41_VERIFY_CAP", value)
    with pytest.raises(ValueError, match="DSV41_VERIFY_CAP"):
        read_verify_cap()
    # Building the draft model (startup) reads it too.
    with pytest.raises(ValueError, match="DSV41_VERIFY_CAP"):
        _build_head()


@pytest.mark.absent
def test_without_the_feature_the_cap_is_ignored(monkeypatch):
    from sglang.srt.environ import Envs

    monkeypatch.setenv("DSV41_VERIFY_CAP", "conf:0.5")
    assert "DSV41_VERIFY_CAP" not in vars(Envs)
    assert _build_head() is None


# -- the DSpark worker's decode step ------------------------------------------------
#
# DSparkWorkerV2 built through its __init__ and one static-mode decode step through
# _forward_decode. What is not sglang code under test is stood in for, each where
# the worker reaches it:
# - the published runtime config (get_spec/get_schedule/get_exec/get_disagg: a
#   server publishes them after resolving a real checkpoint on CUDA) and the
#   parallel state (one rank; process groups need torch.distributed);
# - the draft checkpoint: build_draft_tp_worker loads a DeepSeek-V4 draft model on
#   the GPU; here a draft model/runner namespace with the config the worker reads;
#   draft_is_deepseek_v4 reads that checkpoint's config;
# - is_cuda: the worker builds the verify epilogue (the folded in-graph accept) and
#   the sampling-accept region only on CUDA; they run eagerly on CPU tensors;
# - the draft forward (proposer.propose: the draft proposal), the target model's
#   verify forward (_forward_prepared_verify, reached through the executor's real
#   run_non_compact / run_compact: it records the tokens it receives; a static
#   graph replay runs the ops the graph captured with it, the epilogue's capture
#   hooks, eagerly, as a replay does; packed rows run eagerly), the KV-cache index
#   plan, the draft-KV injection of the target hidden states and the engram
#   history (their own features);
# - Tensor.record_stream: CUDA caching-allocator bookkeeping, a no-op CPU tensors lack;
# - assign_extend_cache_locs_func: the packed rows' KV slots, a kernel this CPU build lacks.

VOCAB = 32
CANDIDATES = ((1, 2, 3, 4), (5, 6, 7, 8), (9, 10, 11, 12))
BONUS = 13  # the target's token after the last draft


class _SamplingInfo(SimpleNamespace):
    """The batch's sampling info: its length is the batch size, as SamplingBatchInfo's."""

    def __len__(self):
        return len(self.temperatures)


class _DecodeWorld:
    """A one-rank DSpark deployment with a DeepSeek-V4.1 target, static verify mode."""

    def __init__(self, monkeypatch, *, sampling: bool):
        import contextlib

        import torch
        from sglang.srt.model_executor.cuda_graph_config import Backend
        from sglang.srt.runtime_context import get_parallel
        from sglang.srt.speculative import spec_utils
        from sglang.srt.speculative.dspark_components import dspark_planner, dspark_worker_v2
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
        from transformers import PretrainedConfig

        self.torch = torch
        self.sampling = sampling
        if sampling:
            monkeypatch.setenv("SGLANG_OPT_DSV41_SAMPLING_ACCEPT_GRAPH", "1")
        group = SimpleNamespace(world_size=1, rank_in_group=0)
        parallel = get_parallel().override(
            pp_group=SimpleNamespace(is_last_rank=True), pp_size=1, pp_rank=0, tp_group=group, tp_size=1, tp_rank=0,
            attn_tp_size=1, attn_tp_rank=0, attn_dp_enabled=False, attn_dp_size=1, attn_dp_rank=0, attn_cp_size=1,
            attn_cp_rank=0, enable_prefill_cp=False, enable_dp_attention=False, dp_size=1, moe_ep_size=1, moe_tp_size=1)
        parallel.__enter__()
        self._parallel = parallel
        spec = SimpleNamespace(
            speculative_num_draft_tokens=VERIFY_NUM_DRAFT_TOKENS, speculative_use_block_verification=False,
            speculative_dspark_align_verify_tokens_to_graph_tier=False,
            speculative_dspark_confidence_sts_path=None, speculative_dspark_sps_table_path=None)
        graph = SimpleNamespace(cuda_graph_config=SimpleNamespace(decode=SimpleNamespace(backend=Backend.FULL, bs=[1, 2, 4])))
        exec_config = SimpleNamespace(graph=graph, mamba=SimpleNamespace(enable_mamba_extra_buffer=False))
        stand_ins = dict(
            get_spec=lambda: spec, get_schedule=lambda: SimpleNamespace(page_size=1),
            get_disagg=lambda: SimpleNamespace(disaggregation_mode="null"), get_exec=lambda: exec_config,
            get_dp_tp_group=lambda: group, get_pp_stage_load_group=lambda: None,
            draft_pp_context=contextlib.nullcontext, draft_is_deepseek_v4=lambda: True, is_cuda=lambda: True,
            build_draft_tp_worker=self._build_draft_tp_worker)
        for name, value in stand_ins.items():
            monkeypatch.setattr(dspark_worker_v2, name, value)
        monkeypatch.setattr(dspark_planner, "get_spec", lambda: spec)
        monkeypatch.setattr(spec_utils, "get_exec", lambda: exec_config)
        monkeypatch.setattr(torch.Tensor, "record_stream", lambda tensor, stream: None)
        # The packed verify rows' KV-cache slots (a CUDA/NPU/CPU-build kernel upstream).
        from sglang.kernels.ops.speculative.dspark import dspark_verify_window

        def cache_locs(*, req_pool_indices, req_to_token, start_offset, end_offset, batch_size, draft_token_num,
                       device):
            locs = torch.cat([req_to_token[r, s:e] for r, s, e in zip(req_pool_indices.tolist(),
                              start_offset.tolist(), end_offset.tolist(), strict=True)])
            return torch.nn.functional.pad(locs, (0, batch_size * draft_token_num - locs.numel()))

        monkeypatch.setattr(dspark_verify_window, "assign_extend_cache_locs_func", cache_locs)

        target_config = PretrainedConfig(vocab_size=VOCAB)
        target_config.model_type = "deepseek_v41"
        self.bs = len(CANDIDATES)
        self.candidates = torch.tensor(CANDIDATES)
        predict = torch.cat([self.candidates[:, 1:], torch.full((self.bs, 1), BONUS)], dim=1)
        self.predict = predict
        # The target agrees with every draft, sharply enough that sampling at
        # temperature 1 accepts them too. One static output buffer, as a graph has.
        self.logits = torch.nn.functional.one_hot(predict.reshape(-1), VOCAB).float() * 60
        self.target_runner = SimpleNamespace(
            spec_aux_config=SimpleNamespace(draft_model_config=None), spec_algorithm=SpeculativeAlgorithm.DSPARK,
            model_config=SimpleNamespace(hf_text_config=target_config, hf_config=target_config, vocab_size=VOCAB,
                                         linear_attn_registry_result=None),
            model=SimpleNamespace(), capture_tail_hooks=[], decode_cuda_graph_runner=None,
            kv_index_translator=SimpleNamespace(plan_uniform_extend=self._plan_uniform_extend),
            req_to_token_pool=SimpleNamespace(req_to_token=torch.arange(self.bs * 64).view(self.bs, 64)),
            attn_backend=SimpleNamespace(),
            ngram_embedding_manager=SimpleNamespace(update_after_verify=lambda **kwargs: None))
        self.target_worker = SimpleNamespace(model_runner=self.target_runner, device=torch.device("cpu"), random_seed=0)
        self.target_worker.target_worker = self.target_worker
        self.accept_calls: list[dict] = []
        self.verify_tokens: list[list[int]] = []  # the token ids each verify forward received

    def close(self):
        self._parallel.__exit__(None, None, None)

    def _build_draft_tp_worker(self, **kwargs):
        draft_config = SimpleNamespace(dspark_block_size=GAMMA, dspark_markov_rank=4, mask_token_id=VOCAB - 1)
        runner = SimpleNamespace(model_config=SimpleNamespace(hf_config=draft_config), device=self.torch.device("cpu"),
                                 token_to_kv_pool=SimpleNamespace())
        model = SimpleNamespace(sample_from_anchor=False, markov_head=SimpleNamespace(), uses_own_vocab_modules=True,
                                confidence_head=SimpleNamespace())
        return SimpleNamespace(draft_worker=SimpleNamespace(), draft_model_runner=runner, draft_model=model,
                               resolved_attention_backend="dsv4")

    def _plan_uniform_extend(self, **kwargs):
        return SimpleNamespace(write_virtual=self.torch.arange(self.bs * VERIFY_NUM_DRAFT_TOKENS))

    def build_worker(self):
        from sglang.srt.speculative.dspark_components.dspark_worker_v2 import DSparkWorkerV2

        worker = DSparkWorkerV2(server_args=SimpleNamespace(), gpu_id=0, nccl_port=0, target_worker=self.target_worker)
        worker._proposer.propose = self._propose
        executor = worker._verify_executor
        executor._forward_prepared_verify = self._verify_forward
        executor.commit_hidden = lambda **kwargs: None
        real_accept = executor.accept_and_finalize

        def accept_and_finalize(**kwargs):
            self.accept_calls.append(kwargs)
            return real_accept(**kwargs)

        executor.accept_and_finalize = accept_and_finalize
        if self.sampling:
            # What the draft graph staged for this all-sampled batch (greedy draft).
            worker._draft_sampler = SimpleNamespace(
                greedy_draft=True, step_logits=None,
                params=SimpleNamespace(temperatures=self.torch.ones(self.bs, 1),
                                       greedy_mask=self.torch.zeros(self.bs, dtype=self.torch.bool)))
        return worker

    def _propose(self, **kwargs):
        from sglang.srt.speculative.dspark_components.dspark_draft import DraftBlockResult, DraftProposal

        torch = self.torch
        block = DraftBlockResult(
            draft_tokens=self.candidates[:, 1:], corrected_logits=None,
            greedy_mask=torch.full((self.bs,), not self.sampling), temperatures=torch.ones(self.bs, 1),
            greedy_draft=True)
        return DraftProposal(draft_block_ids=self.candidates, draft_block=block, confidence=torch.tensor(CONFIDENCE),
                             folded=True)

    def _verify_forward(self, *, batch, verify_input, seq_lens_cpu_backup, seq_lens_sum_backup):
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        torch = self.torch
        tokens = verify_input.draft_token.reshape(-1)
        self.verify_tokens.append(tokens.tolist())
        if verify_input.ragged_verify_layout is not None:
            # Packed rows: each is the verify row it was packed from (kv_loc_cols), run eagerly.
            rows = verify_input.kv_loc_cols.clamp(min=0)
            out = LogitsProcessorOutput(next_token_logits=self.logits[rows].clone(),
                                        hidden_states=torch.zeros(tokens.numel(), 8))
            return SimpleNamespace(logits_output=out, can_run_cuda_graph=False)
        out = LogitsProcessorOutput(next_token_logits=self.logits,
                                    hidden_states=torch.zeros(self.bs * VERIFY_NUM_DRAFT_TOKENS, 8))
        forward_batch = SimpleNamespace(
            forward_mode=ForwardMode.TARGET_VERIFY, batch_size=self.bs, input_ids=tokens,
            seq_lens=batch.seq_lens, req_pool_indices=batch.req_pool_indices,
            out_cache_loc=batch.out_cache_loc, positions=verify_input.positions)
        runner = SimpleNamespace(model_runner=SimpleNamespace(is_draft_worker=False), ragged_verify_mode=False)
        # Captured graphs record their static IO; a replay reruns the captured ops.
        with pytest.MonkeyPatch.context() as capture:
            capture.setattr(torch.cuda, "is_available", lambda: True)
            capture.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
            for hook in self.target_runner.capture_tail_hooks:
                hook(runner, out, forward_batch, self.bs * VERIFY_NUM_DRAFT_TOKENS)
        return SimpleNamespace(logits_output=out, can_run_cuda_graph=True)

    def decode_step(self, worker):
        from sglang.srt.model_executor.forward_batch_info import ForwardMode
        from sglang.srt.speculative.dflash_info_v2 import DFlashDraftInputV2

        torch = self.torch
        prefix = torch.full((self.bs,), 10)
        draft_input = DFlashDraftInputV2(topk_p=None, topk_index=None, bonus_tokens=self.candidates[:, 0],
                                         new_seq_lens=prefix, hidden_states=None)
        sampling_info = None
        if self.sampling:
            sampling_info = _SamplingInfo(
                temperatures=torch.ones(self.bs, 1), is_all_greedy=False, is_any_greedy=False,
                need_top_k_sampling=False, need_top_p_sampling=False, need_min_p_sampling=False,
                has_custom_logit_processor=False, sampling_mask_batch_indices=None)
        batch = SimpleNamespace(
            spec_info=draft_input, forward_mode=ForwardMode.DECODE, global_num_tokens=None, seq_lens=prefix.clone(),
            seq_lens_cpu=prefix.clone(), seq_lens_sum=int(prefix.sum()), req_pool_indices=torch.arange(self.bs),
            sampling_info=sampling_info, has_grammar=False, return_logprob=False, forward_iter=0,
            reqs=[None] * self.bs, spec_verify_tier_num_tokens=0)
        return worker._forward_decode(batch, on_publish=None)


def _committed(world, result):
    lens = result.accept_lens.tolist()
    tokens = result.next_token_ids.view(world.bs, VERIFY_NUM_DRAFT_TOKENS).tolist()
    return lens, [row[:n] for row, n in zip(tokens, lens, strict=True)]


def _decode_step(monkeypatch, *, sampling: bool) -> dict:
    """One decode step of a freshly built worker: what it committed, whether the
    sampling-accept region ran, and how the eager accept was called."""
    world = _DecodeWorld(monkeypatch, sampling=sampling)
    try:
        worker = world.build_worker()
        result = world.decode_step(worker)
        region = worker._sampling_accept_graph
        return {
            "committed": [list(part) for part in _committed(world, result)],
            "verify_tokens": world.verify_tokens,
            "region_ran": bool(region is not None and region._warmed_up),
            "accepts": [{"folded_accept": call["folded_accept"],
                         "layout": None if call["layout"] is None else call["layout"].verify_lens.tolist()}
                        for call in world.accept_calls],
        }
    finally:
        world.close()


_SAMPLING_STEP_SCRIPT = textwrap.dedent(
    """
    import json, sys, traceback
    import pytest
    sys.path.insert(0, sys.argv[1])
    import test_verify_cap

    steps = {}
    for cap in json.loads(sys.argv[2]):
        with pytest.MonkeyPatch.context() as monkeypatch:
            if cap:
                monkeypatch.setenv("DSV41_VERIFY_CAP", cap)
            else:
                monkeypatch.delenv("DSV41_VERIFY_CAP", raising=False)
            try:
                steps[cap] = test_verify_cap._decode_step(monkeypatch, sampling=True)
            except Exception:
                steps[cap] = {"error": traceback.format_exc()[-3000:]}
    print(json.dumps(steps))
    """
)
# The two sampling tests' DSV41_VERIFY_CAP (unset, conf:0.5): the interpreter one of them starts
# runs the other's step too, after its own (each start imports sglang: seconds).
_SAMPLING_CAPS = ("", "conf:0.5")
_sampling_steps: dict[str, dict] = {}


def _sampling_decode_step(monkeypatch) -> dict:
    """The decode step under the DSV41_VERIFY_CAP the test set. The sampling accept's rejection
    kernel is Triton: on CPU it runs in Triton's interpreter, which a process picks when it imports
    the kernel module."""
    import os

    cap = os.environ.get("DSV41_VERIFY_CAP", "")
    if cap not in _sampling_steps:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        caps = [cap, *(other for other in _SAMPLING_CAPS if other != cap)]
        proc = subprocess.run(
            [sys.executable, "-c", _SAMPLING_STEP_SCRIPT, os.path.dirname(os.path.abspath(__file__)), json.dumps(caps)],
            capture_output=True, text=True, timeout=900,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        _sampling_steps.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    step = _sampling_steps[cap]
    assert "error" not in step, step.get("error")
    return step


# Uncapped: every draft is accepted, plus the bonus token.
UNCAPPED = [[4, 4, 4], [[2, 3, 4, BONUS], [6, 7, 8, BONUS], [10, 11, 12, BONUS]]]
# conf:0.5 cuts after 2, 0 and 3 drafts (survival 0.9, 0.81 | 0.4 | 1, 1, 1); the
# target's next token follows the last verified draft.
CAPPED = [[3, 1, 4], [[2, 3, 4], [6], [10, 11, 12, BONUS]]]


# What the target's verify forward receives: uncapped, every request's anchor and
# gamma drafts (bs * (gamma + 1) = 12 tokens); conf:0.5, each request's leading
# capped rows only, packed (3 + 1 + 4 = 8); an integer cap of 1, two rows each (6).
ALL_ROWS = [token for row in CANDIDATES for token in row]
CAPPED_ROWS = [1, 2, 3, 5, 9, 10, 11, 12]


@pytest.mark.guard_off
def test_stock_greedy_static_step_reads_the_verify_graphs_folded_accept(monkeypatch):
    step = _decode_step(monkeypatch, sampling=False)
    assert step["committed"] == UNCAPPED
    assert step["verify_tokens"] == [ALL_ROWS]
    # The verify graph's in-graph greedy accept: its buffers are read, nothing recomputed.
    assert step["accepts"] == [{"folded_accept": True, "layout": None}]


@pytest.mark.guard_on
def test_capped_greedy_static_step_takes_the_eager_accept_that_cuts(monkeypatch):
    monkeypatch.setenv("DSV41_VERIFY_CAP", "conf:0.5")
    step = _decode_step(monkeypatch, sampling=False)
    assert step["committed"] == CAPPED
    assert step["accepts"] == [{"folded_accept": False, "layout": CAPPED[0]}]
    assert step["verify_tokens"] == [CAPPED_ROWS]


@pytest.mark.guard_on
def test_an_integer_cap_verifies_its_rows_only(monkeypatch):
    monkeypatch.setenv("DSV41_VERIFY_CAP", "1")
    step = _decode_step(monkeypatch, sampling=False)
    assert step["verify_tokens"] == [[1, 2, 5, 6, 9, 10]]
    assert step["committed"] == [[2, 2, 2], [[2, 3], [6, 7], [10, 11]]]


@pytest.mark.guard_on
def test_a_static_graph_runner_runs_packed_verify_rows_eagerly(monkeypatch, planner_factory):
    # The static verify graphs hold gamma + 1 rows a request: the capped layout's
    # packed rows must not replay one (they run eagerly); the stock verify does.
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner

    monkeypatch.setenv("DSV41_VERIFY_CAP", "conf:0.5")
    layout = _static_layout(planner_factory())
    assert layout is not None
    runner = SimpleNamespace(ragged_verify_mode=False)
    batch = SimpleNamespace(replace_embeds=None, forward_mode=ForwardMode.TARGET_VERIFY,
                            spec_info=SimpleNamespace(ragged_verify_layout=layout))
    assert DecodeCudaGraphRunner.can_run_graph(runner, batch) is False


@pytest.mark.guard_off
def test_stock_sampling_static_step_accepts_in_the_sampling_region(monkeypatch):
    step = _sampling_decode_step(monkeypatch)
    assert step["committed"] == UNCAPPED
    assert step["verify_tokens"] == [ALL_ROWS]
    assert step["region_ran"] is True and step["accepts"] == []


@pytest.mark.guard_on
def test_capped_sampling_static_step_takes_the_eager_accept_that_cuts(monkeypatch):
    monkeypatch.setenv("DSV41_VERIFY_CAP", "conf:0.5")
    step = _sampling_decode_step(monkeypatch)
    assert step["committed"] == CAPPED
    assert step["region_ran"] is False
    assert step["accepts"] == [{"folded_accept": False, "layout": CAPPED[0]}]
    assert step["verify_tokens"] == [CAPPED_ROWS]
