"""engram_prefetch: every Engram layer's rows looked up right after the hasher.

On CPU the prefetch runs inline; under `test-patch --device cuda` the same
tests run on the GPU, through the side stream and its events. What is tested
here is that the rows handed over are the rows the layer would have looked up,
and that the layer then does no lookup of its own: on two Engram layers, and
through a real DeepseekV4Model (tiny config, built through its constructor,
its forward run) where the model hands each layer its prefetched rows.
"""

from __future__ import annotations

import contextlib
import os
import types

import pytest

FEATURE = "engram_prefetch"

# On a GPU sglang takes its CUDA paths, which the CPU stand-ins below do not replace. A mark,
# not a skip inside the fixture: the mark skips before the harness starts watching the guards,
# so a skipped guard_on test is not held to having set its guard.
CPU_FORWARD_ONLY = pytest.mark.skipif(os.environ.get("FORKBUILD_TEST_DEVICE", "cpu") == "cuda",
                                      reason="the CPU model path: on a GPU sglang takes its CUDA forward (hc boundaries, residual batch), which these stand-ins do not replace; test_gpu_engram_prefetch covers the GPU prefetch")
GUARD = "DSV41_ENGRAM_PREFETCH"
LAYER_IDS = (0, 2)
TOKENS = 7


def _engram_layers(device, *, tp_size=1):
    """Two Engram layers on ``device``, as rank 0 of ``tp_size`` builds them
    (its shard of each table), with random fp8 tables."""
    import torch
    from sglang.srt.layers.engram import Engram, EngramLayout
    from sglang.srt.runtime_context import get_parallel

    config = types.SimpleNamespace(
        engram_layer_ids=list(LAYER_IDS), engram_max_ngram_size=3, engram_n_heads=2,
        engram_vocab_size=16, engram_num_embeddings=[0, 0], engram_head_dim=32,
        hidden_size=16, hc_mult=2, rms_norm_eps=1e-6,
    )
    probe = EngramLayout.from_config(config)
    config.engram_num_embeddings = [probe.column_bounds(i)[-1] for i in range(len(LAYER_IDS))]
    layout = EngramLayout.from_config(config)
    generator = torch.Generator().manual_seed(0)
    layers = {}
    with get_parallel().override(tp_size=tp_size, tp_rank=0):
        for layer_id in LAYER_IDS:
            engram = Engram(config, layer_id, layout).to(torch.bfloat16)
            embed = engram.embed
            embed.weight.data.copy_(torch.randn(embed.weight.shape, generator=generator).to(torch.float8_e4m3fn))
            embed.scale.data.copy_(torch.full(embed.scale.shape, 0.5).to(torch.float8_e8m0fnu))
            engram.wkv.weight.data.copy_(torch.randn(engram.wkv.weight.shape, generator=generator) * 0.05)
            layers[layer_id] = engram.to(device)
    hash_ids = torch.stack(
        [torch.randint(0, rows, (TOKENS, 4), generator=generator) for rows in config.engram_num_embeddings], dim=1
    )
    x = torch.randn(TOKENS, config.hc_mult, config.hidden_size, generator=generator).to(torch.bfloat16)
    return types.SimpleNamespace(layers=layers, hash_ids=hash_ids.to(device), x=x.to(device),
                                 input_ids=torch.arange(TOKENS, device=device), config=config)


@pytest.fixture
def engram_layers(test_device):
    """Two Engram layers on the test device, single TP rank, with random fp8 tables."""
    return _engram_layers(test_device)


@pytest.fixture
def lookups(monkeypatch):
    """Counts table reads (a spy: the real lookup still runs)."""
    from sglang.srt.layers.engram import EngramEmbedding

    calls = []
    real = EngramEmbedding._owned_rows

    def spy(self, indices):
        calls.append(indices.shape)
        return real(self, indices)

    monkeypatch.setattr(EngramEmbedding, "_owned_rows", spy)
    return calls


def _layer_forward(setup, layer_id, **kwargs):
    engram = setup.layers[layer_id]
    return engram(setup.x, setup.hash_ids[:, engram.layer_hash_index], None, input_ids=setup.input_ids, **kwargs)


@pytest.mark.guard_off
def test_each_layer_looks_up_its_own_rows(engram_layers, lookups):
    for layer_id in LAYER_IDS:
        _layer_forward(engram_layers, layer_id)

    assert len(lookups) == len(LAYER_IDS)


@pytest.mark.guard_on
def test_guard_decides_whether_the_model_prefetches(engram_layers, monkeypatch):
    from sglang.srt.layers.engram import EngramRowPrefetch

    monkeypatch.setenv(GUARD, "0")
    assert EngramRowPrefetch.from_env(engram_layers.layers) is None
    monkeypatch.setenv(GUARD, "1")
    assert isinstance(EngramRowPrefetch.from_env(engram_layers.layers), EngramRowPrefetch)
    assert EngramRowPrefetch.from_env({}) is None


@pytest.mark.guard_on
def test_prefetched_rows_equal_the_layer_lookup(engram_layers, monkeypatch):
    import torch
    from sglang.srt.layers.engram import EngramRowPrefetch

    monkeypatch.setenv(GUARD, "1")
    prefetch = EngramRowPrefetch.from_env(engram_layers.layers)

    prefetched = prefetch.run(engram_layers.hash_ids, None, False)

    assert sorted(prefetched) == list(LAYER_IDS)
    for layer_id, engram in engram_layers.layers.items():
        expected = engram.embed(engram_layers.hash_ids[:, engram.layer_hash_index])
        assert torch.equal(prefetched[layer_id].take(), expected)


@pytest.mark.guard_on
def test_layer_output_is_the_same_and_the_layer_does_no_lookup(engram_layers, lookups, monkeypatch):
    import torch
    from sglang.srt.layers.engram import EngramRowPrefetch

    monkeypatch.setenv(GUARD, "1")
    expected = {layer_id: _layer_forward(engram_layers, layer_id) for layer_id in LAYER_IDS}
    lookups.clear()

    prefetched = EngramRowPrefetch.from_env(engram_layers.layers).run(engram_layers.hash_ids, None, False)
    assert len(lookups) == len(LAYER_IDS)
    lookups.clear()
    actual = {
        layer_id: _layer_forward(engram_layers, layer_id, prefetched=prefetched[layer_id])
        for layer_id in LAYER_IDS
    }

    assert lookups == []
    for layer_id in LAYER_IDS:
        assert torch.equal(actual[layer_id], expected[layer_id])


@pytest.mark.guard_on
def test_scheduler_staged_layers_are_left_to_the_layer(engram_layers, monkeypatch):
    from sglang.srt.layers.engram import EngramRowPrefetch

    monkeypatch.setenv(GUARD, "1")
    engram_layers.layers[LAYER_IDS[0]].embed.staged_by_scheduler = True

    prefetched = EngramRowPrefetch.from_env(engram_layers.layers).run(engram_layers.hash_ids, None, False)

    assert sorted(prefetched) == [LAYER_IDS[1]]


@pytest.mark.guard_on
@pytest.mark.parametrize("graph", ["breakable", "tc_piecewise"])
def test_no_prefetch_inside_a_piecewise_cuda_graph(engram_layers, monkeypatch, graph):
    """Each piece of a breakable or piecewise graph is its own graph and cannot
    wait on an event recorded in another: inside one, every layer looks up its
    own rows (sglang's own scopes mark the capture)."""
    from sglang.srt.layers.engram import EngramRowPrefetch
    from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph.context import (
        enable_breakable_cuda_graph,
    )
    from sglang.srt.model_executor.runner_backend_utils.tc_piecewise_cuda_graph.context_manager import (
        enable_tc_piecewise_cuda_graph,
    )

    monkeypatch.setenv(GUARD, "1")
    prefetch = EngramRowPrefetch.from_env(engram_layers.layers)
    scope = {"breakable": enable_breakable_cuda_graph, "tc_piecewise": enable_tc_piecewise_cuda_graph}[graph]
    with scope():
        assert prefetch.run(engram_layers.hash_ids, None, False) == {}
    assert sorted(prefetch.run(engram_layers.hash_ids, None, False)) == list(LAYER_IDS)


@pytest.fixture
def all_reduces(monkeypatch):
    """The TP all-reduce that reassembles a sharded table's rows. It is a
    collective over the TP group; here one process is rank 0 of two, so the
    stand-in returns rank 0's part as it is (the same for the prefetched and the
    inline lookup) and records where it was called."""
    from sglang.srt.layers import engram

    calls = []

    def all_reduce(values):
        calls.append(tuple(values.shape))
        return values

    monkeypatch.setattr(engram, "tensor_model_parallel_all_reduce", all_reduce)
    return calls


@pytest.mark.guard_on
def test_sharded_table_prefetches_its_shard_and_reduces_at_the_layer(monkeypatch, test_device, all_reduces):
    import torch
    from sglang.srt.layers.engram import EngramRowPrefetch
    from sglang.srt.runtime_context import get_parallel

    monkeypatch.setenv(GUARD, "1")
    setup = _engram_layers(test_device, tp_size=2)
    with get_parallel().override(tp_size=2, tp_rank=0, attn_tp_size=2, attn_dp_size=1, attn_cp_size=1):
        expected = {layer_id: _layer_forward(setup, layer_id) for layer_id in LAYER_IDS}
        assert len(all_reduces) == len(LAYER_IDS)
        all_reduces.clear()
        prefetch = EngramRowPrefetch.from_env(setup.layers)

        prefetched = prefetch.run(setup.hash_ids, None, False)
        # The prefetch reads this rank's shard only: no collective off the layer's stream.
        assert sorted(prefetched) == list(LAYER_IDS) and all_reduces == []
        actual = {layer_id: _layer_forward(setup, layer_id, prefetched=prefetched[layer_id])
                  for layer_id in LAYER_IDS}
        assert len(all_reduces) == len(LAYER_IDS)
        for layer_id in LAYER_IDS:
            assert torch.equal(actual[layer_id], expected[layer_id])

        # Prefill CP gathers the hash ids over the CP group first: left to the layer.
        assert prefetch.run(setup.hash_ids, None, True) == {}
    with get_parallel().override(tp_size=2, tp_rank=0, attn_tp_size=1, attn_dp_size=2, attn_cp_size=1):
        # So is DP attention's gather of every DP rank's ids.
        assert prefetch.run(setup.hash_ids, None, False) == {}


@pytest.mark.guard_on
def test_peer_shards_are_prefetched_whole(monkeypatch, test_device, all_reduces):
    """Peer shards map every rank's table here (CUDA IPC; a stand-in returns the
    rows): the prefetch reads them even under prefill CP, and the layer takes
    them without an all-reduce."""
    import torch
    from sglang.srt.layers.engram import EngramRowPrefetch
    from sglang.srt.runtime_context import get_parallel

    monkeypatch.setenv(GUARD, "1")
    setup = _engram_layers(test_device, tp_size=2)
    generator = torch.Generator().manual_seed(7)
    peer_rows = {}
    for layer_id, engram in setup.layers.items():
        rows = torch.randn(TOKENS, 4, engram.embed.dim, generator=generator).to(torch.bfloat16).to(test_device)
        engram.embed.peer = types.SimpleNamespace(ready=True, lookup=lambda indices, rows=rows: rows)
        peer_rows[layer_id] = rows
    with get_parallel().override(tp_size=2, tp_rank=0, attn_tp_size=2, attn_dp_size=1, attn_cp_size=1):
        expected = {layer_id: _layer_forward(setup, layer_id, cp_all_tokens=True) for layer_id in LAYER_IDS}
        prefetched = EngramRowPrefetch.from_env(setup.layers).run(setup.hash_ids, None, True)

        assert sorted(prefetched) == list(LAYER_IDS)
        for layer_id in LAYER_IDS:
            assert prefetched[layer_id].take() is peer_rows[layer_id]
            out = _layer_forward(setup, layer_id, cp_all_tokens=True, prefetched=prefetched[layer_id])
            assert torch.equal(out, expected[layer_id])
    assert all_reduces == []


@pytest.mark.guard_on
def test_shared_host_table_is_prefetched_whole(monkeypatch, test_device, all_reduces):
    """The shared host-memory layout: every rank maps the whole table (pinned
    host pages, read by the engram_gather CUDA kernel over their addresses; a
    stand-in gathers from the same tensors by address). Rank 0 of two still
    prefetches every row, and the layer takes them without an all-reduce."""
    import torch
    from sglang.srt.layers import engram as engram_module
    from sglang.srt.layers.engram import EngramRowPrefetch
    from sglang.srt.runtime_context import get_parallel
    from torch import nn

    monkeypatch.setenv(GUARD, "1")
    setup = _engram_layers(test_device, tp_size=2)
    tables, expected_rows = {}, {}
    generator = torch.Generator().manual_seed(11)
    for (layer_id, engram), rows in zip(setup.layers.items(), setup.config.engram_num_embeddings, strict=True):
        embed = engram.embed
        blocks = embed.scale.shape[1]
        weight = torch.randn(rows, embed.dim, generator=generator).to(torch.float8_e4m3fn).to(test_device)
        scale = torch.ldexp(torch.ones(rows, blocks), torch.randint(-3, 2, (rows, blocks), generator=generator))
        scale = scale.to(torch.float8_e8m0fnu).to(test_device)
        embed.weight, embed.scale = nn.Parameter(weight, requires_grad=False), nn.Parameter(scale, requires_grad=False)
        embed.host_table = types.SimpleNamespace(layout="shared", dirty=False)
        embed._host_table_ptrs = (weight.data_ptr(), scale.data_ptr())
        tables[weight.data_ptr()] = (weight, scale)
        ids = setup.hash_ids[:, engram.layer_hash_index].long()
        expected_rows[layer_id] = (weight[ids].float().unflatten(-1, (blocks, -1))
                                   * scale[ids].float().unsqueeze(-1)).flatten(-2).to(torch.bfloat16)

    def engram_gather(weight_ptr, scale_ptr, ids, out, dim, block_size, row_lo=0, row_hi=2**62, sort_ids=False):
        weight, scale = tables[weight_ptr]
        assert scale.data_ptr() == scale_ptr and dim == weight.shape[1]
        local = ids.long() - row_lo
        owned = (local >= 0) & (local < min(row_hi - row_lo, weight.shape[0]))
        local = local.masked_fill(~owned, 0)
        rows = weight[local].float().unflatten(-1, (-1, block_size)) * scale[local].float().unsqueeze(-1)
        out.copy_(rows.flatten(-2).masked_fill(~owned.unsqueeze(-1), 0).to(out.dtype))
        return out

    monkeypatch.setattr(engram_module, "engram_gather", engram_gather)
    with get_parallel().override(tp_size=2, tp_rank=0, attn_tp_size=2, attn_dp_size=1, attn_cp_size=1):
        expected = {layer_id: _layer_forward(setup, layer_id) for layer_id in LAYER_IDS}
        prefetched = EngramRowPrefetch.from_env(setup.layers).run(setup.hash_ids, None, False)

        assert sorted(prefetched) == list(LAYER_IDS)
        for layer_id in LAYER_IDS:
            assert torch.equal(prefetched[layer_id].take(), expected_rows[layer_id])
            out = _layer_forward(setup, layer_id, prefetched=prefetched[layer_id])
            assert torch.equal(out, expected[layer_id])
    assert all_reduces == []


# -- through DeepseekV4Model ----------------------------------------------------
#
# The model is built through its constructor from a DeepSeekV4Config with three
# layers, two of them Engram layers, on one rank. What cannot run on a CPU is
# replaced, and only outside the patched code:
# - each decoder layer's own forward (its hyper-connections run tilelang/Triton
#   kernels, its attention a CUDA attention backend) by a fixed torch mix of the
#   residual it is handed; the Engram step before it, where the prefetched rows
#   are used, is the model's own code;
# - mhc_combine (a Triton kernel) after the last layer, by the same sum in torch;
# - the rotary-embedding factory, which on a plain CPU torch imports vllm's
#   kernel; the attention that holds it never runs here.
# The hasher, the Engram layers and their tables, and the model's layer loop run
# for real.

MODEL_ENGRAM_LAYERS = (0, 2)
MODEL_VOCAB = 64


def _one_rank_group():
    return types.SimpleNamespace(is_first_rank=True, is_last_rank=True, world_size=1, rank_in_group=0, rank=0)


_RANKS = ("tp_rank", "pp_rank", "moe_ep_rank", "moe_dp_rank", "moe_tp_rank", "attn_tp_rank", "attn_cp_rank",
          "dcp_rank", "attn_dcp_rank", "attn_dp_rank", "dp_rank")
_GROUPS = ("world_group", "tp_group", "pp_group", "moe_ep_group", "moe_dp_group", "moe_tp_group", "attn_tp_group",
           "attn_cp_group", "shared_experts_tp_group", "dcp_group")


def _tiny_tokenizer(directory) -> str:
    """A word-level HF tokenizer of MODEL_VOCAB distinct tokens, saved where the
    hasher's loader (get_tokenizer) reads it: the compressed token map is built
    from its normalised vocabulary."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel({f"t{i}": i for i in range(MODEL_VOCAB)}, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer).save_pretrained(str(directory))
    return str(directory)


def _tiny_v4_config():
    from sglang.srt.configs.deepseek_v4 import DeepSeekV4Config
    from sglang.srt.layers.engram import EngramLayout

    config = DeepSeekV4Config(
        architectures=["DeepseekV4ForCausalLM"], quantization_config=None, rope_scaling={},
        kv_source_layer_ids=[], index_source_layer_ids=[], num_hidden_layers=3, compress_ratios=[0, 0, 0],
        hidden_size=64, num_attention_heads=4, qk_rope_head_dim=16, q_lora_rank=32, o_lora_rank=32, o_groups=2,
        vocab_size=MODEL_VOCAB, moe_intermediate_size=32, intermediate_size=32, n_routed_experts=4,
        num_experts_per_tok=2, n_group=1, topk_group=1, n_shared_experts=1, n_hash_layers=0, window_size=8,
        hc_mult=2, hc_pre_from_prev_sublayer=True, engram_layer_ids=list(MODEL_ENGRAM_LAYERS),
        engram_max_ngram_size=3, engram_n_heads=2, engram_vocab_size=16, engram_head_dim=32,
        engram_num_embeddings=[0, 0], engram_compressed_vocab_size=MODEL_VOCAB,
    )  # fmt: skip
    config.head_dim = 64  # a checkpoint's config.json field the dataclass does not declare
    probe = EngramLayout.from_config(config)
    config.engram_num_embeddings = [probe.column_bounds(i)[-1] for i in range(len(MODEL_ENGRAM_LAYERS))]
    return config


def _layer_standin(layer, positions, state, input_ids, forward_batch, input_ids_global):
    import torch
    from sglang.srt.models import deepseek_v4_mhc as mhc

    residual = state.residual
    mixed = residual * 0.5 + residual.roll(1, dims=1) * 0.25
    return mhc.HcState(mixed, torch.full(residual.shape[:2], 1.0 / residual.shape[1]))


def _mhc_combine_in_torch(x_flat, pre, hc, out_dtype):
    return (x_flat.float().view(x_flat.shape[0], hc, -1) * pre.float()[..., None]).sum(1).to(out_dtype)


@pytest.fixture
def tiny_v4_model(monkeypatch, tmp_path):
    """build() -> a DeepseekV4Model (weights from a fixed seed) as the current
    guards make it; forward(model) -> its output for one decode batch."""
    import sglang.kernels.ops.layernorm.mhc as mhc_kernels
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
    from sglang.srt.model_loader.utils import set_default_torch_dtype
    from sglang.srt.models import deepseek_v4
    from sglang.srt.runtime_context import get_context, get_parallel

    monkeypatch.setattr(deepseek_v4, "get_rope_wrapper", lambda *args, **kwargs: None)
    monkeypatch.setattr(mhc_kernels, "mhc_combine", _mhc_combine_in_torch)
    tokenizer = _tiny_tokenizer(tmp_path / "tokenizer")
    with contextlib.ExitStack() as scope:
        scope.enter_context(get_context().override_server_args(tokenizer_path=tokenizer, device="cpu"))
        group = _one_rank_group()
        scope.enter_context(get_parallel().override(
            tp_size=1, attn_tp_size=1, attn_dp_size=1, attn_cp_size=1, pp_size=1, moe_ep_size=1, moe_tp_size=1,
            **dict.fromkeys(_RANKS, 0), **dict.fromkeys(_GROUPS, group)))

        def build():
            with set_default_torch_dtype(torch.bfloat16):
                model = deepseek_v4.DeepseekV4Model(_tiny_v4_config())
            generator = torch.Generator().manual_seed(0)
            for param in model.parameters():
                if param.dtype == torch.float8_e8m0fnu:
                    param.data.copy_(torch.full(param.shape, 0.5).to(param.dtype))
                else:
                    param.data.copy_((torch.randn(param.shape, generator=generator) * 0.05).to(param.dtype))
            model.engram_hasher.init_history(4, "cpu")
            for layer in model.layers:
                layer.forward_hc_pre_from_prev = types.MethodType(_layer_standin, layer)
            return model

        def forward(model):
            ids = torch.tensor([5, 17, 3, 60, 42, 9, 11])
            tokens = ids.shape[0]
            batch = ForwardBatch(
                forward_mode=ForwardMode.DECODE, batch_size=tokens, input_ids=ids,
                req_pool_indices=torch.arange(tokens) % 4, seq_lens=torch.full((tokens,), 4),
                out_cache_loc=torch.arange(tokens) + 1, seq_lens_sum=4 * tokens, positions=torch.full((tokens,), 3))
            # The attention backend is never called (the layers are stood in for);
            # the model reads it from the forward context as ModelRunner publishes it.
            with forward_context(ForwardContext(attn_backend=types.SimpleNamespace())):
                return model(ids, batch.positions, batch, None)

        def forward_tail(model):
            """An extend under decoder SWA bounded replay: from layer 1 on the
            layers run over the tail's rows (2, 4, 6) only. Returns those rows
            of the output. The backend's tail bookkeeping is stood in for; the
            tail's source-KV write is off (it runs the hyper-connection combine,
            a tilelang kernel), so the tail starts at late_layer_start."""
            from sglang.srt.layers.attention.deepseek_v4_backend import LateLayerTail

            model.late_layer_start, model.tail_writes_source_kv = 1, False
            ids = torch.tensor([5, 17, 3, 60, 42, 9, 11])
            tokens, rows = ids.shape[0], torch.tensor([2, 4, 6])
            tail = LateLayerTail(token_indices=rows, positions=rows, extend_seq_lens=torch.tensor([3]),
                                 extend_seq_lens_cpu=[3], swa_out_cache_loc=rows + 1)
            switches = []
            backend = types.SimpleNamespace(
                tail_forward_metadata=types.SimpleNamespace(late_layer_tail=tail),
                enter_late_layer_tail=lambda batch: switches.append("enter") or "full",
                exit_late_layer_tail=lambda saved, batch: switches.append(f"exit {saved}"))
            batch = ForwardBatch(
                forward_mode=ForwardMode.EXTEND, batch_size=1, input_ids=ids, req_pool_indices=torch.tensor([0]),
                seq_lens=torch.tensor([tokens]), out_cache_loc=torch.arange(tokens) + 1, seq_lens_sum=tokens,
                positions=torch.arange(tokens), extend_seq_lens=torch.tensor([tokens]),
                extend_start_loc=torch.tensor([0]), extend_seq_lens_cpu=[tokens],
                extend_prefix_lens=torch.tensor([0]))
            with forward_context(ForwardContext(attn_backend=backend)):
                hidden, pre_head = model(ids, batch.positions, batch, None)
            assert switches == ["enter", "exit full"]
            return hidden[rows], pre_head[rows]

        yield types.SimpleNamespace(build=build, forward=forward, forward_tail=forward_tail)


@pytest.fixture
def engram_events(monkeypatch):
    """The order of table reads and Engram layer calls in a forward, and what
    each layer was handed (a spy: the real code runs)."""
    from sglang.srt.layers.engram import Engram, EngramEmbedding

    events = []
    real_lookup, real_forward = EngramEmbedding._owned_rows, Engram.forward

    def lookup(self, indices):
        events.append("lookup")
        return real_lookup(self, indices)

    def forward(self, *args, **kwargs):
        prefetched = kwargs.get("prefetched")
        layer_id = MODEL_ENGRAM_LAYERS[self.layer_hash_index]
        events.append(f"layer {layer_id}" + ("" if prefetched is None else " prefetched"))
        return real_forward(self, *args, **kwargs)

    monkeypatch.setattr(EngramEmbedding, "_owned_rows", lookup)
    monkeypatch.setattr(Engram, "forward", forward)
    return events


@pytest.mark.guard_off
@CPU_FORWARD_ONLY
def test_model_layers_look_up_their_own_rows(tiny_v4_model, engram_events):
    model = tiny_v4_model.build()
    assert getattr(model, "engram_prefetch", None) is None

    tiny_v4_model.forward(model)

    assert engram_events == ["layer 0", "lookup", "layer 2", "lookup"]


@pytest.mark.guard_on
@CPU_FORWARD_ONLY
def test_model_prefetches_after_the_hasher_and_hands_each_layer_its_rows(tiny_v4_model, engram_events, monkeypatch):
    import torch
    from sglang.srt.layers.engram import EngramRowPrefetch

    stock = tiny_v4_model.build()
    expected = tiny_v4_model.forward(stock)
    engram_events.clear()
    monkeypatch.setenv(GUARD, "1")
    model = tiny_v4_model.build()
    assert isinstance(model.engram_prefetch, EngramRowPrefetch)
    assert model.engram_prefetch._engrams == {i: model.layers[i].engram for i in MODEL_ENGRAM_LAYERS}

    actual = tiny_v4_model.forward(model)

    # Both tables are read right after the hasher, before the first layer;
    # each layer takes its rows and reads nothing itself.
    assert engram_events == ["lookup", "lookup", "layer 0 prefetched", "layer 2 prefetched"]
    for stock_out, out in zip(expected, actual, strict=True):
        assert torch.equal(out, stock_out)


@pytest.mark.guard_off
@CPU_FORWARD_ONLY
def test_model_tail_layers_look_up_their_own_rows(tiny_v4_model, engram_events):
    model = tiny_v4_model.build()

    tiny_v4_model.forward_tail(model)

    assert engram_events == ["layer 0", "lookup", "layer 2", "lookup"]


@pytest.mark.guard_on
@CPU_FORWARD_ONLY
def test_model_narrows_the_prefetched_rows_to_the_late_layer_tail(tiny_v4_model, engram_events, monkeypatch):
    """Layer 2 runs over the tail's rows: it gets those rows of its prefetched
    ones (every token's were read after the hasher), as it gets those hash ids."""
    import torch

    expected = tiny_v4_model.forward_tail(tiny_v4_model.build())
    engram_events.clear()
    monkeypatch.setenv(GUARD, "1")

    actual = tiny_v4_model.forward_tail(tiny_v4_model.build())

    assert engram_events == ["lookup", "lookup", "layer 0 prefetched", "layer 2 prefetched"]
    for stock_out, out in zip(expected, actual, strict=True):
        assert torch.equal(out, stock_out)


@pytest.mark.absent
def test_absent_no_prefetch_and_guard_undeclared():
    import inspect

    from sglang.srt import environ
    from sglang.srt.layers import engram

    assert GUARD not in vars(environ.Envs)
    assert not hasattr(engram, "EngramRowPrefetch")
    assert "prefetched" not in inspect.signature(engram.Engram.forward).parameters
