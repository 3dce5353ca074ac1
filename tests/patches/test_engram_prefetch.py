"""engram_prefetch: every Engram layer's rows looked up right after the hasher.

On CPU the prefetch runs inline; under `test-patch --device cuda` the same
tests run on the GPU, through the side stream and its events. What is tested
here is that the rows handed over are the rows the layer would have looked up,
and that the layer then does no lookup of its own.
"""

from __future__ import annotations

import types

import pytest

FEATURE = "engram_prefetch"
GUARD = "DSV41_ENGRAM_PREFETCH"
LAYER_IDS = (0, 2)
TOKENS = 7


@pytest.fixture
def engram_layers(monkeypatch, test_device):
    """Two Engram layers on the test device, single TP rank, with random fp8 tables."""
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
    with get_parallel().override(tp_size=1, tp_rank=0):
        for layer_id in LAYER_IDS:
            engram = Engram(config, layer_id, layout).to(torch.bfloat16)
            embed = engram.embed
            embed.weight.data.copy_(torch.randn(embed.weight.shape, generator=generator).to(torch.float8_e4m3fn))
            embed.scale.data.copy_(torch.full(embed.scale.shape, 0.5).to(torch.float8_e8m0fnu))
            engram.wkv.weight.data.copy_(torch.randn(engram.wkv.weight.shape, generator=generator) * 0.05)
            layers[layer_id] = engram.to(test_device)
    hash_ids = torch.stack(
        [torch.randint(0, layers[i].embed.rows, (TOKENS, 4), generator=generator) for i in LAYER_IDS], dim=1
    )
    x = torch.randn(TOKENS, config.hc_mult, config.hidden_size, generator=generator).to(torch.bfloat16)
    return types.SimpleNamespace(layers=layers, hash_ids=hash_ids.to(test_device), x=x.to(test_device),
                                 input_ids=torch.arange(TOKENS, device=test_device))


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


@pytest.mark.absent
def test_absent_no_prefetch_and_guard_undeclared():
    import inspect

    from sglang.srt import environ
    from sglang.srt.layers import engram

    assert GUARD not in vars(environ.Envs)
    assert not hasattr(engram, "EngramRowPrefetch")
    assert "prefetched" not in inspect.signature(engram.Engram.forward).parameters
