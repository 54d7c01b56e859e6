"""Every decoding setting, its limits and its validation, in one place.

The UI, ``generate()``, the benchmark and every CLI call ``validate_settings`` before anything
runs; a bad value raises ``SettingsError`` whose message a workshop attendee can act on.
Space owners cap the expensive settings with environment variables (documented in README)."""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass

METHODS = ("ar", "fixed", "pacer", "smc")


class SettingsError(ValueError):
    """A setting is missing, of the wrong type or out of range. The message is for end users."""


def _env_int(name: str, default: int) -> int:
    try:
        return max(1, int(os.environ.get(name, default)))
    except ValueError:
        return default


@dataclass(frozen=True)
class Limits:
    max_new_tokens: int
    max_prompt_tokens: int
    max_particles: int
    max_prompt_chars: int

    @classmethod
    def from_env(cls) -> "Limits":
        return cls(max_new_tokens=_env_int("PACER_MAX_NEW_TOKENS", 512),
                   max_prompt_tokens=_env_int("PACER_MAX_PROMPT_TOKENS", 1536),
                   max_particles=_env_int("PACER_MAX_PARTICLES", 16),
                   max_prompt_chars=_env_int("PACER_MAX_PROMPT_CHARS", 20000))


@dataclass(frozen=True)
class DecodeSettings:
    """Settings shared by every method, plus each method's own (ignored by the others)."""
    max_new_tokens: int = 64
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    gamma: int = 4                      # fixed-length SD: drafted tokens per step
    block_size: int = 3                 # PACER
    max_draft_len: int = 16
    threshold: float | None = None      # None: the pre-verifier's own (trained) threshold
    on_fail: str = "submit"             # submit (lossless) | discard (exact only when greedy)
    n_particles: int = 4                # SMC-SD
    draft_len: int = 4
    ess_threshold: float = 0.5
    draft_temperature: float | None = None   # None: same as temperature
    power: float = 1.0
    final: str = "sample"               # sample | argmax

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict:
        return asdict(self)


def _as_int(value, low: int, high: int, label: str) -> int:
    if isinstance(value, bool) or value is None:
        raise SettingsError(f"{label} must be a whole number between {low} and {high}.")
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise SettingsError(f"{label} must be a whole number between {low} and {high} (got {value}).")
        value = int(value)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise SettingsError(f"{label} must be a whole number between {low} and {high} (got {value!r}).") from None
    if not isinstance(value, int):
        raise SettingsError(f"{label} must be a whole number between {low} and {high}.")
    if not low <= value <= high:
        raise SettingsError(f"{label} must be between {low} and {high} (got {value}).")
    return value


def _as_float(value, low: float, high: float, label: str) -> float:
    if isinstance(value, bool) or value is None:
        raise SettingsError(f"{label} must be a number between {low} and {high}.")
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise SettingsError(f"{label} must be a number between {low} and {high} (got {value!r}).") from None
    if not math.isfinite(number) or not low <= number <= high:
        raise SettingsError(f"{label} must be between {low} and {high} (got {value}).")
    return number


def _choice(value, options: tuple[str, ...], label: str) -> str:
    if value not in options:
        raise SettingsError(f"{label} must be one of: {', '.join(options)} (got {value!r}).")
    return value


MIN_TEMPERATURE = 0.05   # logits / T stays far from float overflow (below ~1e-37 every sampler hit inf/nan)


def _temperature(value) -> float:
    """0 means greedy; a sampling temperature must be at least MIN_TEMPERATURE."""
    temperature = _as_float(value, 0.0, 5.0, "Temperature")
    if 0.0 < temperature < MIN_TEMPERATURE:
        raise SettingsError(f"Temperature must be 0 (greedy) or at least {MIN_TEMPERATURE} (got {value!r}); "
                            "smaller values overflow the softmax.")
    return temperature


def validate_settings(limits: Limits | None = None, **raw) -> DecodeSettings:
    """Check and convert every given setting; unknown names are an error too."""
    limits = limits or Limits.from_env()
    known = set(DecodeSettings.__dataclass_fields__)
    unknown = sorted(set(raw) - known)
    if unknown:
        raise SettingsError(f"Unknown setting(s): {', '.join(unknown)}.")
    values = DecodeSettings().to_dict() | {k: v for k, v in raw.items()}
    if "max_new_tokens" not in raw:  # the default never exceeds a Space owner's cap
        values["max_new_tokens"] = min(values["max_new_tokens"], limits.max_new_tokens)
    checked = {
        "max_new_tokens": _as_int(values["max_new_tokens"], 1, limits.max_new_tokens, "Max new tokens"),
        "temperature": _temperature(values["temperature"]),
        "top_k": _as_int(values["top_k"], 0, 1_000_000, "Top-k (0 = off)"),
        "top_p": _as_float(values["top_p"], 0.01, 1.0, "Top-p"),
        "seed": _as_int(values["seed"], 0, 2**31 - 1, "Seed"),
        "gamma": _as_int(values["gamma"], 1, 32, "Draft length γ"),
        "block_size": _as_int(values["block_size"], 1, 16, "Block size"),
        "max_draft_len": _as_int(values["max_draft_len"], 1, 64, "Max draft length"),
        "threshold": None if values["threshold"] is None else
        _as_float(values["threshold"], 0.0, 1.0, "Pre-verifier threshold"),
        "on_fail": _choice(values["on_fail"], ("submit", "discard"), "On a failed block"),
        "n_particles": _as_int(values["n_particles"], 1, limits.max_particles, "Particles N"),
        "draft_len": _as_int(values["draft_len"], 1, 32, "SMC draft length K"),
        "ess_threshold": _as_float(values["ess_threshold"], 0.0, 1.0, "ESS threshold"),
        "draft_temperature": None if values["draft_temperature"] is None else
        _as_float(values["draft_temperature"], MIN_TEMPERATURE, 5.0, "Draft temperature"),
        "power": _as_float(values["power"], 0.0, 4.0, "Power exponent"),
        "final": _choice(values["final"], ("sample", "argmax"), "Final particle choice"),
    }
    if checked["max_draft_len"] < checked["block_size"]:
        raise SettingsError("Max draft length must be at least the block size.")
    return DecodeSettings(**checked)


def validate_prompt(prompt, limits: Limits | None = None) -> str:
    """A non-empty string within the character limit (the token limit is checked after encoding)."""
    limits = limits or Limits.from_env()
    if not isinstance(prompt, str):
        raise SettingsError("The prompt must be text.")
    if not prompt.strip():
        raise SettingsError("Please type a prompt first: it is empty.")
    if len(prompt) > limits.max_prompt_chars:
        raise SettingsError(f"The prompt is too long ({len(prompt):,} characters; the limit is "
                            f"{limits.max_prompt_chars:,}). Shorten it and try again.")
    return prompt


def check_method_settings(method: str, settings: DecodeSettings) -> None:
    """Rules that depend on the method as well as the values."""
    if method == "smc" and settings.greedy:
        raise SettingsError("SMC-SD samples particles, so it needs a temperature above 0 (try 0.7). "
                            "For greedy decoding choose AR, fixed-length SD or PACER.")


def validate_method(method) -> str:
    name = str(method).strip().lower() if isinstance(method, str) else method
    if name not in METHODS:
        raise SettingsError(f"Unknown method {method!r}. Choose one of: {', '.join(METHODS)}.")
    return name
