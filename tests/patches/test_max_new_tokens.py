"""max_new_tokens: a chat request's max_new_tokens is its completion budget."""

from __future__ import annotations

import pytest

FEATURE = "max_new_tokens"
GUARD = "DSV41_MAX_NEW_TOKENS"
MESSAGES = [{"role": "user", "content": "hi"}]


def _request(**fields):
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest

    return ChatCompletionRequest(model="m", messages=MESSAGES, **fields)


def _budget(request):
    return request.to_sampling_params(stop=[], model_generation_config={})["max_new_tokens"]


@pytest.mark.guard_off
def test_max_new_tokens_is_dropped():
    assert _budget(_request(max_new_tokens=5)) is None


@pytest.mark.guard_off
def test_max_new_tokens_never_conflicts():
    assert _budget(_request(max_new_tokens=5, max_tokens=7)) == 7


@pytest.mark.guard_on
def test_max_new_tokens_is_the_budget(monkeypatch):
    monkeypatch.setenv(GUARD, "1")

    assert _budget(_request(max_new_tokens=5)) == 5
    # The same value under two names is no conflict.
    assert _budget(_request(max_new_tokens=5, max_tokens=5)) == 5
    assert _budget(_request(max_new_tokens=5, max_completion_tokens=5)) == 5


@pytest.mark.guard_on
@pytest.mark.parametrize("other", ["max_tokens", "max_completion_tokens"])
def test_conflicting_values_are_rejected_naming_both(monkeypatch, other):
    from pydantic import ValidationError

    monkeypatch.setenv(GUARD, "1")

    # A ValidationError of the request body is the server's 400
    # (http_server.validation_exception_handler).
    with pytest.raises(ValidationError, match=f"max_new_tokens=5 conflicts with {other}=7"):
        _request(max_new_tokens=5, **{other: 7})


def _served_budget(monkeypatch, *, prompt_len: int, context_length: int = 128, **fields):
    """What the chat endpoint hands the engine: validation, then conversion,
    through a real OpenAIServingChat (serving_fakes: one prompt id per char)."""
    from serving_fakes import ROLE_OVERHEAD, chat_request, serving_chat

    serving = serving_chat(monkeypatch, context_length=context_length)
    request = chat_request("x" * (prompt_len - ROLE_OVERHEAD), **fields)
    error = serving._validate_request(request)
    if error is not None:
        return error
    internal, _ = serving._convert_to_internal_request(request)
    assert len(internal.input_ids) == prompt_len
    return internal.sampling_params["max_new_tokens"]


@pytest.mark.guard_off
def test_a_budget_past_the_context_is_a_400_as_in_stock(monkeypatch):
    error = _served_budget(monkeypatch, prompt_len=100, max_tokens=1000)
    assert error.startswith("max_completion_tokens is too large: 1000")


@pytest.mark.guard_off
def test_the_budget_reaches_the_engine_unclamped_as_in_stock(monkeypatch):
    assert _served_budget(monkeypatch, prompt_len=100, max_tokens=100) == 100


@pytest.mark.guard_on
@pytest.mark.parametrize(
    ("budget", "prompt_len", "expected"),
    [(1000, 100, 28), (10, 100, 10), (1000, 128, 1000), (1000, 200, 1000), (100, 100, 28)],
    ids=["cut-to-room", "fits", "prompt-fills-context", "prompt-too-long", "within-context-cut-to-room"],
)
def test_budget_is_clamped_to_the_context_by_the_chat_endpoint(monkeypatch, budget, prompt_len, expected):
    monkeypatch.setenv(GUARD, "1")
    # No 400 for a budget past the context: the endpoint clamps it instead.
    assert _served_budget(monkeypatch, prompt_len=prompt_len, max_new_tokens=budget) == expected


@pytest.mark.guard_on
def test_budget_under_any_name_is_clamped(monkeypatch):
    monkeypatch.setenv(GUARD, "1")
    assert _served_budget(monkeypatch, prompt_len=100, max_tokens=1000) == 28
    assert _served_budget(monkeypatch, prompt_len=100, max_completion_tokens=1000) == 28


@pytest.mark.guard_on
def test_budget_without_a_token_prompt_is_clamped_to_the_context_length(monkeypatch):
    from sglang.srt.entrypoints.openai import serving_chat

    monkeypatch.setenv(GUARD, "1")
    sampling_params = {"max_new_tokens": 1000}
    # A text prompt (a multimodal template's) has no length yet: counted as empty.
    serving_chat._clamp_max_new_tokens(sampling_params, prompt_ids="a text prompt", context_length=128)
    assert sampling_params["max_new_tokens"] == 128


@pytest.mark.absent
def test_absent_max_new_tokens_dropped_and_guard_undeclared(monkeypatch):
    from sglang.srt import environ

    assert GUARD not in vars(environ.Envs)
    monkeypatch.setenv(GUARD, "1")

    assert _budget(_request(max_new_tokens=5)) is None


@pytest.mark.guard_on
def test_the_clamp_leaves_a_request_without_a_budget_at_none(monkeypatch):
    monkeypatch.setenv(GUARD, "1")
    # A clamp that invented a budget for a request that names none would cut every
    # open-ended answer at the context's room; the budgeted twin shows the clamp ran
    # (so this fails on stock, where nothing is clamped).
    assert _served_budget(monkeypatch, prompt_len=100) is None
    assert _served_budget(monkeypatch, prompt_len=100, max_new_tokens=1000) == 28
