"""folded_fence on a CUDA GPU: the race itself, under a real CUDA graph.

The verify epilogue's accept buffers are static outputs of the captured verify
graph: every replay rewrites them. Here a real graph is captured whose replay
writes those buffers (what the in-graph accept does), the folded
accept_and_finalize reads them after one replay as the executor does, and the
next replay follows before the caller has consumed the results (the overlap
schedule). With DSV41_FOLDED_FENCE on the results are the first replay's; off,
the second replay has overwritten them. GPU-only (marked cuda).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

FEATURE = "folded_fence"
BS = 3
FIELDS = ("correct_len", "bonus", "cap_trim_lens", "commit_lens", "new_seq_lens", "out_tokens")
pytestmark = pytest.mark.cuda


def _graph_writing_the_epilogue():
    """(executor, epilogue, sources, graph): replaying `graph` copies each
    `sources[name]` into the epilogue's `<name>_buf`, on the device."""
    import torch
    from sglang.srt.speculative.dspark_components.dspark_verify import DsparkVerifyEpilogue, TargetVerifyExecutor
    from sglang.srt.speculative.spec_tp_sync import SpecTpSync

    epilogue = DsparkVerifyEpilogue(max_bs=4, verify_num_draft_tokens=4, device="cuda",
                                    tp_sync=SpecTpSync(SimpleNamespace(world_size=1, rank_in_group=0)))
    buffers = {name: getattr(epilogue, f"{name}_buf") for name in FIELDS}
    assert all(buffer.is_cuda for buffer in buffers.values())
    sources = {name: torch.zeros_like(buffer) for name, buffer in buffers.items()}

    def write():
        for name, buffer in buffers.items():
            buffer.copy_(sources[name])

    side = torch.cuda.Stream()  # warm up off the capture stream, as torch.cuda.graph asks
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        write()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        write()
    executor = object.__new__(TargetVerifyExecutor)
    executor.verify_epilogue = epilogue
    return executor, epilogue, sources, graph


def _replay(graph, sources, values) -> None:
    for name, value in zip(FIELDS, values):
        sources[name].fill_(value)
    graph.replay()


def _folded_accept(executor):
    return executor.accept_and_finalize(
        folded_accept=True, bs=BS, verify_ids_2d=None, target_logits=None, draft_block=None,
        sampling_info=None, draft_input=None, layout=None, prefix_lens=None, draft_tokens=None,
    )  # fmt: skip


def _step_then_next_replay(executor, sources, graph):
    import torch

    first = list(range(1, len(FIELDS) + 1))
    _replay(graph, sources, first)
    accept = _folded_accept(executor)
    _replay(graph, sources, [-7] * len(FIELDS))  # the next verify step, before the caller reads
    torch.cuda.synchronize()
    return accept, first


@pytest.mark.guard_off
def test_without_the_fence_the_next_replay_overwrites_the_results():
    executor, epilogue, sources, graph = _graph_writing_the_epilogue()
    accept, _ = _step_then_next_replay(executor, sources, graph)
    for name in FIELDS:
        kept = getattr(accept, name)
        assert kept.is_cuda and kept.data_ptr() == getattr(epilogue, f"{name}_buf").data_ptr(), name
        assert (kept == -7).all(), name


@pytest.mark.guard_on
def test_with_the_fence_the_results_survive_the_next_replay(monkeypatch):
    from sglang.srt.environ import envs
    from sglang.srt.speculative.dspark_components import dspark_verify

    monkeypatch.setenv("DSV41_FOLDED_FENCE", "1")
    monkeypatch.setattr(dspark_verify, "_FOLDED_FENCE", envs.DSV41_FOLDED_FENCE.get())
    executor, epilogue, sources, graph = _graph_writing_the_epilogue()
    accept, first = _step_then_next_replay(executor, sources, graph)
    for name, value in zip(FIELDS, first):
        kept = getattr(accept, name)
        assert kept.is_cuda and kept.shape[0] == BS, name
        assert kept.dtype == getattr(epilogue, f"{name}_buf").dtype, name
        assert (kept == value).all(), f"{name}: {kept.tolist()} after the next replay"
