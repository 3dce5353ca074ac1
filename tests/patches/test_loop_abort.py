"""loop_abort: a request whose output tail repeats a short period is aborted."""

from __future__ import annotations

import random
from array import array

import pytest

FEATURE = "loop_abort"
GUARD = "DSV41_LOOP_ABORT"
EOS = 999
MAX_NEW_TOKENS = 600
PREFIX = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20]


def _req():
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    params = SamplingParams(max_new_tokens=MAX_NEW_TOKENS)
    params.normalize(None)
    return Req("r", "", array("i", [1, 2, 3]), params, vocab_size=1000, eos_token_ids={EOS})


def _decode(tokens):
    """Feed tokens one decode step at a time; return (tokens emitted, the Req)."""
    req = _req()
    for token in tokens:
        req.output_ids.append(token)
        req.update_finish_state()
        if req.finished():
            break
    return len(req.output_ids), req


def _periodic(period: list[int]) -> list[int]:
    return (PREFIX + period * MAX_NEW_TOKENS)[:MAX_NEW_TOKENS]


def _non_periodic() -> list[int]:
    rng = random.Random(0)
    return [rng.randrange(900) for _ in range(MAX_NEW_TOKENS)]


def _turn_on(monkeypatch, **thresholds):
    """Set the guards and re-read them, as a process start does (they are read at import)."""
    from sglang.srt.managers import schedule_batch

    monkeypatch.setenv(GUARD, "1")
    for name, value in thresholds.items():
        monkeypatch.setenv(f"DSV41_LOOP_ABORT_{name}", value)
    monkeypatch.setattr(schedule_batch, "_LOOP_ABORT", schedule_batch._loop_abort_plan())


@pytest.mark.guard_off
def test_periodic_stream_runs_to_the_length_limit():
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH

    emitted, req = _decode(_periodic([7, 8, 9]))

    assert emitted == MAX_NEW_TOKENS
    assert isinstance(req.finished_reason, FINISH_LENGTH)


@pytest.mark.guard_off
def test_short_period_streams_run_to_the_length_limit():
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH

    for period in ([0], [0, 44]):
        emitted, req = _decode(_periodic(period))

        assert emitted == MAX_NEW_TOKENS
        assert isinstance(req.finished_reason, FINISH_LENGTH)


@pytest.mark.guard_on
def test_a_long_period_aborts_after_the_default_16_repeats(monkeypatch):
    from sglang.srt.managers.schedule_batch import FINISH_ABORT

    _turn_on(monkeypatch)
    period = list(range(100, 120))

    emitted, req = _decode(_periodic(period))

    # Defaults: period 20 x 16 repeats = 320 tokens, already over MIN_TOKENS (256).
    assert emitted == len(PREFIX) + 20 * 16
    assert isinstance(req.finished_reason, FINISH_ABORT)
    assert "last 320 tokens repeat a 20-token period 16 times" in req.finished_reason.message
    assert req.finished_reason.status_code is None


@pytest.mark.guard_on
@pytest.mark.parametrize(
    ("period", "repeats"),
    # A zero-filled array (one token, or `0, ` as two) and a 3-token line.
    [([0], 256), ([0, 44], 128), ([7, 8, 9], 86)],
)
def test_a_short_period_needs_min_tokens_of_repetition(monkeypatch, period, repeats):
    from sglang.srt.managers.schedule_batch import FINISH_ABORT

    _turn_on(monkeypatch)
    span = len(period) * repeats
    below = PREFIX + (period * span)[: span - 1]

    emitted_below, req_below = _decode(below)
    emitted, req = _decode(_periodic(period))

    # 16 repeats and more, up to one token short of the span: the output runs on.
    assert emitted_below == len(below)
    assert not req_below.finished()
    # The default MIN_TOKENS: the first step whose repeated tail covers 256 tokens.
    assert emitted == len(PREFIX) + span
    assert isinstance(req.finished_reason, FINISH_ABORT)
    assert f"last {span} tokens repeat a {len(period)}-token period {repeats} times" in (
        req.finished_reason.message
    )


@pytest.mark.guard_on
def test_a_broken_run_restarts_the_count(monkeypatch):
    _turn_on(monkeypatch)
    tokens = PREFIX + [5] * 255 + [6] + [5] * 300

    emitted, req = _decode(tokens)

    assert emitted == len(PREFIX) + 256 + 256
    assert req.finished()


@pytest.mark.guard_on
def test_thresholds_come_from_the_environment(monkeypatch):
    _turn_on(monkeypatch, MAX_PERIOD="4", MIN_REPEATS="3", MIN_TOKENS="1")

    long_period, _ = _decode(_periodic([1, 2, 3, 4, 5]))
    short_period, req = _decode(_periodic([7, 8]))

    assert long_period == MAX_NEW_TOKENS
    assert short_period == len(PREFIX) + 2 * 3
    assert "2-token period 3 times" in req.finished_reason.message


@pytest.mark.guard_on
def test_min_tokens_comes_from_the_environment(monkeypatch):
    _turn_on(monkeypatch, MIN_TOKENS="40")

    one_token, req = _decode(_periodic([0]))
    two_tokens, _ = _decode(_periodic([0, 44]))
    three_tokens, _ = _decode(_periodic([7, 8, 9]))

    # max(16 repeats, enough repeats to cover 40 tokens)
    assert one_token == len(PREFIX) + 40
    assert "1-token period 40 times" in req.finished_reason.message
    assert two_tokens == len(PREFIX) + 2 * 20
    assert three_tokens == len(PREFIX) + 3 * 16


@pytest.mark.guard_on
def test_non_periodic_stream_never_aborts(monkeypatch):
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH

    _turn_on(monkeypatch, MIN_REPEATS="2", MIN_TOKENS="1")

    emitted, req = _decode(_non_periodic())

    assert emitted == MAX_NEW_TOKENS
    assert isinstance(req.finished_reason, FINISH_LENGTH)


@pytest.mark.guard_on
def test_eos_still_wins_over_a_loop(monkeypatch):
    from sglang.srt.managers.schedule_batch import FINISH_MATCHED_TOKEN

    _turn_on(monkeypatch, MIN_REPEATS="2", MIN_TOKENS="1")
    req = _req()

    # A speculative step accepts several tokens at once: [.., 7, 7, 7, EOS] ends
    # a 1-token loop and the request in the same step.
    req.output_ids.extend([7, 7, 7, EOS])
    req.update_finish_state(new_accepted_len=4)

    assert isinstance(req.finished_reason, FINISH_MATCHED_TOKEN)


@pytest.mark.guard_on
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DSV41_LOOP_ABORT_MAX_PERIOD", "thirty"),
        ("DSV41_LOOP_ABORT_MIN_REPEATS", "1"),
        ("DSV41_LOOP_ABORT_MIN_TOKENS", "0"),
        ("DSV41_LOOP_ABORT_MIN_TOKENS", "-5"),
        ("DSV41_LOOP_ABORT_MIN_TOKENS", "2.5"),
        (GUARD, "maybe"),
    ],
)
def test_bad_values_stop_the_start_naming_the_variable(monkeypatch, name, value):
    from sglang.srt.managers import schedule_batch

    monkeypatch.setenv(GUARD, "1")
    monkeypatch.setenv(name, value)

    with pytest.raises(ValueError, match=name):
        schedule_batch._loop_abort_plan()


@pytest.mark.absent
def test_absent_periodic_stream_runs_on_and_guards_undeclared(monkeypatch):
    from sglang.srt import environ

    guards = {GUARD, "DSV41_LOOP_ABORT_MAX_PERIOD", "DSV41_LOOP_ABORT_MIN_REPEATS", "DSV41_LOOP_ABORT_MIN_TOKENS"}
    assert not guards & set(vars(environ.Envs))
    monkeypatch.setenv(GUARD, "1")

    emitted, _ = _decode(_periodic([7, 8, 9]))

    assert emitted == MAX_NEW_TOKENS
