"""engram_prefetch on a CUDA GPU: the side stream and its events.

Two Engram layers on the GPU (test_engram_prefetch's fixture; their lookups
are sglang's Triton gather there).
The hash ids are written on the compute stream behind a long kernel, so a
prefetch that did not wait for the compute stream would read stale ids; the
rows it hands over must equal each layer's own inline lookup (the guard-off
path), must have been looked up on the side stream, and a layer fed them must
give the same output. GPU-only (marked cuda).
"""

from __future__ import annotations

import pytest

FEATURE = "engram_prefetch"
GUARD = "DSV41_ENGRAM_PREFETCH"
LAYER_IDS = (0, 2)
pytestmark = pytest.mark.cuda

# The CPU tests' layers; under --device cuda that fixture puts them on the GPU.
from test_engram_prefetch import engram_layers  # noqa: E402,F401


def _hash_ids_written_late(hash_ids):
    """A zeroed buffer that the compute stream fills with `hash_ids` after a long kernel."""
    import torch

    late = torch.zeros_like(hash_ids)
    torch.cuda._sleep(50_000_000)  # ~tens of ms of GPU time ahead of the copy
    late.copy_(hash_ids)
    return late


def _prefetch(setup, monkeypatch, hash_ids):
    """Runs the prefetch; returns (prefetched, the streams each lookup ran on)."""
    import torch
    from sglang.srt.layers.engram import EngramEmbedding, EngramRowPrefetch

    monkeypatch.setenv(GUARD, "1")
    streams = []
    real = EngramEmbedding._owned_rows

    def spy(self, indices):
        streams.append(torch.cuda.current_stream())
        return real(self, indices)

    monkeypatch.setattr(EngramEmbedding, "_owned_rows", spy)
    prefetch = EngramRowPrefetch.from_env(setup.layers)
    prefetched = prefetch.run(hash_ids, None, False)
    monkeypatch.setattr(EngramEmbedding, "_owned_rows", real)
    return prefetch, prefetched, streams


@pytest.mark.guard_off
def test_guard_off_builds_no_prefetch_on_cuda(engram_layers):
    from sglang.srt.layers.engram import EngramRowPrefetch

    assert EngramRowPrefetch.from_env(engram_layers.layers) is None


@pytest.mark.guard_on
def test_side_stream_rows_equal_the_inline_lookup(engram_layers, monkeypatch):
    import torch

    compute = torch.cuda.current_stream()
    expected = {i: e.embed(engram_layers.hash_ids[:, e.layer_hash_index]) for i, e in engram_layers.layers.items()}
    late = _hash_ids_written_late(engram_layers.hash_ids)
    prefetch, prefetched, streams = _prefetch(engram_layers, monkeypatch, late)

    assert sorted(prefetched) == list(LAYER_IDS)
    assert streams and all(stream == prefetch._stream != compute for stream in streams)
    for layer_id in LAYER_IDS:
        assert prefetched[layer_id].ready is not None
        rows = prefetched[layer_id].take()  # the compute stream waits for this layer's event
        assert torch.equal(rows, expected[layer_id]), f"layer {layer_id}: prefetched rows differ"


@pytest.mark.guard_on
def test_layer_fed_side_stream_rows_gives_the_inline_output(engram_layers, monkeypatch):
    import torch

    setup = engram_layers

    def forward(layer_id, **kwargs):
        engram = setup.layers[layer_id]
        return engram(setup.x, setup.hash_ids[:, engram.layer_hash_index], None, input_ids=setup.input_ids, **kwargs)

    expected = {layer_id: forward(layer_id) for layer_id in LAYER_IDS}
    _, prefetched, _ = _prefetch(setup, monkeypatch, _hash_ids_written_late(setup.hash_ids))
    for layer_id in LAYER_IDS:
        actual = forward(layer_id, prefetched=prefetched[layer_id])
        assert torch.equal(actual, expected[layer_id]), f"layer {layer_id}"
