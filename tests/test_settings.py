"""The one validation layer: every bad value gives a SettingsError with a readable message, nothing runs."""
import math

import pytest
from hypothesis import given, settings as hypothesis_settings, strategies as st

from pacer_core import method_table
from pacer_core import SettingsError, generate, validate_settings
from pacer_core.settings import DecodeSettings, Limits, validate_prompt
from pacer_core.testing.tiny import tiny_pair

BAD_VALUES = [
    ("max_new_tokens", 0), ("max_new_tokens", -5), ("max_new_tokens", 10**9), ("max_new_tokens", "lots"),
    ("max_new_tokens", 3.5), ("max_new_tokens", None), ("max_new_tokens", True), ("temperature", -0.1),
    ("temperature", float("nan")), ("temperature", float("inf")), ("temperature", "hot"), ("top_p", 0.0),
    ("top_p", 1.5), ("top_k", -1), ("gamma", 0), ("gamma", 100), ("block_size", 0), ("max_draft_len", 0),
    ("threshold", 1.5), ("threshold", -0.2), ("on_fail", "explode"), ("n_particles", 0), ("n_particles", 10_000),
    ("draft_len", 0), ("ess_threshold", 2.0), ("draft_temperature", 0.0), ("power", -1.0), ("final", "best"),
    ("seed", -1), ("seed", "abc"), ("no_such_setting", 1),
]


@pytest.mark.parametrize("name,value", BAD_VALUES)
def test_bad_values_are_refused_with_a_message(name, value):
    with pytest.raises(SettingsError) as error:
        validate_settings(**{name: value})
    message = str(error.value)
    assert message and "Traceback" not in message and len(message) < 200


def test_block_size_cannot_exceed_max_draft_len():
    with pytest.raises(SettingsError, match="at least the block size"):
        validate_settings(block_size=8, max_draft_len=4)


def test_limits_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("PACER_MAX_NEW_TOKENS", "32")
    monkeypatch.setenv("PACER_MAX_PARTICLES", "4")
    limits = Limits.from_env()
    assert limits.max_new_tokens == 32 and limits.max_particles == 4
    with pytest.raises(SettingsError, match="between 1 and 32"):
        validate_settings(max_new_tokens=33)
    with pytest.raises(SettingsError, match="Particles"):
        validate_settings(n_particles=5)


@pytest.mark.parametrize("prompt", ["", "   ", "\n\t", None, 42])
def test_empty_or_non_text_prompts_are_refused(prompt):
    with pytest.raises(SettingsError):
        validate_prompt(prompt)


def test_too_long_prompt_is_refused_and_over_token_limit_is_truncated_with_a_note(monkeypatch):
    with pytest.raises(SettingsError, match="too long"):
        validate_prompt("x" * 30_000)
    monkeypatch.setenv("PACER_MAX_PROMPT_TOKENS", "10")
    target, drafter = tiny_pair(scale=4.0)
    result = generate(target, drafter, "ar", " ".join(f"t{i}" for i in range(30)), max_new_tokens=3)
    assert "only its last 10 were kept" in result.info["prompt_note"]


def test_smc_needs_a_temperature():
    with pytest.raises(SettingsError, match="temperature above 0"):
        target, drafter = tiny_pair()
        generate(target, drafter, "smc", "t1", temperature=0)


def test_unknown_method_is_refused():
    with pytest.raises(SettingsError, match="Unknown method"):
        target, drafter = tiny_pair()
        generate(target, drafter, "beam", "t1")


values = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                   st.text(max_size=8))


@hypothesis_settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(DecodeSettings.__dataclass_fields__)), values, max_size=5))
def test_validator_either_accepts_in_range_or_raises_settings_error(raw):
    try:
        checked = validate_settings(**raw)
    except SettingsError as error:
        assert str(error)
        return
    limits = Limits.from_env()
    assert 1 <= checked.max_new_tokens <= limits.max_new_tokens
    assert 0 <= checked.temperature <= 5 and math.isfinite(checked.temperature)
    assert 0 < checked.top_p <= 1 and checked.top_k >= 0
    assert 1 <= checked.gamma <= 32 and 1 <= checked.block_size <= checked.max_draft_len
    assert 1 <= checked.n_particles <= limits.max_particles and 0 <= checked.ess_threshold <= 1
    assert checked.on_fail in ("submit", "discard") and checked.final in ("sample", "argmax")


@pytest.mark.parametrize("method", method_table.method_keys())
@pytest.mark.parametrize("temperature", [1e-40, 1e-30, 1e-3, 0.049])
def test_tiny_temperatures_are_refused_on_every_method(method, temperature):
    from pacer_core import generate
    from pacer_core.testing.tiny import tiny_pair
    with pytest.raises(SettingsError, match="at least 0.05"):
        target, drafter = tiny_pair()
        generate(target, drafter, method, "t1 t2", max_new_tokens=4, temperature=temperature)


@pytest.mark.parametrize("method", method_table.method_keys())
def test_the_smallest_temperature_runs_on_every_method(method):
    from pacer_core import generate
    from pacer_core.testing.tiny import tiny_pair
    target, drafter = tiny_pair(scale=50.0)
    result = generate(target, drafter, method, "t1 t2", max_new_tokens=6, temperature=0.05,
                      draft_temperature=0.05 if method == "smc" else None)
    assert len(result.token_ids) == 6


def test_tiny_draft_temperature_is_refused():
    with pytest.raises(SettingsError):
        validate_settings(temperature=0.7, draft_temperature=1e-40)
