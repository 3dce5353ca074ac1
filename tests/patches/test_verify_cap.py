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
@pytest.mark.parametrize("cap, expected", [("1", [2, 2, 2]), ("2", [3, 3, 3]), ("9", [4, 4, 4])])
def test_static_plan_respects_n(monkeypatch, planner_factory, cap, expected):
    monkeypatch.setenv("DSV41_VERIFY_CAP", cap)
    planner = planner_factory(confidence_head=None)  # an integer cap needs no head
    assert planner._is_verify_all is False
    layout = _static_layout(planner)
    # verify_len counts the anchor row: N drafts -> N + 1, never past gamma + 1.
    assert layout.verify_lens.tolist() == expected
    assert layout.graph_num_tokens == len(CONFIDENCE) * VERIFY_NUM_DRAFT_TOKENS


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
    assert [t.tolist() for t in group.broadcasts] == [[3, 1, 4]]  # rank 1's own cut, replaced
    assert layout.verify_lens.tolist() == [2, 1, 4]


@pytest.mark.guard_on
@pytest.mark.parametrize("tp_rank", [0, 1])
def test_the_cap_is_logged_once_by_rank_zero(monkeypatch, planner_factory, caplog, tp_rank):
    import logging

    monkeypatch.setenv("DSV41_VERIFY_CAP", "2")
    with caplog.at_level(logging.INFO):
        planner_factory(confidence_head=None, tp_rank=tp_rank)
    logged = [r.getMessage() for r in caplog.records if "DSV41_VERIFY_CAP" in r.getMessage()]
    assert logged == (["DSpark verify cap (DSV41_VERIFY_CAP): VerifyCap(max_drafts=2, min_confidence=None)"]
                      if tp_rank == 0 else [])


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

    verify_lens = json.loads(sys.argv[1])
    rows = int(sys.argv[2])
    device = sys.argv[3]
    mark = sum(verify_lens)
    torch.manual_seed(0)
    weights, ids = moe_fused_gate(
        torch.randn(rows, 16).to(device), torch.zeros(16, device=device), 4,
        num_token_non_padded=torch.tensor(mark, dtype=torch.int32, device=device),
    )
    print(json.dumps({"mark": mark, "weights": weights.tolist(), "ids": ids.tolist()}))
    """
)


def _run_gate(monkeypatch, device: str, *, verify_lens: list[int], rows: int) -> dict:
    # On CPU the Triton gate runs in Triton's interpreter; under --device cuda, compiled on the GPU.
    if device == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    proc = subprocess.run(
        [sys.executable, "-c", _GATE_SCRIPT, json.dumps(verify_lens), str(rows), device],
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


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
