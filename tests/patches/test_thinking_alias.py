"""thinking_alias: every client spelling of "thinking on" gives one answer.

`OpenAIServingChat._thinking_requested` decides both the prompt encoding and the
output parsing (the DeepSeek encoding adapter's hook); `normalize_reasoning_inputs`
writes the template kwargs the chat template and the reasoning parser read.
"""

from __future__ import annotations

import pytest

FEATURE = "thinking_alias"
GUARD = "DSV41_THINKING_ALIAS"
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(autouse=True)
def _no_server_default(monkeypatch):
    monkeypatch.delenv("SGLANG_DEFAULT_THINKING", raising=False)


def _request(**fields):
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest

    return ChatCompletionRequest(model="m", messages=MESSAGES, **fields)


def _thinking_requested(request) -> bool:
    from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat

    # The decision reads only the request: no server state is needed.
    return OpenAIServingChat.__new__(OpenAIServingChat)._thinking_requested(request)


def _template_toggles(request):
    kwargs = request.chat_template_kwargs or {}
    return kwargs.get("thinking"), kwargs.get("enable_thinking")


# -- chat_template_kwargs.enable_thinking ------------------------------------------

@pytest.mark.guard_off
def test_enable_thinking_is_ignored_by_the_encoder():
    request = _request(chat_template_kwargs={"enable_thinking": True})

    assert not _thinking_requested(request)
    assert _template_toggles(request) == (None, True)


@pytest.mark.guard_on
def test_enable_thinking_turns_thinking_on(monkeypatch):
    monkeypatch.setenv(GUARD, "1")
    request = _request(chat_template_kwargs={"enable_thinking": True})

    assert _thinking_requested(request) is True
    assert _template_toggles(request) == (True, True)


@pytest.mark.guard_on
def test_enable_thinking_from_server_defaults_is_honoured(monkeypatch):
    """Server default template kwargs are merged after validation."""
    monkeypatch.setenv(GUARD, "on")
    request = _request()
    request.chat_template_kwargs = {"enable_thinking": True}

    assert _thinking_requested(request) is True


# -- top-level thinking --------------------------------------------------------------

@pytest.mark.guard_off
@pytest.mark.parametrize("thinking", [{"type": "enabled"}, True])
def test_top_level_thinking_is_ignored(thinking):
    request = _request(thinking=thinking)

    assert not _thinking_requested(request)
    assert request.chat_template_kwargs is None


@pytest.mark.guard_on
@pytest.mark.parametrize(
    ("thinking", "expected"),
    [({"type": "enabled"}, True), (True, True), ("enabled", True), ({"type": "disabled"}, False), (False, False)],
)
def test_top_level_thinking_is_honoured(monkeypatch, thinking, expected):
    monkeypatch.setenv(GUARD, "1")
    request = _request(thinking=thinking)

    assert _thinking_requested(request) is expected
    assert _template_toggles(request) == (expected, expected)


@pytest.mark.guard_on
def test_adaptive_thinking_defers_to_the_other_spellings(monkeypatch):
    monkeypatch.setenv(GUARD, "1")
    request = _request(thinking={"type": "adaptive"}, chat_template_kwargs={"enable_thinking": True})

    assert _thinking_requested(request) is True
    assert _template_toggles(request) == (True, True)


# -- chat_template_kwargs.thinking -----------------------------------------------------

@pytest.mark.guard_off
def test_thinking_kwarg_reaches_the_encoder_only():
    request = _request(chat_template_kwargs={"thinking": True})

    assert _thinking_requested(request) is True
    assert _template_toggles(request) == (True, None)


@pytest.mark.guard_on
def test_thinking_kwarg_reaches_the_template_toggle_too(monkeypatch):
    monkeypatch.setenv(GUARD, "1")
    request = _request(chat_template_kwargs={"thinking": True})

    assert _thinking_requested(request) is True
    assert _template_toggles(request) == (True, True)


@pytest.mark.guard_on
def test_thinking_kwarg_outranks_enable_thinking(monkeypatch):
    monkeypatch.setenv(GUARD, "1")
    request = _request(chat_template_kwargs={"thinking": False, "enable_thinking": True})

    assert _thinking_requested(request) is False
    assert _template_toggles(request) == (False, False)


# -- reasoning_effort ------------------------------------------------------------------

@pytest.mark.guard_off
def test_effort_overrides_nothing_explicit_and_toggles_disagree():
    request = _request(reasoning_effort="high", chat_template_kwargs={"enable_thinking": False})

    assert _thinking_requested(request) is True
    assert _template_toggles(request) == (True, False)


@pytest.mark.guard_off
def test_effort_set_after_validation_is_ignored():
    request = _request()
    request.reasoning_effort = "high"

    assert not _thinking_requested(request)


@pytest.mark.guard_on
def test_explicit_toggle_outranks_effort_and_toggles_agree(monkeypatch):
    monkeypatch.setenv(GUARD, "1")
    request = _request(reasoning_effort="high", chat_template_kwargs={"enable_thinking": False})

    assert _thinking_requested(request) is False
    assert _template_toggles(request) == (False, False)


@pytest.mark.guard_on
def test_effort_set_after_validation_is_honoured(monkeypatch):
    """Server default template kwargs may carry reasoning_effort, copied after validation."""
    monkeypatch.setenv(GUARD, "1")
    request = _request()
    request.reasoning_effort = "high"

    assert _thinking_requested(request) is True


# -- not built in ----------------------------------------------------------------------

@pytest.mark.absent
def test_absent_enable_thinking_ignored_and_guard_undeclared(monkeypatch):
    from sglang.srt import environ

    assert GUARD not in vars(environ.Envs)
    monkeypatch.setenv(GUARD, "1")

    assert not _thinking_requested(_request(chat_template_kwargs={"enable_thinking": True}))


@pytest.mark.guard_on
@pytest.mark.parametrize(("value", "expected"), [(1, True), (0, False)])
def test_integer_thinking_kwarg_is_a_switch(monkeypatch, value, expected):
    monkeypatch.setenv(GUARD, "1")
    assert _thinking_requested(_request(chat_template_kwargs={"thinking": value})) is expected
