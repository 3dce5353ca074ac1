"""block_verify: DSV41_BLOCK_VERIFY turns on upstream's DSpark block verification.

sglang 0.5.23 has the feature (--speculative-use-block-verification); the patch
only maps the guard onto that server argument during argument resolution
(handle_speculative_decoding). The resolution runs on CPU: with device="cpu"
it stops at upstream's device checks, after the guard has been mapped, so the
tests read the resolved value and which upstream check fired.
"""

from __future__ import annotations

import pytest

FEATURE = "block_verify"

BLOCK_VERIFY_ON_CPU = "--speculative-use-block-verification only supports CUDA or ROCm"
DSPARK_ON_CPU = "DSpark speculative decoding only supports CUDA"


def _resolve(algorithm: str = "DSPARK", **extra):
    """Runs upstream's speculative resolution; returns (error message, resolved flag)."""
    from sglang.srt.arg_groups.overrides import resolving_view
    from sglang.srt.arg_groups.speculative_hook import handle_speculative_decoding
    from sglang.srt.server_args import ServerArgs

    server_args = ServerArgs(model_path="unused", speculative_algorithm=algorithm, device="cpu", **extra)
    with pytest.raises(ValueError) as error:
        handle_speculative_decoding(server_args)
    return str(error.value), resolving_view(server_args).speculative_use_block_verification


@pytest.mark.guard_off
def test_unset_keeps_the_upstream_default():
    message, block_verification = _resolve()
    assert block_verification is False
    assert DSPARK_ON_CPU in message


@pytest.mark.guard_off
def test_the_upstream_flag_still_works_alone():
    message, block_verification = _resolve(speculative_use_block_verification=True)
    assert block_verification is True
    assert BLOCK_VERIFY_ON_CPU in message


@pytest.mark.guard_on
@pytest.mark.parametrize("value", ["1", "on", "true"])
def test_guard_resolves_dspark_with_block_verification(monkeypatch, value):
    monkeypatch.setenv("DSV41_BLOCK_VERIFY", value)
    message, block_verification = _resolve()
    assert block_verification is True
    # Upstream's own validation of the option ran on the mapped value.
    assert BLOCK_VERIFY_ON_CPU in message


@pytest.mark.guard_off
@pytest.mark.parametrize("value", ["0", "off", ""])
def test_off_spellings_keep_the_default(monkeypatch, value):
    # The .env spellings of "off": stock behaviour, patched or not.
    monkeypatch.setenv("DSV41_BLOCK_VERIFY", value)

    message, block_verification = _resolve()
    assert block_verification is False
    assert DSPARK_ON_CPU in message


@pytest.mark.guard_on
def test_bad_value_fails_resolution_naming_the_variable(monkeypatch):
    monkeypatch.setenv("DSV41_BLOCK_VERIFY", "maybe")
    from sglang.srt.arg_groups.speculative_hook import handle_speculative_decoding
    from sglang.srt.server_args import ServerArgs

    server_args = ServerArgs(model_path="unused", speculative_algorithm="DSPARK", device="cpu")
    with pytest.raises(ValueError, match="DSV41_BLOCK_VERIFY"):
        handle_speculative_decoding(server_args)


@pytest.mark.absent
def test_without_the_feature_the_guard_is_ignored(monkeypatch):
    from sglang.srt.environ import Envs

    monkeypatch.setenv("DSV41_BLOCK_VERIFY", "1")
    assert "DSV41_BLOCK_VERIFY" not in vars(Envs)
    message, block_verification = _resolve()
    assert block_verification is False
    assert DSPARK_ON_CPU in message
